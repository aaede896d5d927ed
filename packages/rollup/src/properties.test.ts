import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DEFAULT_REASON_CATALOG, type ReasonClass, reasonClassRank } from "./catalog.js";
import { findCondition, statusChanged } from "./condition.js";
import {
  type InstanceInput,
  rollupWorkloadDeployment,
  type SpecBlocker,
  type WorkloadDeploymentInput,
  type WorkloadDeploymentStatus,
} from "./deployment.js";
import { type PlacementInput, rollupWorkload, type WorkloadStatus } from "./workload.js";

const CRASH_MESSAGE =
  'container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.';
const CUSTOMER_REASONS = [
  "InstanceCrashing",
  "OutOfMemory",
  "ImageUnavailable",
  "ConfigurationError",
];

const reason = fc.oneof(
  fc.constantFrom(...DEFAULT_REASON_CATALOG.names()),
  fc.constantFrom("ReportUnreadable", "ContainerStatusUnknown", "", "not a reason"),
);
const message = fc.option(
  fc.constantFrom(
    CRASH_MESSAGE,
    "exit code 2",
    "image x not found.",
    "quota for cpu is exhausted.",
  ),
  { nil: undefined },
);
const name = fc.constantFrom("web-0", "web-1", "web-2", "web-3", "web-4", "a", "z");

const instance: fc.Arbitrary<InstanceInput> = fc.record(
  { name, ready: fc.boolean(), reason, message },
  { requiredKeys: ["name", "ready"] },
);
const blocker: fc.Arbitrary<SpecBlocker> = fc.record(
  {
    reason: fc.constantFrom("InvalidSpec", "NoMatchingLocation", "QuotaExceeded", "Custom"),
    message,
    replicas: fc.nat(4),
  },
  { requiredKeys: ["reason"] },
);
const deploymentInput: fc.Arbitrary<WorkloadDeploymentInput> = fc.record({
  desiredReplicas: fc.nat(8),
  generation: fc.nat(20),
  blockers: fc.array(blocker, { maxLength: 3 }),
  instances: fc.array(instance, { maxLength: 12 }),
});

const placementInput: fc.Arbitrary<PlacementInput> = fc
  .tuple(fc.constantFrom("eu", "us", "ap"), deploymentInput, fc.boolean())
  .map(([placementName, input, reported]) => {
    if (!reported) return { name: placementName, desiredReplicas: input.desiredReplicas };
    const { replicas, readyReplicas, reasons } = rollupWorkloadDeployment(input, { now: t0 });
    return {
      name: placementName,
      desiredReplicas: input.desiredReplicas,
      replicas,
      readyReplicas,
      reasons,
    };
  });
const workloadInput = fc.record({
  generation: fc.nat(20),
  placements: fc.array(placementInput, { maxLength: 4 }),
});

const t0 = new Date("2026-11-30T05:00:00Z");
const t1 = new Date("2026-11-30T06:30:00Z");

/** A permutation of `items`. */
function shuffled<T>(items: readonly T[]): fc.Arbitrary<T[]> {
  return fc.shuffledSubarray([...items], { minLength: items.length, maxLength: items.length });
}

function classOf(reasonName: string): ReasonClass {
  return DEFAULT_REASON_CATALOG.resolve(reasonName).definition.class;
}

