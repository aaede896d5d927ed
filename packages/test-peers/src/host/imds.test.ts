import { afterEach, describe, expect, it } from "vitest";
import { type ImdsIdentity, type ImdsServer, startImdsServer } from "./imds.js";

const IDENTITY: ImdsIdentity = {
  instanceId: "i-0123456789abcdef0",
  region: "eu-west-1",
  availabilityZone: "eu-west-1a",
  roleName: "nebula-host",
  instanceProfileArn: "arn:aws:iam::123456789012:instance-profile/nebula-host",
  imageId: "ami-12345678",
  instanceType: "m5.large",
  privateIp: "10.0.0.7",
  accountId: "123456789012",
  tokensRequired: true,
};

let server: ImdsServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function token(endpoint: string, ttl = "60"): Promise<Response> {
  return fetch(`${endpoint}latest/api/token`, {
    method: "PUT",
    headers: { "x-aws-ec2-metadata-token-ttl-seconds": ttl },
  });
}

describe("startImdsServer", () => {
  it("serves identity and role credentials to a holder of a token", async () => {
    server = await startImdsServer(IDENTITY);
    const t = await (await token(server.endpoint)).text();
    const get = async (path: string) =>
      fetch(`${server?.endpoint}${path.slice(1)}`, { headers: { "x-aws-ec2-metadata-token": t } });
    expect(await (await get("/latest/meta-data/instance-id")).text()).toBe(IDENTITY.instanceId);
    expect(await (await get("/latest/meta-data/placement/region")).text()).toBe("eu-west-1");
    expect(await (await get("/latest/meta-data/iam/security-credentials/")).text()).toBe(
      "nebula-host",
    );
    const creds = (await (
      await get("/latest/meta-data/iam/security-credentials/nebula-host")
    ).json()) as {
      AccessKeyId: string;
    };
    expect(creds).toMatchObject({ Code: "Success", Type: "AWS-HMAC" });
    expect(creds.AccessKeyId).toMatch(/^ASIA/);
    expect((await get("/latest/meta-data/iam/security-credentials/other")).status).toBe(404);
    const doc = await (await get("/latest/dynamic/instance-identity/document")).json();
    expect(doc).toMatchObject({ instanceId: IDENTITY.instanceId, region: "eu-west-1" });
  });

  it("serves the instance's tags as they are at each request when tags are in the metadata, and 404 when not", async () => {
    const tags = new Map([["nebula:pod-uid", "uid-1"]]);
    server = await startImdsServer({ ...IDENTITY, tags: async () => tags });
    const t = await (await token(server.endpoint)).text();
    const get = async (path: string) =>
      fetch(`${server?.endpoint}${path.slice(1)}`, { headers: { "x-aws-ec2-metadata-token": t } });
    expect(await (await get("/latest/meta-data/tags/instance")).text()).toBe("nebula:pod-uid");
    expect((await get("/latest/meta-data/tags/instance/nebula:stop-grace-seconds")).status).toBe(
      404,
    );
    tags.set("nebula:stop-grace-seconds", "5");
    expect(
      await (await get("/latest/meta-data/tags/instance/nebula:stop-grace-seconds")).text(),
    ).toBe("5");
    await server.close();
    server = await startImdsServer(IDENTITY);
    const t2 = await (await token(server.endpoint)).text();
    const plain = await fetch(`${server.endpoint}latest/meta-data/tags/instance`, {
      headers: { "x-aws-ec2-metadata-token": t2 },
    });
    expect(plain.status).toBe(404);
  });

  it("serves the user-data as it is at each request, bytes untouched, to token holders only, and 404 when there is none", async () => {
    let userData: Buffer | undefined = Buffer.from("#!/bin/bash\necho pool\n");
    let reads = 0;
    server = await startImdsServer({
      ...IDENTITY,
      userData: async () => {
        reads++;
        return userData;
      },
    });
    const t = await (await token(server.endpoint)).text();
    const get = () =>
      fetch(`${server?.endpoint}latest/user-data`, { headers: { "x-aws-ec2-metadata-token": t } });
    const first = await get();
    expect(first.status).toBe(200);
    expect(first.headers.get("content-type")).toBe("application/octet-stream");
    expect(await first.text()).toBe("#!/bin/bash\necho pool\n");
    // Changed while the instance was stopped (ModifyInstanceAttribute): served at once, as given,
    // gzip and all (IMDS does not gunzip; cloud-init does).
    userData = Buffer.from([0x1f, 0x8b, 0x08, 0x00, 0xff, 0x00, 0x0a]);
    expect(Buffer.from(await (await get()).arrayBuffer())).toEqual(userData);
    userData = undefined;
    expect((await get()).status).toBe(404);
    expect(reads).toBe(3);
    // Token rules as for every item: without a token (HttpTokens=required), 401, and not read.
    expect((await fetch(`${server.endpoint}latest/user-data`)).status).toBe(401);
    expect(reads).toBe(3);
    // No user-data at all.
    await server.close();
    server = await startImdsServer(IDENTITY);
    const t2 = await (await token(server.endpoint)).text();
    const none = await fetch(`${server.endpoint}latest/user-data`, {
      headers: { "x-aws-ec2-metadata-token": t2 },
    });
    expect(none.status).toBe(404);
  });

  it("serves a Spot interruption notice and a rebalance recommendation once set (404 before), listed under meta-data, to token holders only", async () => {
    server = await startImdsServer(IDENTITY);
    const t = await (await token(server.endpoint)).text();
    const get = async (path: string) =>
      fetch(`${server?.endpoint}latest/meta-data/${path}`, {
        headers: { "x-aws-ec2-metadata-token": t },
      });
    expect((await get("spot/instance-action")).status).toBe(404);
    expect((await get("spot/termination-time")).status).toBe(404);
    expect((await get("spot/")).status).toBe(404);
    expect((await get("events/recommendations/rebalance")).status).toBe(404);
    const before = (await (await get("")).text()).split("\n");
    expect(before).not.toContain("spot/");
    expect(before).not.toContain("events/");

    const notice = JSON.stringify({ action: "terminate", time: "2017-09-18T08:22:00Z" });
    server.setNotice("spot/instance-action", notice);
    server.setNotice("spot/termination-time", "2017-09-18T08:22:00Z");
    const action = await get("spot/instance-action");
    expect(action.status).toBe(200);
    expect(await action.json()).toEqual({ action: "terminate", time: "2017-09-18T08:22:00Z" });
    expect(await (await get("spot/termination-time")).text()).toBe("2017-09-18T08:22:00Z");
    expect(await (await get("spot/")).text()).toBe("instance-action\ntermination-time");
    expect((await get("events/recommendations/rebalance")).status).toBe(404);

    server.setNotice("events/recommendations/rebalance", '{"noticeTime":"2020-11-05T08:22:00Z"}');
    expect(await (await get("events/recommendations/rebalance")).json()).toEqual({
      noticeTime: "2020-11-05T08:22:00Z",
    });
    expect(await (await get("events/")).text()).toBe("recommendations/");
    expect(await (await get("events/recommendations/")).text()).toBe("rebalance");
    const listed = (await (await get("")).text()).split("\n");
    expect(listed).toContain("spot/");
    expect(listed).toContain("events/");
    expect(listed).toEqual([...listed].sort());
    // Token-checked like every item.
    expect((await fetch(`${server.endpoint}latest/meta-data/spot/instance-action`)).status).toBe(
      401,
    );

    server.setNotice("spot/instance-action", undefined);
    server.setNotice("spot/termination-time", undefined);
    expect((await get("spot/instance-action")).status).toBe(404);
    expect((await (await get("")).text()).split("\n")).not.toContain("spot/");
  });

  it("serves instance-life-cycle: on-demand by default, spot for a Spot instance, listed under meta-data", async () => {
    const lifeCycle = async (identity: ImdsIdentity) => {
      server = await startImdsServer(identity);
      const t = await (await token(server.endpoint)).text();
      const get = (path: string) =>
        fetch(`${server?.endpoint}latest/meta-data/${path}`, {
          headers: { "x-aws-ec2-metadata-token": t },
        });
      const answer = await get("instance-life-cycle");
      const listed = (await (await get("")).text()).split("\n");
      await server.close();
      server = undefined;
      return { status: answer.status, body: await answer.text(), listed };
    };
    const plain = await lifeCycle(IDENTITY);
    expect(plain).toMatchObject({ status: 200, body: "on-demand" });
    expect(plain.listed).toContain("instance-life-cycle");
    expect(plain.listed).toEqual([...plain.listed].sort());
    expect(await lifeCycle({ ...IDENTITY, lifeCycle: "spot" })).toMatchObject({
      status: 200,
      body: "spot",
    });
    expect(await lifeCycle({ ...IDENTITY, lifeCycle: "on-demand" })).toMatchObject({
      body: "on-demand",
    });
    // Token-checked like every item.
    server = await startImdsServer(IDENTITY);
    expect((await fetch(`${server.endpoint}latest/meta-data/instance-life-cycle`)).status).toBe(
      401,
    );
  });

  it("enforces IMDSv2: no token, a bad token, an expired token or a bad TTL are refused", async () => {
    let clock = 1_000_000;
    server = await startImdsServer(IDENTITY, () => clock);
    const url = `${server.endpoint}latest/meta-data/instance-id`;
    expect((await fetch(url)).status).toBe(401);
    expect((await fetch(url, { headers: { "x-aws-ec2-metadata-token": "nope" } })).status).toBe(
      401,
    );
    expect((await token(server.endpoint, "0")).status).toBe(400);
    expect((await token(server.endpoint, "21601")).status).toBe(400);
    const forwarded = await fetch(`${server.endpoint}latest/api/token`, {
      method: "PUT",
      headers: { "x-aws-ec2-metadata-token-ttl-seconds": "60", "x-forwarded-for": "1.2.3.4" },
    });
    expect(forwarded.status).toBe(403);
    const t = await (await token(server.endpoint, "1")).text();
    expect((await fetch(url, { headers: { "x-aws-ec2-metadata-token": t } })).status).toBe(200);
    clock += 1001;
    expect((await fetch(url, { headers: { "x-aws-ec2-metadata-token": t } })).status).toBe(401);
  });

  it("ends its endpoint with a slash and accepts paths appended with or without one", async () => {
    server = await startImdsServer(IDENTITY);
    expect(server.endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
    const t = await (await token(server.endpoint)).text();
    const headers = { "x-aws-ec2-metadata-token": t };
    for (const url of [
      `${server.endpoint}latest/meta-data/instance-id`,
      `${server.endpoint}/latest/meta-data/instance-id`,
    ]) {
      expect(await (await fetch(url, { headers })).text()).toBe(IDENTITY.instanceId);
    }
  });

  it("answers 404 for credentials when the instance has no profile, and allows IMDSv1 when optional", async () => {
    server = await startImdsServer({ ...IDENTITY, roleName: undefined, tokensRequired: false });
    expect(
      (await fetch(`${server.endpoint}latest/meta-data/iam/security-credentials/`)).status,
    ).toBe(404);
    expect(await (await fetch(`${server.endpoint}/latest/meta-data/instance-id`)).text()).toBe(
      IDENTITY.instanceId,
    );
  });
});
