import { describe, expect, it } from "vitest";
import { type Condition, findCondition } from "./condition.js";
import { type InstanceInput, rollupWorkloadDeployment } from "./deployment.js";
import {
  type PlacementInput,
  parseWorkloadInput,
  rollupWorkload,
  type WorkloadInput,
} from "./workload.js";

const now = new Date("2026-11-30T05:00:00Z");
const CRASH_MESSAGE =
  'container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.';

const crashing = (name: string): InstanceInput => ({
  name,
  ready: false,
  reason: "InstanceCrashing",
  message: CRASH_MESSAGE,
});
const ready = (name: string): InstanceInput => ({ name, ready: true });
const failing = (name: string, reason: string): InstanceInput => ({ name, ready: false, reason });

/** A placement as the operator builds it: its name and spec, plus its WorkloadDeployment's status. */
function placement(
  name: string,
  desiredReplicas: number,
  instances: InstanceInput[],
): PlacementInput {
  const { replicas, readyReplicas, reasons } = rollupWorkloadDeployment(
    { desiredReplicas, generation: 1, instances },
    { now },
  );
  return { name, desiredReplicas, replicas, readyReplicas, reasons };
}

function rollup(placements: PlacementInput[]) {
  return rollupWorkload({ generation: 5, placements }, { now });
}

function brief(conditions: readonly Condition[], type: string) {
  const c = findCondition(conditions, type);
  return [c?.status, c?.reason, c?.message];
}

describe("a crash-looping placement at the Workload", () => {
  it("carries the WorkloadDeployment's reason and message up unchanged (one placement)", () => {
    const status = rollup([placement("eu", 1, [crashing("web-0")])]);
    expect(brief(status.conditions, "Available")).toEqual([
      "False",
      "InstanceCrashing",
      '1 of 1 instances is repeatedly exiting and restarting: container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.',
    ]);
  });

  it("says an image could not be pulled, not that instances are being provisioned", () => {
    const status = rollup([placement("eu", 1, [failing("web-0", "ImageUnavailable")])]);
    expect(brief(status.conditions, "Available")).toEqual([
      "False",
      "ImageUnavailable",
      "1 of 1 instances could not pull its image.",
    ]);
  });

  it("gives each placement the same Available its WorkloadDeployment has", () => {
    const instances = [ready("web-0"), crashing("web-1"), failing("web-2", "QuotaExceeded")];
    const deployment = rollupWorkloadDeployment(
      { desiredReplicas: 4, generation: 1, instances },
      { now },
    );
    const status = rollup([placement("eu", 4, instances)]);
    const available = findCondition(deployment.conditions, "Available");
    expect(status.placements).toEqual([
      {
        name: "eu",
        desiredReplicas: 4,
        replicas: 3,
        readyReplicas: 1,
        available: available?.status,
        reason: available?.reason,
        message: available?.message,
      },
    ]);
  });
});

