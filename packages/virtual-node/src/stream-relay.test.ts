import { createHash } from "node:crypto";
import { once } from "node:events";
import { createServer, request, type Server } from "node:http";
import { type AddressInfo, connect, createServer as createTcpServer, type Socket } from "node:net";
import type { V1Pod } from "@kubernetes/client-node";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import {
  createKubeletHandler,
  type KubeletHandler,
  type KubeletHandlerOptions,
} from "./kubelet-handler.js";
import {
  createStreamRelay,
  execCommand,
  fingerprintMatches,
  type HostAgentLocation,
  hostHeader,
  rawHttpResponse,
  SessionSlots,
  upstreamRequestHead,
} from "./stream-relay.js";
import { type FakeHostAgent, selfSigned, startFakeHostAgent } from "./testing/host-agent.js";
import { reviewingApis } from "./testing/review-apis.js";

describe("fingerprintMatches", () => {
  it("matches a certificate's own SHA-256 only, in either case, and nothing malformed", () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 1, maxLength: 64 }),
        fc.uint8Array({ maxLength: 64 }),
        (a, b) => {
          const der = Buffer.from(a);
          const hex = createHash("sha256").update(der).digest("hex");
          expect(fingerprintMatches(der, hex)).toBe(true);
          expect(fingerprintMatches(der, hex.toUpperCase())).toBe(true);
          expect(fingerprintMatches(Buffer.from(b), hex)).toBe(Buffer.from(b).equals(der));
        },
      ),
    );
    const der = Buffer.from("cert");
    const hex = createHash("sha256").update(der).digest("hex");
    expect(fingerprintMatches(der, hex.slice(2))).toBe(false);
    expect(fingerprintMatches(der, `${hex}00`)).toBe(false);
    expect(fingerprintMatches(der, hex.replace(/../g, "$&:").slice(0, -1))).toBe(false);
    expect(fingerprintMatches(der, `${hex.slice(0, 62)}zz`)).toBe(false);
    expect(fingerprintMatches(undefined, hex)).toBe(false);
    expect(fingerprintMatches(Buffer.alloc(0), hex)).toBe(false);
  });
});

describe("upstreamRequestHead", () => {
  it("keeps the request line and the headers as they came, Host the agent's, Authorization left out", () => {
    const head = upstreamRequestHead(
      "POST",
      "/exec/shop/web/app?command=sh&command=-c&stdin=1",
      [
        "Host",
        "10.0.0.1:10250",
        "X-Stream-Protocol-Version",
        "v5.channel.k8s.io",
        "X-Stream-Protocol-Version",
        "v4.channel.k8s.io",
        "Authorization",
        "Bearer secret",
        "Connection",
        "Upgrade",
        "Upgrade",
        "SPDY/3.1",
      ],
      hostHeader("10.1.2.3", 10350),
    );
    expect(head).toBe(
      "POST /exec/shop/web/app?command=sh&command=-c&stdin=1 HTTP/1.1\r\n" +
        "Host: 10.1.2.3:10350\r\n" +
        "X-Stream-Protocol-Version: v5.channel.k8s.io\r\n" +
        "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n" +
        "Connection: Upgrade\r\n" +
        "Upgrade: SPDY/3.1\r\n\r\n",
    );
    expect(upstreamRequestHead("GET", "/portForward/a/b", ["upgrade", "websocket"], "h:1")).toBe(
      "GET /portForward/a/b HTTP/1.1\r\nHost: h:1\r\nupgrade: websocket\r\n\r\n",
    );
    expect(hostHeader("fd00::1", 10350)).toBe("[fd00::1]:10350");
    expect(hostHeader("agent.internal", 10350)).toBe("agent.internal:10350");
  });
});

describe("rawHttpResponse", () => {
  it("is a whole response: its length counted in bytes, a newline ended body, the connection closing", () => {
    const response = rawHttpResponse(502, "héllo", { "Retry-After": "5" });
    expect(response).toBe(
      "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 7\r\nRetry-After: 5\r\nConnection: close\r\n\r\nhéllo\n",
    );
  });
});

describe("execCommand", () => {
  it("is the command query parameters in order", () => {
    expect(
      execCommand(new URLSearchParams("command=sh&stdin=1&command=-c&command=echo%20hi")),
    ).toEqual(["sh", "-c", "echo hi"]);
    expect(execCommand(new URLSearchParams(""))).toEqual([]);
  });
});

