import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EC2_STATES, listInstanceItems } from "./overlay.js";
import { type OverlayProxy, startOverlayProxy, takeStateFilter } from "./proxy.js";

const DESCRIBE = readFileSync(
  new URL("../../fixtures/host/describe-instances.xml", import.meta.url),
  "utf8",
);
const STOP = readFileSync(
  new URL("../../fixtures/host/stop-instances.xml", import.meta.url),
  "utf8",
);
const STATUS = readFileSync(
  new URL("../../fixtures/host/describe-instance-status.xml", import.meta.url),
  "utf8",
);

describe("takeStateFilter", () => {
  it("removes instance-state-name filters and renumbers the others", () => {
    const params = new URLSearchParams({
      Action: "DescribeInstances",
      "Filter.1.Name": "instance-state-name",
      "Filter.1.Value.1": "pending",
      "Filter.1.Value.2": "running",
      "Filter.2.Name": "tag:nebula:cluster",
      "Filter.2.Value.1": "c1",
    });
    const { params: rest, states } = takeStateFilter(params);
    expect([...(states ?? [])]).toEqual(["pending", "running"]);
    expect(Object.fromEntries(rest)).toEqual({
      Action: "DescribeInstances",
      "Filter.1.Name": "tag:nebula:cluster",
      "Filter.1.Value.1": "c1",
    });
  });

  it("keeps every other parameter and every other filter, in order", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.tuple(
            fc.constantFrom("tag-key", "instance-id", "instance-state-name"),
            fc.array(fc.string(), { maxLength: 3 }),
          ),
          {
            maxLength: 5,
          },
        ),
        (filters) => {
          const params = new URLSearchParams({ Action: "DescribeInstances", MaxResults: "5" });
          filters.forEach(([name, values], n) => {
            params.append(`Filter.${n + 1}.Name`, name);
            for (const [i, v] of values.entries())
              params.append(`Filter.${n + 1}.Value.${i + 1}`, v);
          });
          const { params: rest, states } = takeStateFilter(params);
          const kept = filters.filter(([name]) => name !== "instance-state-name");
          expect(rest.get("MaxResults")).toBe("5");
          kept.forEach(([name, values], n) => {
            expect(rest.get(`Filter.${n + 1}.Name`)).toBe(name);
            expect(rest.getAll(`Filter.${n + 1}.Value.1`)).toEqual(values.slice(0, 1));
          });
          expect(rest.get(`Filter.${kept.length + 1}.Name`)).toBeNull();
          const stateValues = filters
            .filter(([name]) => name === "instance-state-name")
            .flatMap(([, v]) => v);
          expect(states === undefined ? [] : [...states].sort()).toEqual(
            [...new Set(stateValues)].sort(),
          );
        },
      ),
    );
  });
});

