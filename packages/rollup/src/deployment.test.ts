import { describe, expect, it } from "vitest";
import { DEFAULT_REASON_CATALOG } from "./catalog.js";
import { type Condition, findCondition } from "./condition.js";
import {
  type InstanceInput,
  parseWorkloadDeploymentInput,
  rollupWorkloadDeployment,
  type WorkloadDeploymentInput,
} from "./deployment.js";

const now = new Date("2026-11-30T05:00:00Z");

/** The representative message of a crash-looping instance, as `@nebula/state-mapping` words it. */
const CRASH_MESSAGE =
  'container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.';

const crashing = (name: string, message = CRASH_MESSAGE): InstanceInput => ({
  name,
  ready: false,
  reason: "InstanceCrashing",
  message,
});
const ready = (name: string): InstanceInput => ({ name, ready: true, reason: "Ready" });
const withReason = (name: string, reason: string, message?: string): InstanceInput => ({
  name,
  ready: false,
  reason,
  ...(message === undefined ? {} : { message }),
});

function rollup(input: Partial<WorkloadDeploymentInput>) {
  return rollupWorkloadDeployment(
    { desiredReplicas: 1, generation: 1, instances: [], ...input },
    { now },
  );
}

/** `[status, reason, message]` of a condition, for compact tables. */
function brief(conditions: readonly Condition[], type: string) {
  const c = findCondition(conditions, type);
  return [c?.status, c?.reason, c?.message];
}

describe("a crash-looping WorkloadDeployment, word for word", () => {
  it("a workload whose only container exits on startup: Available=False InstanceCrashing", () => {
    const status = rollup({ desiredReplicas: 1, instances: [crashing("web-0")] });
    expect(brief(status.conditions, "Available")).toEqual([
      "False",
      "InstanceCrashing",
      '1 of 1 instances is repeatedly exiting and restarting: container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.',
    ]);
  });

  it("an image that could not be pulled: Available=False ImageUnavailable", () => {
    const status = rollup({ instances: [withReason("web-0", "ImageUnavailable")] });
    expect(brief(status.conditions, "Available")).toEqual([
      "False",
      "ImageUnavailable",
      "1 of 1 instances could not pull its image.",
    ]);
  });

  it("partial failure keeps Available=True and shows in its message", () => {
    const status = rollup({
      desiredReplicas: 3,
      instances: [ready("web-0"), crashing("web-1"), ready("web-2")],
    });
    expect(brief(status.conditions, "Available")).toEqual([
      "True",
      "ReadyInstanceFound",
      "2/3 instances are ready; 1 is repeatedly exiting and restarting",
    ]);
    expect(brief(status.conditions, "Degraded")).toEqual([
      "True",
      "InstanceCrashing",
      `1 of 3 instances is repeatedly exiting and restarting (web-1): ${CRASH_MESSAGE}`,
    ]);
  });

  it("never reports ReplicasReady=True beside 0/1 ready (the secondary observation)", () => {
    const status = rollup({ instances: [withReason("web-0", "ImageUnavailable")] });
    expect(brief(status.conditions, "ReplicasReady")).toEqual([
      "False",
      "ImageUnavailable",
      "0/1 instances are ready; 1 could not pull its image",
    ]);
    expect(status.readyReplicas).toBe(0);
  });

  it("does not say the instances are being provisioned when they are failing", () => {
    for (const reason of ["InstanceCrashing", "ImageUnavailable", "ConfigurationError"]) {
      const status = rollup({ instances: [withReason("web-0", reason)] });
      expect(findCondition(status.conditions, "Available")?.reason).toBe(reason);
      expect(findCondition(status.conditions, "Progressing")?.status).toBe("False");
    }
  });
});

