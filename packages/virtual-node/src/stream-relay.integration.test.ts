/**
 * `kubectl exec`'s path end to end but for the host: a real kube-apiserver upgrades a Pod's
 * `exec` (SPDY/3.1) to the virtual node's kubelet API, which authenticates it (the API server's
 * kubelet client certificate), authorizes it (`nodes/proxy` by `SubjectAccessReview`), finds the
 * Pod in a real informer and relays it over mutual TLS to a stand-in host agent (a TLS server of
 * this test that answers `101` and echoes). What the API server's client reads is the agent's
 * answer, byte for byte. When the Go agent is built (`apps/host-agent/dist/nebula-agent`), the
 * real `kubectl exec` also runs through the relay to it, against a podman container.
 */
import "reflect-metadata";
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { type AddressInfo, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type TLSSocket } from "node:tls";
import { fileURLToPath } from "node:url";
import { CoreV1Api, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { podInformer } from "@nebula/kube/cache";
import { kubectlPath } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubeletApiConfigSchema, kubeletApiServer } from "./kubelet-server.js";
import type { HostAgentLocation } from "./stream-relay.js";
import { type FakeHostAgent, selfSigned, startFakeHostAgent } from "./testing/host-agent.js";

const { controlPlane } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const NS = "stream-relay-it";
const NODE = "stream-relay-it-node";
const ADMIN = { user: "stream-relay-it-admin", groups: ["system:masters"] };

interface Line {
  level: string;
  msg: string;
  fields: Record<string, unknown>;
}
const lines: Line[] = [];
const logger = {
  info: (fields: Record<string, unknown>, msg: string) => {
    lines.push({ level: "info", msg, fields });
  },
  warn: (fields: Record<string, unknown>, msg: string) => {
    lines.push({ level: "warn", msg, fields });
  },
};

async function until<T>(what: string, probe: () => T | undefined | false, ms = 15_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const probe = createServer().listen(0, "127.0.0.1");
  await once(probe, "listening");
  const { port } = probe.address() as AddressInfo;
  await new Promise((r) => probe.close(r));
  return port;
}

/** The client certificate and key of `user`, from the API server's client CA. */
function clientCertOf(user: string, groups: readonly string[]): { cert: string; key: string } {
  const kc = new KubeConfig();
  kc.loadFromString(controlPlane.kubeconfigFor(user, groups));
  const u = kc.getCurrentUser();
  const decode = (b64: string | undefined) => Buffer.from(b64 ?? "", "base64").toString("utf8");
  return { cert: decode(u?.certData), key: decode(u?.keyData) };
}

const sockets = new Set<TLSSocket>();

/**
 * An upgrade request on a raw TLS connection (to the API server, or to the kubelet API), as
 * `kubectl exec` over SPDY makes it: what comes back, and when the connection closes.
 */
async function upgrade(
  url: string,
  path: string,
  client: { cert: string; key: string },
): Promise<{ socket: TLSSocket; read: () => string; closed: Promise<void> }> {
  const { hostname, port } = new URL(url);
  const socket = connect({
    host: hostname,
    port: Number(port),
    ...client,
    rejectUnauthorized: false,
  });
  sockets.add(socket);
  socket.on("close", () => sockets.delete(socket));
  socket.on("error", () => undefined);
  await once(socket, "secureConnect");
  let text = "";
  socket.setEncoding("latin1");
  socket.on("data", (chunk: string) => {
    text += chunk;
  });
  const closed = once(socket, "close").then(() => undefined);
  socket.write(
    `POST ${path} HTTP/1.1\r\nHost: ${hostname}:${port}\r\n` +
      "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n",
  );
  return { socket, read: () => text, closed };
}

const stop = new AbortController();
let served: Promise<void> | undefined;
let informerDone: Promise<void> | undefined;
let kubeletPort = 0;
let agent: FakeHostAgent;
let vnodeClient: { cert: string; key: string; fingerprint: string };
/** What the locator answers; each test sets it. */
let locateAs: () => HostAgentLocation;
/** The stand-in agent, where every test but those that point elsewhere finds the Pod's agent. */
const toStandIn = (): HostAgentLocation => ({
  kind: "found",
  address: "127.0.0.1",
  port: agent.port,
  fingerprint: agent.fingerprint,
});

