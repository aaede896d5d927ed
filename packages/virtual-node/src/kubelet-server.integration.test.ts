/**
 * The kubelet API's listener against a real kube-apiserver (issue #33, item 5): the client CA read
 * at start is retried while the API server does not answer or refuses (its Role not bound yet),
 * with a message that says which, and a rotated CA is served without a restart.
 */
import "reflect-metadata";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { type AddressInfo, connect, createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CoreV1Api, KubeConfig, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import * as x509 from "@peculiar/x509";
import { afterAll, describe, expect, it } from "vitest";
import { KubeletApiConfigSchema, kubeletApiServer } from "./kubelet-server.js";

const { controlPlane } = useTestPeers();
const admin = controlPlane.kubeConfig();
const ALGORITHM = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
const dirs: string[] = [];

afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** Log lines as pino would take them. */
function recorder() {
  const lines: Array<{ level: string; msg: string; fields: Record<string, unknown> }> = [];
  const at =
    (level: string) =>
    (fields: Record<string, unknown>, msg: string): void => {
      lines.push({ level, msg, fields });
    };
  return { lines, logger: { info: at("info"), warn: at("warn") } };
}

async function until<T>(
  what: string,
  probe: () => T | undefined | Promise<T | undefined>,
  ms = 30_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A port nothing listens on (yet). */
async function closedPort(): Promise<number> {
  const probe = createServer().listen(0, "127.0.0.1");
  await once(probe, "listening");
  const { port } = probe.address() as AddressInfo;
  await new Promise((r) => probe.close(r));
  return port;
}

/** A plain TCP relay on `port` to the API server: the API server "coming back" at that address. */
async function relay(port: number, to: URL): Promise<Server> {
  const server = createServer((client) => {
    const upstream = connect(Number(to.port), to.hostname);
    client.pipe(upstream).pipe(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end);
    upstream.on("error", end);
  }).listen(port, "127.0.0.1");
  await once(server, "listening");
  return server;
}

/** `user`'s kubeconfig (a client certificate of the API server's client CA), at `server`. */
function kubeConfigAt(user: string, groups: readonly string[], server?: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromString(controlPlane.kubeconfigFor(user, groups));
  if (server === undefined) return kc;
  const moved = new KubeConfig();
  moved.loadFromOptions({
    clusters: kc.clusters.map((c) => ({ ...c, server })),
    users: kc.users,
    contexts: kc.contexts,
    currentContext: kc.currentContext,
  });
  return moved;
}

/** The client certificate and key a kubeconfig authenticates with. */
function clientCertOf(kc: KubeConfig): { cert: string; key: string } {
  const user = kc.getCurrentUser();
  const decode = (b64: string | undefined) => Buffer.from(b64 ?? "", "base64").toString("utf8");
  return { cert: decode(user?.certData), key: decode(user?.keyData) };
}

/** A CA of the test's own and a client certificate it issued for `user` in `groups`. */
async function ownCa(user: string, groups: readonly string[]) {
  const caKeys = await crypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
  const now = Date.now();
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: "01",
    name: "CN=rotated client CA",
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + 3_600_000),
    signingAlgorithm: ALGORITHM,
    keys: caKeys,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign,
        true,
      ),
    ],
  });
  const keys = await crypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
  const leaf = await x509.X509CertificateGenerator.create({
    serialNumber: "02",
    subject: `${groups.map((g) => `O=${g}, `).join("")}CN=${user}`,
    issuer: ca.subject,
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + 3_600_000),
    signingAlgorithm: ALGORITHM,
    publicKey: keys.publicKey,
    signingKey: caKeys.privateKey,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth]),
    ],
  });
  const pkcs8 = Buffer.from(await crypto.subtle.exportKey("pkcs8", keys.privateKey)).toString(
    "base64",
  );
  const key = `-----BEGIN PRIVATE KEY-----\n${pkcs8.match(/.{1,64}/g)?.join("\n")}\n-----END PRIVATE KEY-----\n`;
  return { ca: ca.toString("pem"), client: { cert: leaf.toString("pem"), key } };
}

/** GET `/healthz` from the kubelet API with a client certificate: the HTTP status. */
function healthz(port: number, client: { cert: string; key: string }): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port,
        path: "/healthz",
        ...client,
        rejectUnauthorized: false,
        agent: false,
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on("error", reject);
    req.end();
  });
}

/** The listener as the vnode runs it, on a free port, with the handler's other sources empty. */
async function start(kubeConfig: KubeConfig, settings: Record<string, unknown>) {
  const { lines, logger } = recorder();
  const port = await closedPort();
  const serve = kubeletApiServer({
    kubeConfig,
    settings: KubeletApiConfigSchema.parse({ bindAddress: "127.0.0.1", ...settings }),
    port,
    hosts: ["localhost", "127.0.0.1"],
    nodeName: "kubelet-server-it",
    pods: { list: () => [] },
    logs: undefined,
    usage: undefined,
    startTime: new Date(),
    logger,
    clientCaRetryDelaysMs: [200, 400],
  });
  const stop = new AbortController();
  const done = serve(stop.signal);
  const halt = async () => {
    stop.abort();
    await done;
  };
  return { lines, port, stop: halt, done };
}

