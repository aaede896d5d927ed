import { request } from "node:https";
import type { V1Pod } from "@kubernetes/client-node";
import { silentLogger } from "@nebula/kube";
import type { PodUsage, UsageSource } from "@nebula/virtual-node";
import { afterEach, describe, expect, it } from "vitest";
import { KubeletServer, type KubeletServerOptions } from "./kubelet-server.js";
import { selfSignedServingCert } from "./serving-cert.js";

const running: V1Pod = {
  metadata: { name: "web", namespace: "shop", uid: "u-1" },
  spec: { containers: [{ name: "app", image: "busybox" }] },
  status: {
    phase: "Running",
    containerStatuses: [
      {
        name: "app",
        image: "busybox",
        imageID: "",
        ready: true,
        restartCount: 0,
        state: { running: { startedAt: new Date("2026-12-01T04:00:00Z") } },
      },
    ],
  },
};

/** Counts reads; fails the reads it is told to. */
class CountingUsage implements UsageSource {
  calls = 0;
  failNext = false;
  async podUsage(): Promise<PodUsage> {
    this.calls++;
    if (this.failNext) {
      this.failNext = false;
      throw new Error("CloudWatch unavailable");
    }
    return new Map([
      [
        "u-1",
        new Map([
          [
            "app",
            {
              cpuCoreSeconds: 2,
              cpuCores: 0.5,
              memoryWorkingSetBytes: 1024,
              timestamp: new Date("2026-12-01T04:59:00Z"),
            },
          ],
        ]),
      ],
    ]);
  }
}

let server: KubeletServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function start(overrides: Partial<KubeletServerOptions> = {}): Promise<KubeletServer> {
  const serving = await selfSignedServingCert(["127.0.0.1"]);
  server = new KubeletServer({
    nodeName: "vn",
    port: 0,
    bindAddress: "127.0.0.1",
    ...serving,
    clientCa: undefined,
    pods: () => [running],
    logs: undefined,
    usage: undefined,
    // Tokens name their user; "admin" may do anything, anyone else nothing.
    authenticateToken: async (token) => ({ name: token, groups: [] }),
    authorize: async (user) => ({ allowed: user.name === "admin" }),
    startTime: new Date("2026-12-01T03:00:00Z"),
    logger: silentLogger(),
    ...overrides,
  });
  await server.listen();
  return server;
}

function get(path: string, token?: string): Promise<{ status: number; body: string }> {
  return call("GET", path, token).then(({ status, body }) => ({ status, body }));
}

function call(
  method: string,
  path: string,
  token?: string,
): Promise<{ status: number; body: string; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port: server?.port,
        path,
        method,
        rejectUnauthorized: false,
        headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
      },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => {
          body += c;
        });
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, body, headers: { ...res.headers } }),
        );
      },
    );
    req.on("error", reject);
    req.end();
  });
}

