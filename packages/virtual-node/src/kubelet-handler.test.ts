import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { V1Pod, V1SubjectAccessReview, V1TokenReview } from "@kubernetes/client-node";
import { afterEach, describe, expect, it } from "vitest";
import { VirtualNodeError } from "./errors.js";
import type {
  ContainerLogSource,
  ContainerRunRef,
  LogLine,
  LogReadOptions,
  PodUsage,
  UsageSource,
} from "./kubelet-api.js";
import {
  apiServerClientCa,
  createKubeletHandler,
  type KubeletHandler,
  type KubeletHandlerOptions,
} from "./kubelet-handler.js";
import { reviewingApis } from "./testing/review-apis.js";

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
const apis = reviewingApis([running]);

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

describe("the SubjectAccessReview cache", () => {
  it("never shares a decision between users who differ only in their extra (a scoped token)", async () => {
    const asked: V1SubjectAccessReview[] = [];
    await start({
      authentication: {
        // "scoped" and "full" are one user, but "scoped"'s token carries a narrowing scope.
        createTokenReview: async ({ body }: { body: V1TokenReview }) => ({
          ...body,
          status: {
            authenticated: true,
            user: {
              username: "alice",
              groups: [],
              ...(body.spec.token === "scoped" ? { extra: { scopes: ["user:info"] } } : {}),
            },
          },
        }),
      },
      authorization: {
        createSubjectAccessReview: async ({ body }: { body: V1SubjectAccessReview }) => {
          asked.push(body);
          return { ...body, status: { allowed: body.spec.extra === undefined } };
        },
      },
    });
    expect((await get("/pods", "full")).status).toBe(200);
    expect((await get("/pods", "scoped")).status).toBe(403);
    // One review for the full user; the scoped one is asked about again (nodes/pods, then the
    // kubelet's fallback nodes/proxy), never answered from the full user's decision.
    expect(asked[0]?.spec.extra).toBeUndefined();
    expect(asked.length).toBeGreaterThan(1);
    for (const review of asked.slice(1))
      expect(review.spec.extra).toEqual({ scopes: ["user:info"] });
  });
});

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

/**
 * A run of `pages` pages of `perPage` lines of 100 bytes each (99 characters and the newline),
 * each page made only when its first line is asked for, as a paged CloudWatch read does; counts
 * the pages pulled and the iterations ended. `follow` yields the same, then waits for its abort.
 */
class PagedSource implements ContainerLogSource {
  pulled = 0;
  ended = 0;
  followsEnded = 0;
  options: Array<LogReadOptions & { readonly signal?: AbortSignal }> = [];
  constructor(
    readonly pages = 10_000,
    readonly perPage = 100,
  ) {}
  line(page: number, i: number): string {
    return `${page}:${i}`.padEnd(99, ".");
  }
  async *lines(
    _ref: ContainerRunRef,
    options: LogReadOptions & { readonly signal?: AbortSignal } = {},
  ): AsyncGenerator<LogLine> {
    this.options.push(options);
    try {
      for (let page = 0; page < this.pages; page++) {
        if (options.signal?.aborted) return;
        await new Promise((resolve) => setImmediate(resolve)); // a request
        this.pulled += 1;
        const lines = Array.from({ length: this.perPage }, (_, i) => ({
          timestamp: new Date(0),
          message: this.line(page, i),
        }));
        for (const line of lines) yield line;
      }
    } finally {
      this.ended += 1;
    }
  }
  async *follow(
    ref: ContainerRunRef,
    options: LogReadOptions & { readonly signal: AbortSignal },
  ): AsyncGenerator<LogLine> {
    try {
      yield* this.lines(ref, options);
      if (!options.signal.aborted) {
        await new Promise((resolve) => options.signal.addEventListener("abort", resolve));
      }
    } finally {
      this.followsEnded += 1;
    }
  }
}

