/**
 * The generated CRDs on a real kube-apiserver: accepted, Established, and strict enough that a
 * bad spec is rejected at admission.
 */
import type { KubeConfig } from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { beforeAll, describe, expect, it } from "vitest";
import { createNamespace, createObject, installCrds } from "./testing/cluster.js";

let kc: KubeConfig;
let ns: string;

beforeAll(async () => {
  kc = useTestPeers().controlPlane.kubeConfig();
  await installCrds(kc);
  ns = await createNamespace(kc, "crds");
});

const deployment = (spec: Record<string, unknown>) => ({
  spec: {
    workloadRef: { name: "web" },
    placement: "eu",
    replicas: 2,
    selector: { matchLabels: { app: "web" } },
    ...spec,
  },
});

async function rejection(promise: Promise<unknown>): Promise<{ code: number; body: string }> {
  try {
    await promise;
  } catch (error) {
    const e = error as { code?: number; body?: unknown };
    const text = typeof e.body === "string" ? e.body : JSON.stringify(e.body);
    // The Status' message, with the quotes it escapes for JSON unescaped.
    return { code: e.code ?? 0, body: text.replaceAll('\\"', '"') };
  }
  throw new Error("the API server accepted it");
}

describe("admission of the API's objects", () => {
  it("accepts well-formed objects of the three kinds", async () => {
    await createObject(kc, ns, "Workload", "web", {
      spec: { placements: [{ name: "eu", replicas: 2 }] },
    });
    await createObject(kc, ns, "WorkloadDeployment", "web-eu", deployment({}));
    await createObject(
      kc,
      ns,
      "WorkloadDeployment",
      "web-eu-expr",
      deployment({
        selector: {
          matchExpressions: [
            { key: "app", operator: "In", values: ["web"] },
            { key: "legacy", operator: "DoesNotExist" },
          ],
        },
      }),
    );
    await createObject(kc, ns, "Instance", "i-0", { spec: { providerID: "aws:///i-0" } });
  });

  it.each([
    ["replicas < 0", deployment({ replicas: -1 }), "spec.replicas"],
    ["an unknown field", deployment({ replica: 3 }), 'unknown field "spec.replica"'],
    [
      "a label key with a space",
      deployment({ selector: { matchLabels: { "my app": "web" } } }),
      "label key",
    ],
    [
      "a label value that is too long",
      deployment({ selector: { matchLabels: { app: "x".repeat(64) } } }),
      "spec.selector.matchLabels",
    ],
    [
      "an unknown operator",
      deployment({
        selector: { matchExpressions: [{ key: "app", operator: "Like", values: ["a"] }] },
      }),
      "operator",
    ],
    [
      "In without values",
      deployment({ selector: { matchExpressions: [{ key: "app", operator: "In" }] } }),
      "In and NotIn need at least one value",
    ],
    [
      "a missing selector",
      { spec: { workloadRef: { name: "web" }, placement: "eu", replicas: 1 } },
      "spec.selector",
    ],
  ])("rejects a WorkloadDeployment with %s", async (_, body, expected) => {
    const { code, body: text } = await rejection(
      createObject(kc, ns, "WorkloadDeployment", `bad-${Date.now()}`, body),
    );
    expect([400, 422]).toContain(code);
    expect(text).toContain(expected);
  });

  it.each([
    [
      "negative replicas",
      { placements: [{ name: "eu", replicas: -1 }] },
      "spec.placements[0].replicas",
    ],
    [
      "a duplicate placement",
      {
        placements: [
          { name: "eu", replicas: 1 },
          { name: "eu", replicas: 2 },
        ],
      },
      "Duplicate value",
    ],
    ["an unknown field", { placements: [], template: {} }, 'unknown field "spec.template"'],
  ])("rejects a Workload with %s", async (_, spec, expected) => {
    const { code, body } = await rejection(
      createObject(kc, ns, "Workload", `bad-${Date.now()}`, { spec }),
    );
    expect([400, 422]).toContain(code);
    expect(body).toContain(expected);
  });
});