describe("mixes (table)", () => {
  it.each([
    {
      name: "crash + image failure + provisioning, nothing ready",
      input: {
        desiredReplicas: 4,
        instances: [
          crashing("web-0"),
          crashing("web-1"),
          withReason("web-2", "ImageUnavailable"),
          withReason("web-3", "Provisioning"),
        ],
      },
      replicas: [4, 0],
      available: [
        "False",
        "InstanceCrashing",
        `2 of 4 instances are repeatedly exiting and restarting: ${CRASH_MESSAGE} 1 of 4 instances could not pull its image. 1 of 4 instances is being provisioned.`,
      ],
      replicasReady: [
        "False",
        "InstanceCrashing",
        "0/4 instances are ready; 2 are repeatedly exiting and restarting; 1 could not pull its image; 1 is being provisioned",
      ],
      degraded: [
        "True",
        "InstanceCrashing",
        `2 of 4 instances are repeatedly exiting and restarting (web-0, web-1): ${CRASH_MESSAGE} 1 of 4 instances could not pull its image (web-2).`,
      ],
      progressing: ["True", "Provisioning", "1 of 4 instances is being provisioned (web-3)."],
    },
    {
      name: "quota-blocked + crashing: the customer's crash outranks the platform's quota",
      input: {
        desiredReplicas: 3,
        blockers: [{ reason: "QuotaExceeded", message: "Quota for cpu is exhausted." }],
        instances: [crashing("web-0")],
      },
      replicas: [1, 0],
      available: [
        "False",
        "InstanceCrashing",
        `1 of 3 instances is repeatedly exiting and restarting: ${CRASH_MESSAGE} 2 of 3 instances are waiting for quota.`,
      ],
      replicasReady: [
        "False",
        "InstanceCrashing",
        "0/3 instances are ready; 1 is repeatedly exiting and restarting; 2 are waiting for quota",
      ],
      degraded: [
        "True",
        "InstanceCrashing",
        `1 of 3 instances is repeatedly exiting and restarting (web-0): ${CRASH_MESSAGE} 2 of 3 instances are waiting for quota.`,
      ],
      progressing: ["False", "NoInstancePending", "No instance is being provisioned or started."],
    },
    {
      name: "quota-blocked alone: the blocker's message is the representative",
      input: {
        desiredReplicas: 2,
        blockers: [{ reason: "QuotaExceeded", message: "Quota for cpu is exhausted." }],
        instances: [],
      },
      replicas: [0, 0],
      available: [
        "False",
        "QuotaExceeded",
        "2 of 2 instances are waiting for quota: Quota for cpu is exhausted.",
      ],
      replicasReady: ["False", "QuotaExceeded", "0/2 instances are ready; 2 are waiting for quota"],
      degraded: [
        "True",
        "QuotaExceeded",
        "2 of 2 instances are waiting for quota: Quota for cpu is exhausted.",
      ],
      progressing: ["False", "NoInstancePending", "No instance is being provisioned or started."],
    },
    {
      name: "partial failure with several reasons",
      input: {
        desiredReplicas: 5,
        instances: [
          ready("web-0"),
          ready("web-1"),
          crashing("web-2"),
          withReason(
            "web-3",
            "OutOfMemory",
            'container "app" was killed because it ran out of memory (limit 512Mi).',
          ),
          withReason("web-4", "Starting"),
        ],
      },
      replicas: [5, 2],
      available: [
        "True",
        "ReadyInstanceFound",
        "2/5 instances are ready; 1 is repeatedly exiting and restarting; 1 ran out of memory; 1 is starting",
      ],
      replicasReady: [
        "False",
        "InstanceCrashing",
        "2/5 instances are ready; 1 is repeatedly exiting and restarting; 1 ran out of memory; 1 is starting",
      ],
      degraded: [
        "True",
        "InstanceCrashing",
        `1 of 5 instances is repeatedly exiting and restarting (web-2): ${CRASH_MESSAGE} 1 of 5 instances ran out of memory (web-3).`,
      ],
      progressing: ["True", "Starting", "1 of 5 instances is starting (web-4)."],
    },
    {
      name: "zero desired replicas",
      input: { desiredReplicas: 0, instances: [] },
      replicas: [0, 0],
      available: ["True", "NoReplicasDesired", "No instances are desired"],
      replicasReady: ["True", "NoReplicasDesired", "No instances are desired"],
      degraded: ["False", "NoFailures", "No instance reports a failure."],
      progressing: ["False", "NoInstancePending", "No instance is being provisioned or started."],
    },
    {
      name: "zero desired replicas with a leftover instance still crashing",
      input: { desiredReplicas: 0, instances: [crashing("web-0")] },
      replicas: [1, 0],
      available: [
        "True",
        "NoReplicasDesired",
        "No instances are desired; 1 is repeatedly exiting and restarting",
      ],
      replicasReady: [
        "True",
        "NoReplicasDesired",
        "No instances are desired; 1 is repeatedly exiting and restarting",
      ],
      degraded: [
        "True",
        "InstanceCrashing",
        `1 instance (0 desired) is repeatedly exiting and restarting (web-0): ${CRASH_MESSAGE}`,
      ],
      progressing: ["False", "NoInstancePending", "No instance is being provisioned or started."],
    },
    {
      // A scale-down in progress: the ratio never exceeds 100 %, the surplus is said apart.
      name: "instances beyond desired, all ready",
      input: { desiredReplicas: 2, instances: [ready("web-0"), ready("web-1"), ready("web-2")] },
      replicas: [3, 3],
      available: [
        "True",
        "ReadyInstanceFound",
        "2/2 instances are ready (1 more is ready but not desired)",
      ],
      replicasReady: [
        "True",
        "AllReplicasReady",
        "2/2 instances are ready (1 more is ready but not desired)",
      ],
      degraded: ["False", "NoFailures", "No instance reports a failure."],
      progressing: ["False", "NoInstancePending", "No instance is being provisioned or started."],
    },
    {
      name: "instances beyond desired, none ready",
      input: {
        desiredReplicas: 1,
        instances: [crashing("web-0"), crashing("web-1"), crashing("web-2")],
      },
      replicas: [3, 0],
      available: [
        "False",
        "InstanceCrashing",
        `3 instances (1 desired) are repeatedly exiting and restarting: ${CRASH_MESSAGE}`,
      ],
      replicasReady: [
        "False",
        "InstanceCrashing",
        "0/1 instances are ready; 3 are repeatedly exiting and restarting",
      ],
      degraded: [
        "True",
        "InstanceCrashing",
        `3 instances (1 desired) are repeatedly exiting and restarting (web-0, web-1, web-2): ${CRASH_MESSAGE}`,
      ],
      progressing: ["False", "NoInstancePending", "No instance is being provisioned or started."],
    },
    {
      name: "missing instances count as being provisioned",
      input: { desiredReplicas: 3, instances: [ready("web-0")] },
      replicas: [1, 1],
      available: ["True", "ReadyInstanceFound", "1/3 instances are ready; 2 are being provisioned"],
      replicasReady: ["False", "Provisioning", "1/3 instances are ready; 2 are being provisioned"],
      degraded: ["False", "NoFailures", "No instance reports a failure."],
      progressing: ["True", "Provisioning", "2 of 3 instances are being provisioned."],
    },
  ])("$name", ({ input, replicas, available, replicasReady, degraded, progressing }) => {
    const status = rollup(input);
    expect([status.replicas, status.readyReplicas]).toEqual(replicas);
    expect(brief(status.conditions, "Available")).toEqual(available);
    expect(brief(status.conditions, "ReplicasReady")).toEqual(replicasReady);
    expect(brief(status.conditions, "Degraded")).toEqual(degraded);
    expect(brief(status.conditions, "Progressing")).toEqual(progressing);
  });
});