describe("startOverlayProxy", () => {
  let upstream: Server;
  let proxy: OverlayProxy;
  const seenBodies: string[] = [];
  const changes: string[] = [];
  const [first, second] = listInstanceItems(DESCRIBE).map((i) => i.instanceId);

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      let body = "";
      req.on("data", (chunk: Buffer) => {
        body += chunk.toString();
      });
      req.on("end", () => {
        seenBodies.push(body);
        const action = new URLSearchParams(body).get("Action");
        res.writeHead(200, { "content-type": "text/xml" });
        res.end(
          action === "StopInstances"
            ? STOP
            : action === "DescribeInstances"
              ? DESCRIBE
              : action === "DescribeInstanceStatus"
                ? STATUS
                : "<Other/>",
        );
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const { port } = upstream.address() as AddressInfo;
    proxy = await startOverlayProxy(`http://127.0.0.1:${port}`, {
      observe: (item) => (item.instanceId === first ? { state: EC2_STATES.pending } : undefined),
      observeState: (_id, state) => (state === "stopped" ? EC2_STATES.stopping : undefined),
      stateChanged: (action, ids) => changes.push(`${action} ${ids.join(",")}`),
      userDataChange: (id) =>
        id === first ? `The instance '${id}' is not in the 'stopped' state.` : undefined,
      consoleOutput: (id) => (id === first ? Buffer.from("NEBULA-REPORT v1 abc\n") : undefined),
    });
  });

  afterAll(async () => {
    await proxy.close();
    await new Promise((resolve) => upstream.close(resolve));
  });

  const call = async (params: Record<string, string>) =>
    (
      await fetch(`${proxy.endpoint}/`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded; charset=utf-8" },
        body: new URLSearchParams({ Version: "2016-11-15", ...params }),
      })
    ).text();

  it("overlays DescribeInstances and applies a state filter after the overlay", async () => {
    const all = await call({ Action: "DescribeInstances" });
    expect(listInstanceItems(all).map((i) => i.stateName)).toEqual([
      "pending",
      "stopped",
      "running",
    ]);
    const pendingOnly = await call({
      Action: "DescribeInstances",
      "Filter.1.Name": "instance-state-name",
      "Filter.1.Value.1": "pending",
    });
    expect(listInstanceItems(pendingOnly).map((i) => i.instanceId)).toEqual([first]);
    expect(seenBodies.at(-1)).not.toContain("instance-state-name");
  });

  it("overlays DescribeInstanceStatus: the state the simulator shows, the rest as moto answered", async () => {
    const answer = await call({ Action: "DescribeInstanceStatus", IncludeAllInstances: "true" });
    expect(
      [...answer.matchAll(/<instanceState><code>(\d+)<\/code><name>([a-z-]+)</g)].map(
        (m) => `${m[1]} ${m[2]}`,
      ),
    ).toEqual(["16 running", "64 stopping", "48 terminated"]);
    expect(seenBodies.at(-1)).toContain("IncludeAllInstances=true");
  });

  it("tells the simulator about accepted stops and serves the guest's console", async () => {
    await call({ Action: "StopInstances", "InstanceId.1": second ?? "" });
    expect(changes).toEqual([`StopInstances ${second}`]);
    const console = await call({ Action: "GetConsoleOutput", InstanceId: first ?? "" });
    const output = /<output>([^<]*)<\/output>/.exec(console)?.[1] ?? "";
    expect(Buffer.from(output, "base64").toString()).toBe("NEBULA-REPORT v1 abc\n");
    expect(await call({ Action: "GetConsoleOutput", InstanceId: second ?? "" })).toBe("<Other/>");
  });

  it("refuses to change the user-data of an instance the simulator says is not stopped, as EC2 does, without asking moto", async () => {
    const modify = async (params: Record<string, string>) => {
      const before = seenBodies.length;
      const response = await fetch(`${proxy.endpoint}/`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded; charset=utf-8" },
        body: new URLSearchParams({
          Version: "2016-11-15",
          Action: "ModifyInstanceAttribute",
          ...params,
        }),
      });
      return {
        status: response.status,
        text: await response.text(),
        forwarded: seenBodies.length > before,
      };
    };
    const userData = Buffer.from("#!/bin/bash\n").toString("base64");
    // The SDK's form (UserData.Value) and the CLI's (Attribute=userData, Value).
    for (const form of [
      { "UserData.Value": userData },
      { Attribute: "userData", Value: userData },
    ]) {
      const refused = await modify({ InstanceId: first ?? "", ...form });
      expect(refused).toMatchObject({ status: 400, forwarded: false });
      expect(refused.text).toContain("<Code>IncorrectInstanceState</Code>");
      expect(refused.text).toContain(
        `<Message>The instance '${first}' is not in the 'stopped' state.</Message>`,
      );
      expect(await modify({ InstanceId: second ?? "", ...form })).toMatchObject({
        status: 200,
        forwarded: true,
      });
    }
    // The SDK's blob reaches moto encoded once more (moto decodes it and wants base64 again);
    // the CLI's string form, already the base64 EC2 keeps, goes as it is.
    const forwarded = seenBodies.filter((b) => b.includes("Action=ModifyInstanceAttribute"));
    expect(new URLSearchParams(forwarded[0]).get("UserData.Value")).toBe(
      Buffer.from(userData).toString("base64"),
    );
    expect(new URLSearchParams(forwarded[1]).get("Value")).toBe(userData);
    // Other attributes are moto's business.
    expect(
      await modify({ InstanceId: first ?? "", "InstanceType.Value": "m5.xlarge" }),
    ).toMatchObject({ status: 200, forwarded: true });
  });
});