describe("SessionSlots", () => {
  it("holds at most max sessions and maxPerPod per Pod; a release, once, frees its slot", () => {
    const slots = new SessionSlots(3, 2);
    const a = { namespace: "n", name: "a", uid: "ua" };
    const b = { namespace: "n", name: "b", uid: "ub" };
    const a1 = slots.acquire(a);
    const a2 = slots.acquire(a);
    expect(typeof a1).toBe("function");
    expect(typeof a2).toBe("function");
    expect(slots.acquire(a)).toEqual({
      refused: expect.stringContaining('to pod "n/a" (2 at once)'),
    });
    const b1 = slots.acquire(b);
    expect(typeof b1).toBe("function");
    expect(slots.acquire(b)).toEqual({
      refused: expect.stringContaining("on this virtual node (3 at once)"),
    });
    if (typeof a1 === "function") {
      a1();
      a1();
    }
    expect(slots.open).toBe(2);
    expect(typeof slots.acquire(a)).toBe("function");
    expect(slots.acquire(b)).toMatchObject({ refused: expect.any(String) });
  });

  it("never counts below zero nor above its caps, whatever the order of acquires and releases", () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 3 })), { maxLength: 60 }),
        (ops) => {
          const slots = new SessionSlots(5, 2);
          const held: Array<{ pod: number; release: () => void }> = [];
          for (const [take, pod] of ops) {
            if (take) {
              const got = slots.acquire({ namespace: "n", name: `p${pod}`, uid: `u${pod}` });
              if (typeof got === "function") held.push({ pod, release: got });
            } else {
              held.shift()?.release();
            }
            expect(slots.open).toBe(held.length);
            expect(slots.open).toBeLessThanOrEqual(5);
            for (let p = 0; p < 4; p++)
              expect(held.filter((h) => h.pod === p).length).toBeLessThanOrEqual(2);
          }
        },
      ),
    );
  });
});

const web: V1Pod = {
  metadata: { name: "web", namespace: "shop", uid: "u-1" },
  spec: { containers: [{ name: "app", image: "busybox" }] },
};

/** The API server as the handler sees it: every token names its user; "admin" may do anything. */
const apis = reviewingApis([web]);

interface Line {
  level: string;
  msg: string;
  fields: Record<string, unknown>;
}

let server: Server | undefined;
let kubelet: KubeletHandler | undefined;
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  kubelet?.close();
  kubelet = undefined;
  for (const cleanup of cleanups.splice(0)) await cleanup();
  await new Promise<void>((resolve) => {
    if (server === undefined) return resolve();
    server.close(() => resolve());
    server.closeAllConnections();
  });
  server = undefined;
});

const client = await selfSigned("vnode-client");

/** A stand-in agent that pins the vnode's client certificate, stopped after the test. */
async function agent(answer: "101" | "close" = "101"): Promise<FakeHostAgent> {
  const started = await startFakeHostAgent(client.fingerprint, answer);
  cleanups.push(() => started.close());
  return started;
}

/** The handler over plain HTTP (TLS is the listener's), with its upgrade listener when agents are given. */
async function start(
  overrides: Partial<KubeletHandlerOptions> & {
    locate?: (pod: { uid: string }) => Promise<HostAgentLocation>;
  },
  pods: V1Pod[] = [web],
): Promise<{ port: number; lines: Line[] }> {
  const lines: Line[] = [];
  const at = (level: string) => (fields: Record<string, unknown>, msg: string) => {
    lines.push({ level, msg, fields });
  };
  const { locate, ...rest } = overrides;
  kubelet = createKubeletHandler({
    nodeName: "vn",
    pods: { list: () => pods },
    logs: undefined,
    usage: undefined,
    ...apis,
    startTime: new Date(),
    logger: { warn: at("warn"), info: at("info") },
    ...(locate === undefined
      ? {}
      : { agents: { locate: { locate }, clientCert: client.cert, clientKey: client.key } }),
    ...rest,
  });
  const listening = createServer(kubelet.handle);
  if (locate !== undefined) listening.on("upgrade", kubelet.upgrade);
  server = listening;
  listening.listen(0, "127.0.0.1");
  await once(listening, "listening");
  return { port: (listening.address() as AddressInfo).port, lines };
}

const at =
  (a: FakeHostAgent): (() => Promise<HostAgentLocation>) =>
  async () => ({
    kind: "found",
    address: "127.0.0.1",
    port: a.port,
    fingerprint: a.fingerprint,
  });