/** Checks every number in every message against the counts of the same status. */
function assertNoContradiction(status: WorkloadDeploymentStatus | WorkloadStatus): void {
  const desired = status.desiredReplicas;
  const ready = status.readyReplicas;
  // Messages and conditions count at most the desired replicas as ready (a scale-down may have
  // more); a Workload caps each placement at its own desired count.
  const capped =
    "placements" in status
      ? status.placements.reduce((sum, p) => sum + Math.min(p.readyReplicas, p.desiredReplicas), 0)
      : Math.min(ready, desired);
  const replicasReadyStatus = findCondition(status.conditions, "ReplicasReady")?.status;
  for (const condition of status.conditions) {
    const text = condition.message;
    // No ratio anywhere ever exceeds 100 %.
    for (const m of text.matchAll(/(\d+)\/(\d+) /g)) {
      expect(Number(m[1])).toBeLessThanOrEqual(Number(m[2]));
    }
    for (const m of text.matchAll(/(\d+) of (\d+) /g)) {
      expect(Number(m[1])).toBeLessThanOrEqual(Number(m[2]));
    }
    for (const m of text.matchAll(/(\d+)\/(\d+) instances are ready/g)) {
      expect([Number(m[1]), Number(m[2])]).toEqual([capped, desired]);
      // "All ready" is said exactly when ReplicasReady is True.
      if (Number(m[2]) > 0) {
        expect(m[1] === m[2]).toBe(replicasReadyStatus === "True");
      }
    }
    for (const m of text.matchAll(/(\d+) of (\d+) instances/g)) {
      expect(Number(m[2])).toBe(desired);
      expect(Number(m[1])).toBeGreaterThan(0);
      expect(Number(m[1])).toBeLessThanOrEqual(desired);
    }
    for (const m of text.matchAll(/(\d+) instances? \((\d+) desired\)/g)) {
      expect(Number(m[2])).toBe(desired);
      expect(Number(m[1])).toBeGreaterThan(desired);
    }
    if (/^No instances are desired/i.test(text) || /; no instances are desired/.test(text)) {
      expect(desired).toBe(0);
    }
    if (/instances are (ready|desired)/i.test(text)) {
      const surplus = /\((\d+) (?:more )?(?:is|are) ready but not desired\)/.exec(text);
      expect(Number(surplus?.[1] ?? 0)).toBe(ready - capped);
    }
  }

  const available = findCondition(status.conditions, "Available");
  if (available?.status === "False") expect(capped).toBe(0);
  if (available?.status === "True") expect(capped > 0 || desired === 0).toBe(true);
  if (available?.status === "False") {
    expect(available.reason).toBe(status.reasons[0]?.reason);
  }

  const replicasReady = findCondition(status.conditions, "ReplicasReady");
  if (!("placements" in status)) {
    expect(replicasReady?.status).toBe(ready >= desired ? "True" : "False");
    // Each not-ready instance and each missing replica is counted exactly once.
    const counted = status.reasons.reduce((sum, r) => sum + r.count, 0);
    expect(counted).toBe(status.replicas - ready + Math.max(0, desired - status.replicas));
    // The short form lists the same counts: shown groups plus "N more".
    const parts = (replicasReady?.message ?? "").split("; ").slice(1);
    const listed = parts.reduce((sum, p) => sum + Number(/^(\d+) /.exec(p)?.[1] ?? 0), 0);
    expect(listed).toBe(counted);
  } else {
    const total = status.placements.length;
    const withReady = status.placements.filter(
      (p) => Math.min(p.readyReplicas, p.desiredReplicas) > 0,
    ).length;
    const satisfied = status.placements.filter((p) => p.readyReplicas >= p.desiredReplicas).length;
    for (const m of (available?.message ?? "").matchAll(/(\d+)\/(\d+) placements have ready/g)) {
      expect([Number(m[1]), Number(m[2])]).toEqual([withReady, total]);
    }
    for (const m of (replicasReady?.message ?? "").matchAll(/(\d+)\/(\d+) placements have all/g)) {
      expect([Number(m[1]), Number(m[2])]).toEqual([satisfied, total]);
    }
    expect(replicasReady?.status).toBe(satisfied === total ? "True" : "False");
    if (replicasReady?.status === "True") expect(ready).toBeGreaterThanOrEqual(desired);
  }

  const degraded = findCondition(status.conditions, "Degraded");
  const failing = status.reasons.some((r) =>
    ["SpecRejected", "CustomerMustFix", "PlatformBlocked", "Unclassified"].includes(
      classOf(r.reason),
    ),
  );
  expect(degraded?.status).toBe(failing ? "True" : "False");
}