const apiServer = controlPlane.server;
const execPath = (pod: string, query = "command=cat&container=app&stdin=true&stdout=true") =>
  `/api/v1/namespaces/${NS}/pods/${pod}/exec?${query}`;

let pods: { list(): readonly V1Pod[] } = { list: () => [] };

/** A Pod bound to the Node, once the virtual node's informer holds it. */
async function createPod(name: string): Promise<V1Pod> {
  const pod = await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name },
      spec: {
        nodeName: NODE,
        containers: [{ name: "app", image: "busybox" }],
        terminationGracePeriodSeconds: 0,
      },
    },
  });
  await until(`the informer holding ${name}`, () =>
    pods.list().some((p) => p.metadata?.uid === pod.metadata?.uid),
  );
  return pod;
}

beforeAll(async () => {
  vnodeClient = await selfSigned("stream-relay-it-vnode");
  agent = await startFakeHostAgent(vnodeClient.fingerprint);
  locateAs = toStandIn;
  await core.createNamespace({ body: { metadata: { name: NS } } }).catch(() => undefined);
  kubeletPort = await closedPort();
  const node = await core.createNode({ body: { metadata: { name: NODE } } });
  await core.replaceNodeStatus({
    name: NODE,
    body: {
      ...node,
      status: {
        addresses: [{ type: "InternalIP", address: "127.0.0.1" }],
        daemonEndpoints: { kubeletEndpoint: { Port: kubeletPort } },
      },
    },
  });
  const informer = podInformer(admin, { fieldSelector: `spec.nodeName=${NODE}`, name: "relay-it" });
  pods = informer;
  informerDone = informer.run(stop.signal);
  served = kubeletApiServer({
    kubeConfig: admin,
    settings: KubeletApiConfigSchema.parse({
      bindAddress: "127.0.0.1",
      maxStreamSessionsPerPod: 2,
    }),
    port: kubeletPort,
    hosts: ["127.0.0.1"],
    nodeName: NODE,
    pods: informer,
    logs: undefined,
    usage: undefined,
    startTime: new Date(),
    logger,
    agents: {
      locate: { locate: async () => locateAs() },
      clientCert: vnodeClient.cert,
      clientKey: vnodeClient.key,
    },
  })(stop.signal);
  await until("the kubelet API listening", () =>
    lines.some((l) => l.msg === "kubelet API listening"),
  );
  await until("the informer synced", () => informer.hasSynced());
});

afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  stop.abort();
  await served;
  await informerDone;
  await agent?.close();
  await core.deleteNode({ name: NODE }).catch(() => undefined);
  await core.deleteNamespace({ name: NS }).catch(() => undefined);
});

const OK = "HTTP/1.1 101 Switching Protocols\r\n";

