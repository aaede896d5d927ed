import { API_VERSION, type Instance, type Workload, type WorkloadDeployment } from "@nebula/api";
import { type Condition, findCondition, statusChanged } from "@nebula/rollup";
import { describe, expect, it } from "vitest";
import {
  availabilityEvent,
  desiredInstanceConditions,
  desiredWorkloadDeploymentStatus,
  desiredWorkloadStatus,
  type PodLike,
  planInstance,
  planWorkloadDeployment,
} from "./reconcile.js";
import { FIXTURE_NOW as now, type PodScenario, podIn } from "./testing/pods.js";

const later = new Date("2026-11-30T07:00:00Z");

function workload(
  placements: { name: string; replicas: number }[],
  status?: Workload["status"],
): Workload {
  return {
    apiVersion: API_VERSION,
    kind: "Workload",
    metadata: { name: "web", namespace: "team-a", generation: 2 },
    spec: { placements },
    ...(status ? { status } : {}),
  };
}

function deployment(
  placement: string,
  replicas: number,
  extra: Partial<WorkloadDeployment> = {},
): WorkloadDeployment {
  return {
    apiVersion: API_VERSION,
    kind: "WorkloadDeployment",
    metadata: { name: `web-${placement}`, namespace: "team-a", generation: 1 },
    spec: {
      workloadRef: { name: "web" },
      placement,
      replicas,
      selector: { matchLabels: { app: "web", placement } },
    },
    ...extra,
  };
}

const pods = (placement: string, ...scenarios: PodScenario[]): PodLike[] =>
  scenarios.map(
    (s, i) => podIn(s, `web-${placement}-${i}`, "team-a", { app: "web", placement }) as PodLike,
  );

const condition = (conditions: readonly Condition[], type: string) => {
  const c = findCondition(conditions, type);
  return c && [c.status, c.reason, c.message];
};