describe("spec-level rejections come first", () => {
  const noLocation = {
    reason: "NoMatchingLocation",
    message:
      "No location that is Ready and offers compute matches this placement, so it has nowhere to run.",
  };

  it("outranks every instance reason and claims the replicas that cannot be placed", () => {
    const status = rollup({ desiredReplicas: 2, blockers: [noLocation], instances: [] });
    expect(brief(status.conditions, "Available")).toEqual([
      "False",
      "NoMatchingLocation",
      `2 of 2 instances have no location that can run them: ${noLocation.message}`,
    ]);
  });

  it("is reported even when every replica already exists (it claims none)", () => {
    const status = rollup({
      desiredReplicas: 1,
      blockers: [{ reason: "InvalidSpec", message: "capability SYS_ADMIN is not allowed" }],
      instances: [crashing("web-0")],
    });
    expect(brief(status.conditions, "Available")).toEqual([
      "False",
      "InvalidSpec",
      "capability SYS_ADMIN is not allowed. 1 of 1 instances is repeatedly exiting and restarting.",
    ]);
    expect(status.reasons.map((r) => [r.reason, r.count])).toEqual([
      ["InvalidSpec", 0],
      ["InstanceCrashing", 1],
    ]);
  });

  it("keeps the deployment unavailable at zero desired replicas", () => {
    const status = rollup({ desiredReplicas: 0, blockers: [noLocation] });
    expect(brief(status.conditions, "Available")[0]).toBe("False");
    expect(brief(status.conditions, "ReplicasReady")[0]).toBe("True");
  });

  it("does not mark a serving deployment down", () => {
    const status = rollup({
      desiredReplicas: 2,
      blockers: [{ reason: "InvalidSpec", message: "bad" }],
      instances: [ready("web-0")],
    });
    expect(brief(status.conditions, "Available")).toEqual([
      "True",
      "ReadyInstanceFound",
      "1/2 instances are ready; 1 cannot be placed because its spec was rejected",
    ]);
  });

  it("claims missing replicas in rank order and never more than are missing", () => {
    const status = rollup({
      desiredReplicas: 4,
      blockers: [
        { reason: "QuotaExceeded", replicas: 5 },
        { reason: "NoMatchingLocation", replicas: 1 },
      ],
      instances: [withReason("web-0", "Starting")],
    });
    expect(status.reasons.map((r) => [r.reason, r.count])).toEqual([
      ["NoMatchingLocation", 1],
      ["QuotaExceeded", 2],
      ["Starting", 1],
    ]);
  });
});