/** A raw connection that sent an upgrade request: what it reads, and when it is closed. */
async function upgrade(
  port: number,
  path: string,
  options: { token?: string; method?: string; extra?: string } = {},
): Promise<{ socket: Socket; read: () => string; closed: Promise<void> }> {
  const socket = connect(port, "127.0.0.1");
  await once(socket, "connect");
  let text = "";
  socket.setEncoding("latin1");
  socket.on("data", (chunk: string) => {
    text += chunk;
  });
  socket.on("error", () => undefined);
  const closed = once(socket, "close").then(() => undefined);
  socket.write(
    `${options.method ?? "POST"} ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n` +
      (options.token === undefined ? "" : `Authorization: Bearer ${options.token}\r\n`) +
      "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n" +
      (options.extra ?? ""),
  );
  return { socket, read: () => text, closed };
}

async function until<T>(what: string, probe: () => T | undefined, ms = 5_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function get(
  port: number,
  path: string,
  token?: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port,
        path,
        method: "POST",
        headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
      },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => {
          body += c;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on("error", reject);
    req.end();
  });
}

const EXEC = "/exec/shop/web/app?command=cat&command=-n&input=1&output=1";
const OK = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n";

describe("the stream relay", () => {
  it("relays an allowed upgrade to the Pod's agent: the request as it came (Host the agent's), its 101 byte for byte, then bytes both ways; audited", async () => {
    const a = await agent();
    const { port, lines } = await start({ locate: at(a) });
    const c = await upgrade(port, EXEC, { token: "admin", extra: "early" });
    await until("the 101 and the early bytes echoed", () => c.read() === `${OK}early`);
    c.socket.write("more bytes");
    await until("the echo", () => c.read().endsWith("more bytes"));
    expect(a.heads).toEqual([
      `POST ${EXEC} HTTP/1.1\r\nHost: 127.0.0.1:${a.port}\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1`,
    ]);
    const start_ = lines.find((l) => l.msg === "stream session started");
    expect(start_?.fields).toMatchObject({
      kind: "exec",
      namespace: "shop",
      pod: "web",
      uid: "u-1",
      container: "app",
      command: ["cat", "-n"],
      user: "admin",
      client: "127.0.0.1",
    });
    c.socket.end();
    await c.closed;
    const end = await until("the end line", () =>
      lines.find((l) => l.msg === "stream session ended"),
    );
    expect(end.fields).toMatchObject({
      session: start_?.fields.session,
      bytesToAgent: "early".length + "more bytes".length,
      bytesFromAgent: OK.length + "early".length + "more bytes".length,
      agentStatus: 101,
    });
    expect(end.fields.durationMs).toBeTypeOf("number");
    await until("the agent's socket closed", () => a.open.size === 0);
  });

  it("relays the path with the Pod's UID, attach and portForward alike", async () => {
    const a = await agent();
    const { port } = await start({ locate: at(a) });
    for (const path of [
      "/exec/shop/web/u-1/app?command=ls",
      "/attach/shop/web/app",
      "/portForward/shop/web/u-1",
    ]) {
      const c = await upgrade(port, path, { token: "admin", method: "GET" });
      await until(path, () => c.read() === OK);
      c.socket.destroy();
    }
    expect(a.heads.map((h) => h.split("\r\n")[0])).toEqual([
      "GET /exec/shop/web/u-1/app?command=ls HTTP/1.1",
      "GET /attach/shop/web/app HTTP/1.1",
      "GET /portForward/shop/web/u-1 HTTP/1.1",
    ]);
  });

  it("sends nothing to an agent whose certificate is not the pinned one, and answers 502 saying so", async () => {
    const a = await agent();
    const { port, lines } = await start({
      locate: async () => ({
        kind: "found",
        address: "127.0.0.1",
        port: a.port,
        fingerprint: "ab".repeat(32),
      }),
    });
    const c = await upgrade(port, EXEC, { token: "admin", extra: "secret input" });
    await c.closed;
    expect(c.read()).toMatch(/^HTTP\/1\.1 502 Bad Gateway\r\n/);
    expect(c.read()).toContain(
      "SHA-256 fingerprint is not the one pinned for it; nothing was sent",
    );
    expect(Buffer.concat(a.received).length).toBe(0);
    expect(lines.some((l) => l.msg === "stream session started")).toBe(false);
    await until("the agent's socket closed", () => a.open.size === 0);
  });

  it("answers 502 at once when nothing listens at the agent's address, naming the port to open", async () => {
    const probe = createTcpServer().listen(0, "127.0.0.1");
    await once(probe, "listening");
    const closedPort = (probe.address() as AddressInfo).port;
    await new Promise((r) => probe.close(r));
    const { port } = await start({
      locate: async () => ({
        kind: "found",
        address: "127.0.0.1",
        port: closedPort,
        fingerprint: "ab".repeat(32),
      }),
    });
    const began = Date.now();
    const c = await upgrade(port, EXEC, { token: "admin" });
    await c.closed;
    expect(Date.now() - began).toBeLessThan(5_000);
    expect(c.read()).toMatch(/^HTTP\/1\.1 502 /);
    expect(c.read()).toContain(`security group lets the virtual node reach port ${closedPort}`);
  });

  it("gives up on an agent that does not complete TLS within the deadline: 502", async () => {
    // Accepts TCP, never speaks.
    const held: Socket[] = [];
    const silent = createTcpServer((s) => held.push(s)).listen(0, "127.0.0.1");
    await once(silent, "listening");
    cleanups.push(async () => {
      for (const s of held) s.destroy();
      await new Promise((r) => silent.close(r));
    });
    const relay = createStreamRelay({
      agents: {
        locate: {
          locate: async () => ({
            kind: "found",
            address: "127.0.0.1",
            port: (silent.address() as AddressInfo).port,
            fingerprint: "ab".repeat(32),
          }),
        },
        clientCert: client.cert,
        clientKey: client.key,
      },
      pods: { list: () => [web] },
      logger: { info: () => undefined, warn: () => undefined },
      connectTimeoutMs: 300,
    });
    const began = Date.now();
    const opened = await relay.open(
      {
        route: { kind: "exec", namespace: "shop", pod: "web", uid: undefined, container: "app" },
        uid: "u-1",
        user: "admin",
      },
      "127.0.0.1",
    );
    expect(Date.now() - began).toBeGreaterThanOrEqual(290);
    expect(opened).toMatchObject({
      ok: false,
      status: 502,
      message: expect.stringContaining("did not answer within 0.3 s"),
    });
    expect(relay.sessions).toBe(0);
  });

  it("answers 429 beyond the sessions per Pod, with Retry-After, and takes one again once a session ends", async () => {
    const a = await agent();
    const { port } = await start({ locate: at(a), maxStreamSessionsPerPod: 2 });
    const first = await upgrade(port, EXEC, { token: "admin" });
    const second = await upgrade(port, EXEC, { token: "admin" });
    await until("two sessions", () => first.read() === OK && second.read() === OK);
    const third = await upgrade(port, EXEC, { token: "admin" });
    await third.closed;
    expect(third.read()).toMatch(/^HTTP\/1\.1 429 Too Many Requests\r\n/);
    expect(third.read().toLowerCase()).toContain("retry-after: 10");
    expect(third.read()).toContain(
      'too many streaming sessions (exec, attach, port-forward) to pod "shop/web" (2 at once)',
    );
    first.socket.destroy();
    await until("the agent's side closed", () => a.open.size === 1);
    await new Promise((r) => setTimeout(r, 50));
    const fourth = await upgrade(port, EXEC, { token: "admin" });
    await until("a session again", () => fourth.read() === OK);
    second.socket.destroy();
    fourth.socket.destroy();
  });

  it("ends a session within seconds of its Pod leaving the informer, both sockets closed", async () => {
    const a = await agent();
    const pods = [web];
    const { port, lines } = await start({ locate: at(a) }, pods);
    const c = await upgrade(port, EXEC, { token: "admin" });
    await until("the session", () => c.read() === OK);
    pods.splice(0);
    const began = Date.now();
    await c.closed;
    expect(Date.now() - began).toBeLessThan(3_000);
    await until("the agent's socket closed", () => a.open.size === 0);
    const end = await until("the end line", () =>
      lines.find((l) => l.msg === "stream session ended"),
    );
    expect(end.fields.ended).toBe("pod deleted");
  });

  it("ends a session whose Pod's UID was replaced (the Pod deleted and made again)", async () => {
    const a = await agent();
    const pods = [web];
    const { port } = await start({ locate: at(a) }, pods);
    const c = await upgrade(port, EXEC, { token: "admin" });
    await until("the session", () => c.read() === OK);
    pods[0] = { ...web, metadata: { ...web.metadata, uid: "u-2" } };
    await c.closed;
    await until("the agent's socket closed", () => a.open.size === 0);
  });

  it("ends an idle session after the idle timeout", async () => {
    const a = await agent();
    const { port, lines } = await start({ locate: at(a), streamIdleTimeoutMs: 300 });
    const c = await upgrade(port, EXEC, { token: "admin" });
    await until("the session", () => c.read() === OK);
    await c.closed;
    await until("the agent's socket closed", () => a.open.size === 0);
    const end = await until("the end line", () =>
      lines.find((l) => l.msg === "stream session ended"),
    );
    expect(end.fields.ended).toBe("idle for 0.3 s");
  });

  it("tells the API server when the agent hangs up before answering (it does not pin this client certificate)", async () => {
    const a = await agent("close");
    const { port } = await start({ locate: at(a) });
    const c = await upgrade(port, EXEC, { token: "admin" });
    await c.closed;
    expect(c.read()).toMatch(/^HTTP\/1\.1 502 /);
    expect(c.read()).toContain("closed the connection before answering");
    expect(a.refused).toBe(1);
  });

  it("refuses before locating anything: 401, 403 in the kubelet's words, and the kubelet's 404s", async () => {
    let located = 0;
    const a = await agent();
    const { port } = await start({
      locate: async () => {
        located += 1;
        return at(a)();
      },
    });
    const answer = async (path: string, token?: string) => {
      const c = await upgrade(port, path, token === undefined ? {} : { token });
      await c.closed;
      const [head = "", body = ""] = c.read().split("\r\n\r\n");
      return { status: Number(head.split(" ")[1]), body };
    };
    expect(await answer(EXEC)).toEqual({
      status: 401,
      body: expect.stringContaining("Unauthorized"),
    });
    expect((await answer(EXEC, "tenant")).body).toContain(
      "Forbidden (user=tenant, verb=create, resource=nodes, subresource(s)=[proxy])",
    );
    expect((await answer("/exec/shop/nope/app", "admin")).body).toContain("pod does not exist");
    expect((await answer("/exec/shop/web/u-9/app", "admin")).body).toContain("pod does not exist");
    expect((await answer("/portForward/shop/web/u-9", "admin")).body).toContain("pod not found");
    expect(await answer("/exec/shop/web/sidecar", "admin")).toMatchObject({ status: 404 });
    expect((await answer("/attach/shop/web/sidecar", "admin")).body).toContain(
      'container not found ("sidecar")',
    );
    expect(located).toBe(0);
    // Another path with an Upgrade header is answered as any request.
    expect(await answer("/healthz", "admin")).toMatchObject({ status: 200 });
    expect(Buffer.concat(a.received).length).toBe(0);
  });

  it("answers the locator's refusal as it gives it", async () => {
    const { port } = await start({
      locate: async () => ({
        kind: "unavailable",
        status: 409,
        message: "the pod's host is not running yet",
      }),
    });
    const c = await upgrade(port, EXEC, { token: "admin" });
    await c.closed;
    expect(c.read()).toMatch(/^HTTP\/1\.1 409 Conflict\r\n/);
    expect(c.read()).toContain("the pod's host is not running yet\n");
  });

  it("answers a request without Upgrade 400 after its checks, and a method other than GET and POST 405", async () => {
    const a = await agent();
    const { port } = await start({ locate: at(a) });
    expect(await get(port, EXEC, "admin")).toEqual({
      status: 400,
      body: "Upgrade request required",
    });
    expect(await get(port, "/exec/shop/nope/app", "admin")).toEqual({
      status: 404,
      body: "pod does not exist",
    });
    const c = await upgrade(port, EXEC, { token: "admin", method: "PUT" });
    await c.closed;
    expect(c.read()).toMatch(/^HTTP\/1\.1 405 /);
    expect(c.read().toLowerCase()).toContain("allow: get, post");
  });

  it("leaves the paths not found without agents, as before", async () => {
    const { port } = await start({});
    expect(await get(port, EXEC, "admin")).toEqual({ status: 404, body: "404 page not found" });
    expect(await get(port, "/portForward/shop/web", "admin")).toEqual({
      status: 404,
      body: "404 page not found",
    });
  });

  it("needs a logger with info() for the audit lines when agents are given", () => {
    expect(() =>
      createKubeletHandler({
        nodeName: "vn",
        pods: { list: () => [] },
        logs: undefined,
        usage: undefined,
        ...apis,
        startTime: new Date(),
        logger: { warn: () => undefined },
        agents: {
          locate: { locate: async () => ({ kind: "unavailable", status: 503, message: "" }) },
          clientCert: "",
          clientKey: "",
        },
      }),
    ).toThrow(/info\(\)/);
  });

  it("ends every session on close()", async () => {
    const a = await agent();
    const { port } = await start({ locate: at(a) });
    const c = await upgrade(port, EXEC, { token: "admin" });
    await until("the session", () => c.read() === OK);
    kubelet?.close();
    await c.closed;
    await until("the agent's socket closed", () => a.open.size === 0);
  });
});
