import type { PodParameter } from "@nebula/userdata";
import { describe, expect, it, vi } from "vitest";
import { ProviderError } from "./errors.js";
import { ParameterDelivery } from "./parameter-delivery.js";
import { podParametersAuxiliary } from "./parameters.js";
import { observed, T0, testContext, testRecord } from "./testing/context.js";
import { testPod } from "./testing/fixtures.js";

const ACCOUNT = "123456789012";

function params(uid: string, n = 2): PodParameter[] {
  return Array.from({ length: n }, (_, i) => ({
    name: `/nebula/test/pods/${uid}/${i}`,
    value: `v${i}`,
  }));
}

const SHARED: PodParameter[] = [{ name: "/nebula/test/supervisor/0", value: "sup" }];

function setup(podDelivery: "parameters" | "user-data" = "parameters") {
  const t = testContext({ podDelivery });
  const delivery = new ParameterDelivery(t.ctx);
  const notWritten: string[] = [];
  delivery.onNotWritten = (record) => void notWritten.push(record.facts.uid);
  return { ...t, delivery, notWritten };
}

describe("ParameterDelivery with user-data delivery", () => {
  it("does nothing and names no auxiliary object", async () => {
    const { ctx, gateway, delivery } = setup("user-data");
    const record = testRecord(ctx, testPod("a", "uid-a"), {
      parameters: params("uid-a"),
      instanceId: "i-0123456789abcdef0",
      parametersUntagged: false,
    });
    expect(delivery.enabled).toBe(false);
    expect(await delivery.write(record)).toBe(true);
    await delivery.tag(record);
    expect(delivery.auxiliariesOf("uid-a")).toEqual([]);
    expect(gateway.calls).toEqual([]);
  });
});

describe("ParameterDelivery.write", () => {
  it("writes the shared parameters once per process, the Pod's on every launch that needs them", async () => {
    const { ctx, gateway, delivery } = setup();
    const a = testRecord(ctx, testPod("a", "uid-a"), {
      parameters: params("uid-a"),
      sharedParameters: SHARED,
    });
    const b = testRecord(ctx, testPod("b", "uid-b"), {
      parameters: params("uid-b"),
      sharedParameters: SHARED,
    });
    expect(await delivery.write(a)).toBe(true);
    expect(await delivery.write(b)).toBe(true);
    expect(gateway.calls.map((c) => [c.action, c.arg])).toEqual([
      ["writeSharedParameters", SHARED],
      ["writePodParameters", "uid-a"],
      ["writePodParameters", "uid-b"],
    ]);
    expect(a.parametersWrittenAt).toBe(T0);
    expect([...gateway.parameters.keys()].sort()).toEqual(
      [...SHARED, ...params("uid-a"), ...params("uid-b")].map((p) => p.name).sort(),
    );
  });

  it("writes again only once they are half the parameter grace old", async () => {
    const { ctx, gateway, delivery, clock } = setup();
    const record = testRecord(ctx, testPod("a", "uid-a"), { parameters: params("uid-a") });
    await delivery.write(record);
    clock.advance(299_000); // grace 600 s: refreshed after 300 s
    await delivery.write(record);
    expect(gateway.count("writePodParameters")).toBe(1);
    clock.advance(1_000);
    await delivery.write(record);
    expect(gateway.count("writePodParameters")).toBe(2);
    expect(record.parametersWrittenAt).toBe(T0 + 300_000);
  });

  it("a Pod without parameters needs no write", async () => {
    const { ctx, gateway, delivery } = setup();
    expect(await delivery.write(testRecord(ctx, testPod("a", "uid-a"), { parameters: [] }))).toBe(
      true,
    );
    expect(gateway.calls).toEqual([]);
  });

  it("a failed write holds the launch, says so once, and tells the launcher no instance can exist", async () => {
    const { ctx, gateway, delivery, notWritten } = setup();
    const record = testRecord(ctx, testPod("a", "uid-a"), { parameters: params("uid-a") });
    gateway.fail(
      "writePodParameters",
      new ProviderError("Throttled", "too many updates", { awsCode: "TooManyUpdates" }),
      2,
    );
    expect(await delivery.write(record)).toBe(false);
    expect(await delivery.write(record)).toBe(false);
    expect(record.launchError?.code).toBe("Throttled");
    expect(record.launchError?.message).toMatch(
      /could not be written to Parameter Store \(TooManyUpdates\)/,
    );
    expect(record.events.map((e) => e.reason)).toEqual(["ParametersNotWritten"]);
    expect(notWritten).toEqual(["uid-a", "uid-a"]);
    expect(record.parametersWrittenAt).toBeUndefined();
    expect(await delivery.write(record)).toBe(true);
  });
});

