import { describe, expect, it } from "vitest";
import { chunk, InstanceBatcher, missingInstanceIds } from "./batch.js";
import { ProviderError } from "./errors.js";

function notFound(ids: string[]) {
  return Object.assign(new Error(`The instance IDs '${ids.join(", ")}' do not exist`), {
    name: "InvalidInstanceID.NotFound",
  });
}

describe("chunk", () => {
  it("cuts into pieces of at most size", () => {
    expect(chunk([1, 2, 3, 4, 5], 2)).toEqual([[1, 2], [3, 4], [5]]);
    expect(chunk([], 3)).toEqual([]);
  });
});

describe("InstanceBatcher", () => {
  it("one ID EC2 refuses never fails the others: a refused batch is resent ID by ID", async () => {
    const calls: string[][] = [];
    const batcher = new InstanceBatcher(
      async (ids) => {
        calls.push(ids);
        if (ids.includes("i-spot")) {
          throw Object.assign(new Error("You can't stop the Spot Instance 'i-spot'"), {
            name: "UnsupportedOperation",
            $fault: "client",
          });
        }
      },
      "StopInstances",
      { batchSize: 10, windowMs: 5 },
    );
    const [a, b, c] = await Promise.allSettled(
      ["i-aaaaaaaa", "i-spot", "i-bbbbbbbb"].map((id) => batcher.add(id)),
    );
    expect(a).toEqual({ status: "fulfilled", value: "done" });
    expect(c).toEqual({ status: "fulfilled", value: "done" });
    expect(b?.status).toBe("rejected");
    expect((b as PromiseRejectedResult).reason).toMatchObject({ awsCode: "UnsupportedOperation" });
    expect(calls.length).toBe(4);
  });

  it("throttling is not split into more calls", async () => {
    let calls = 0;
    const batcher = new InstanceBatcher(
      async () => {
        calls++;
        throw Object.assign(new Error("slow down"), { name: "RequestLimitExceeded" });
      },
      "StopInstances",
      { batchSize: 10, windowMs: 5 },
    );
    const results = await Promise.allSettled(["i-1", "i-2", "i-3"].map((id) => batcher.add(id)));
    expect(results.every((r) => r.status === "rejected")).toBe(true);
    expect(calls).toBe(1);
  });

  it("gathers many requests into ⌈n/batchSize⌉ calls", async () => {
    const calls: string[][] = [];
    const batcher = new InstanceBatcher(async (ids) => void calls.push(ids), "StopInstances", {
      batchSize: 4,
      windowMs: 5,
    });
    const ids = Array.from({ length: 10 }, (_, i) => `i-${i.toString(16).padStart(8, "0")}`);
    const outcomes = await Promise.all(ids.map((id) => batcher.add(id)));
    expect(outcomes.every((o) => o === "done")).toBe(true);
    expect(calls.flat().sort()).toEqual([...ids].sort());
    expect(calls.length).toBe(3);
    expect(batcher.calls).toBe(3);
  });

  it("drops IDs EC2 says do not exist and sends the rest again", async () => {
    const calls: string[][] = [];
    const batcher = new InstanceBatcher(
      async (ids) => {
        calls.push(ids);
        if (ids.includes("i-dead")) throw notFound(["i-dead"]);
      },
      "TerminateInstances",
      { batchSize: 10, windowMs: 1 },
    );
    const [a, b] = await Promise.all([batcher.add("i-aaaa"), batcher.add("i-dead")]);
    expect(a).toBe("done");
    expect(b).toBe("notFound");
    expect(calls).toEqual([["i-aaaa", "i-dead"], ["i-aaaa"]]);
    expect(missingInstanceIds("The instance ID 'i-0123abcd' does not exist")).toEqual([
      "i-0123abcd",
    ]);
  });

  it("rejects every request of a failed call with a classified error", async () => {
    const batcher = new InstanceBatcher(
      async () => {
        throw Object.assign(new Error("slow down"), { name: "RequestLimitExceeded" });
      },
      "StopInstances",
      { batchSize: 10, windowMs: 1 },
    );
    await expect(batcher.add("i-1")).rejects.toSatisfy(
      (e) => e instanceof ProviderError && e.code === "Throttled",
    );
  });
});