describe("message budget", () => {
  it('shows three groups, then counts the rest as "more"', () => {
    const status = rollup({
      desiredReplicas: 6,
      instances: [
        crashing("a"),
        withReason("b", "OutOfMemory"),
        withReason("c", "ImageUnavailable"),
        withReason("d", "ConfigurationError"),
        withReason("e", "QuotaExceeded"),
        withReason("f", "Provisioning"),
      ],
    });
    const [, , available] = brief(status.conditions, "Available");
    expect(available).toBe(
      `1 of 6 instances is repeatedly exiting and restarting: ${CRASH_MESSAGE} 1 of 6 instances cannot start because of its configuration. 1 of 6 instances could not pull its image. 3 more are not ready for other reasons.`,
    );
    expect(brief(status.conditions, "ReplicasReady")[2]).toBe(
      "0/6 instances are ready; 1 is repeatedly exiting and restarting; 1 cannot start because of its configuration; 1 could not pull its image; 3 more are not ready for other reasons",
    );
  });

  it('shows three names, then "... (N more)"', () => {
    const names = ["web-4", "web-0", "web-3", "web-1", "web-2"];
    const status = rollup({ desiredReplicas: 5, instances: names.map((n) => crashing(n)) });
    expect(brief(status.conditions, "Degraded")[2]).toBe(
      `5 of 5 instances are repeatedly exiting and restarting (web-0, web-1, web-2, ... (2 more)): ${CRASH_MESSAGE}`,
    );
    expect(status.reasons[0]?.instances).toEqual(["web-0", "web-1", "web-2"]);
  });

  it("cuts a very long representative message", () => {
    const status = rollup({ instances: [crashing("web-0", "x".repeat(5000))] });
    const message = status.reasons[0]?.message ?? "";
    expect(message).toHaveLength(1024);
    expect(message.endsWith("...")).toBe(true);
  });
});

describe("representative instance", () => {
  it("is the message most instances carry, whatever the order", () => {
    const a = crashing("web-9", "exit code 2.");
    const b = crashing("web-1", "exit code 1.");
    const c = crashing("web-5", "exit code 2.");
    for (const instances of [
      [a, b, c],
      [c, b, a],
      [b, a, c],
    ]) {
      expect(rollup({ desiredReplicas: 3, instances }).reasons[0]?.message).toBe("exit code 2.");
    }
  });

  it("on a tie, is the message of the instance whose name sorts first", () => {
    const instances = [crashing("web-2", "second."), crashing("web-1", "first.")];
    expect(rollup({ desiredReplicas: 2, instances }).reasons[0]?.message).toBe("first.");
    expect(rollup({ desiredReplicas: 2, instances: instances.reverse() }).reasons[0]?.message).toBe(
      "first.",
    );
  });

  it("prefers a group with a message when two groups tie", () => {
    const status = rollup({
      desiredReplicas: 2,
      instances: [withReason("a", "ImageUnavailable"), crashing("b")],
    });
    expect(findCondition(status.conditions, "Available")?.reason).toBe("InstanceCrashing");
  });
});

