import { describe, expect, it } from "vitest";
import { TeardownExecutor } from "./executor.js";
import { decodeLaunch, MemoryPodLedger } from "./ledger.js";
import { podTeardown } from "./pod.js";

const base = { podUid: "uid-1", namespace: "default", name: "web-0" };

describe("MemoryPodLedger", () => {
  it("ensure never overwrites; recordLaunch merges; remove forgets", async () => {
    const ledger = new MemoryPodLedger();
    await ledger.recordLaunch(base, { requestedAt: 5, clientToken: "uid-1" });
    const kept = await ledger.ensure({ ...base, name: "other" });
    expect(kept.launch).toEqual({ ...base, requestedAt: 5, clientToken: "uid-1" });
    await ledger.recordLaunch(base, { instanceId: "i-0123456789abcdef0", launchedAt: 9 });
    expect((await ledger.get("uid-1"))?.launch).toMatchObject({
      requestedAt: 5,
      instanceId: "i-0123456789abcdef0",
    });
    expect((await ledger.list()).map((e) => e.launch.podUid)).toEqual(["uid-1"]);
    await ledger.remove("uid-1");
    expect(await ledger.get("uid-1")).toBeUndefined();
  });

  it("is the teardown store keyed by Pod UID, and keeps the launch across teardown writes", async () => {
    const ledger = new MemoryPodLedger();
    await ledger.recordLaunch(base, { instanceId: "i-0123456789abcdef0" });
    const executor = new TeardownExecutor({
      teardown: podTeardown,
      store: ledger,
      handlers: {
        StopInstance: () => undefined,
        TerminateInstance: () => undefined,
        DeleteAuxiliary: () => undefined,
        DeletePod: () => undefined,
      },
      observe: () => ({ instance: "terminated" as const, pod: "present" as const }),
      now: () => 1_000,
    });
    const params = { ...base, instanceId: "i-0123456789abcdef0", finish: "clear" as const };
    await executor.request("uid-1", { params, cause: "DeletionRequested", uid: "uid-1" });
    expect((await executor.settle("uid-1")).status).toBe("complete");
    const entry = await ledger.get("uid-1");
    expect(entry?.launch.instanceId).toBe("i-0123456789abcdef0");
    expect(entry?.record).toContain('"phase":"complete"');
  });

  it("remove with ifVersion deletes only the entry as it was listed", async () => {
    const ledger = new MemoryPodLedger();
    const base = { podUid: "uid-v", namespace: "default", name: "web-0" };
    await ledger.ensure(base);
    const [listed] = await ledger.list();
    await ledger.recordLaunch(base, { requestedAt: 5 });
    expect(await ledger.remove("uid-v", { ifVersion: listed?.version })).toBe(false);
    expect((await ledger.get("uid-v"))?.launch.requestedAt).toBe(5);
    const now = await ledger.get("uid-v");
    expect(await ledger.remove("uid-v", { ifVersion: now?.version })).toBe(true);
    expect(await ledger.get("uid-v")).toBeUndefined();
  });

  it("decodeLaunch is total", () => {
    expect(decodeLaunch(undefined)).toBeUndefined();
    expect(decodeLaunch("{")).toBeUndefined();
    expect(decodeLaunch(JSON.stringify({ ...base, instanceId: "nope" }))).toBeUndefined();
    expect(decodeLaunch(JSON.stringify(base))).toEqual(base);
  });
});
