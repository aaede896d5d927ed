import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { API_VERSION, type Instance, type Workload, type WorkloadDeployment } from "@nebula/api";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import {
  desiredInstanceConditions,
  desiredWorkloadDeploymentStatus,
  desiredWorkloadStatus,
  type PodLike,
} from "./reconcile.js";
import { argoHealth, HEALTH_LUA } from "./testing/lua.js";
import { FIXTURE_NOW as now, type PodScenario, podIn } from "./testing/pods.js";

const workload: Workload = {
  apiVersion: API_VERSION,
  kind: "Workload",
  metadata: { name: "web", namespace: "team-a", generation: 1 },
  spec: { placements: [{ name: "eu", replicas: 3 }] },
};

function deploymentWith(scenarios: PodScenario[], replicas = scenarios.length): WorkloadDeployment {
  const deployment: WorkloadDeployment = {
    apiVersion: API_VERSION,
    kind: "WorkloadDeployment",
    metadata: { name: "web-eu", namespace: "team-a", generation: 1 },
    spec: {
      workloadRef: { name: "web" },
      placement: "eu",
      replicas,
      selector: { matchLabels: { app: "web" } },
    },
  };
  const pods = scenarios.map((s, i) => podIn(s, `web-${i}`) as PodLike);
  return {
    ...deployment,
    status: desiredWorkloadDeploymentStatus({ deployment, workload, pods, instances: [] }, now),
  };
}

describe("the Argo CD health check, run by Lua 5.4", () => {
  it.each([
    [
      "crash loop",
      "Degraded",
      ["crashing"],
      /^InstanceCrashing: 0\/1 instances are ready; 1 is repeatedly exiting and restarting$/,
    ],
    ["OOM", "Degraded", ["oom"], /^OutOfMemory: /],
    ["image", "Degraded", ["image"], /^ImageUnavailable: /],
    ["quota", "Degraded", ["quota"], /^QuotaExceeded: /],
    ["provisioning", "Progressing", ["provisioning"], /^Provisioning: /],
    ["partial, one crashing", "Degraded", ["ready", "ready", "crashing"], /^InstanceCrashing: /],
    ["healthy", "Healthy", ["ready", "ready"], /^2\/2 instances are ready$/],
  ] as [string, string, PodScenario[], RegExp][])(
    "%s: a WorkloadDeployment is %s",
    (_, status, scenarios, message) => {
      const deployment = deploymentWith(scenarios);
      const health = argoHealth(deployment);
      expect(health.status).toBe(status);
      expect(health.message).toMatch(message);
      // The Workload above it reads the same.
      const wl = {
        ...workload,
        spec: { placements: [{ name: "eu", replicas: scenarios.length }] },
      };
      const wlStatus = desiredWorkloadStatus({ workload: wl, deployments: [deployment] }, now);
      expect(argoHealth({ ...wl, status: wlStatus }).status).toBe(status);
    },
  );

  it("is Progressing before the operator observed the latest generation or wrote any status", () => {
    const deployment = deploymentWith(["ready"]);
    expect(
      argoHealth({ ...deployment, metadata: { ...deployment.metadata, generation: 2 } }),
    ).toEqual({
      status: "Progressing",
      message: "Waiting for the operator to observe generation 2",
    });
    expect(argoHealth({ ...workload, status: undefined }).status).toBe("Progressing");
    expect(
      argoHealth({
        ...deployment,
        metadata: { ...deployment.metadata, deletionTimestamp: "2026-11-30T06:00:00Z" },
      }).status,
    ).toBe("Progressing");
  });

  it("reads an Instance by its Stalled / Reconciling conditions and its Ready", () => {
    const instance = (ready: boolean, reason: string): Instance => {
      const base: Instance = {
        apiVersion: API_VERSION,
        kind: "Instance",
        metadata: { name: "i-0", namespace: "team-a", generation: 1 },
        status: {
          conditions: [
            {
              type: "Ready",
              status: ready ? "True" : "False",
              reason,
              message: "m",
              lastTransitionTime: "2026-11-30T05:00:00Z",
            },
          ],
        },
      };
      return { ...base, status: { conditions: desiredInstanceConditions(base, now) } };
    };
    expect(argoHealth(instance(false, "ImageUnavailable")).status).toBe("Degraded");
    expect(argoHealth(instance(false, "Provisioning")).status).toBe("Progressing");
    expect(argoHealth(instance(true, "Ready"))).toEqual({ status: "Healthy", message: "m" });
  });
});

describe("deploy/operator/argocd/argocd-cm.yaml", () => {
  const file = fileURLToPath(
    new URL("../../../deploy/operator/argocd/argocd-cm.yaml", import.meta.url),
  );
  const lua = readFileSync(HEALTH_LUA, "utf8");
  const expected = `# Generated from health.lua by apps/operator (src/argocd.test.ts); do not edit.
# Merge into Argo CD's argocd-cm ConfigMap (kubectl -n argocd patch cm argocd-cm --patch-file ...).
data:
${["Workload", "WorkloadDeployment", "Instance"]
  .map(
    (kind) =>
      `  resource.customizations.health.compute.nebula.dev_${kind}: |\n${lua
        .trimEnd()
        .split("\n")
        .map((l) => (l === "" ? "" : `    ${l}`))
        .join("\n")}\n`,
  )
  .join("")}`;

  it("carries health.lua for the three kinds", () => {
    if (process.env.UPDATE_CRDS === "1") writeFileSync(file, expected);
    expect(readFileSync(file, "utf8")).toBe(expected);
    const data = (parse(expected) as { data: Record<string, string> }).data;
    expect(Object.values(data)).toEqual([lua, lua, lua]);
  });
});
