import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { ObservedInstance } from "./poll.js";
import { describedOutcome, type PlannedPod, planListing, unlistedPods } from "./poll-plan.js";

function instance(
  id: string,
  podUid: string | undefined,
  options: { state?: string; launchTime?: number | undefined } = {},
): ObservedInstance {
  return {
    instanceId: id,
    state: options.state ?? "running",
    stateReasonCode: undefined,
    stateReasonMessage: undefined,
    launchTime: "launchTime" in options ? options.launchTime : 1000,
    podUid,
    podKey: undefined,
    orphanedAt: undefined,
    privateIp: undefined,
    publicIp: undefined,
    instanceType: undefined,
    availabilityZone: undefined,
    subnetId: undefined,
    capacityType: "on-demand",
    clientToken: podUid,
    instanceProfileArn: undefined,
    tags: new Map(podUid === undefined ? [] : [["nebula:pod-uid", podUid]]),
    raw: { InstanceId: id },
  };
}

/** A disprove that refuses the instances in `unproven` (by ID). */
function refusing(unproven: ReadonlySet<string>) {
  return (i: ObservedInstance, uid: string) =>
    unproven.has(i.instanceId) ? `not proven for ${uid}` : undefined;
}

describe("planListing", () => {
  it("keeps the recorded instance and lists the other proven ones as duplicates", () => {
    const listing = [
      instance("i-a", "u1", { launchTime: 1 }),
      instance("i-b", "u1", { launchTime: 2 }),
      instance("i-c", "u1", { launchTime: 3, state: "shutting-down" }),
      instance("i-d", "u2"),
    ];
    const plan = planListing(
      listing,
      (uid) => (uid === "u1" ? "i-b" : undefined),
      refusing(new Set()),
    );
    expect(plan.byUid.get("u1")?.instanceId).toBe("i-b");
    expect(plan.byUid.get("u2")?.instanceId).toBe("i-d");
    // A shutting-down one is already going: not terminated again.
    expect(plan.duplicates).toEqual(["i-a"]);
  });

  it("without a recorded instance keeps the earliest launched, preferring one not shutting down", () => {
    const listing = [
      instance("i-late", "u1", { launchTime: 50 }),
      instance("i-early", "u1", { launchTime: 10, state: "shutting-down" }),
      instance("i-mid", "u1", { launchTime: 20 }),
    ];
    const plan = planListing(listing, () => undefined, refusing(new Set()));
    expect(plan.byUid.get("u1")?.instanceId).toBe("i-mid");
    expect(plan.duplicates).toEqual(["i-late"]);
  });

  it("never keeps nor terminates an instance that does not prove it is the Pod's", () => {
    const listing = [instance("i-forged", "u1"), instance("i-real", "u1", { launchTime: 5000 })];
    const plan = planListing(listing, () => "i-forged", refusing(new Set(["i-forged"])));
    expect(plan.byUid.get("u1")?.instanceId).toBe("i-real");
    expect(plan.duplicates).toEqual([]);
    const none = planListing(
      [instance("i-forged", "u1")],
      () => undefined,
      refusing(new Set(["i-forged"])),
    );
    expect(none.byUid.size).toBe(0);
    expect(none.duplicates).toEqual([]);
  });

  it("ignores instances without a Pod UID", () => {
    const plan = planListing([instance("i-x", undefined)], () => undefined, refusing(new Set()));
    expect(plan.byUid.size).toBe(0);
    expect(plan.duplicates).toEqual([]);
  });
});