describe("KubeletServer", () => {
  it("refuses a request without credentials, and one its authorizer denies, in the kubelet's words", async () => {
    await start();
    expect(await get("/healthz")).toEqual({ status: 401, body: "Unauthorized" });
    expect(await get("/metrics/resource", "tenant")).toEqual({
      status: 403,
      body: "Forbidden (user=tenant, verb=get, resource=nodes, subresource(s)=[metrics])\n",
    });
    expect(await get("/healthz", "admin")).toEqual({ status: 200, body: "ok" });
    expect((await get("/exec/shop/web/app", "admin")).status).toBe(404);
  });

  it("reads usage once per cache period for any number of scrapes, and again after a failed read", async () => {
    const usage = new CountingUsage();
    await start({ usage, usageCacheMs: 60_000 });
    for (let i = 0; i < 4; i++) {
      const metrics = await get("/metrics/resource", "admin");
      expect(metrics.body).toContain(
        'container_cpu_usage_seconds_total{container="app",namespace="shop",pod="web"} 2 ',
      );
    }
    expect(JSON.parse((await get("/stats/summary", "admin")).body)).toMatchObject({
      pods: [{ containers: [{ name: "app", memory: { workingSetBytes: 1024 } }] }],
    });
    expect(usage.calls).toBe(1);

    await server?.close();
    const failing = new CountingUsage();
    failing.failNext = true;
    await start({ usage: failing, usageCacheMs: 60_000 });
    expect((await get("/metrics/resource", "admin")).body).toContain("resource_scrape_error 1");
    expect((await get("/metrics/resource", "admin")).body).toContain("resource_scrape_error 0");
    expect(failing.calls).toBe(2);
  });

  it("keeps an ended Pod's CPU time in the Node's counter, which metrics-server needs never to drop", async () => {
    const second: V1Pod = {
      ...running,
      metadata: { name: "job", namespace: "shop", uid: "u-2" },
    };
    let pods: V1Pod[] = [running, second];
    const sample = (cpuCoreSeconds: number) => ({
      cpuCoreSeconds,
      cpuCores: undefined,
      memoryWorkingSetBytes: 1024,
      timestamp: new Date("2026-12-01T04:59:00Z"),
    });
    const usage: UsageSource = {
      podUsage: async (query) =>
        new Map(query.map((q) => [q.uid, new Map([["app", sample(q.uid === "u-1" ? 2 : 30)]])])),
    };
    await start({ usage, usageCacheMs: 0, pods: () => pods });
    const nodeCounter = async () =>
      /^node_cpu_usage_seconds_total (\S+) /m.exec(
        (await get("/metrics/resource", "admin")).body,
      )?.[1];
    expect(await nodeCounter()).toBe("32");
    pods = [running];
    // The sum of the running containers is 2 now; the Node keeps the 30 s of the ended Pod.
    expect(await nodeCounter()).toBe("32");
    expect(
      JSON.parse((await get("/stats/summary", "admin")).body).node.cpu.usageCoreNanoSeconds,
    ).toBe(32e9);
  });

  it("says how to turn logs on when the provider keeps none", async () => {
    await start();
    const answer = await get("/containerLogs/shop/web/app", "admin");
    expect(answer.status).toBe(400);
    expect(answer.body).toContain("set provider.logs.group");
    expect(await get("/containerLogs/shop/nope/app", "admin")).toEqual({
      status: 404,
      body: 'pod "nope" does not exist',
    });
    expect(await get("/containerLogs/shop/web/app?tailLines=-1", "admin")).toEqual({
      status: 422,
      body: '{"message": "Invalid request."}',
    });
  });
  it("/pods is the kubelet's v1.PodList of every Pod bound to the Node, terminal ones included, whole", async () => {
    const finished: V1Pod = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "job", namespace: "shop", uid: "u-2" },
      spec: { nodeName: "vn", containers: [{ name: "app", image: "busybox" }] },
      status: { phase: "Succeeded" },
    };
    await start({ pods: () => [running, finished] });
    const answer = await call("GET", "/pods", "admin");
    expect(answer.status).toBe(200);
    expect(answer.headers["content-type"]).toBe("application/json");
    expect(answer.body.endsWith("}\n")).toBe(true);
    const list = JSON.parse(answer.body);
    expect(list).toMatchObject({ kind: "PodList", apiVersion: "v1", metadata: {} });
    expect(list.items).toHaveLength(2);
    expect(list.items[0]).toMatchObject({
      metadata: { name: "web", uid: "u-1" },
      spec: { containers: [{ name: "app", image: "busybox" }] },
      status: {
        phase: "Running",
        containerStatuses: [{ state: { running: { startedAt: "2026-12-01T04:00:00.000Z" } } }],
      },
    });
    expect(list.items[1]).toEqual({
      metadata: { name: "job", namespace: "shop", uid: "u-2" },
      spec: { nodeName: "vn", containers: [{ name: "app", image: "busybox" }] },
      status: { phase: "Succeeded" },
    });
    expect((await get("/pods/", "admin")).status).toBe(200);
    // GET only, as the kubelet's GETOnlyRestfulFilter: 405 with Allow.
    const post = await call("POST", "/pods", "admin");
    expect(post).toMatchObject({ status: 405, body: "Method Not Allowed" });
    expect(post.headers.allow).toBe("GET");
  });

  it("authorizes /pods as nodes/pods, then nodes/proxy, and refuses naming both", async () => {
    const asked: string[] = [];
    await start({
      authorize: async (user, attributes) => {
        asked.push(`${user.name}:${attributes.subresource}`);
        return {
          allowed:
            `${user.name}:${attributes.subresource}` !== "tenant:pods" && user.name !== "nobody",
        };
      },
    });
    expect((await get("/pods", "tenant")).status).toBe(200);
    expect(asked).toEqual(["tenant:pods", "tenant:proxy"]);
    expect(await get("/runningpods/", "nobody")).toEqual({
      status: 403,
      body: "Forbidden (user=nobody, verb=get, resource=nodes, subresource(s)=[pods proxy])\n",
    });
  });

  it("/runningpods/ judges the Pods read from the API at the moment of the request, not the cache", async () => {
    const deleting: V1Pod = {
      ...running,
      metadata: {
        name: "going",
        namespace: "shop",
        uid: "u-3",
        deletionTimestamp: new Date("2026-12-01T05:00:00Z"),
      },
    };
    const failed: V1Pod = {
      ...running,
      metadata: { name: "failed", namespace: "shop", uid: "u-4" },
      status: { ...running.status, phase: "Failed" },
    };
    // The cache still has "web"; the API has let it go already.
    let fresh: V1Pod[] = [deleting, failed];
    await start({
      pods: () => [running, deleting, failed],
      readPods: async () => fresh,
      instanceState: (uid) => (uid === "u-3" ? "stopped" : "running"),
    });
    const answer = await call("GET", "/runningpods/", "admin");
    expect(answer.status).toBe(200);
    expect(answer.headers["content-type"]).toBe("application/json");
    expect(JSON.parse(answer.body)).toEqual({
      kind: "PodList",
      apiVersion: "v1",
      metadata: {},
      items: null,
    });
    fresh = [running];
    expect(JSON.parse((await get("/runningpods/", "admin")).body).items).toEqual([
      {
        metadata: { name: "web", namespace: "shop", uid: "u-1" },
        spec: { containers: [{ name: "app", image: "busybox", resources: {} }] },
        status: {},
      },
    ]);
  });

  it("/runningpods/ answers 500 when the API cannot be read, and /runningpods 301 to the slash before authentication", async () => {
    await start({
      readPods: async () => {
        throw new Error("connection refused");
      },
    });
    expect(await get("/runningpods/", "admin")).toEqual({
      status: 500,
      body: "listing the Pods failed: connection refused",
    });
    const redirect = await call("GET", "/runningpods?x=1");
    expect(redirect.status).toBe(301);
    expect(redirect.headers.location).toBe("/runningpods/?x=1");
  });
});
