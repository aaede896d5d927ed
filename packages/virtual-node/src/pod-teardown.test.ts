import type { V1Pod } from "@kubernetes/client-node";
import { MemoryPodLedger } from "@nebula/teardown";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { FoundInstance, InstanceReclaimer } from "./lifecycle.js";
import type { PodRef } from "./pod-api.js";
import { PodTeardown, type PodTeardownOptions } from "./pod-teardown.js";

/**
 * An EC2 account reduced to what the reclaimer interface exposes: instance states by ID, and a
 * call log. (The real reclaimer, `@nebula/provider` against moto, runs in the app's end-to-end tests.)
 */
class Account implements InstanceReclaimer {
  readonly states = new Map<string, string>();
  readonly byPod = new Map<string, string>();
  readonly calls: string[] = [];
  /** The options each stop and terminate was called with. */
  readonly options: { call: string; options: unknown }[] = [];
  unknown = false;
  async findInstance(podUid: string): Promise<FoundInstance | undefined> {
    if (this.unknown) throw new Error("launch outcome unknown");
    const id = this.byPod.get(podUid);
    if (id === undefined) return undefined;
    return { instanceId: id, state: this.states.get(id) ?? "terminated" };
  }
  async stopInstance(id: string, options?: unknown): Promise<void> {
    this.calls.push(`stop ${id}`);
    this.options.push({ call: `stop ${id}`, options });
    if (this.states.get(id) === "running") this.states.set(id, "stopped");
  }
  async terminateInstance(id: string, options?: unknown): Promise<void> {
    this.calls.push(`terminate ${id}`);
    this.options.push({ call: `terminate ${id}`, options });
    this.states.set(id, "terminated");
  }
}

const pod: V1Pod = { metadata: { namespace: "default", name: "web-0", uid: "uid-1" } };

function setup(
  now: { t: number },
  ledger = new MemoryPodLedger(),
  account = new Account(),
  extra: Partial<PodTeardownOptions> = {},
) {
  const removed: PodRef[] = [];
  let present = true;
  const events: string[] = [];
  const recorded: { regarding: { kind: string; uid?: string }; action: string }[] = [];
  const teardown = new PodTeardown({
    store: ledger,
    prepare: async (ref) => {
      await ledger.ensure({ podUid: ref.uid, namespace: ref.namespace, name: ref.name });
    },
    reclaimer: account,
    removePod: async (ref) => {
      removed.push(ref);
      present = false;
    },
    podPresent: () => present,
    headroomSeconds: 5,
    now: () => now.t,
    ...extra,
    // The Pod controller's Event sink: the teardown records its Events itself.
    events: {
      record: async (occurrence) => {
        events.push(occurrence.reason);
        recorded.push(occurrence);
      },
    },
  });
  return { teardown, ledger, account, removed, events, recorded, present: () => present };
}

/** The Pod's instance running, and its launch recorded in the ledger. */
async function launched(s: ReturnType<typeof setup>): Promise<void> {
  s.account.byPod.set("uid-1", "i-0123456789abcdef0");
  s.account.states.set("i-0123456789abcdef0", "running");
  await s.ledger.recordLaunch(
    { podUid: "uid-1", namespace: "default", name: "web-0" },
    { instanceId: "i-0123456789abcdef0" },
  );
}

async function drive(
  teardown: PodTeardown,
  how: { deleting: boolean; graceSeconds: number },
  now: { t: number },
) {
  for (let i = 0; i < 50; i++) {
    const result = await teardown.reconcile(pod, how);
    if (result.status === "complete") return result;
    now.t += Math.max(result.requeueAfterMs, 1000);
  }
  throw new Error("teardown did not complete");
}

