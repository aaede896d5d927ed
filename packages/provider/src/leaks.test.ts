import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { planLeakCollection, planParameterLeaks } from "./leaks.js";
import { disproveOwnership, type OwnershipRules } from "./ownership.js";
import type { ObservedInstance } from "./poll.js";

const NOW = Date.parse("2026-11-30T06:00:00Z");
const PROFILE = "arn:aws:iam::123456789012:instance-profile/nebula-host";
const rules: OwnershipRules = {
  clusterName: "prod",
  nodeName: "nebula",
  instanceProfile: "nebula-host",
  clientToken: true,
};

function instance(
  id: string,
  podUid: string | undefined,
  ageMs: number,
  options: {
    taggedMarkAgoMs?: number;
    state?: string;
    token?: string | undefined;
    profile?: string | undefined;
  } = {},
): ObservedInstance {
  const tags = new Map<string, string>([
    ["nebula:cluster", "prod"],
    ["nebula:node", "nebula"],
  ]);
  if (podUid) tags.set("nebula:pod-uid", podUid);
  if (options.taggedMarkAgoMs !== undefined)
    tags.set("nebula:orphaned-at", new Date(NOW - options.taggedMarkAgoMs).toISOString());
  return {
    instanceId: id,
    state: options.state ?? "running",
    stateReasonCode: undefined,
    stateReasonMessage: undefined,
    launchTime: NOW - ageMs,
    podUid,
    podKey: undefined,
    orphanedAt: undefined,
    privateIp: undefined,
    publicIp: undefined,
    instanceType: undefined,
    availabilityZone: undefined,
    subnetId: undefined,
    capacityType: "on-demand",
    clientToken: "token" in options ? options.token : podUid,
    instanceProfileArn: "profile" in options ? options.profile : PROFILE,
    tags,
    raw: { InstanceId: id },
  };
}

const base = {
  now: NOW,
  graceMs: 300_000,
  confirmAfterMs: 60_000,
  disprove: (i: ObservedInstance) => disproveOwnership(i, undefined, rules),
};

describe("planLeakCollection", () => {
  it("marks, then terminates on a later pass (its own marks only), and unmarks a Pod that came back", () => {
    const plan = planLeakCollection({
      ...base,
      livePodUids: new Set(["live", "back"]),
      marks: new Map([
        ["i-marked", NOW - 120_000],
        ["i-justmarked", NOW - 1_000],
        ["i-back", NOW - 120_000],
        ["i-dying", NOW - 120_000],
      ]),
      instances: [
        instance("i-live", "live", 3_600_000),
        instance("i-young", "gone", 10_000),
        instance("i-old", "gone", 3_600_000),
        instance("i-marked", "gone", 3_600_000),
        instance("i-justmarked", "gone", 3_600_000),
        instance("i-back", "back", 3_600_000),
        instance("i-dying", "gone", 3_600_000, { state: "shutting-down" }),
      ],
    });
    expect(plan).toEqual({
      mark: ["i-old"],
      terminate: ["i-marked"],
      unmark: ["i-back"],
      unproven: [],
    });
  });

  it("a forged orphan mark and forged Nebula tags never get an instance terminated", () => {
    const plan = planLeakCollection({
      ...base,
      livePodUids: new Set(),
      marks: new Map(),
      instances: [
        // Someone with ec2:CreateTags wrote our tags and an old mark on an instance of theirs.
        instance("i-victim", "forged-uid", 3_600_000, {
          taggedMarkAgoMs: 3_600_000,
          token: "",
          profile: "arn:aws:iam::123456789012:instance-profile/other",
        }),
        // Our tags and profile, but not launched with this UID's client token.
        instance("i-retagged", "forged-uid", 3_600_000, { taggedMarkAgoMs: 3_600_000, token: "x" }),
        instance("i-untagged", undefined, 3_600_000),
        // Ours, with a forged mark: it is marked by us first, never terminated on the forged mark.
        instance("i-ours", "gone", 3_600_000, { taggedMarkAgoMs: 3_600_000 }),
      ],
    });
    expect(plan.terminate).toEqual([]);
    expect(plan.mark).toEqual(["i-ours"]);
    expect(plan.unproven.map((u) => u.instanceId)).toEqual([
      "i-victim",
      "i-retagged",
      "i-untagged",
    ]);
  });

  it("never terminates an instance whose Pod is live, nor one it did not mark before", () => {
    const arb = fc.array(
      fc.record({
        live: fc.boolean(),
        age: fc.nat(10_000_000),
        marked: fc.option(fc.nat(10_000_000), { nil: undefined }),
        tagged: fc.option(fc.nat(10_000_000), { nil: undefined }),
      }),
      { maxLength: 30 },
    );
    fc.assert(
      fc.property(arb, (rows) => {
        const instances = rows.map((r, i) =>
          instance(`i-${i}`, r.live ? `live-${i}` : `gone-${i}`, r.age, {
            ...(r.tagged === undefined ? {} : { taggedMarkAgoMs: r.tagged }),
          }),
        );
        const marks = new Map(
          rows.flatMap((r, i) => (r.marked === undefined ? [] : [[`i-${i}`, NOW - r.marked]])),
        ) as Map<string, number>;
        const live = new Set(rows.flatMap((r, i) => (r.live ? [`live-${i}`] : [])));
        const plan = planLeakCollection({ ...base, instances, livePodUids: live, marks });
        for (const id of plan.terminate) {
          const i = Number(id.slice(2));
          expect(rows[i]?.live).toBe(false);
          expect(rows[i]?.marked).toBeGreaterThanOrEqual(base.confirmAfterMs);
          expect(rows[i]?.age).toBeGreaterThanOrEqual(base.graceMs);
        }
        for (const id of plan.mark) expect(rows[Number(id.slice(2))]?.live).toBe(false);
      }),
    );
  });
});

