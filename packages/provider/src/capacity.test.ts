import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  ACCOUNT_POOL,
  afterCapacityError,
  choosePlacement,
  NO_BACKOFF,
  placementsFor,
  poolOf,
  SPOT_ACCOUNT_POOL,
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

  it("with spot-then-on-demand, every Spot placement first, then the On-Demand ones, each with its own token", () => {
    const facts = podFacts(testPod("a", "uid-1"));
    const list = placementsFor(
      facts,
      ["m7i.large", "m6i.large"],
      config,
      [],
      ["spot", "on-demand"],
    );
    expect(list.map((p) => `${p.capacityType} ${p.instanceType}`)).toEqual([
      "spot m7i.large",
      "spot m7i.large",
      "spot m6i.large",
      "spot m6i.large",
      "on-demand m7i.large",
      "on-demand m7i.large",
      "on-demand m6i.large",
      "on-demand m6i.large",
    ]);
    expect(new Set(list.map((p) => p.clientToken)).size).toBe(8);
    expect(new Set(list.map(poolOf)).size).toBe(8);
    // An On-Demand Pod's placements, tokens and pools are what they were before Spot.
    expect(placementsOf(facts).map((p) => [p.clientToken, poolOf(p)])).toEqual([
      ["uid-1", `${list[4]?.subnetId}/m7i.large`],
      ["uid-1.1", `${list[5]?.subnetId}/m7i.large`],
      ["uid-1.2", `${list[6]?.subnetId}/m6i.large`],
      ["uid-1.3", `${list[7]?.subnetId}/m6i.large`],
    ]);
    // A type the catalogue says cannot run as Spot gets no Spot placement.
    const onDemandOnly = [
      {
        name: "m6i.large",
        vcpus: 2,
        memoryMiB: 8192,
        architectures: ["x86_64"],
        gpus: 0,
        bareMetal: false,
        usageClasses: ["on-demand"],
      },
    ];
    const limited = placementsFor(facts, ["m6i.large"], config, onDemandOnly, [
      "spot",
      "on-demand",
    ]);
    expect(limited.map((p) => p.capacityType)).toEqual(["on-demand", "on-demand"]);
  });

  it("a Spot quota stops the account's Spot placements only: the Pod's On-Demand ones go next, at once", () => {
    const facts = podFacts(testPod("a", "uid-1"));
    const list = placementsFor(facts, ["m7i.large"], config, [], ["spot", "on-demand"]);
    const first = choosePlacement(list, NO_BACKOFF, new Map(), 0);
    if (first.kind !== "launch") throw new Error("expected a launch");
    expect(first.placement.capacityType).toBe("spot");
    const next = afterCapacityError(
      NO_BACKOFF,
      first.placement,
      "QuotaExceeded",
      list.length,
      0,
      settings,
    );
    expect(next.pool).toBe(SPOT_ACCOUNT_POOL);
    expect(next.backoff.notBefore).toBe(0);
    const pools = new Map([[next.pool, next.poolUntil]]);
    const second = choosePlacement(list, next.backoff, pools, 1);
    expect(second).toMatchObject({ kind: "launch", placement: { capacityType: "on-demand" } });
    // Another Pod that may only buy Spot waits for the pool.
    const spotOnly = placementsFor(
      podFacts(testPod("b", "uid-2")),
      ["m7i.large"],
      config,
      [],
      ["spot"],
    );
    expect(choosePlacement(spotOnly, NO_BACKOFF, pools, 1)).toEqual({
      kind: "wait",
      until: next.poolUntil,
    });
  });

  it("any capacity types, types and offerings: tokens unique and stable, Spot before On-Demand, only offered pairs (property)", () => {
    const typeName = fc.constantFrom("m7i.large", "m6i.large", "c7i.large", "r7i.large");
    fc.assert(
      fc.property(
        fc.uniqueArray(typeName, { minLength: 1, maxLength: 4 }),
        fc.constantFrom<("spot" | "on-demand")[]>(["on-demand"], ["spot"], ["spot", "on-demand"]),
        fc.array(fc.tuple(typeName, fc.subarray(["subnet-0a", "subnet-0b"]), fc.boolean()), {
          maxLength: 4,
        }),
        (types, capacityTypes, listed) => {
          const facts = podFacts(testPod("a", "uid-1"));
          const catalogue = listed.map(([name, subnets, spot]) => ({
            name,
            subnets,
            vcpus: 2,
            memoryMiB: 8192,
            architectures: ["x86_64"],
            gpus: 0,
            bareMetal: false,
            usageClasses: spot ? ["on-demand", "spot"] : ["on-demand"],
          }));
          const full = placementsFor(facts, types, config, [], capacityTypes);
          const kept = placementsFor(facts, types, config, catalogue, capacityTypes);
          expect(new Set(full.map((p) => p.clientToken)).size).toBe(full.length);
          // Every kept placement is the full list's at the same index (same token, same params).
          for (const p of kept) expect(full[p.index]).toEqual(p);
          const kinds = kept.map((p) => p.capacityType);
          expect(kinds).toEqual([...kinds].sort((a, b) => (a === b ? 0 : a === "spot" ? -1 : 1)));
          if (kept.length < full.length) {
            for (const p of kept) {
              const info = catalogue.findLast((t) => t.name === p.instanceType);
              if (info === undefined) continue;
              expect(info.subnets).toContain(p.subnetId);
              if (p.capacityType === "spot") expect(info.usageClasses).toContain("spot");
            }
          }
        },
      ),
    );
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