describe("PodTeardown", () => {
  it("deleted Pod: stop, terminate, then the Pod is removed (grace 0, UID), with Events", async () => {
    const now = { t: 1_000_000 };
    const s = setup(now);
    await launched(s);
    const result = await drive(s.teardown, { deleting: true, graceSeconds: 5 }, now);
    expect(result).toMatchObject({ status: "complete", instanceId: "i-0123456789abcdef0" });
    expect(s.account.calls).toEqual(["stop i-0123456789abcdef0", "terminate i-0123456789abcdef0"]);
    expect(s.removed).toEqual([{ namespace: "default", name: "web-0", uid: "uid-1" }]);
    expect(s.events).toEqual(["Stopping", "Terminating", "InstanceTerminated"]);
    expect(s.recorded.map((e) => e.action)).toEqual(["Stop", "Terminate", "Terminate"]);
    expect(s.recorded[0]?.regarding).toMatchObject({ kind: "Pod", uid: "uid-1" });
  });

  it("onTerminateSent: told the Pod's UID once the terminate was sent, not for a terminate skipped", async () => {
    const now = { t: 1_000_000 };
    const sent: { uid: string; calls: string[] }[] = [];
    const account = new Account();
    const s = setup(now, new MemoryPodLedger(), account, {
      onTerminateSent: (uid) => sent.push({ uid, calls: [...account.calls] }),
    });
    await launched(s);
    await drive(s.teardown, { deleting: true, graceSeconds: 5 }, now);
    // Called after the call, with it in the log.
    expect(sent).toEqual([
      { uid: "uid-1", calls: ["stop i-0123456789abcdef0", "terminate i-0123456789abcdef0"] },
    ]);

    // An instance already terminated is not terminated again, and nothing is reported.
    const other = { t: 1_000_000 };
    const skipped: string[] = [];
    const gone = setup(other, new MemoryPodLedger(), new Account(), {
      onTerminateSent: (uid) => skipped.push(uid),
    });
    gone.account.byPod.set("uid-1", "i-0123456789abcdef0");
    gone.account.states.set("i-0123456789abcdef0", "terminated");
    await drive(gone.teardown, { deleting: true, graceSeconds: 5 }, other);
    expect(gone.account.calls).toEqual([]);
    expect(skipped).toEqual([]);
  });

  it("the reclaimer is told the Pod's UID on the stop and on the terminate (it acts only on that Pod's instance)", async () => {
    const now = { t: 1_000_000 };
    const s = setup(now);
    await launched(s);
    await drive(s.teardown, { deleting: true, graceSeconds: 5 }, now);
    expect(s.account.options).toEqual([
      { call: "stop i-0123456789abcdef0", options: { graceSeconds: 5, podUid: "uid-1" } },
      { call: "terminate i-0123456789abcdef0", options: { podUid: "uid-1" } },
    ]);
  });

  it.each([
    ["a year and a second, under the default cap", 31_536_001, {}, 3600],
    ["a year and a second, under maxGraceSeconds 600", 31_536_001, { maxGraceSeconds: 600 }, 600],
    ["Infinity", Number.POSITIVE_INFINITY, {}, 0],
    ["NaN", Number.NaN, {}, 0],
    ["-5", -5, {}, 0],
    ["7.9", 7.9, {}, 7],
  ])("a grace of %s: a Stop is sent with the bounded grace (%#)", async (_, grace, extra, sent) => {
    const now = { t: 1_000_000 };
    const s = setup(now, new MemoryPodLedger(), new Account(), extra);
    await launched(s);
    const first = await s.teardown.reconcile(pod, { deleting: true, graceSeconds: grace });
    expect(first.status).not.toBe("error");
    expect(s.account.options[0]).toEqual({
      call: "stop i-0123456789abcdef0",
      options: { graceSeconds: sent, podUid: "uid-1" },
    });
    await drive(s.teardown, { deleting: true, graceSeconds: grace }, now);
    expect(s.account.calls).toEqual(["stop i-0123456789abcdef0", "terminate i-0123456789abcdef0"]);
    expect(s.removed).toHaveLength(1);
  });

  it("a NaN or negative grace reclaims at once: the stop's deadline is the headroom alone", async () => {
    for (const grace of [Number.NaN, -1]) {
      const now = { t: 1_000_000 };
      const s = setup(now);
      s.account.byPod.set("uid-1", "i-0123456789abcdef0");
      // The instance ignores the stop: the teardown terminates it once the headroom (5 s) passed.
      s.account.stopInstance = async (id: string, options?: unknown) => {
        s.account.calls.push(`stop ${id}`);
        s.account.options.push({ call: `stop ${id}`, options });
      };
      s.account.states.set("i-0123456789abcdef0", "running");
      await s.ledger.recordLaunch(
        { podUid: "uid-1", namespace: "default", name: "web-0" },
        { instanceId: "i-0123456789abcdef0" },
      );
      await s.teardown.reconcile(pod, { deleting: true, graceSeconds: grace });
      now.t += 6_000;
      await s.teardown.reconcile(pod, { deleting: true, graceSeconds: grace });
      await s.teardown.reconcile(pod, { deleting: true, graceSeconds: grace });
      expect(s.account.calls).toEqual([
        "stop i-0123456789abcdef0",
        "terminate i-0123456789abcdef0",
      ]);
    }
  });

  it("parameters the teardown refuses fall back to an immediate reclaim (grace 0), never to none", async () => {
    const now = { t: 1_000_000 };
    // A headroom over the teardown's limit (a day) makes the parameters invalid.
    const s = setup(now, new MemoryPodLedger(), new Account(), { headroomSeconds: 100_000 });
    await launched(s);
    await drive(s.teardown, { deleting: true, graceSeconds: 30 }, now);
    expect(s.account.options[0]).toEqual({
      call: "stop i-0123456789abcdef0",
      options: { graceSeconds: 0, podUid: "uid-1" },
    });
    expect(s.account.calls).toEqual(["stop i-0123456789abcdef0", "terminate i-0123456789abcdef0"]);
    expect(s.removed).toHaveLength(1);
  });

  it("releases what the provider says the Pod holds (its parameters) after the instance is terminated, before the Pod goes", async () => {
    const now = { t: 1_000_000 };
    const account = new (class extends Account {
      auxiliariesOf(podUid: string) {
        return [{ apiVersion: "ssm.nebula.dev/v1", kind: "PodParameters", name: podUid }];
      }
      async releaseAuxiliary(object: { kind: string; name: string }) {
        this.calls.push(`release ${object.kind} ${object.name}`);
      }
    })();
    const s = setup(now, new MemoryPodLedger(), account);
    account.byPod.set("uid-1", "i-0123456789abcdef2");
    account.states.set("i-0123456789abcdef2", "running");
    await s.ledger.recordLaunch(
      { podUid: "uid-1", namespace: "default", name: "web-0" },
      { instanceId: "i-0123456789abcdef2" },
    );
    await drive(s.teardown, { deleting: true, graceSeconds: 5 }, now);
    expect(account.calls).toEqual([
      "stop i-0123456789abcdef2",
      "terminate i-0123456789abcdef2",
      "release PodParameters uid-1",
    ]);
    expect(s.removed).toHaveLength(1);
  });

  it("an instance already gone (no teardown runs): the parameters are still released before the Pod goes", async () => {
    const now = { t: 1_000_000 };
    const released: string[] = [];
    const account = new (class extends Account {
      auxiliariesOf(podUid: string) {
        return [{ apiVersion: "ssm.nebula.dev/v1", kind: "PodParameters", name: podUid }];
      }
      async releaseAuxiliary(object: { name: string }) {
        released.push(`${object.name} (pod removed: ${s.removed.length})`);
      }
    })();
    const s = setup(now, new MemoryPodLedger(), account);
    account.byPod.set("uid-1", "i-0123456789abcdef3");
    account.states.set("i-0123456789abcdef3", "terminated");
    await drive(s.teardown, { deleting: true, graceSeconds: 5 }, now);
    expect(account.calls).toEqual([]);
    expect(released).toEqual(["uid-1 (pod removed: 0)"]);
    expect(s.removed).toHaveLength(1);
  });

  it("finished Pod: the instance is terminated and the Pod stays", async () => {
    const now = { t: 1_000_000 };
    const s = setup(now);
    s.account.byPod.set("uid-1", "i-0123456789abcdef1");
    s.account.states.set("i-0123456789abcdef1", "stopped");
    await drive(s.teardown, { deleting: false, graceSeconds: 30 }, now);
    expect(s.account.states.get("i-0123456789abcdef1")).toBe("terminated");
    expect(s.removed).toEqual([]);
  });

  it("a launch whose outcome is unknown is never declared done", async () => {
    const now = { t: 1_000_000 };
    const s = setup(now);
    s.account.unknown = true;
    for (let i = 0; i < 5; i++) {
      const result = await s.teardown.reconcile(pod, { deleting: true, graceSeconds: 0 });
      expect(result.status).toBe("waiting");
      now.t += 10_000;
    }
    expect(s.removed).toEqual([]);
    s.account.unknown = false;
    s.account.byPod.set("uid-1", "i-0123456789abcdef2");
    s.account.states.set("i-0123456789abcdef2", "running");
    await drive(s.teardown, { deleting: true, graceSeconds: 0 }, now);
    expect(s.account.states.get("i-0123456789abcdef2")).toBe("terminated");
    expect(s.removed).toHaveLength(1);
  });

  it("an instance already terminated is not acted on (EC2 may drop what proves whose it was)", async () => {
    const now = { t: 1_000_000 };
    const s = setup(now);
    s.account.byPod.set("uid-1", "i-0123456789abcdef5");
    s.account.states.set("i-0123456789abcdef5", "running");
    // The first reconcile starts the teardown and sends the stop; then the instance is gone.
    await s.teardown.reconcile(pod, { deleting: true, graceSeconds: 0 });
    s.account.states.set("i-0123456789abcdef5", "terminated");
    const refuse = s.account.terminateInstance.bind(s.account);
    s.account.terminateInstance = async (id) => {
      await refuse(id);
      throw new Error(`instance ${id} does not prove that Nebula launched it`);
    };
    await drive(s.teardown, { deleting: true, graceSeconds: 0 }, now);
    expect(s.account.calls.filter((c) => c.startsWith("terminate"))).toEqual([]);
    expect(s.removed).toHaveLength(1);
  });

  it("a completed teardown is not restarted by a stale request", async () => {
    const now = { t: 1_000_000 };
    const s = setup(now);
    s.account.byPod.set("uid-1", "i-0123456789abcdef3");
    s.account.states.set("i-0123456789abcdef3", "stopped");
    await drive(s.teardown, { deleting: false, graceSeconds: 30 }, now);
    const calls = s.account.calls.length;
    for (let i = 0; i < 3; i++) {
      expect((await s.teardown.reconcile(pod, { deleting: false, graceSeconds: 30 })).status).toBe(
        "complete",
      );
    }
    expect(s.account.calls.length).toBe(calls);
  });

  it("a ledger entry deleted at any step is made again from the instance found by the Pod's UID: the teardown stops and terminates, never reads the absence as done", async () => {
    for (let deleteAt = 0; deleteAt < 6; deleteAt++) {
      const now = { t: 1_000_000 };
      const s = setup(now);
      s.account.byPod.set("uid-1", "i-0123456789abcdef6");
      s.account.states.set("i-0123456789abcdef6", "running");
      await s.ledger.recordLaunch(
        { podUid: "uid-1", namespace: "default", name: "web-0" },
        { instanceId: "i-0123456789abcdef6" },
      );
      let done = false;
      for (let i = 0; i < 40 && !done; i++) {
        if (i === deleteAt) await s.ledger.remove("uid-1");
        const result = await s.teardown.reconcile(pod, { deleting: true, graceSeconds: 5 });
        if (s.removed.length > 0) {
          expect(s.account.states.get("i-0123456789abcdef6"), `deleted at ${deleteAt}`).toBe(
            "terminated",
          );
        }
        done = result.status === "complete";
        now.t += 3_000;
      }
      expect(done, `deleted at step ${deleteAt}`).toBe(true);
      expect(s.account.calls, `deleted at step ${deleteAt}`).toContain(
        "terminate i-0123456789abcdef6",
      );
      // Removed (a repeat is harmless: the removal is idempotent), and only once terminated (above).
      expect(s.removed.length).toBeGreaterThanOrEqual(1);
    }
  });

  it("without a way to make the record again, an absent record is an error, never complete", async () => {
    const now = { t: 1_000_000 };
    const ledger = new MemoryPodLedger();
    const account = new Account();
    account.byPod.set("uid-1", "i-0123456789abcdef7");
    account.states.set("i-0123456789abcdef7", "running");
    const removed: PodRef[] = [];
    const teardown = new PodTeardown({
      store: ledger,
      reclaimer: account,
      removePod: async (ref) => void removed.push(ref),
      podPresent: () => true,
      now: () => now.t,
    });
    for (let i = 0; i < 3; i++) {
      const result = await teardown.reconcile(pod, { deleting: true, graceSeconds: 5 });
      expect(result.status).toBe("error");
      now.t += 5_000;
    }
    expect(removed).toEqual([]);
  });

  it("while the instance cannot be found, the stop's deadline still passes and the teardown goes on to terminate", async () => {
    const now = { t: 1_000_000 };
    const s = setup(now);
    s.account.byPod.set("uid-1", "i-0123456789abcdef8");
    s.account.states.set("i-0123456789abcdef8", "running");
    await s.ledger.recordLaunch(
      { podUid: "uid-1", namespace: "default", name: "web-0" },
      { instanceId: "i-0123456789abcdef8" },
    );
    // A stop the instance ignores (hung), then the lookup fails for good.
    s.account.stopInstance = async (id) => void s.account.calls.push(`stop ${id}`);
    await s.teardown.reconcile(pod, { deleting: true, graceSeconds: 5 });
    await s.teardown.reconcile(pod, { deleting: true, graceSeconds: 5 });
    expect(s.account.calls).toEqual(["stop i-0123456789abcdef8"]);
    s.account.unknown = true;
    // Past grace (5 s) + headroom (5 s).
    now.t += 11_000;
    for (let i = 0; i < 3; i++)
      await s.teardown.reconcile(pod, { deleting: true, graceSeconds: 5 });
    expect(s.account.calls).toContain("terminate i-0123456789abcdef8");
    expect(s.removed).toEqual([]);
  });

  it("property: a crash (a fresh PodTeardown on the same ledger) at any step still ends terminated, then removed", async () => {
    await fc.assert(
      fc.asyncProperty(fc.nat(8), fc.constantFrom(0, 5, 30), async (crashAt, grace) => {
        const now = { t: 1_000_000 };
        const ledger = new MemoryPodLedger();
        const account = new Account();
        account.byPod.set("uid-1", "i-0123456789abcdef4");
        account.states.set("i-0123456789abcdef4", "running");
        let s = setup(now, ledger, account);
        let removedOnce = false;
        for (let i = 0; i < 60; i++) {
          if (i === crashAt) s = setup(now, ledger, account);
          const result = await s.teardown.reconcile(pod, { deleting: true, graceSeconds: grace });
          if (s.removed.length > 0) {
            // The Pod goes only after its instance is terminated.
            expect(account.states.get("i-0123456789abcdef4")).toBe("terminated");
            removedOnce = true;
          }
          if (result.status === "complete") break;
          now.t += 3_000;
        }
        expect(removedOnce || account.states.get("i-0123456789abcdef4") === "terminated").toBe(
          true,
        );
        expect(account.states.get("i-0123456789abcdef4")).toBe("terminated");
      }),
      { numRuns: 40 },
    );
  });
});