describe("placements (table)", () => {
  it.each([
    {
      name: "one placement fully down, one serving: available, degraded",
      placements: [
        placement("eu", 2, [ready("eu-0"), ready("eu-1")]),
        placement("us", 2, [crashing("us-0"), crashing("us-1")]),
      ],
      available: [
        "True",
        "AvailablePlacementFound",
        "1/2 placements have ready instances; 2/4 instances are ready; 2 are repeatedly exiting and restarting",
      ],
      replicasReady: [
        "False",
        "InstanceCrashing",
        "1/2 placements have all desired instances ready; 2/4 instances are ready; 2 are repeatedly exiting and restarting",
      ],
      degraded: [
        "True",
        "InstanceCrashing",
        `2 of 4 instances are repeatedly exiting and restarting (us-0, us-1): ${CRASH_MESSAGE}`,
      ],
      perPlacement: [
        ["eu", "True", "ReadyInstanceFound"],
        ["us", "False", "InstanceCrashing"],
      ],
    },
    {
      name: "every placement down for different reasons: the customer's reason wins",
      placements: [
        placement("eu", 1, [failing("eu-0", "QuotaExceeded")]),
        placement("us", 2, [crashing("us-0"), failing("us-1", "Provisioning")]),
      ],
      available: [
        "False",
        "InstanceCrashing",
        `None of the 2 placements has a ready instance. 1 of 3 instances is repeatedly exiting and restarting: ${CRASH_MESSAGE} 1 of 3 instances is waiting for quota. 1 of 3 instances is being provisioned.`,
      ],
      replicasReady: [
        "False",
        "InstanceCrashing",
        "0/2 placements have all desired instances ready; 0/3 instances are ready; 1 is repeatedly exiting and restarting; 1 is waiting for quota; 1 is being provisioned",
      ],
      degraded: [
        "True",
        "InstanceCrashing",
        `1 of 3 instances is repeatedly exiting and restarting (us-0): ${CRASH_MESSAGE} 1 of 3 instances is waiting for quota (eu-0).`,
      ],
      perPlacement: [
        ["eu", "False", "QuotaExceeded"],
        ["us", "False", "InstanceCrashing"],
      ],
    },
    {
      name: "partial failure inside every placement",
      placements: [
        placement("eu", 2, [ready("eu-0"), crashing("eu-1")]),
        placement("us", 2, [ready("us-0"), failing("us-1", "OutOfMemory")]),
      ],
      available: [
        "True",
        "AvailablePlacementFound",
        "2/2 placements have ready instances; 2/4 instances are ready; 1 is repeatedly exiting and restarting; 1 ran out of memory",
      ],
      replicasReady: [
        "False",
        "InstanceCrashing",
        "0/2 placements have all desired instances ready; 2/4 instances are ready; 1 is repeatedly exiting and restarting; 1 ran out of memory",
      ],
      degraded: [
        "True",
        "InstanceCrashing",
        `1 of 4 instances is repeatedly exiting and restarting (eu-1): ${CRASH_MESSAGE} 1 of 4 instances ran out of memory (us-1).`,
      ],
      perPlacement: [
        ["eu", "True", "ReadyInstanceFound"],
        ["us", "True", "ReadyInstanceFound"],
      ],
    },
    {
      name: "instances beyond desired in one placement, none in the other",
      placements: [
        placement("eu", 2, [ready("eu-0"), ready("eu-1"), ready("eu-2")]),
        placement("us", 1, [failing("us-0", "ImageUnavailable")]),
      ],
      available: [
        "True",
        "AvailablePlacementFound",
        "1/2 placements have ready instances; 2/3 instances are ready (1 more is ready but not desired); 1 could not pull its image",
      ],
      replicasReady: [
        "False",
        "ImageUnavailable",
        "1/2 placements have all desired instances ready; 2/3 instances are ready (1 more is ready but not desired); 1 could not pull its image",
      ],
      degraded: ["True", "ImageUnavailable", "1 of 3 instances could not pull its image (us-0)."],
      perPlacement: [
        ["eu", "True", "ReadyInstanceFound"],
        ["us", "False", "ImageUnavailable"],
      ],
    },
    {
      name: "no placements",
      placements: [],
      available: ["True", "NoReplicasDesired", "No placements are defined"],
      replicasReady: ["True", "NoReplicasDesired", "No placements are defined"],
      degraded: ["False", "NoFailures", "No instance reports a failure."],
      perPlacement: [],
    },
    {
      name: "a placement whose WorkloadDeployment has no status yet",
      placements: [{ name: "eu", desiredReplicas: 2 }],
      available: ["False", "Provisioning", "2 of 2 instances are being provisioned."],
      replicasReady: [
        "False",
        "Provisioning",
        "0/1 placements have all desired instances ready; 0/2 instances are ready; 2 are being provisioned",
      ],
      degraded: ["False", "NoFailures", "No instance reports a failure."],
      perPlacement: [["eu", "False", "Provisioning"]],
    },
    {
      name: "zero desired everywhere",
      placements: [placement("eu", 0, []), placement("us", 0, [])],
      available: [
        "True",
        "NoReplicasDesired",
        "0/2 placements have ready instances; no instances are desired",
      ],
      replicasReady: [
        "True",
        "NoReplicasDesired",
        "2/2 placements have all desired instances ready; no instances are desired",
      ],
      degraded: ["False", "NoFailures", "No instance reports a failure."],
      perPlacement: [
        ["eu", "True", "NoReplicasDesired"],
        ["us", "True", "NoReplicasDesired"],
      ],
    },
  ])("$name", ({ placements, available, replicasReady, degraded, perPlacement }) => {
    const status = rollup(placements);
    expect(brief(status.conditions, "Available")).toEqual(available);
    expect(brief(status.conditions, "ReplicasReady")).toEqual(replicasReady);
    expect(brief(status.conditions, "Degraded")).toEqual(degraded);
    expect(status.placements.map((p) => [p.name, p.available, p.reason])).toEqual(perPlacement);
  });
});

describe("counts and conventions", () => {
  it("sums replicas over placements and stamps the Workload's generation", () => {
    const status = rollup([
      placement("us", 3, [ready("us-0"), crashing("us-1")]),
      placement("eu", 1, [ready("eu-0")]),
    ]);
    expect([status.desiredReplicas, status.replicas, status.readyReplicas]).toEqual([4, 3, 2]);
    expect(status.observedGeneration).toBe(5);
    expect(status.conditions.every((c) => c.observedGeneration === 5)).toBe(true);
    expect(status.placements.map((p) => p.name)).toEqual(["eu", "us"]);
    expect(status.reasons.map((r) => [r.reason, r.count])).toEqual([
      ["InstanceCrashing", 1],
      ["Provisioning", 1],
    ]);
  });

  it("keeps a spec rejection that claims no replica", () => {
    const deployment = rollupWorkloadDeployment(
      {
        desiredReplicas: 1,
        generation: 1,
        blockers: [{ reason: "InvalidSpec", message: "capability SYS_ADMIN is not allowed" }],
        instances: [crashing("web-0")],
      },
      { now },
    );
    const status = rollup([{ ...deployment, name: "eu" }]);
    expect(findCondition(status.conditions, "Available")?.message).toBe(
      findCondition(deployment.conditions, "Available")?.message,
    );
    expect(findCondition(status.conditions, "Available")?.reason).toBe("InvalidSpec");
  });

  it("answers for input that breaks its own types, without throwing", () => {
    const garbage = {
      generation: "x",
      placements: [null, { name: 1, desiredReplicas: "2", reasons: [null, { count: -4 }] }],
    } as unknown as WorkloadInput;
    const status = rollupWorkload(garbage, { now });
    expect(status.placements).toHaveLength(2);
    expect(status.desiredReplicas).toBe(0);
    expect(rollupWorkload(undefined as unknown as WorkloadInput, { now }).conditions).toHaveLength(
      4,
    );
  });
});

describe("parseWorkloadInput", () => {
  it("returns valid input, or a typed error", () => {
    const input = { generation: 1, placements: [{ name: "eu", desiredReplicas: 1 }] };
    expect(parseWorkloadInput(input)).toEqual({ ok: true, value: input });
    const bad = parseWorkloadInput({ generation: 1, placements: [{ name: "eu" }] });
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.error.code).toBe("InvalidWorkloadInput");
  });
});
