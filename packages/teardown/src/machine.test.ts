import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  defineTeardown,
  type StepOutcome,
  type StepResult,
  TeardownDefinitionError,
} from "./machine.js";
import { decodeRecord, type TeardownRecord } from "./record.js";

interface Obs {
  readonly aDone: boolean;
  readonly bDone: boolean;
  readonly cDone: boolean;
  readonly holds?: readonly string[];
}
type Effect = { readonly kind: "A" } | { readonly kind: "C1" } | { readonly kind: "C2" };

const Params = z.strictObject({
  deadlineMs: z.number().int().default(10_000),
  holdMs: z.number().int().default(5_000),
  skipB: z.boolean().default(false),
});

const demo = defineTeardown<Obs, Effect, z.infer<typeof Params>>({
  name: "test.dev/demo",
  params: Params,
  phases: [
    {
      name: "a",
      waitsFor: "a to finish",
      action: () => [{ kind: "A" }],
      isDone: (o) => o.aDone,
      deadline: { afterMs: ({ params }) => params.deadlineMs, onExpiry: "advance" },
    },
    {
      name: "b",
      waitsFor: "b to finish",
      skip: ({ params }) => params.skipB,
      subject: () => ({ spec: { b: true } }),
      isDone: (o) => o.bDone,
      hold: { holders: (o) => o.holds ?? [], timeoutMs: ({ params }) => params.holdMs },
    },
    {
      name: "c",
      waitsFor: "c to finish",
      action: () => [{ kind: "C1" }, { kind: "C2" }],
      isDone: (o) => o.cDone,
      deadline: { afterMs: () => 1_000, onExpiry: "reissue" },
    },
  ],
  complete: () => ({ status: { done: true } }),
});

const T0 = 1_700_000_000_000;
const none: Obs = { aDone: false, bDone: false, cDone: false };

function ok(outcome: StepOutcome<Effect>): StepResult<Effect> {
  if (outcome.kind !== "step") throw new Error(`expected a step, got: ${outcome.reason}`);
  return outcome;
}

/** Starts and confirms phase `a` at T0. */
function confirmedA(params: object = {}): TeardownRecord {
  const started = ok(demo.start({ params, cause: "Test", uid: "u1" }, T0));
  return ok(demo.acknowledge(started.record, T0 + 100)).record;
}

describe("defineTeardown", () => {
  it("refuses definitions that cannot work", () => {
    const base = { name: "x", params: z.object({}) };
    expect(() => defineTeardown({ ...base, phases: [] })).toThrow(TeardownDefinitionError);
    const same = { name: "p", waitsFor: "w" };
    expect(() => defineTeardown({ ...base, phases: [same, same] })).toThrow(/declared twice/);
    expect(() =>
      defineTeardown({ ...base, phases: [{ name: "complete", waitsFor: "w" }] }),
    ).toThrow(/reserved/);
  });
});

describe("start", () => {
  it("records the intent in the first phase and claims its action, before any effect", () => {
    const started = ok(demo.start({ params: {}, cause: "Test", uid: "u1" }, T0));
    expect(started).toMatchObject({
      status: "advanced",
      write: "update",
      effects: [{ kind: "A" }],
    });
    expect(started.record).toEqual({
      v: 1,
      def: "test.dev/demo",
      cause: "Test",
      uid: "u1",
      startedAt: T0,
      phase: "a",
      idx: 0,
      since: T0,
      attempt: 1,
      claimedAt: T0,
      params: { deadlineMs: 10_000, holdMs: 5_000, skipB: false },
    });
    expect(started.transitions).toEqual([
      { from: null, to: "a", reason: "Started", skipped: [], at: T0 },
    ]);
  });

  it("rejects bad parameters with a reason instead of throwing", () => {
    const outcome = demo.start({ params: { deadlineMs: "soon" }, cause: "Test" }, T0);
    expect(outcome.kind).toBe("invalid");
  });
});