describe("unlistedPods", () => {
  const pod = (over: Partial<PlannedPod>): PlannedPod => ({
    uid: "u1",
    mode: "launch",
    instanceId: "i-1",
    missing: false,
    observedState: "running",
    ...over,
  });

  it("names launched Pods whose recorded instance the listing does not show", () => {
    const byUid = new Map([["u2", instance("i-2", "u2")]]);
    expect(
      unlistedPods(
        [
          pod({ uid: "u1", instanceId: "i-1" }), // not listed
          pod({ uid: "u2", instanceId: "i-2" }), // listed
          pod({ uid: "u3", instanceId: undefined }), // not launched
          pod({ uid: "u4", mode: "hold" }),
          pod({ uid: "u5", missing: true }),
          pod({ uid: "u6", observedState: "terminated" }),
        ],
        byUid,
      ),
    ).toEqual(["u1"]);
  });

  it("names a Pod whose listed instance is another one than the recorded", () => {
    const byUid = new Map([["u1", instance("i-other", "u1")]]);
    expect(unlistedPods([pod({ uid: "u1", instanceId: "i-1" })], byUid)).toEqual(["u1"]);
  });
});

describe("describedOutcome", () => {
  it("observes a proven instance, or a gone one carrying the Pod UID even without proof", () => {
    const running = instance("i-1", "u1");
    const gone = instance("i-1", "u1", { state: "terminated" });
    const base = { podUid: "u1", withinConsistencyWindow: false };
    expect(describedOutcome({ ...base, found: running, disproved: undefined })).toBe("observe");
    expect(describedOutcome({ ...base, found: running, disproved: "no profile" })).toBe("unknown");
    expect(describedOutcome({ ...base, found: gone, disproved: "no profile" })).toBe("observe");
    expect(
      describedOutcome({ ...base, podUid: "u2", found: gone, disproved: "another Pod's" }),
    ).toBe("unknown");
  });

  it("says absent for a missing instance only outside the consistency window", () => {
    const base = { podUid: "u1", found: undefined, disproved: undefined };
    expect(describedOutcome({ ...base, withinConsistencyWindow: false })).toBe("absent");
    expect(describedOutcome({ ...base, withinConsistencyWindow: true })).toBe("unknown");
  });
});

// --- properties ---------------------------------------------------------------------------------

const STATES = ["pending", "running", "stopping", "stopped", "shutting-down"] as const;

/** A listing of up to 12 instances over 4 Pod UIDs (some without one), each proven or not. */
const listingArb = fc
  .array(
    fc.record({
      uid: fc.option(fc.constantFrom("u1", "u2", "u3", "u4"), { nil: undefined }),
      state: fc.constantFrom(...STATES),
      launchTime: fc.option(fc.integer({ min: 0, max: 100 }), { nil: undefined }),
      proven: fc.boolean(),
    }),
    { maxLength: 12 },
  )
  .map((specs) => {
    const listing = specs.map((s, i) =>
      instance(`i-${i.toString(16).padStart(8, "0")}`, s.uid, {
        state: s.state,
        launchTime: s.launchTime,
      }),
    );
    const unproven = new Set(listing.filter((_, i) => !specs[i]?.proven).map((x) => x.instanceId));
    return { listing, unproven };
  });

/** For each Pod UID, a recorded ID: none, one from the listing (any), or one not listed. */
const recordedArb = fc.dictionary(
  fc.constantFrom("u1", "u2", "u3", "u4"),
  fc.oneof(fc.integer({ min: 0, max: 11 }), fc.constant(-1)),
);

