import { describe, expect, it } from "vitest";
import { Ec2Budget } from "./ec2-budget.js";
import { ProviderError } from "./errors.js";

function clock() {
  let now = 0;
  const waits: number[] = [];
  return {
    waits,
    now: () => now,
    sleep: async (ms: number) => {
      waits.push(ms);
      now += ms;
    },
    advance: (ms: number) => {
      now += ms;
    },
  };
}

const settings = {
  reads: { perSecond: 10, burst: 2 },
  writes: { perSecond: 1, burst: 1 },
  maxWaitSeconds: 5,
};

describe("Ec2Budget", () => {
  it("lets a burst through, then spaces calls at the share, per API", async () => {
    const c = clock();
    const budget = new Ec2Budget(settings, c);
    await budget.take("DescribeInstances");
    await budget.take("DescribeInstances");
    await budget.take("DescribeInstances");
    await budget.take("RunInstances");
    await budget.take("RunInstances");
    expect(c.waits).toEqual([100, 1000]);
  });

  it("fails a call that would wait too long as Throttled, without spending a token", async () => {
    const c = clock();
    const budget = new Ec2Budget({ ...settings, maxWaitSeconds: 0 }, c);
    await budget.take("TerminateInstances");
    const error = await budget.take("TerminateInstances").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).code).toBe("Throttled");
    expect((error as ProviderError).message).toContain("ec2Budget");
    c.advance(1000);
    await budget.take("TerminateInstances");
    expect(c.waits).toEqual([]);
  });

  it("halves an API's rate when EC2 throttles it and climbs back as calls go through", async () => {
    const c = clock();
    const budget = new Ec2Budget(settings, c);
    await budget.take("DescribeInstances");
    budget.result("DescribeInstances", true);
    expect(budget.state()).toEqual([{ action: "DescribeInstances", rate: 5, waiting: 0 }]);
    await budget.take("DescribeInstances");
    expect(c.waits).toEqual([200]);
    for (let i = 0; i < 5; i++) budget.result("DescribeInstances", false);
    expect(budget.state()[0]?.rate).toBe(10);
  });
});