describe("a WorkloadDeployment's status from its Pods", () => {
  const wl = workload([
    { name: "eu", replicas: 2 },
    { name: "us", replicas: 3 },
  ]);

  it("every instance crashing: Available=False InstanceCrashing with the count and the last exit code", () => {
    const status = desiredWorkloadDeploymentStatus(
      {
        deployment: deployment("eu", 2),
        workload: wl,
        pods: pods("eu", "crashing", "crashing"),
        instances: [],
      },
      now,
    );
    const [s, reason, message] = condition(status.conditions, "Available") ?? [];
    expect([s, reason]).toEqual(["False", "InstanceCrashing"]);
    expect(message).toMatch(
      /^2 of 2 instances are repeatedly exiting and restarting: container "app" .*code 1\./,
    );
    expect(condition(status.conditions, "Stalled")?.slice(0, 2)).toEqual([
      "True",
      "InstanceCrashing",
    ]);
    expect(condition(status.conditions, "Reconciling")?.[0]).toBe("False");
    expect(status).toMatchObject({
      observedGeneration: 1,
      desiredReplicas: 2,
      replicas: 2,
      readyReplicas: 0,
    });
  });

  it.each([
    ["image", "ImageUnavailable"],
    ["oom", "OutOfMemory"],
    ["quota", "QuotaExceeded"],
  ] as const)("%s: Available=False %s, Stalled", (scenario, reason) => {
    const status = desiredWorkloadDeploymentStatus(
      { deployment: deployment("eu", 1), workload: wl, pods: pods("eu", scenario), instances: [] },
      now,
    );
    expect(condition(status.conditions, "Available")?.slice(0, 2)).toEqual(["False", reason]);
    expect(condition(status.conditions, "Stalled")?.slice(0, 2)).toEqual(["True", reason]);
  });

  it("provisioning: Reconciling, not stalled", () => {
    const status = desiredWorkloadDeploymentStatus(
      {
        deployment: deployment("eu", 1),
        workload: wl,
        pods: pods("eu", "provisioning"),
        instances: [],
      },
      now,
    );
    expect(condition(status.conditions, "Available")?.slice(0, 2)).toEqual([
      "False",
      "Provisioning",
    ]);
    expect(condition(status.conditions, "Reconciling")?.slice(0, 2)).toEqual([
      "True",
      "Provisioning",
    ]);
    expect(condition(status.conditions, "Stalled")?.[0]).toBe("False");
  });

  it("2 of 3 ready: Available=True with the degraded detail, ReplicasReady=False", () => {
    const status = desiredWorkloadDeploymentStatus(
      {
        deployment: deployment("us", 3),
        workload: wl,
        pods: pods("us", "ready", "ready", "crashing"),
        instances: [],
      },
      now,
    );
    expect(condition(status.conditions, "Available")).toEqual([
      "True",
      "ReadyInstanceFound",
      "2/3 instances are ready; 1 is repeatedly exiting and restarting",
    ]);
    expect(condition(status.conditions, "ReplicasReady")?.slice(0, 2)).toEqual([
      "False",
      "InstanceCrashing",
    ]);
  });

  it("counts only the Pods its selector matches, in its namespace", () => {
    const other = podIn("crashing", "x", "team-b", { app: "web", placement: "eu" }) as PodLike;
    const status = desiredWorkloadDeploymentStatus(
      {
        deployment: deployment("eu", 1),
        workload: wl,
        pods: [...pods("eu", "ready"), ...pods("us", "crashing"), other],
        instances: [],
      },
      now,
    );
    expect(status).toMatchObject({ replicas: 1, readyReplicas: 1 });
    expect(condition(status.conditions, "ReplicasReady")?.[0]).toBe("True");
    expect(condition(status.conditions, "Stalled")?.[0]).toBe("False");
    expect(condition(status.conditions, "Reconciling")?.[0]).toBe("False");
    expect(condition(status.conditions, "ReferencesResolved")?.slice(0, 2)).toEqual([
      "True",
      "Resolved",
    ]);
  });

  it("reads Instance objects the same way", () => {
    const instance = (name: string, ready: boolean, reason: string): Instance => ({
      apiVersion: API_VERSION,
      kind: "Instance",
      metadata: { name, namespace: "team-a", labels: { app: "web", placement: "eu" } },
      status: {
        state: "Running",
        conditions: [
          {
            type: "Ready",
            status: ready ? "True" : "False",
            reason,
            message: "",
            lastTransitionTime: "2026-11-30T05:00:00Z",
          },
        ],
      },
    });
    const status = desiredWorkloadDeploymentStatus(
      {
        deployment: deployment("eu", 2),
        workload: wl,
        pods: [],
        instances: [
          instance("i-0", false, "ImageUnavailable"),
          instance("i-1", false, "ImageUnavailable"),
        ],
      },
      now,
    );
    expect(condition(status.conditions, "Available")?.slice(0, 2)).toEqual([
      "False",
      "ImageUnavailable",
    ]);
  });

  it("an unchanged world computes an unchanged status (nothing to write)", () => {
    const scope = {
      deployment: deployment("eu", 2),
      workload: wl,
      pods: pods("eu", "ready", "crashing"),
      instances: [],
    };
    const first = desiredWorkloadDeploymentStatus(scope, now);
    const stored = {
      ...scope,
      deployment: { ...scope.deployment, status: JSON.parse(JSON.stringify(first)) },
    };
    const second = desiredWorkloadDeploymentStatus(stored, later);
    expect(statusChanged(first, second)).toBe(false);
    expect(second).toEqual(first);
  });
});

