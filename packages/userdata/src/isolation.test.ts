/**
 * The supervisor's isolation of the Pod, on the recording host (fake docker, recording iptables):
 * the Pod sandbox and its network, the IMDS block rule, host networking only on opt-in, and
 * runAsNonRoot checked as the kubelet checks it. The same against real podman containers is in
 * `isolation.integration.test.ts`.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import type { ExitReport } from "@nebula/state-mapping";
import { afterEach, describe, expect, it } from "vitest";
import { HOST_NETWORK_ANNOTATION, type RenderOptionsInput, renderUserData } from "./index.js";
import { type FakeImage, HOST_IP, TestHost } from "./testing/host.js";

const FAST: RenderOptionsInput = {
  backoff: { initialSeconds: 1, maxSeconds: 2, resetAfterSeconds: 600 },
  report: { retryAttempts: 8, retryBaseMs: 50 },
  defaultRestartLimit: 1,
};
const EXIT0: FakeImage = { script: "exit 0\n" };

function pod(
  containers: V1Container[],
  spec: Partial<V1Pod["spec"]> = {},
  annotations: Record<string, string> = {},
): V1Pod {
  return {
    metadata: { name: "job-1", namespace: "batch", uid: "uid-1", annotations },
    spec: { restartPolicy: "Never", terminationGracePeriodSeconds: 5, containers, ...spec },
  };
}

const hosts: TestHost[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
});

async function run(p: V1Pod, images: Record<string, FakeImage>, before?: (h: TestHost) => void) {
  const rendered = renderUserData(p, FAST);
  if (!rendered.ok) throw rendered.error;
  const h = new TestHost({ images });
  hosts.push(h);
  before?.(h);
  expect(await h.boot(rendered.value)).toBe(0);
  await h.finished();
  return h;
}
const final = (h: TestHost): ExitReport | undefined => h.tagReports().at(-1);
const app = (h: TestHost) => final(h)?.containers.find((c) => c.name === "app");
const text = (b64: string | undefined) => Buffer.from(b64 ?? "", "base64").toString("utf8");

describe("the Pod's network namespace", () => {
  it("blocks IMDS first, then runs every container in the sandbox's namespace, ports on the sandbox", async () => {
    const h = await run(
      pod([
        { name: "app", image: "fake/a:1", ports: [{ containerPort: 8080 }] },
        { name: "side", image: "fake/a:1" },
      ]),
      { "fake/a:1": EXIT0 },
    );
    const calls = h.calls();
    const block = calls.indexOf(
      "iptables -w 5 -t raw -I PREROUTING 1 -d 169.254.169.254/32 -j DROP",
    );
    expect(block).toBeGreaterThanOrEqual(0);
    expect(calls).toContain("ip6tables -w 5 -t raw -I PREROUTING 1 -d fd00:ec2::254/128 -j DROP");
    const [sandbox] = h.sandboxCalls().filter((c) => c.startsWith("docker create"));
    expect(sandbox).toBe(
      "docker create --name=nebula-sandbox --network=bridge --hostname=job-1 --publish=8080:8080/tcp -- registry.k8s.io/pause:3.10",
    );
    expect(block).toBeLessThan(calls.indexOf(sandbox ?? ""));
    const creates = h.dockerCalls("create");
    expect(creates).toHaveLength(2);
    for (const create of creates) {
      expect(create).toContain(`--network=container:${h.sandboxId()}`);
      expect(create).not.toContain("--network=host");
      expect(create).not.toContain("--publish");
    }
    // The sandbox goes when the Pod is done.
    expect(h.sandboxCalls()).toContain("docker rm -f nebula-sandbox");
    expect(final(h)?.final).toBe(true);
  });

  it("uses the host's network only with the opt-in annotation, and then touches no firewall", async () => {
    const h = await run(
      pod(
        [{ name: "app", image: "fake/a:1" }],
        { hostNetwork: true },
        { [HOST_NETWORK_ANNOTATION]: "true" },
      ),
      { "fake/a:1": EXIT0 },
    );
    expect(h.dockerCalls("create")[0]).toContain("--network=host");
    expect(h.sandboxCalls()).toEqual([]);
    expect(h.calls().filter((c) => c.startsWith("iptables"))).toEqual([]);
  });

  it("subdomain: the Pod's fully qualified name at the instance's address (IMDS local-ipv4) on the sandbox", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/a:1" }], { hostname: "db-0", subdomain: "db" }),
      {
        "fake/a:1": EXIT0,
      },
    );
    const [sandbox] = h.sandboxCalls().filter((c) => c.startsWith("docker create"));
    expect(sandbox).toBe(
      `docker create --name=nebula-sandbox --network=bridge --hostname=db-0 --add-host=db-0.db.batch.svc.cluster.local:${HOST_IP} -- registry.k8s.io/pause:3.10`,
    );
  });

  it("hostAliases: each name as --add-host on the sandbox (its containers share its /etc/hosts), in order", async () => {
    const aliases = [
      { ip: "10.0.0.5", hostnames: ["db", "db.internal"] },
      { ip: "fd00::5", hostnames: ["v6"] },
    ];
    const h = await run(pod([{ name: "app", image: "fake/a:1" }], { hostAliases: aliases }), {
      "fake/a:1": EXIT0,
    });
    const [sandbox] = h.sandboxCalls().filter((c) => c.startsWith("docker create"));
    expect(sandbox).toBe(
      "docker create --name=nebula-sandbox --network=bridge --hostname=job-1 --add-host=db:10.0.0.5 --add-host=db.internal:10.0.0.5 --add-host=v6:fd00::5 -- registry.k8s.io/pause:3.10",
    );
    expect(h.dockerCalls("create")[0]).not.toContain("--add-host");
    // With hostNetwork there is no sandbox: the container takes them.
    const host = await run(
      pod(
        [{ name: "app", image: "fake/a:1" }],
        { hostNetwork: true, hostAliases: aliases },
        { [HOST_NETWORK_ANNOTATION]: "true" },
      ),
      { "fake/a:1": EXIT0 },
    );
    expect(host.dockerCalls("create")[0]).toContain("--network=host");
    expect(host.dockerCalls("create")[0]).toContain(
      "--add-host=db:10.0.0.5 --add-host=db.internal:10.0.0.5 --add-host=v6:fd00::5 -- fake/a:1",
    );
  });

  it("hostAliases that are not an IP and DNS names are refused before anything reaches /etc/hosts", () => {
    for (const alias of [
      { ip: "10.0.0.5\n6.6.6.6 evil", hostnames: ["db"] },
      { ip: "10.0.0.5", hostnames: ["db\n6.6.6.6 evil"] },
      { ip: "10.0.0.5", hostnames: ["db evil"] },
      { ip: "not-an-ip", hostnames: ["db"] },
    ]) {
      const rendered = renderUserData(
        pod([{ name: "app", image: "fake/a:1" }], { hostAliases: [alias] }),
        FAST,
      );
      expect(rendered.ok).toBe(false);
      if (!rendered.ok) expect(rendered.error.code).toBe("InvalidPod");
    }
  });

  it("runs nothing when IMDS cannot be blocked: the Pod ends with the reason", async () => {
    const h = await run(pod([{ name: "app", image: "fake/a:1" }]), { "fake/a:1": EXIT0 }, (host) =>
      writeFileSync(join(host.dir, "iptables-fail"), ""),
    );
    expect(h.dockerCalls("create")).toEqual([]);
    expect(h.sandboxCalls()).toEqual([]);
    expect(app(h)).toMatchObject({ state: "waiting", reason: "ContainerCreating" });
    expect(text(app(h)?.messageB64)).toContain("cannot block IMDS for the Pod's network");
    expect(final(h)?.final).toBe(true);
    expect(h.poweredOff()).toBe(true);
  });
});

describe("runAsNonRoot, as the kubelet checks it", () => {
  const nonRoot = (user?: number) =>
    pod([
      {
        name: "app",
        image: "fake/a:1",
        securityContext: { runAsNonRoot: true, ...(user === undefined ? {} : { runAsUser: user }) },
      },
    ]);

  it("refuses an image whose user is root, with CreateContainerConfigError and the kubelet's message", async () => {
    const h = await run(nonRoot(), { "fake/a:1": { ...EXIT0, user: "" } });
    expect(h.dockerCalls("create")).toEqual([]);
    expect(app(h)).toMatchObject({ state: "waiting", reason: "CreateContainerConfigError" });
    expect(text(app(h)?.messageB64)).toBe(
      'container has runAsNonRoot and image will run as root (pod: "job-1_batch(uid-1)", container: app)',
    );
  });

  it("refuses an image whose user is a name, which cannot be verified", async () => {
    const h = await run(nonRoot(), { "fake/a:1": { ...EXIT0, user: "app:app" } });
    expect(h.dockerCalls("create")).toEqual([]);
    expect(text(app(h)?.messageB64)).toBe(
      'container has runAsNonRoot and image has non-numeric user (app), cannot verify user is non-root (pod: "job-1_batch(uid-1)", container: app)',
    );
  });

  it("refuses runAsUser 0", async () => {
    const h = await run(nonRoot(0), { "fake/a:1": { ...EXIT0, user: "1000" } });
    expect(h.dockerCalls("create")).toEqual([]);
    expect(text(app(h)?.messageB64)).toBe(
      'container\'s runAsUser breaks non-root policy (pod: "job-1_batch(uid-1)", container: app)',
    );
  });

  it("runs an image whose user is a non-zero uid", async () => {
    const h = await run(nonRoot(), { "fake/a:1": { ...EXIT0, user: "1000:1000" } });
    expect(h.dockerCalls("create")).toHaveLength(1);
    expect(app(h)).toMatchObject({ state: "terminated", exitCode: 0 });
  });
});