describe("kubectl exec through the API server, the kubelet API and the relay", () => {
  it("reaches the Pod's agent: its 101 and every byte after it come back through the API server; the session is audited as the API server's", async () => {
    const pod = await createPod("echo");
    const c = await upgrade(apiServer, execPath("echo"), clientCertOf(ADMIN.user, ADMIN.groups));
    await until("the 101", () => c.read().startsWith(OK) && c.read().includes("\r\n\r\n"));
    const payload = "stdin reaches cat\n".repeat(2048); // 36 KiB, more than one TLS record
    c.socket.write(payload);
    await until("the echo", () => c.read().endsWith(payload));
    const head = agent.heads.at(-1) ?? "";
    expect(head.split("\r\n")[0]).toMatch(
      /^POST \/exec\/stream-relay-it\/echo\/app\?.*command=cat.* HTTP\/1\.1$/,
    );
    expect(head).toContain(`\r\nHost: 127.0.0.1:${agent.port}`);
    const started = lines.filter((l) => l.msg === "stream session started").at(-1);
    expect(started?.fields).toMatchObject({
      kind: "exec",
      namespace: NS,
      pod: "echo",
      uid: pod.metadata?.uid,
      container: "app",
      command: ["cat"],
      user: "kube-apiserver-kubelet-client",
      client: "127.0.0.1",
    });
    c.socket.end();
    await c.closed;
    const ended = await until("the end line", () =>
      lines.find(
        (l) => l.msg === "stream session ended" && l.fields.session === started?.fields.session,
      ),
    );
    expect(ended.fields).toMatchObject({ agentStatus: 101, bytesToAgent: payload.length });
    expect(Number(ended.fields.bytesFromAgent)).toBeGreaterThan(payload.length);
  });

  it("closes the session's sockets within seconds of the Pod's deletion", async () => {
    await createPod("doomed");
    const c = await upgrade(apiServer, execPath("doomed"), clientCertOf(ADMIN.user, ADMIN.groups));
    await until("the 101", () => c.read().startsWith(OK));
    const open = agent.open.size;
    expect(open).toBeGreaterThan(0);
    const began = Date.now();
    await core.deleteNamespacedPod({ name: "doomed", namespace: NS, gracePeriodSeconds: 0 });
    await c.closed;
    await until("the agent's socket closed", () => agent.open.size === open - 1);
    expect(Date.now() - began).toBeLessThan(10_000);
    const started = lines.find(
      (l) => l.msg === "stream session started" && l.fields.pod === "doomed",
    );
    const ended = await until("the end line", () =>
      lines.find(
        (l) => l.msg === "stream session ended" && l.fields.session === started?.fields.session,
      ),
    );
    expect(ended.fields.ended).toBe("pod deleted");
  });

  it("answers 429 beyond the sessions per Pod, through the API server", async () => {
    await createPod("busy");
    const who = clientCertOf(ADMIN.user, ADMIN.groups);
    const first = await upgrade(apiServer, execPath("busy"), who);
    const second = await upgrade(apiServer, execPath("busy"), who);
    await until("two sessions", () => first.read().startsWith(OK) && second.read().startsWith(OK));
    const third = await upgrade(apiServer, execPath("busy"), who);
    await until("the refusal", () => third.read().includes("too many streaming sessions"));
    expect(third.read()).toMatch(/^HTTP\/1\.1 429 /);
    expect(third.read()).toContain('to pod "stream-relay-it/busy" (2 at once)');
    for (const c of [first, second, third]) c.socket.destroy();
  });

  it("sends nothing to an agent whose certificate is not the pinned one: 502 through the API server", async () => {
    await createPod("pinned");
    const before = agent.received.length;
    const headsBefore = agent.heads.length;
    locateAs = () => ({
      kind: "found",
      address: "127.0.0.1",
      port: agent.port,
      fingerprint: "0".repeat(64),
    });
    try {
      const c = await upgrade(
        apiServer,
        execPath("pinned"),
        clientCertOf(ADMIN.user, ADMIN.groups),
      );
      await until("the 502", () => c.read().includes("nothing was sent to it"));
      expect(c.read()).toMatch(/^HTTP\/1\.1 502 /);
      expect(agent.received.length).toBe(before);
      expect(agent.heads.length).toBe(headsBefore);
      c.socket.destroy();
    } finally {
      locateAs = toStandIn;
    }
  });

  it("answers 502 within the deadline when no agent listens, naming the port the security group must open", async () => {
    const port = await closedPort();
    locateAs = () => ({
      kind: "found",
      address: "127.0.0.1",
      port,
      fingerprint: agent.fingerprint,
    });
    try {
      const began = Date.now();
      const c = await upgrade(
        apiServer,
        execPath("pinned"),
        clientCertOf(ADMIN.user, ADMIN.groups),
      );
      await until("the 502", () => c.read().includes(`reach port ${port}`));
      expect(Date.now() - began).toBeLessThan(10_000);
      expect(c.read()).toMatch(/^HTTP\/1\.1 502 /);
      c.socket.destroy();
    } finally {
      locateAs = toStandIn;
    }
  });

  it("refuses a client the API server's CA vouches for but RBAC does not allow nodes/proxy: 403 in the kubelet's words", async () => {
    const c = await upgrade(
      `https://127.0.0.1:${kubeletPort}`,
      `/exec/${NS}/pinned/app?command=cat&stdin=true`,
      clientCertOf("stream-relay-it-stranger", []),
    );
    await c.closed;
    expect(c.read()).toMatch(/^HTTP\/1\.1 403 /);
    expect(c.read()).toContain(
      "Forbidden (user=stream-relay-it-stranger, verb=create, resource=nodes, subresource(s)=[proxy])",
    );
  });
});