describe("ParameterDelivery.tag", () => {
  it("tags the Pod's parameters with its instance's ARN, once", async () => {
    const { ctx, gateway, delivery } = setup();
    const record = testRecord(ctx, testPod("a", "uid-a"), {
      parameters: params("uid-a"),
      parametersUntagged: true,
    });
    await delivery.write(record);
    record.instanceId = "i-0123456789abcdef0";
    record.accountId = ACCOUNT;
    await delivery.tag(record);
    const arn = `arn:aws:ec2:us-east-1:${ACCOUNT}:instance/i-0123456789abcdef0`;
    expect(gateway.calls.at(-1)).toEqual({
      action: "tagParameters",
      arg: { names: params("uid-a").map((p) => p.name), instanceArn: arn },
    });
    expect(
      gateway.parameters.get("/nebula/test/pods/uid-a/0")?.tags.get("nebula:instance-arn"),
    ).toBe(arn);
    expect(record.parametersUntagged).toBe(false);
    await delivery.tag(record);
    expect(gateway.count("tagParameters")).toBe(1);
  });

  it("after a restart lists the parameters that exist, and takes the account from the observed profile", async () => {
    const { ctx, gateway, delivery } = setup();
    await gateway.writePodParameters("uid-r", params("uid-r", 3));
    gateway.calls.length = 0;
    const record = testRecord(ctx, testPod("r", "uid-r"), {
      instanceId: "i-0123456789abcdef0",
      parametersUntagged: true,
    });
    // No account known yet (a name as instance profile, no RunInstances answer): wait for a poll.
    await delivery.tag(record);
    expect(gateway.calls).toEqual([]);
    // The poll's observation brings the instance profile's ARN, and so the account.
    record.observed = observed(gateway.addInstance("uid-r", { InstanceId: "i-0123456789abcdef0" }));
    await delivery.tag(record);
    expect(gateway.calls.map((c) => c.action)).toEqual(["podParameterNames", "tagParameters"]);
    expect(record.parametersUntagged).toBe(false);
  });

  it("writes the parameters again when they vanished, then tags them", async () => {
    const { ctx, gateway, delivery } = setup();
    const record = testRecord(ctx, testPod("a", "uid-a"), {
      parameters: params("uid-a"),
      parametersUntagged: true,
      parametersWrittenAt: T0,
      instanceId: "i-0123456789abcdef0",
      accountId: ACCOUNT,
    });
    // parametersWrittenAt says written, but nothing is in Parameter Store.
    await delivery.tag(record);
    expect(gateway.calls.map((c) => c.action)).toEqual([
      "tagParameters",
      "writePodParameters",
      "tagParameters",
    ]);
    expect(record.parametersUntagged).toBe(false);
  });

  it("a failure is logged and left for the next poll", async () => {
    const { ctx, gateway, delivery, logs } = setup();
    const record = testRecord(ctx, testPod("a", "uid-a"), {
      parameters: params("uid-a"),
      parametersUntagged: true,
      instanceId: "i-0123456789abcdef0",
      accountId: ACCOUNT,
    });
    await delivery.write(record);
    gateway.fail("tagParameters", new ProviderError("Throttled", "slow down"));
    await expect(delivery.tag(record)).resolves.toBeUndefined();
    expect(record.parametersUntagged).toBe(true);
    expect(record.tagging).toBe(false);
    expect(logs.some((l) => /not yet tagged/.test(l.message))).toBe(true);
    await delivery.tag(record);
    expect(record.parametersUntagged).toBe(false);
  });

  it("tags once when called twice at the same time", async () => {
    const { ctx, gateway, delivery } = setup();
    const record = testRecord(ctx, testPod("a", "uid-a"), {
      parameters: params("uid-a"),
      parametersUntagged: true,
      instanceId: "i-0123456789abcdef0",
      accountId: ACCOUNT,
    });
    await delivery.write(record);
    const tag = vi.spyOn(gateway, "tagParameters");
    await Promise.all([delivery.tag(record), delivery.tag(record)]);
    expect(tag).toHaveBeenCalledTimes(1);
  });
});

describe("ParameterDelivery.release", () => {
  it("names the Pod's parameters as its auxiliary and deletes them all on release (repeatable)", async () => {
    const { gateway, delivery } = setup();
    await gateway.writePodParameters("uid-a", params("uid-a"));
    await gateway.writePodParameters("uid-b", params("uid-b"));
    const [object] = delivery.auxiliariesOf("uid-a");
    expect(object).toEqual(podParametersAuxiliary("uid-a"));
    if (object === undefined) throw new Error("no auxiliary");
    await delivery.release(object);
    await delivery.release(object);
    expect([...gateway.parameters.keys()]).toEqual(params("uid-b").map((p) => p.name));
  });

  it("refuses an object it did not name", async () => {
    const { gateway, delivery } = setup();
    await expect(
      delivery.release({ apiVersion: "v1", kind: "Secret", name: "uid-a" }),
    ).rejects.toMatchObject({ code: "InvalidConfiguration" });
    expect(gateway.calls).toEqual([]);
  });
});
