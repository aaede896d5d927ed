import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { V1Pod, V1SubjectAccessReview, V1TokenReview } from "@kubernetes/client-node";
import { afterEach, describe, expect, it } from "vitest";
import { VirtualNodeError } from "./errors.js";
import type { PodUsage, UsageSource } from "./kubelet-api.js";
import {
  apiServerClientCa,
  createKubeletHandler,
  type KubeletHandler,
  type KubeletHandlerOptions,
} from "./kubelet-handler.js";

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

let server: Server | undefined;
let kubelet: KubeletHandler | undefined;
afterEach(async () => {
  kubelet?.close();
  await new Promise<void>((resolve) => {
    if (server === undefined) return resolve();
    server.close(() => resolve());
    server.closeAllConnections();
  });
  server = undefined;
});

/** The API server as the handler sees it: every token names its user; "admin" may do anything. */
const apis = {
  core: {
    listPodForAllNamespaces: async () => ({ items: [running] }),
  },
  authentication: {
    createTokenReview: async ({ body }: { body: V1TokenReview }): Promise<V1TokenReview> => ({
      ...body,
      status: { authenticated: true, user: { username: body.spec.token ?? "", groups: [] } },
    }),
  },
  authorization: {
    createSubjectAccessReview: async ({
      body,
    }: {
      body: V1SubjectAccessReview;
    }): Promise<V1SubjectAccessReview> => ({
      ...body,
      status: { allowed: body.spec.user === "admin" },
    }),
  },
} satisfies Pick<KubeletHandlerOptions, "core" | "authentication" | "authorization">;

/** Serves the handler over plain HTTP (the listener, its TLS included, is the caller's). */
async function start(overrides: Partial<KubeletHandlerOptions> = {}): Promise<void> {
  await new Promise<void>((resolve) => {
    if (server === undefined) return resolve();
    server.close(() => resolve());
    server.closeAllConnections();
  });
  kubelet = createKubeletHandler({
    nodeName: "vn",
    pods: { list: () => [running] },
    logs: undefined,
    usage: undefined,
    ...apis,
    startTime: new Date("2026-12-01T03:00:00Z"),
    logger: { warn: () => undefined },
    ...overrides,
  });
  const listening = createServer(kubelet.handle);
  server = listening;
  await new Promise<void>((resolve) => listening.listen(0, "127.0.0.1", resolve));
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
        port: (server?.address() as AddressInfo | undefined)?.port,
        path,
        method,
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

describe("createKubeletHandler", () => {
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
    await start({ usage, usageCacheMs: 0, pods: { list: () => pods } });
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
    await start({ pods: { list: () => [running, finished] } });
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
      authorization: {
        createSubjectAccessReview: async ({ body }) => {
          const asking = `${body.spec.user}:${body.spec.resourceAttributes?.subresource}`;
          asked.push(asking);
          return {
            ...body,
            status: { allowed: asking !== "tenant:pods" && body.spec.user !== "nobody" },
          };
        },
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
    const selectors: (string | undefined)[] = [];
    await start({
      pods: { list: () => [running, deleting, failed] },
      core: {
        listPodForAllNamespaces: async (request) => {
          selectors.push(request?.fieldSelector);
          return { items: fresh };
        },
      },
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
    expect(selectors).toEqual(["spec.nodeName=vn"]);
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
      core: {
        listPodForAllNamespaces: async () => {
          throw new Error("connection refused");
        },
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

  it("reviews a token once, refuses one the API server does not authenticate, and honours a SubjectAccessReview's denied", async () => {
    const reviews: string[] = [];
    await start({
      authentication: {
        createTokenReview: async ({ body }) => {
          reviews.push(body.spec.token ?? "");
          return {
            ...body,
            status:
              body.spec.token === "forged"
                ? { authenticated: false }
                : { authenticated: true, user: { username: body.spec.token ?? "", groups: ["g"] } },
          };
        },
      },
      authorization: {
        createSubjectAccessReview: async ({ body }) => ({
          ...body,
          status: { allowed: true, denied: body.spec.user === "denied" },
        }),
      },
    });
    expect(await get("/healthz", "forged")).toEqual({ status: 401, body: "Unauthorized" });
    expect(await get("/healthz", "admin")).toEqual({ status: 200, body: "ok" });
    expect(await get("/healthz", "admin")).toEqual({ status: 200, body: "ok" });
    expect((await get("/healthz", "denied")).status).toBe(403);
    expect(reviews).toEqual(["forged", "admin", "denied"]);
  });

  it("answers 500 when a request fails before its answer", async () => {
    await start({
      authentication: {
        createTokenReview: async () => {
          throw new Error("API server unavailable");
        },
      },
    });
    expect(await get("/healthz", "admin")).toEqual({ status: 500, body: "Internal Server Error" });
  });
});

describe("apiServerClientCa", () => {
  it("reads the client CA kube-apiserver publishes, and says what is missing when it cannot", async () => {
    const published = {
      readNamespacedConfigMap: async () => ({ data: { "client-ca-file": "PEM" } }),
    };
    expect(await apiServerClientCa(published)).toBe("PEM");
    const none = { readNamespacedConfigMap: async () => ({ data: {} }) };
    await expect(apiServerClientCa(none)).rejects.toMatchObject({
      name: "VirtualNodeError",
      code: "ClientCaMissing",
    });
    const forbidden = {
      readNamespacedConfigMap: async () => {
        throw Object.assign(new Error("forbidden"), { code: 403 });
      },
    };
    const error = await apiServerClientCa(forbidden).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(VirtualNodeError);
    expect(error).toMatchObject({ code: "RequestFailed", cause: { code: 403 } });
    expect((error as Error).message).toContain("extension-apiserver-authentication-reader");
  });
});