const AGENT = fileURLToPath(new URL("../../../apps/host-agent/dist/nebula-agent", import.meta.url));

describe.skipIf(!existsSync(AGENT))("kubectl exec to the real host agent", () => {
  const container = `nebula-relay-it-${process.pid}`;
  const state = mkdtempSync(join(tmpdir(), "nebula-relay-it-agent-"));
  let child: ChildProcess | undefined;

  afterAll(async () => {
    if (child !== undefined && child.exitCode === null) {
      child.kill("SIGTERM");
      await once(child, "exit");
    }
    try {
      execFileSync("podman", ["rm", "-f", "-t", "0", container], { stdio: "ignore" });
    } catch {
      // not created
    }
    rmSync(state, { recursive: true, force: true });
  });

  it("kubectl exec -i runs in the container through the API server, the relay and the agent: stdin reaches cat, exit code 7 comes back", async () => {
    // Within this host's hard limits (as @nebula/test-peers' containerLimits): the sandbox
    // refuses the runtime's defaults.
    const [files, processes] = execFileSync("bash", [
      "-c",
      "n=$(ulimit -Hn); [[ $n == unlimited ]] && n=1048576; u=$(ulimit -Hu); m=$(cat /proc/sys/kernel/pid_max); [[ $u == unlimited || $u -gt $m ]] && u=$m; ((u > 65536)) && u=65536; echo $n; echo $u",
    ])
      .toString()
      .trim()
      .split("\n");
    execFileSync("podman", [
      "run",
      "-d",
      "--name",
      container,
      "--ulimit",
      `nofile=1024:${files}`,
      "--ulimit",
      `nproc=${processes}:${processes}`,
      "docker.io/library/busybox",
      "sleep",
      "3600",
    ]);
    const pod = await createPod("real");
    const port = await closedPort();
    child = spawn(
      AGENT,
      [
        "--listen",
        `127.0.0.1:${port}`,
        "--state-dir",
        state,
        "--name",
        "i-relay-it",
        "--client-fingerprint",
        vnodeClient.fingerprint,
        "--namespace",
        NS,
        "--pod",
        "real",
        "--pod-uid",
        pod.metadata?.uid ?? "",
        "--container",
        `app=${container}`,
        "--docker",
        "podman",
      ],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    let agentLog = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      agentLog += chunk.toString();
    });
    const fingerprintFile = join(state, "fingerprint");
    await until("the agent's fingerprint", () => existsSync(fingerprintFile));
    const fingerprint = readFileSync(fingerprintFile, "utf8").trim();
    locateAs = () => ({ kind: "found", address: "127.0.0.1", port, fingerprint });
    try {
      const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>(
        (resolve) => {
          const kubectl = execFile(
            kubectlPath(),
            [
              "--kubeconfig",
              controlPlane.kubeconfigPath ?? "",
              "-n",
              NS,
              "exec",
              "-i",
              "real",
              "-c",
              "app",
              "--",
              "sh",
              "-c",
              "cat; exit 7",
            ],
            { timeout: 60_000 },
            (error, stdout, stderr) =>
              resolve({
                code: error === null ? 0 : ((error as { code?: number }).code ?? null),
                stdout,
                stderr,
              }),
          );
          kubectl.stdin?.end("stdin reaches cat\n");
        },
      );
      expect(run, agentLog).toMatchObject({ code: 7, stdout: "stdin reaches cat\n" });
      const started = lines.filter((l) => l.msg === "stream session started").at(-1);
      expect(started?.fields).toMatchObject({
        kind: "exec",
        pod: "real",
        command: ["sh", "-c", "cat; exit 7"],
      });
    } finally {
      locateAs = toStandIn;
    }
  });
});