/** A request whose response is left open: its status and headers, and how to end it. */
function open(
  path: string,
  token: string,
): Promise<{
  status: number;
  headers: Record<string, unknown>;
  body: Promise<string>;
  close(): void;
  pause(): void;
}> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port: (server?.address() as AddressInfo | undefined)?.port,
        path,
        headers: { authorization: `Bearer ${token}` },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        const body = new Promise<string>((done) => {
          res.on("end", () => done(Buffer.concat(chunks).toString("utf8")));
          res.on("close", () => done(Buffer.concat(chunks).toString("utf8")));
        });
        resolve({
          status: res.statusCode ?? 0,
          headers: { ...res.headers },
          body,
          close: () => req.destroy(),
          pause: () => res.pause(),
        });
      },
    );
    req.on("error", (error) => {
      if (!req.destroyed) reject(error);
    });
    req.end();
  });
}

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !condition(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!condition()) throw new Error(`timed out waiting for ${what}`);
}

/** Every token names its user, and every user may read logs. */
const anyone = {
  authorization: {
    createSubjectAccessReview: async ({
      body,
    }: {
      body: V1SubjectAccessReview;
    }): Promise<V1SubjectAccessReview> => ({ ...body, status: { allowed: true } }),
  },
};

describe("createKubeletHandler /containerLogs", () => {
  it("writes exactly limitBytes bytes, cut mid-line, and pulls one page of 10,000 for limitBytes=1024", async () => {
    const logs = new PagedSource();
    await start({ logs });
    const answer = await get("/containerLogs/shop/web/app?limitBytes=1024", "admin");
    expect(answer.status).toBe(200);
    expect(Buffer.byteLength(answer.body)).toBe(1024);
    const expected = Array.from({ length: 11 }, (_, i) => `${logs.line(0, i)}\n`).join("");
    expect(answer.body).toBe(expected.slice(0, 1024));
    expect(logs.pulled).toBe(1);
    expect(logs.ended).toBe(1);
    // With timestamps the prefix counts too; tailLines and since are the source's to apply.
    const stamped = await get(
      "/containerLogs/shop/web/app?limitBytes=40&timestamps=true&tailLines=10&sinceSeconds=60",
      "admin",
    );
    expect(stamped.body).toBe(`1970-01-01T00:00:00.000000000Z ${logs.line(0, 0)}`.slice(0, 40));
    expect(logs.options[1]).toMatchObject({ tailLines: 10, since: expect.any(Date) });
    expect(logs.options[1]?.signal).toBeInstanceOf(AbortSignal);
  });

  it("follows with limitBytes the same way: stops the source at the limit", async () => {
    const logs = new PagedSource();
    await start({ logs });
    const answer = await get("/containerLogs/shop/web/app?follow=true&limitBytes=250", "admin");
    expect(answer).toEqual({
      status: 200,
      body: `${logs.line(0, 0)}\n${logs.line(0, 1)}\n${logs.line(0, 2).slice(0, 50)}`,
    });
    expect(logs.pulled).toBe(1);
    await until(() => logs.ended === 1, "the follow to end");
  });

  it("reads no further than a paused client takes, and stops reading when the client goes away", async () => {
    const logs = new PagedSource(); // 1,000,000 lines, 100 MB
    await start({ logs });
    const answer = await open("/containerLogs/shop/web/app", "admin");
    answer.pause();
    expect(answer.status).toBe(200);
    // Until the socket's buffers are full and the handler waits for 'drain'.
    let stalled = -1;
    for (let i = 0; i < 50 && logs.pulled !== stalled; i++) {
      stalled = logs.pulled;
      await new Promise((r) => setTimeout(r, 150));
    }
    await new Promise((r) => setTimeout(r, 300));
    // Back-pressure: nothing is read while the client does not take what was written.
    expect(logs.pulled).toBe(stalled);
    expect(stalled).toBeLessThan(1_000);
    answer.close();
    await until(() => logs.ended === 1, "the read to end");
    expect(logs.pulled).toBe(stalled);
  });

  it("serves at most 32 log requests at once and 4 per user: one more is 429 with Retry-After", async () => {
    const logs = new PagedSource(0);
    await start({ logs, ...anyone, tokenReviewBurst: 100 });
    const follows = [];
    for (let user = 0; user < 8; user++) {
      for (let k = 0; k < 4; k++) {
        follows.push(await open("/containerLogs/shop/web/app?follow=true", `user-${user}`));
      }
    }
    expect(follows.map((f) => f.status)).toEqual(Array(32).fill(200));
    const full = await open("/containerLogs/shop/web/app?follow=true", "user-8");
    expect(full.status).toBe(429);
    expect(full.headers["retry-after"]).toBe("5");
    expect(await full.body).toContain("too many container log requests on this virtual node (32");
    // Ending one frees its slot; its user's fifth is refused while four are open.
    follows[0]?.close();
    await until(() => logs.followsEnded === 1, "the first follow to end");
    const mine = await open("/containerLogs/shop/web/app?follow=true", "user-1");
    expect(mine.status).toBe(429);
    expect(await mine.body).toContain('of user "user-1"');
    const other = await open("/containerLogs/shop/web/app?follow=true", "user-8");
    expect(other.status).toBe(200);
    kubelet?.close();
    await until(() => logs.followsEnded === 33, "every follow to end");
    // Reads count too, and a slot is given back when a read is done.
    await start({ logs: new PagedSource(1), maxLogStreams: 1 });
    expect((await get("/containerLogs/shop/web/app", "admin")).status).toBe(200);
    expect((await get("/containerLogs/shop/web/app", "admin")).status).toBe(200);
  });

  it("refuses invalid caps", () => {
    expect(() =>
      createKubeletHandler({
        ...apis,
        nodeName: "vn",
        pods: { list: () => [] },
        logs: undefined,
        usage: undefined,
        startTime: new Date(),
        logger: { warn: () => undefined },
        maxLogStreams: 0,
      }),
    ).toThrow(VirtualNodeError);
    expect(() =>
      createKubeletHandler({
        ...apis,
        nodeName: "vn",
        pods: { list: () => [] },
        logs: undefined,
        usage: undefined,
        startTime: new Date(),
        logger: { warn: () => undefined },
        tokenReviewsPerSecond: Number.NaN,
      }),
    ).toThrow(/tokenReviewsPerSecond/);
  });

  it("reviews at most tokenReviewBurst new tokens per client address: the next is 429, cached answers still serve", async () => {
    const reviews: string[] = [];
    await start({
      authentication: {
        createTokenReview: async ({ body }) => {
          reviews.push(body.spec.token ?? "");
          return {
            ...body,
            status: {
              authenticated: body.spec.token === "admin",
              ...(body.spec.token === "admin" ? { user: { username: "admin", groups: [] } } : {}),
            },
          };
        },
      },
    });
    expect((await get("/healthz", "admin")).status).toBe(200);
    for (let i = 0; i < 9; i++) expect((await get("/healthz", `forged-${i}`)).status).toBe(401);
    const flooded = await call("GET", "/healthz", "forged-9");
    expect(flooded.status).toBe(429);
    expect(Number(flooded.headers["retry-after"])).toBeGreaterThanOrEqual(1);
    expect(reviews).toHaveLength(10);
    // Known tokens cost nothing: the cache answers them.
    expect((await get("/healthz", "admin")).status).toBe(200);
    expect((await get("/healthz", "forged-0")).status).toBe(401);
    expect(reviews).toHaveLength(10);
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
    // An API server that does not answer is not an RBAC problem, and the message does not say so.
    const away = {
      readNamespacedConfigMap: async () => {
        throw new TypeError("fetch failed");
      },
    };
    const unreachable = (await apiServerClientCa(away).catch((e: unknown) => e)) as Error;
    expect(unreachable.message).toContain("got no answer from the API server (fetch failed)");
    expect(unreachable.message).not.toContain("Role");
    const missing = {
      readNamespacedConfigMap: async () => {
        throw Object.assign(new Error("not found"), { code: 404 });
      },
    };
    expect(
      ((await apiServerClientCa(missing).catch((e: unknown) => e)) as Error).message,
    ).toContain("found no such ConfigMap");
  });
});