describe("WorkloadDeployment roll-up properties", () => {
  it("does not depend on the order of instances or blockers", () => {
    fc.assert(
      fc.property(
        deploymentInput.chain((input) =>
          fc.tuple(fc.constant(input), shuffled(input.instances), shuffled(input.blockers ?? [])),
        ),
        ([input, instances, blockers]) => {
          const a = rollupWorkloadDeployment(input, { now: t0 });
          const b = rollupWorkloadDeployment({ ...input, instances, blockers }, { now: t0 });
          expect(b).toEqual(a);
        },
      ),
    );
  });

  it("never contradicts itself: statuses and every number in every message agree", () => {
    fc.assert(
      fc.property(deploymentInput, (input) => {
        assertNoContradiction(rollupWorkloadDeployment(input, { now: t0 }));
      }),
    );
  });

  it("adding a customer-fixable failure never lowers the rank of the reported reason", () => {
    fc.assert(
      fc.property(
        deploymentInput,
        fc.constantFrom(...CUSTOMER_REASONS),
        name,
        message,
        (input, extraReason, extraName, extraMessage) => {
          const before = rollupWorkloadDeployment(input, { now: t0 });
          const extra: InstanceInput = {
            name: extraName,
            ready: false,
            reason: extraReason,
            ...(extraMessage === undefined ? {} : { message: extraMessage }),
          };
          const after = rollupWorkloadDeployment(
            { ...input, instances: [...input.instances, extra] },
            { now: t0 },
          );
          const rank = (s: WorkloadDeploymentStatus, type: string) => {
            const c = findCondition(s.conditions, type);
            return c === undefined || c.status !== (type === "Degraded" ? "True" : "False")
              ? Number.POSITIVE_INFINITY
              : reasonClassRank(classOf(c.reason));
          };
          const top = (s: WorkloadDeploymentStatus) => {
            const first = s.reasons[0];
            return first === undefined
              ? Number.POSITIVE_INFINITY
              : reasonClassRank(classOf(first.reason));
          };
          expect(top(after)).toBeLessThanOrEqual(top(before));
          expect(top(after)).toBeLessThanOrEqual(reasonClassRank("CustomerMustFix"));
          for (const type of ["Available", "ReplicasReady", "Degraded"]) {
            expect(rank(after, type)).toBeLessThanOrEqual(rank(before, type));
          }
        },
      ),
    );
  });

  it("applying the same inputs twice changes nothing, timestamps included", () => {
    fc.assert(
      fc.property(deploymentInput, deploymentInput, (earlier, input) => {
        const stored = rollupWorkloadDeployment(earlier, { now: t0 });
        const once = rollupWorkloadDeployment(input, { now: t0, previous: stored.conditions });
        const twice = rollupWorkloadDeployment(input, { now: t1, previous: once.conditions });
        expect(twice).toEqual(once);
        expect(statusChanged(once, twice)).toBe(false);
        expect(statusChanged(once, rollupWorkloadDeployment(input, { now: t1 }))).toBe(false);
      }),
    );
  });
});

describe("Workload roll-up properties", () => {
  it("does not depend on the order of placements", () => {
    fc.assert(
      fc.property(
        workloadInput.chain((input) => fc.tuple(fc.constant(input), shuffled(input.placements))),
        ([input, placements]) => {
          expect(rollupWorkload({ ...input, placements }, { now: t0 })).toEqual(
            rollupWorkload(input, { now: t0 }),
          );
        },
      ),
    );
  });

  it("never contradicts itself", () => {
    fc.assert(
      fc.property(workloadInput, (input) => {
        assertNoContradiction(rollupWorkload(input, { now: t0 }));
      }),
    );
  });

  it("gives a single placement the message its WorkloadDeployment has", () => {
    fc.assert(
      fc.property(deploymentInput, (input) => {
        const deployment = rollupWorkloadDeployment(input, { now: t0 });
        const workload = rollupWorkload(
          { generation: 1, placements: [{ ...deployment, name: "eu" }] },
          { now: t0 },
        );
        const wd = findCondition(deployment.conditions, "Available");
        const placement = workload.placements[0];
        expect([placement?.available, placement?.reason, placement?.message]).toEqual([
          wd?.status,
          wd?.reason,
          wd?.message,
        ]);
        // The Workload's own Available message, True or False, is the deployment's.
        const w = findCondition(workload.conditions, "Available");
        expect([w?.status, w?.message]).toEqual([wd?.status, wd?.message]);
        if (wd?.status === "False") expect(w?.reason).toBe(wd.reason);
      }),
    );
  });

  it("applying the same inputs twice changes nothing, timestamps included", () => {
    fc.assert(
      fc.property(workloadInput, workloadInput, (earlier, input) => {
        const stored = rollupWorkload(earlier, { now: t0 });
        const once = rollupWorkload(input, { now: t0, previous: stored.conditions });
        const twice = rollupWorkload(input, { now: t1, previous: once.conditions });
        expect(twice).toEqual(once);
        expect(statusChanged(once, twice)).toBe(false);
      }),
    );
  });
});