describe("disproveOwnership", () => {
  it("accepts an instance launched for the Pod, and names what a forged one lacks", () => {
    expect(disproveOwnership(instance("i-1", "u1", 0), "u1", rules)).toBeUndefined();
    expect(
      disproveOwnership(instance("i-1", "u1", 0, { token: "u1.2" }), "u1", rules),
    ).toBeUndefined();
    expect(disproveOwnership(instance("i-1", "u1", 0), "u2", rules)).toMatch(/not u2/);
    expect(disproveOwnership(instance("i-1", "u1", 0, { token: "u2" }), "u1", rules)).toMatch(
      /ClientToken/,
    );
    expect(
      disproveOwnership(instance("i-1", "u1", 0, { token: undefined }), "u1", {
        ...rules,
        clientToken: false,
      }),
    ).toBeUndefined();
    expect(
      disproveOwnership(instance("i-1", "u1", 0, { profile: undefined }), "u1", rules),
    ).toMatch(/instance profile/);
    const other = instance("i-1", "u1", 0);
    (other.tags as Map<string, string>).set("nebula:cluster", "staging");
    expect(disproveOwnership(other, "u1", rules)).toMatch(/nebula:cluster/);
  });
});

describe("planParameterLeaks", () => {
  const GRACE = 600_000;
  const p = (podUid: string, i: number, ageMs: number | undefined) => ({
    name: `/nebula/prod/pods/${podUid}/${i}`,
    podUid,
    lastModified: ageMs === undefined ? undefined : NOW - ageMs,
  });

  it("deletes the parameters of a Pod neither live nor being torn down, once all are past the grace", () => {
    const plan = planParameterLeaks({
      parameters: [
        p("orphan", 1, GRACE + 1),
        p("orphan", 0, GRACE),
        p("live", 0, GRACE * 10),
        p("tearing-down", 0, GRACE * 10),
        p("writing", 0, GRACE * 10),
        p("writing", 1, 1_000),
        p("undated", 0, undefined),
      ],
      livePodUids: new Set(["live"]),
      unfinished: new Set(["tearing-down"]),
      now: NOW,
      graceMs: GRACE,
    });
    expect(plan).toEqual({
      delete: ["/nebula/prod/pods/orphan/0", "/nebula/prod/pods/orphan/1"],
      podUids: ["orphan"],
    });
  });

  it("never deletes a live Pod's parameters nor one inside the grace (a property)", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            podUid: fc.constantFrom("a", "b", "c", "d"),
            i: fc.integer({ min: 0, max: 7 }),
            ageMs: fc.option(fc.integer({ min: -60_000, max: 3 * GRACE }), { nil: undefined }),
          }),
        ),
        fc.subarray(["a", "b", "c", "d"]),
        fc.subarray(["a", "b", "c", "d"]),
        (entries, live, unfinished) => {
          const parameters = entries.map((e) => p(e.podUid, e.i, e.ageMs));
          const plan = planParameterLeaks({
            parameters,
            livePodUids: new Set(live),
            unfinished: new Set(unfinished),
            now: NOW,
            graceMs: GRACE,
          });
          for (const name of plan.delete) {
            const mine = parameters.filter((q) => q.name === name);
            for (const q of mine) {
              expect(live).not.toContain(q.podUid);
              expect(unfinished).not.toContain(q.podUid);
            }
            const pod = mine[0]?.podUid ?? "";
            for (const sibling of parameters.filter((q) => q.podUid === pod)) {
              expect(sibling.lastModified).toBeDefined();
              expect(NOW - (sibling.lastModified ?? NOW)).toBeGreaterThanOrEqual(GRACE);
            }
          }
        },
      ),
    );
  });
});
