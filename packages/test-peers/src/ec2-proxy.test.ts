import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ec2ErrorXml,
  notFoundMessage,
  referencedInstanceIds,
  requestInstanceIds,
  runInstancesFingerprint,
  startEc2Proxy,
} from "./ec2-proxy.js";
import { listInstanceItems } from "./host/overlay.js";

describe("runInstancesFingerprint", () => {
  it("ignores the token, the action, the version and the order of parameters", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.tuple(fc.stringMatching(/^[A-Z][A-Za-z.0-9]{0,12}$/), fc.string()), {
          selector: ([key]) => key,
          maxLength: 8,
        }),
        fc.string(),
        fc.string(),
        (pairs, tokenA, tokenB) => {
          const plain = pairs.filter(([k]) => !["Action", "Version", "ClientToken"].includes(k));
          const a = new URLSearchParams([
            ["Action", "RunInstances"],
            ...plain,
            ["ClientToken", tokenA],
          ]);
          const b = new URLSearchParams([["ClientToken", tokenB], ...[...plain].reverse()]);
          expect(runInstancesFingerprint(a)).toBe(runInstancesFingerprint(b));
        },
      ),
    );
  });

  it("tells different parameters apart", () => {
    const base = new URLSearchParams({ ImageId: "ami-1", InstanceType: "t3.micro" });
    const other = new URLSearchParams({ ImageId: "ami-1", InstanceType: "t3.large" });
    expect(runInstancesFingerprint(base)).not.toBe(runInstancesFingerprint(other));
  });
});

describe("requestInstanceIds", () => {
  it("returns the IDs in their numeric order", () => {
    const params = new URLSearchParams();
    for (let n = 12; n >= 1; n--) params.append(`InstanceId.${n}`, `i-${n}`);
    params.append("Filter.1.Name", "instance-id");
    expect(requestInstanceIds(params)).toEqual(Array.from({ length: 12 }, (_, i) => `i-${i + 1}`));
  });
});

describe("referencedInstanceIds", () => {
  it("finds instance IDs in InstanceId.N, InstanceId and the i- resources of tag calls", () => {
    const params = new URLSearchParams({
      "InstanceId.1": "i-1",
      InstanceId: "i-2",
      "ResourceId.1": "i-3",
      "ResourceId.2": "vol-4",
    });
    expect(referencedInstanceIds(params)).toEqual(["i-1", "i-2", "i-3"]);
  });
});

describe("EC2 error bodies", () => {
  it("escapes the message and names one or several IDs as EC2 does", () => {
    expect(ec2ErrorXml("X", "a<b&c", "r1")).toContain(
      "<Code>X</Code><Message>a&lt;b&amp;c</Message></Error></Errors><RequestID>r1</RequestID>",
    );
    expect(notFoundMessage(["i-1"])).toBe("The instance ID 'i-1' does not exist");
    expect(notFoundMessage(["i-1", "i-2"])).toBe("The instance IDs 'i-1, i-2' do not exist");
  });
});

// moto cannot hold an instance in shutting-down (it terminates at once), the instance-host
// simulator can: this stands in for it with a captured moto answer whose state says so.
describe("refuseStops with an upstream that shows shutting-down", () => {
  const describeXml = readFileSync(
    new URL("../fixtures/host/describe-instances.xml", import.meta.url),
    "utf8",
  ).replace(
    /<instanceState><code>16<\/code><name>running<\/name><\/instanceState>/,
    "<instanceState><code>32</code><name>shutting-down</name></instanceState>",
  );
  const [shuttingDown] = listInstanceItems(describeXml).filter(
    (i) => i.stateName === "shutting-down",
  );
  let upstream: Server;
  let endpoint = "";
  const actions: string[] = [];

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      let body = "";
      req.on("data", (chunk: Buffer) => {
        body += chunk.toString();
      });
      req.on("end", () => {
        const action = new URLSearchParams(body).get("Action") ?? "";
        actions.push(action);
        res.writeHead(200, { "content-type": "text/xml" });
        res.end(action === "DescribeInstances" ? describeXml : "<StopInstancesResponse/>");
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    endpoint = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise((resolve) => upstream.close(resolve)));

  it("answers IncorrectInstanceState and never forwards the stop", async () => {
    expect(shuttingDown).toBeDefined();
    const proxy = await startEc2Proxy({ upstream: endpoint, refuseStops: true });
    try {
      const response = await fetch(`${proxy.endpoint}/`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          Action: "StopInstances",
          Version: "2016-11-15",
          "InstanceId.1": shuttingDown?.instanceId ?? "",
        }),
      });
      expect(response.status).toBe(400);
      expect(await response.text()).toContain("<Code>IncorrectInstanceState</Code>");
      expect(actions).toEqual(["DescribeInstances"]);
    } finally {
      await proxy.close();
    }
  });

  it("rejects options that do not parse", async () => {
    await expect(startEc2Proxy({ upstream: "not a url" })).rejects.toMatchObject({
      code: "InvalidOptions",
    });
    await expect(
      startEc2Proxy({ upstream: endpoint, consistencyWindowMs: -1 }),
    ).rejects.toMatchObject({ code: "InvalidOptions" });
  });
});