describe("invalid references become conditions", () => {
  it("a missing Workload: ReferencesResolved=False WorkloadNotFound and Stalled", () => {
    const status = desiredWorkloadDeploymentStatus(
      {
        deployment: deployment("eu", 1),
        workload: undefined,
        pods: pods("eu", "ready"),
        instances: [],
      },
      now,
    );
    expect(condition(status.conditions, "ReferencesResolved")).toEqual([
      "False",
      "WorkloadNotFound",
      'Workload "web" does not exist in namespace "team-a".',
    ]);
    expect(condition(status.conditions, "Stalled")?.slice(0, 2)).toEqual([
      "True",
      "WorkloadNotFound",
    ]);
    expect(condition(status.conditions, "Available")?.[0]).toBe("True");
  });

  it("a placement the Workload does not have", () => {
    const status = desiredWorkloadDeploymentStatus(
      {
        deployment: deployment("ap", 1),
        workload: workload([{ name: "eu", replicas: 1 }]),
        pods: [],
        instances: [],
      },
      now,
    );
    expect(condition(status.conditions, "ReferencesResolved")?.slice(0, 2)).toEqual([
      "False",
      "PlacementNotFound",
    ]);
    expect(condition(status.conditions, "Available")?.slice(0, 2)).toEqual([
      "False",
      "PlacementNotFound",
    ]);
  });

  it("a selector that matches nothing: said plainly, not 'provisioning'", () => {
    const status = desiredWorkloadDeploymentStatus(
      {
        deployment: deployment("eu", 2),
        workload: workload([{ name: "eu", replicas: 2 }]),
        pods: pods("us", "ready"),
        instances: [],
      },
      now,
    );
    expect(condition(status.conditions, "ReferencesResolved")?.slice(0, 2)).toEqual([
      "False",
      "NoMatchingInstances",
    ]);
    expect(condition(status.conditions, "Available")?.slice(0, 2)).toEqual([
      "False",
      "NoMatchingInstances",
    ]);
    expect(condition(status.conditions, "Reconciling")?.slice(0, 2)).toEqual([
      "True",
      "NoMatchingInstances",
    ]);
  });

  it("an empty selector selects nothing and says so", () => {
    const d = deployment("eu", 1);
    const status = desiredWorkloadDeploymentStatus(
      {
        deployment: { ...d, spec: { ...d.spec, selector: {} } },
        workload: workload([{ name: "eu", replicas: 1 }]),
        pods: pods("eu", "ready"),
        instances: [],
      },
      now,
    );
    expect(status.replicas).toBe(0);
    expect(condition(status.conditions, "ReferencesResolved")?.slice(0, 2)).toEqual([
      "False",
      "EmptySelector",
    ]);
  });

  it("a Workload without placements", () => {
    const status = desiredWorkloadStatus({ workload: workload([]), deployments: [] }, now);
    expect(condition(status.conditions, "ReferencesResolved")?.slice(0, 2)).toEqual([
      "False",
      "NoPlacements",
    ]);
    expect(condition(status.conditions, "Stalled")?.slice(0, 2)).toEqual(["True", "NoPlacements"]);
  });
});

describe("a Workload's status from its WorkloadDeployments", () => {
  const wl = workload([
    { name: "eu", replicas: 2 },
    { name: "us", replicas: 3 },
  ]);
  const withStatus = (
    placement: string,
    replicas: number,
    scenarios: PodScenario[],
  ): WorkloadDeployment => {
    const d = deployment(placement, replicas);
    return {
      ...d,
      status: desiredWorkloadDeploymentStatus(
        { deployment: d, workload: wl, pods: pods(placement, ...scenarios), instances: [] },
        now,
      ),
    };
  };

  it("one placement down, one healthy: Available=True, the failing placement in the detail", () => {
    const status = desiredWorkloadStatus(
      {
        workload: wl,
        deployments: [
          withStatus("eu", 2, ["crashing", "crashing"]),
          withStatus("us", 3, ["ready", "ready", "ready"]),
        ],
      },
      now,
    );
    expect(condition(status.conditions, "Available")?.slice(0, 2)).toEqual([
      "True",
      "AvailablePlacementFound",
    ]);
    expect(status.placements.map((p) => [p.name, p.available, p.reason])).toEqual([
      ["eu", "False", "InstanceCrashing"],
      ["us", "True", "ReadyInstanceFound"],
    ]);
    expect(condition(status.conditions, "Stalled")?.slice(0, 2)).toEqual([
      "True",
      "InstanceCrashing",
    ]);
  });

  it("every placement down: the Workload says InstanceCrashing with the count and the exit code", () => {
    const status = desiredWorkloadStatus(
      {
        workload: workload([{ name: "eu", replicas: 2 }]),
        deployments: [withStatus("eu", 2, ["crashing", "crashing"])],
      },
      now,
    );
    const [s, reason, message] = condition(status.conditions, "Available") ?? [];
    expect([s, reason]).toEqual(["False", "InstanceCrashing"]);
    expect(message).toContain("2 of 2 instances are repeatedly exiting and restarting");
    expect(message).toContain("code 1");
  });

  it("ignores a deployment status from an older generation and deployments of other workloads", () => {
    const stale = {
      ...withStatus("eu", 2, ["ready", "ready"]),
      metadata: { name: "web-eu", namespace: "team-a", generation: 5 },
    };
    const foreign = {
      ...withStatus("us", 3, ["ready", "ready", "ready"]),
      spec: { ...deployment("us", 3).spec, workloadRef: { name: "api" } },
    };
    const status = desiredWorkloadStatus({ workload: wl, deployments: [stale, foreign] }, now);
    expect(status.readyReplicas).toBe(0);
    expect(condition(status.conditions, "Reconciling")?.slice(0, 2)).toEqual([
      "True",
      "Provisioning",
    ]);
  });
});

