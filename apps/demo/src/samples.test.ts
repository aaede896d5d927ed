import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { OOM_IMAGE, SAMPLE_FILES, withReplicas, withSimulatedOom } from "./samples.js";
import { SCENARIO_IDS } from "./scenarios.js";

const SAMPLES = fileURLToPath(new URL("../../../samples/", import.meta.url));
const read = (file: string) => readFileSync(join(SAMPLES, file), "utf8");
// biome-ignore lint/suspicious/noExplicitAny: YAML documents, read field by field in a test
type Doc = Record<string, any>;
const docs = (text: string) => parseAllDocuments(text).map((d) => d.toJS() as Doc);

describe("samples", () => {
  it("every scenario has its sample file, and every file parses", () => {
    const covered = new Set(SAMPLE_FILES.flatMap((s) => s.scenarios));
    // The event channel's and the warm pool's comparison Pods are made by the demo
    // (src/channel.ts, src/warm.ts), not samples.
    for (const id of SCENARIO_IDS.filter((id) => id !== "event-channel" && id !== "warm-pool"))
      expect(covered.has(id)).toBe(true);
    for (const { file } of SAMPLE_FILES) expect(docs(read(file)).length).toBeGreaterThan(0);
  });

  it("every Pod template tolerates the virtual node's taint and selects it", () => {
    for (const { file } of SAMPLE_FILES) {
      for (const doc of docs(read(file))) {
        const spec =
          doc.kind === "Pod"
            ? doc.spec
            : doc.kind === "Deployment"
              ? doc.spec.template.spec
              : undefined;
        if (spec === undefined) continue;
        expect(spec.nodeSelector).toEqual({ type: "virtual-kubelet" });
        expect(spec.tolerations).toContainEqual({
          key: "virtual-kubelet.io/provider",
          operator: "Exists",
        });
      }
    }
  });

  it("withReplicas sets only Deployments' replicas", () => {
    const out = docs(withReplicas(read("workload.yaml"), 4));
    for (const doc of out) {
      if (doc.kind === "Deployment") expect(doc.spec.replicas).toBe(4);
      if (doc.kind === "WorkloadDeployment") expect(doc.spec.replicas).toBe(1);
    }
    expect(docs(withReplicas(read("prints-and-exits.yaml"), 2))[0]?.spec.replicas).toBe(2);
  });

  it("withSimulatedOom swaps the image, drops the command, keeps the limits", () => {
    const [pod] = docs(withSimulatedOom(read("oom-killed.yaml"), 2));
    const container = pod?.spec.containers[0];
    expect(container.image).toBe(OOM_IMAGE);
    expect(container.command).toBeUndefined();
    expect(container.env).toContainEqual({ name: "NEBULA_SIM_OOM_AFTER", value: "2" });
    expect(container.resources.limits.memory).toBe("32Mi");
    expect(pod?.metadata.name).toBe("oom-killed");
  });
});
