import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  ACCOUNT_POOL,
  afterCapacityError,
  choosePlacement,
  NO_BACKOFF,
  placementsFor,
  poolOf,
} from "./capacity.js";
import { parseProviderConfig } from "./config.js";
import { instanceTypeCandidates, type PodFacts, podFacts } from "./pod.js";
import { testConfig, testPod } from "./testing/fixtures.js";

const config = parseProviderConfig(
  testConfig({
    subnetIds: ["subnet-0a", "subnet-0b"],
    instanceTypes: { default: "m7i.large", fallbacks: { "m7i.large": ["m6i.large"] } },
  }),
);
const settings = config.capacityBackoff;
const placementsOf = (facts: PodFacts) =>
  placementsFor(facts, instanceTypeCandidates(facts, config), config);

describe("placementsFor", () => {
  it("tries every subnet, then the fallback types; client tokens stay derived from the UID", () => {
    const facts = podFacts(testPod("a", "uid-1"));
    const list = placementsOf(facts);
    expect(list.map((p) => p.instanceType)).toEqual([
      "m7i.large",
      "m7i.large",
      "m6i.large",
      "m6i.large",
    ]);
    expect(new Set(list.map((p) => p.subnetId))).toEqual(new Set(["subnet-0a", "subnet-0b"]));
    expect(list.map((p) => p.clientToken)).toEqual(["uid-1", "uid-1.1", "uid-1.2", "uid-1.3"]);
  });

  it("leaves out the subnets whose zone does not offer a type, keeping every other placement's token", () => {
    const facts = podFacts(testPod("a", "uid-1"));
    const full = placementsOf(facts);
    const offered = [
      { name: "m7i.large", subnets: [full[1]?.subnetId as string] },
      { name: "m6i.large", subnets: ["subnet-0a", "subnet-0b"] },
    ].map((t) => ({
      ...t,
      vcpus: 2,
      memoryMiB: 8192,
      architectures: ["x86_64"],
      gpus: 0,
      bareMetal: false,
      usageClasses: [],
    }));
    const kept = placementsFor(facts, ["m7i.large", "m6i.large"], config, offered);
    expect(kept).toEqual(full.slice(1));
    // Offered nowhere: every placement stays (EC2's answer then decides, never a silent wait).
    const nowhere = offered.map((t) => ({ ...t, subnets: [] }));
    expect(placementsFor(facts, ["m7i.large", "m6i.large"], config, nowhere)).toEqual(full);
  });

  it("never falls back from a type the Pod asked for by name", () => {
    const pod = testPod("a", "uid-1", { annotations: { "nebula.dev/instance-type": "m7i.large" } });
    expect(placementsOf(podFacts(pod)).map((p) => p.instanceType)).toEqual([
      "m7i.large",
      "m7i.large",
    ]);
  });
});

describe("capacity back-off", () => {
  const facts = podFacts(testPod("a", "uid-1"));
  const list = placementsOf(facts);

  it("after a capacity error, the next placement goes at once; after all of them, the Pod backs off", () => {
    let backoff = NO_BACKOFF;
    const pools = new Map<string, number>();
    const tried: string[] = [];
    let now = 0;
    for (let i = 0; i < list.length; i++) {
      const choice = choosePlacement(list, backoff, pools, now);
      if (choice.kind !== "launch") throw new Error("expected a launch");
      tried.push(poolOf(choice.placement));
      const next = afterCapacityError(
        backoff,
        choice.placement,
        "InsufficientCapacity",
        list.length,
        now,
        settings,
      );
      backoff = next.backoff;
      pools.set(next.pool, next.poolUntil);
      now += 1;
    }
    expect(new Set(tried).size).toBe(list.length);
    expect(choosePlacement(list, backoff, pools, now)).toEqual({
      kind: "wait",
      until: backoff.notBefore,
    });
  });

  it("a quota error blocks the account for every Pod", () => {
    const first = choosePlacement(list, NO_BACKOFF, new Map(), 0);
    if (first.kind !== "launch") throw new Error("expected a launch");
    const next = afterCapacityError(
      NO_BACKOFF,
      first.placement,
      "QuotaExceeded",
      list.length,
      0,
      settings,
    );
    expect(next.pool).toBe(ACCOUNT_POOL);
    const other = placementsOf(podFacts(testPod("b", "uid-2")));
    expect(choosePlacement(other, NO_BACKOFF, new Map([[next.pool, next.poolUntil]]), 1)).toEqual({
      kind: "wait",
      until: next.poolUntil,
    });
  });

  it("20 Pods waiting on pools that just failed make no call until a pool cools down (property)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 50 }), fc.nat(59_000), (pods, elapsed) => {
        const pools = new Map(list.map((p) => [poolOf(p), 60_000] as const));
        let calls = 0;
        for (let i = 0; i < pods; i++) {
          const mine = placementsOf(podFacts(testPod(`p${i}`, `uid-${i}`)));
          if (choosePlacement(mine, NO_BACKOFF, pools, elapsed).kind === "launch") calls++;
        }
        expect(calls).toBe(0);
      }),
    );
  });
});