describe("Instance objects", () => {
  it("gets Reconciling/Stalled from its own Ready condition, its provider's conditions kept", () => {
    const instance: Instance = {
      apiVersion: API_VERSION,
      kind: "Instance",
      metadata: { name: "i-0", namespace: "team-a", generation: 4 },
      status: {
        conditions: [
          {
            type: "Ready",
            status: "False",
            reason: "OutOfMemory",
            message: "ran out of memory",
            lastTransitionTime: "2026-11-30T05:00:00Z",
          },
        ],
      },
    };
    const conditions = desiredInstanceConditions(instance, now);
    expect(conditions.map((c) => [c.type, c.status, c.reason])).toEqual([
      ["Ready", "False", "OutOfMemory"],
      ["Reconciling", "False", "NothingPending"],
      ["Stalled", "True", "OutOfMemory"],
    ]);
    expect(findCondition(conditions, "Stalled")?.observedGeneration).toBe(4);
  });
});

describe("availabilityEvent", () => {
  const c = (status: "True" | "False", reason: string): Condition[] => [
    {
      type: "Available",
      status,
      reason,
      message: `m-${reason}`,
      lastTransitionTime: "2026-11-30T05:00:00Z",
    },
  ];

  it("records a flip, not a first write nor a reason change", () => {
    expect(
      availabilityEvent(c("True", "ReadyInstanceFound"), c("False", "InstanceCrashing")),
    ).toEqual({
      type: "Warning",
      reason: "InstanceCrashing",
      note: "Available changed from True to False: m-InstanceCrashing",
    });
    expect(
      availabilityEvent(c("False", "InstanceCrashing"), c("True", "AvailablePlacementFound"))?.type,
    ).toBe("Normal");
    expect(availabilityEvent(undefined, c("False", "InstanceCrashing"))).toBeUndefined();
    expect(
      availabilityEvent(c("False", "Provisioning"), c("False", "InstanceCrashing")),
    ).toBeUndefined();
  });
});