describe("planListing properties", () => {
  it("never keeps an unproven instance, never lists a keeper as a duplicate, one keeper per proven group", () => {
    fc.assert(
      fc.property(listingArb, recordedArb, ({ listing, unproven }, recordedIdx) => {
        const recorded = (uid: string) => {
          const i = recordedIdx[uid];
          if (i === undefined) return undefined;
          return i < 0 ? "i-notlisted" : listing[i]?.instanceId;
        };
        const plan = planListing(listing, recorded, refusing(unproven));
        const keepers = new Set([...plan.byUid.values()].map((k) => k.instanceId));
        for (const [uid, keeper] of plan.byUid) {
          expect(unproven.has(keeper.instanceId)).toBe(false);
          expect(keeper.podUid).toBe(uid);
        }
        for (const id of plan.duplicates) {
          expect(keepers.has(id)).toBe(false);
          expect(unproven.has(id)).toBe(false);
        }
        expect(new Set(plan.duplicates).size).toBe(plan.duplicates.length);
        const uids = new Set(listing.flatMap((i) => (i.podUid === undefined ? [] : [i.podUid])));
        for (const uid of uids) {
          const proven = listing.filter((i) => i.podUid === uid && !unproven.has(i.instanceId));
          // Exactly one keeper per Pod with a proven instance, none for a Pod without one.
          expect(plan.byUid.has(uid)).toBe(proven.length > 0);
          // Every other proven, live one is a duplicate: never two running for one Pod.
          const keeper = plan.byUid.get(uid);
          const expected = proven
            .filter((i) => i !== keeper && i.state !== "shutting-down")
            .map((i) => i.instanceId);
          expect(plan.duplicates.filter((id) => expected.includes(id)).sort()).toEqual(
            [...expected].sort(),
          );
          // The recorded instance is kept whenever it is proven and listed.
          const mine = proven.find((i) => i.instanceId === recorded(uid));
          if (mine) expect(keeper?.instanceId).toBe(mine.instanceId);
        }
        expect(plan.duplicates.length).toBe(
          [...uids].reduce(
            (n, uid) =>
              n +
              listing.filter(
                (i) =>
                  i.podUid === uid &&
                  !unproven.has(i.instanceId) &&
                  i !== plan.byUid.get(uid) &&
                  i.state !== "shutting-down",
              ).length,
            0,
          ),
        );
      }),
      { numRuns: 500 },
    );
  });
});

describe("describedOutcome properties", () => {
  const found = fc.option(
    fc.record({
      uid: fc.option(fc.constantFrom("u1", "u2"), { nil: undefined }),
      state: fc.constantFrom(...STATES, "terminated"),
    }),
    { nil: undefined },
  );

  it("never says absent within the consistency window, nor when an instance was found", () => {
    fc.assert(
      fc.property(
        found,
        fc.option(fc.string(), { nil: undefined }),
        fc.boolean(),
        (f, disproved, within) => {
          const outcome = describedOutcome({
            podUid: "u1",
            found: f === undefined ? undefined : instance("i-1", f.uid, { state: f.state }),
            disproved,
            withinConsistencyWindow: within,
          });
          if (within || f !== undefined) expect(outcome).not.toBe("absent");
          if (f === undefined && !within) expect(outcome).toBe("absent");
          // An unproven live instance is never observed as the Pod's.
          if (
            f !== undefined &&
            disproved !== undefined &&
            f.state !== "terminated" &&
            f.state !== "shutting-down"
          ) {
            expect(outcome).toBe("unknown");
          }
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe("unlistedPods properties", () => {
  it("names only launched, recorded, not-missing, not-terminated Pods whose instance is not the listed keeper", () => {
    const podArb = fc.record({
      uid: fc.constantFrom("u1", "u2", "u3"),
      mode: fc.constantFrom("launch", "hold", "config", "refused", "terminal"),
      instanceId: fc.option(fc.constantFrom("i-1", "i-2", "i-3"), { nil: undefined }),
      missing: fc.boolean(),
      observedState: fc.option(fc.constantFrom(...STATES, "terminated"), { nil: undefined }),
    });
    const byUidArb = fc.dictionary(
      fc.constantFrom("u1", "u2", "u3"),
      fc.constantFrom("i-1", "i-2", "i-3"),
    );
    fc.assert(
      fc.property(fc.array(podArb, { maxLength: 6 }), byUidArb, (pods, listed) => {
        const byUid = new Map(Object.entries(listed).map(([uid, id]) => [uid, instance(id, uid)]));
        const out = unlistedPods(pods, byUid);
        expect(out).toEqual(
          pods
            .filter(
              (p) =>
                p.mode === "launch" &&
                p.instanceId !== undefined &&
                !p.missing &&
                p.observedState !== "terminated" &&
                listed[p.uid] !== p.instanceId,
            )
            .map((p) => p.uid),
        );
      }),
      { numRuns: 300 },
    );
  });
});