describe("step", () => {
  it("re-claims an unconfirmed action (a crash before confirmation) after a back-off", () => {
    const started = ok(demo.start({ params: {}, cause: "Test" }, T0));
    expect(ok(demo.step(started.record, none, T0 + 999))).toMatchObject({
      status: "waiting",
      write: "none",
      effects: [],
      waitingFor: "its action to be confirmed (attempt 1; next try at 2023-11-14T22:13:21.000Z)",
    });
    const again = ok(demo.step(started.record, none, T0 + 5_000));
    expect(again).toMatchObject({ status: "issuing", write: "update", effects: [{ kind: "A" }] });
    expect(again.record).toMatchObject({ attempt: 2, claimedAt: T0 + 5_000, since: T0 });
    // The back-off doubles with each claim.
    expect(ok(demo.step(again.record, none, T0 + 6_999)).status).toBe("waiting");
    expect(ok(demo.step(again.record, none, T0 + 7_000)).status).toBe("issuing");
    expect(ok(demo.acknowledge(again.record, T0 + 5_100)).record.claimedAt).toBeUndefined();
  });

  it("fixes the deadline from the recorded claim when the action is confirmed, and a restart does not reset it", () => {
    // Claimed at T0 (start), confirmed at T0 + 100: the 10 s budget counts from the claim.
    const record = confirmedA();
    expect(record.issuedAt).toBe(T0 + 100);
    expect(record.deadline).toBe(T0 + 10_000);
    // Confirming again changes nothing.
    expect(ok(demo.acknowledge(record, T0 + 9_000)).write).toBe("none");
    // A "restarted" process only has the record: the deadline is the recorded one.
    const copy = decodeRecord(JSON.stringify(record));
    if (!copy.ok) throw new Error(copy.reason);
    expect(ok(demo.step(copy.record, none, T0 + 9_999))).toMatchObject({
      status: "waiting",
      write: "none",
      waitingFor: "a to finish",
    });
    const expired = ok(demo.step(copy.record, none, T0 + 10_000));
    expect(expired.status).toBe("advanced");
    expect(expired.transitions).toEqual([
      { from: "a", to: "b", reason: "DeadlineExpired", skipped: [], at: T0 + 10_000 },
    ]);
  });

  it("a confirmation that comes after the budget leaves an already passed deadline", () => {
    const started = ok(demo.start({ params: {}, cause: "Test" }, T0));
    const late = ok(demo.acknowledge(started.record, T0 + 12_000)).record;
    expect(late).toMatchObject({ issuedAt: T0 + 12_000, deadline: T0 + 10_000 });
    expect(ok(demo.step(late, none, T0 + 12_000)).transitions).toEqual([
      { from: "a", to: "b", reason: "DeadlineExpired", skipped: [], at: T0 + 12_000 },
    ]);
  });

  it("counts a re-claimed action's deadline from the latest claim", () => {
    const started = ok(demo.start({ params: {}, cause: "Test" }, T0));
    const again = ok(demo.step(started.record, none, T0 + 5_000)).record;
    expect(ok(demo.acknowledge(again, T0 + 7_000)).record.deadline).toBe(T0 + 15_000);
  });

  it("counts a reissued action's deadline from its new claim", () => {
    let record = ok(demo.step(confirmedA({ skipB: true }), { ...none, aDone: true }, T0)).record;
    expect(ok(demo.acknowledge(record, T0 + 400)).record.deadline).toBe(T0 + 1_000);
    record = ok(demo.acknowledge(record, T0 + 10)).record;
    const reissued = ok(demo.step(record, none, T0 + 1_010)).record;
    expect(ok(demo.acknowledge(reissued, T0 + 1_500)).record.deadline).toBe(T0 + 2_010);
  });

  it("enters a phase and changes the subject in the same write", () => {
    const next = ok(demo.step(confirmedA(), { ...none, aDone: true }, T0 + 500));
    expect(next).toMatchObject({ status: "advanced", write: "update", effects: [] });
    expect(next.subject).toEqual({ spec: { b: true } });
    // A phase without an action is confirmed on entry.
    expect(next.record).toMatchObject({ phase: "b", idx: 1, since: T0 + 500, issuedAt: T0 + 500 });
  });

  it("passes over skipped phases and says so", () => {
    const next = ok(demo.step(confirmedA({ skipB: true }), { ...none, aDone: true }, T0 + 500));
    expect(next.record.phase).toBe("c");
    expect(next.subject).toBeUndefined();
    expect(next.transitions).toEqual([
      { from: "a", to: "c", reason: "Done", skipped: ["b"], at: T0 + 500 },
    ]);
  });

  it("waits for holders, records when the hold began, and gives up after the timeout", () => {
    const held = { ...none, aDone: true, holds: ["backup", "audit"] };
    const first = ok(demo.step(confirmedA(), held, T0 + 1_000));
    expect(first).toMatchObject({ status: "held", write: "update", effects: [] });
    expect(first.record).toMatchObject({ phase: "a", heldSince: T0 + 1_000 });
    expect(first.waitingFor).toBe('holders of "b" to release it: backup, audit');
    expect(ok(demo.step(first.record, held, T0 + 5_999))).toMatchObject({
      status: "held",
      write: "none",
    });
    const expired = ok(demo.step(first.record, held, T0 + 6_000));
    expect(expired.transitions[0]?.reason).toBe("HoldExpired");
    expect(expired.record.heldSince).toBeUndefined();
    const released = ok(demo.step(first.record, { ...none, aDone: true }, T0 + 2_000));
    expect(released.transitions[0]?.reason).toBe("Done");
  });

  it("reissues the action when a reissue deadline passes", () => {
    let record = ok(demo.step(confirmedA({ skipB: true }), { ...none, aDone: true }, T0)).record;
    record = ok(demo.acknowledge(record, T0 + 10)).record;
    const reissued = ok(demo.step(record, none, T0 + 1_010));
    expect(reissued).toMatchObject({
      status: "issuing",
      effects: [{ kind: "C1" }, { kind: "C2" }],
    });
    expect(reissued.record).toMatchObject({ phase: "c", attempt: 2, claimedAt: T0 + 1_010 });
    expect(reissued.record.issuedAt).toBeUndefined();
    expect(reissued.record.deadline).toBeUndefined();
  });

  it("completes by clearing the record, with the completion's subject change", () => {
    let record = ok(demo.step(confirmedA({ skipB: true }), { ...none, aDone: true }, T0)).record;
    record = ok(demo.acknowledge(record, T0 + 10)).record;
    const done = ok(demo.step(record, { ...none, cDone: true }, T0 + 20));
    expect(done).toMatchObject({ status: "complete", write: "clear", effects: [] });
    expect(done.subject).toEqual({ status: { done: true } });
    expect(done.record).toMatchObject({ phase: "complete", idx: 3 });
  });

  it("refuses records it cannot act on, with reasons", () => {
    const record = confirmedA();
    expect(demo.step({ ...record, def: "other" }, none, T0)).toEqual({
      kind: "invalid",
      reason: 'the record belongs to teardown "other", not "test.dev/demo"',
    });
    expect(demo.step({ ...record, phase: "zz" }, none, T0).kind).toBe("invalid");
    expect(demo.step({ ...record, idx: 7 }, none, T0).kind).toBe("invalid");
    expect(demo.step({ ...record, params: { skipB: "no" } }, none, T0).kind).toBe("invalid");
  });

  it("turns a throwing callback into an invalid outcome", () => {
    const throwing = defineTeardown<unknown, Effect, object>({
      name: "t",
      params: z.object({}),
      phases: [
        {
          name: "p",
          waitsFor: "w",
          isDone: () => {
            throw new Error("boom");
          },
        },
      ],
    });
    const started = ok(throwing.start({ params: {}, cause: "Test" }, T0));
    expect(throwing.step(started.record, {}, T0)).toEqual({
      kind: "invalid",
      reason: 'a callback of teardown "t" threw: boom',
    });
  });
});