describe("availability survives a restart (the stability window)", () => {
  const wl = workload([{ name: "eu", replicas: 1 }]);
  const scope = (...scenarios: PodScenario[]) => ({
    deployment: deployment("eu", scenarios.length),
    workload: wl,
    pods: pods("eu", ...scenarios),
    instances: [],
  });
  const stored = (s: ReturnType<typeof scope>, status: unknown) => ({
    ...s,
    deployment: { ...s.deployment, status: JSON.parse(JSON.stringify(status)) },
  });
  const crashing =
    '1 of 1 instances is repeatedly exiting and restarting: container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.';

  it("a Pod running (and Ready) 2 s after a restart: Available=False InstanceCrashing, Stalled, again when the window ends", () => {
    const plan = planWorkloadDeployment(scope("restarted"), now);
    expect(condition(plan.status.conditions, "Available")).toEqual([
      "False",
      "InstanceCrashing",
      crashing,
    ]);
    expect(plan.status.readyReplicas).toBe(0);
    expect(condition(plan.status.conditions, "Stalled")?.slice(0, 2)).toEqual([
      "True",
      "InstanceCrashing",
    ]);
    // The Pod started at 05:59:58; the window (10 minutes) ends at 06:09:58.
    expect(plan.requeueAfterMs).toBe(598_000);
    // The back-off between two restarts reads the same: the crash loop writes nothing per phase.
    const backingOff = planWorkloadDeployment(stored(scope("crashing"), plan.status), now);
    expect(statusChanged(plan.status, backingOff.status)).toBe(false);
    expect(backingOff.requeueAfterMs).toBeUndefined();
  });

  it("an unchanged world writes nothing until the window ends, then Available turns True once", () => {
    const first = planWorkloadDeployment(scope("restarted"), now).status;
    let current = first;
    for (const seconds of [1, 10, 60, 300, 597, 597.999]) {
      const at = new Date(now.getTime() + seconds * 1000);
      const next = planWorkloadDeployment(stored(scope("restarted"), current), at);
      expect(statusChanged(current, next.status)).toBe(false);
      expect(next.requeueAfterMs).toBe(Math.ceil(598_000 - seconds * 1000));
      current = next.status;
    }
    const end = new Date(now.getTime() + 598_000);
    const after = planWorkloadDeployment(stored(scope("restarted"), current), end);
    expect(statusChanged(current, after.status)).toBe(true);
    expect(condition(after.status.conditions, "Available")?.slice(0, 2)).toEqual([
      "True",
      "ReadyInstanceFound",
    ]);
    expect(condition(after.status.conditions, "Stalled")?.[0]).toBe("False");
    expect(condition(after.status.conditions, "ReplicasReady")?.[0]).toBe("True");
    expect(after.requeueAfterMs).toBeUndefined();
    const again = planWorkloadDeployment(
      stored(scope("restarted"), after.status),
      new Date(end.getTime() + 3_600_000),
    );
    expect(statusChanged(after.status, again.status)).toBe(false);
  });

  it("takes the window from the options", () => {
    const plan = planWorkloadDeployment(scope("restarted"), now, { stabilityWindowSeconds: 30 });
    expect(plan.requeueAfterMs).toBe(28_000);
    expect(condition(plan.status.conditions, "Available")?.[2]).toContain(
      "without staying up for 30 seconds.",
    );
    const none = planWorkloadDeployment(scope("restarted"), now, { stabilityWindowSeconds: 0 });
    expect(condition(none.status.conditions, "Available")?.[0]).toBe("True");
    expect(none.requeueAfterMs).toBeUndefined();
  });

  it("a partial failure: 1/2 ready, the restarted one counted as crashing", () => {
    const plan = planWorkloadDeployment(scope("ready", "restarted"), now);
    expect(condition(plan.status.conditions, "Available")).toEqual([
      "True",
      "ReadyInstanceFound",
      "1/2 instances are ready; 1 is repeatedly exiting and restarting",
    ]);
    expect(condition(plan.status.conditions, "ReplicasReady")?.slice(0, 2)).toEqual([
      "False",
      "InstanceCrashing",
    ]);
    expect(plan.requeueAfterMs).toBe(598_000);
  });

  it("the Workload reads the held placement as crashing too", () => {
    const wd = {
      ...deployment("eu", 1),
      status: desiredWorkloadDeploymentStatus(scope("restarted"), now),
    };
    const status = desiredWorkloadStatus({ workload: wl, deployments: [wd] }, now);
    expect(condition(status.conditions, "Available")?.slice(0, 2)).toEqual([
      "False",
      "InstanceCrashing",
    ]);
    expect(condition(status.conditions, "Stalled")?.slice(0, 2)).toEqual([
      "True",
      "InstanceCrashing",
    ]);
  });

  it("an Instance object without container statuses has no window to wait for", () => {
    const instance: Instance = {
      apiVersion: API_VERSION,
      kind: "Instance",
      metadata: { name: "i-0", namespace: "team-a", generation: 1 },
      status: {
        conditions: [
          {
            type: "Ready",
            status: "True",
            reason: "Ready",
            message: "",
            lastTransitionTime: "2026-11-30T05:00:00Z",
          },
        ],
      },
    };
    expect(planInstance(instance, now).requeueAfterMs).toBeUndefined();
  });
});