const ADMIN = { user: "kubelet-server-it-admin", groups: ["system:masters"] };

describe("the kubelet API's client CA", () => {
  it("is read again and again while the API server does not answer, saying so (not RBAC), and served once it does", async () => {
    const port = await closedPort();
    const apiServer = new URL(admin.getCurrentCluster()?.server ?? "");
    const kc = kubeConfigAt(ADMIN.user, ADMIN.groups, `https://127.0.0.1:${port}`);
    const listener = await start(kc, {});
    // Nothing answers at that address: the listener waits and says why, several times.
    await until("three refused reads", () =>
      listener.lines.filter((l) => l.level === "warn").length >= 3 ? true : undefined,
    );
    const warnings = listener.lines.filter((l) => l.level === "warn");
    for (const w of warnings) {
      expect(w.msg).toContain("not serving until it is, retrying");
      const message = String((w.fields.err as Error).message);
      expect(message).toContain("got no answer from the API server");
      expect(message).not.toContain("Role");
    }
    expect(warnings.map((w) => w.fields.attempt)).toEqual(warnings.map((_, i) => i + 1));
    expect(listener.lines.some((l) => l.msg === "kubelet API listening")).toBe(false);
    // The API server is back at that address: the listener starts and verifies client certificates.
    const back = await relay(port, apiServer);
    try {
      await until("the listener", () =>
        listener.lines.some((l) => l.msg === "kubelet API listening") ? true : undefined,
      );
      expect(await healthz(listener.port, clientCertOf(kc))).toBe(200);
      await listener.stop();
    } finally {
      back.close();
    }
  });

  it("is read again while the Role is not bound, saying so, and served once it is", async () => {
    const user = "kubelet-server-it-unbound";
    const kc = kubeConfigAt(user, []);
    const listener = await start(kc, {});
    await until("a refused read", () =>
      listener.lines.some((l) => l.level === "warn") ? true : undefined,
    );
    const refused = listener.lines.find((l) => l.level === "warn");
    expect(String((refused?.fields.err as Error | undefined)?.message)).toMatch(
      /was refused \(403\): bind the Role kube-system\/extension-apiserver-authentication-reader/,
    );
    const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
    await rbac.createNamespacedRoleBinding({
      namespace: "kube-system",
      body: {
        metadata: { name: "kubelet-server-it-unbound" },
        roleRef: {
          apiGroup: "rbac.authorization.k8s.io",
          kind: "Role",
          name: "extension-apiserver-authentication-reader",
        },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: user }],
      },
    });
    try {
      await until("the listener", () =>
        listener.lines.some((l) => l.msg === "kubelet API listening") ? true : undefined,
      );
      await listener.stop();
    } finally {
      await rbac.deleteNamespacedRoleBinding({
        name: "kubelet-server-it-unbound",
        namespace: "kube-system",
      });
    }
  });

  it("rotated in its file is served from the next read on, without a restart", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kubelet-server-it-"));
    dirs.push(dir);
    const file = join(dir, "client-ca.crt");
    // Before: the API server's own client CA (its client certificates authenticate).
    const published = await admin.makeApiClient(CoreV1Api).readNamespacedConfigMap({
      name: "extension-apiserver-authentication",
      namespace: "kube-system",
    });
    writeFileSync(file, published.data?.["client-ca-file"] ?? "");
    const old = clientCertOf(kubeConfigAt(ADMIN.user, ADMIN.groups));
    const rotated = await ownCa(ADMIN.user, ADMIN.groups);
    const listener = await start(admin, { clientCaFile: file, clientCaReloadSeconds: 1 });
    await until("the listener", () =>
      listener.lines.some((l) => l.msg === "kubelet API listening") ? true : undefined,
    );
    expect(await healthz(listener.port, old)).toBe(200);
    expect(await healthz(listener.port, rotated.client)).toBe(401);
    // The file is rewritten with the new CA: within a read or two, the new certificate is the one.
    writeFileSync(file, rotated.ca);
    await until("the rotated CA served", async () =>
      (await healthz(listener.port, rotated.client)) === 200 ? true : undefined,
    );
    expect(await healthz(listener.port, old)).toBe(401);
    expect(listener.lines.some((l) => l.msg === "kubelet API: client CA reloaded")).toBe(true);
    // A file that is no CA at all is not taken: the rotated CA stays in use.
    writeFileSync(file, "not a certificate");
    await until("the bad read refused", () =>
      listener.lines.some((l) => l.msg.includes("is not usable; keeping the one in use"))
        ? true
        : undefined,
    );
    expect(await healthz(listener.port, rotated.client)).toBe(200);
    await listener.stop();
  });
});