describe("totality and conventions", () => {
  it("stamps observedGeneration on the status and every condition", () => {
    const status = rollup({ generation: 7 });
    expect(status.observedGeneration).toBe(7);
    expect(status.conditions.map((c) => c.observedGeneration)).toEqual([7, 7, 7, 7]);
  });

  it("treats a ready instance as ready whatever its reason", () => {
    const status = rollup({
      instances: [{ name: "web-0", ready: true, reason: "InstanceCrashing" }],
    });
    expect(status.readyReplicas).toBe(1);
    expect(status.reasons).toEqual([]);
  });

  it("reports unknown and malformed reasons instead of hiding them behind provisioning", () => {
    const status = rollup({
      desiredReplicas: 3,
      instances: [
        withReason("a", "ReportUnreadable"),
        withReason("b", "not a reason"),
        withReason("c", "Provisioning"),
      ],
    });
    expect(status.reasons.map((r) => r.reason)).toEqual([
      "ReportUnreadable",
      "Unknown",
      "Provisioning",
    ]);
    expect(findCondition(status.conditions, "Available")?.message).toBe(
      "1 of 3 instances is not ready (ReportUnreadable). 1 of 3 instances is in an unknown state. 1 of 3 instances is being provisioned.",
    );
  });

  it("answers for input that breaks its own types, without throwing", () => {
    const garbage = {
      desiredReplicas: -3.5,
      generation: Number.NaN,
      blockers: [null, { reason: 5, replicas: -1 }],
      instances: [null, 7, { name: 3, ready: "yes" }],
    } as unknown as WorkloadDeploymentInput;
    const status = rollupWorkloadDeployment(garbage, {
      now: new Date("invalid"),
      previous: "nope" as unknown as Condition[],
    });
    expect(status.desiredReplicas).toBe(0);
    expect(status.observedGeneration).toBe(0);
    expect(status.replicas).toBe(3);
    expect(status.reasons).toEqual([
      { reason: "Unknown", count: 3, message: "", instances: ["", "", ""] },
    ]);
    expect(status.conditions[0]?.lastTransitionTime).toBe("1970-01-01T00:00:00Z");
    expect(
      rollupWorkloadDeployment(undefined as unknown as WorkloadDeploymentInput, { now }).conditions,
    ).toHaveLength(4);
  });

  it("uses a catalog with the platform team's own reasons", () => {
    const extended = DEFAULT_REASON_CATALOG.extend({
      LicenceExpired: {
        class: "CustomerMustFix",
        singular: "cannot start because its licence expired",
        plural: "cannot start because their licence expired",
        transient: false,
      },
    });
    if (!extended.ok) throw extended.error;
    const status = rollupWorkloadDeployment(
      {
        desiredReplicas: 2,
        generation: 1,
        instances: [withReason("a", "LicenceExpired"), withReason("b", "QuotaExceeded")],
      },
      { now, catalog: extended.value },
    );
    expect(findCondition(status.conditions, "Available")?.message).toBe(
      "1 of 2 instances cannot start because its licence expired. 1 of 2 instances is waiting for quota.",
    );
  });
});

describe("parseWorkloadDeploymentInput", () => {
  it("returns valid input unchanged", () => {
    const input = { desiredReplicas: 1, generation: 2, instances: [crashing("web-0")] };
    expect(parseWorkloadDeploymentInput(input)).toEqual({ ok: true, value: input });
  });

  it("returns a typed error for invalid input", () => {
    const result = parseWorkloadDeploymentInput({ desiredReplicas: -1, instances: "x" });
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error.code).toBe("InvalidDeploymentInput");
    expect(result.error.message).toContain("desiredReplicas");
  });
});