describe("describe", () => {
  it("says where the teardown stands, since when, its deadline and what it waits for", () => {
    const summary = demo.describe(confirmedA(), T0 + 4_100);
    expect(summary).toMatchObject({
      phase: "a",
      position: { index: 1, of: 3 },
      elapsedMs: 4_100,
      deadline: T0 + 10_000,
      remainingMs: 5_900,
      overdue: false,
      actionConfirmed: true,
      waitingFor: "a to finish",
    });
    expect(summary.text).toBe(
      "a (1/3) for 4s since 2023-11-14T22:13:20.000Z; waiting for a to finish; deadline in 5s (2023-11-14T22:13:30.000Z); cause Test",
    );
    expect(demo.describe(confirmedA(), T0 + 75_000).text).toContain("deadline passed 1m5s ago");
  });

  it("describes an unconfirmed action and an unknown phase without throwing", () => {
    const started = ok(demo.start({ params: {}, cause: "Test" }, T0));
    expect(demo.describe(started.record, T0).waitingFor).toBe(
      "its action to be confirmed (attempt 1)",
    );
    expect(demo.describe({ ...started.record, phase: "zz" }, T0).waitingFor).toMatch(/unknown/);
  });
});

describe("properties", () => {
  const obs = fc.record({
    aDone: fc.boolean(),
    bDone: fc.boolean(),
    cDone: fc.boolean(),
    holds: fc.array(fc.constantFrom("x", "y"), { maxLength: 2 }),
  });
  const action = fc.record({
    obs,
    dt: fc.integer({ min: -2_000, max: 20_000 }),
    confirm: fc.boolean(),
  });

  it("phase index never decreases, effects only come with a write, and it always ends", () => {
    fc.assert(
      fc.property(
        fc.record({ skipB: fc.boolean(), deadlineMs: fc.integer({ min: 0, max: 30_000 }) }),
        fc.array(action, { maxLength: 60 }),
        (params, actions) => {
          const started = ok(demo.start({ params, cause: "Test" }, T0));
          let record: TeardownRecord | null = started.record;
          let now = T0;
          for (const a of actions) {
            if (record === null) break;
            now += a.dt;
            const result = ok(demo.step(record, a.obs, now));
            if (result.effects.length > 0) expect(result.write).toBe("update");
            expect(result.record.idx).toBeGreaterThanOrEqual(record.idx);
            record = result.write === "clear" ? null : result.record;
            if (record && a.confirm) {
              const claimed = record;
              record = ok(demo.acknowledge(record, now)).record;
              // A deadline fixed by this confirmation counts from the claim, not from now.
              if (claimed.issuedAt === undefined && claimed.claimedAt !== undefined) {
                const budget = claimed.phase === "a" ? Math.max(0, params.deadlineMs) : 1_000;
                expect(record.deadline).toBe(claimed.claimedAt + budget);
              }
            }
          }
          // From anywhere, "everything done" finishes it within a few steps.
          for (let i = 0; i < 10 && record !== null; i++) {
            now += 1;
            const result = ok(demo.step(record, { aDone: true, bDone: true, cDone: true }, now));
            record = result.write === "clear" ? null : result.record;
            if (record) record = ok(demo.acknowledge(record, now)).record;
          }
          expect(record).toBeNull();
        },
      ),
    );
  });

  it("never throws on arbitrary records and observations", () => {
    fc.assert(
      fc.property(fc.anything(), fc.anything(), fc.integer(), (raw, observation, now) => {
        const decoded = decodeRecord(JSON.stringify(raw) ?? "");
        const record = decoded.ok ? decoded.record : confirmedA();
        const result = demo.step(record, observation as Obs, now);
        expect(["step", "invalid"]).toContain(result.kind);
        expect(typeof demo.describe(record, now).text).toBe("string");
      }),
    );
  });
});
