import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { crdFileName, crdYaml, operatorCrds } from "./crds.js";

const dir = fileURLToPath(new URL("../../../deploy/crds/", import.meta.url));
// The Helm chart ships the same files in its crds/ folder (Helm installs them from there).
const chartDir = fileURLToPath(new URL("../../../deploy/helm/nebula/crds/", import.meta.url));

describe("the checked-in CRDs", () => {
  const crds = operatorCrds();

  it.each(crds.map((crd) => [crdFileName(crd), crd] as const))(
    "deploy/crds/%s and the chart's copy are what the schemas generate",
    (file, crd) => {
      for (const path of [`${dir}${file}`, `${chartDir}${file}`]) {
        if (process.env.UPDATE_CRDS === "1") writeFileSync(path, crdYaml(crd));
        expect(readFileSync(path, "utf8"), path).toBe(crdYaml(crd));
      }
    },
  );

  it("have the status subresource, printer columns and a structural, strict spec", () => {
    for (const crd of crds) {
      const version = crd.spec.versions[0];
      expect(version?.subresources).toEqual({ status: {} });
      expect(version?.additionalPrinterColumns?.length).toBeGreaterThanOrEqual(4);
      const spec = version?.schema.openAPIV3Schema.properties?.spec;
      expect(spec?.type).toBe("object");
      expect(JSON.stringify(spec)).not.toContain("x-kubernetes-preserve-unknown-fields");
    }
  });
});
