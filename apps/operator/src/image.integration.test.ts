/**
 * The container image (apps/operator/Dockerfile), built offline on a base assembled from this
 * machine's Node.js, run as its non-root user: `--help`, then the operator itself against the
 * real kube-apiserver (host network, the kubeconfig mounted read-only), rolling a crash up.
 */
import { execFile, spawn } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { CoreV1Api } from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, describe, expect, it } from "vitest";
import {
  createNamespace,
  createObject,
  eventually,
  getObject,
  installCrds,
} from "./testing/cluster.js";
import { podStatus, podTemplate } from "./testing/pods.js";

const run = promisify(execFile);
const appDir = fileURLToPath(new URL("..", import.meta.url));
const podman = ["--runtime", "/usr/sbin/runc", "--cgroup-manager=cgroupfs"];
const base = "localhost/nebula-test/operator-node-base:latest";
const image = "localhost/nebula-test/nebula-operator:test";
const container = `nebula-operator-test-${process.pid}`;
/** This sandbox refuses the runtime's default rlimits; explicit ones within the host's are accepted. */
const limits = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"];

/**
 * A distroless-shaped base assembled offline from this machine's Node.js: the binary at
 * /nodejs/bin/node and the shared libraries it links (from `ldd`), nothing else.
 */
async function assembleBase(dir: string): Promise<void> {
  const root = join(dir, "rootfs");
  mkdirSync(join(root, "nodejs/bin"), { recursive: true });
  mkdirSync(join(root, "tmp"), { recursive: true });
  copyFileSync(process.execPath, join(root, "nodejs/bin/node"));
  const { stdout } = await run("ldd", [process.execPath]);
  for (const lib of stdout.match(/\/[^\s]+\.so[^\s]*/g) ?? []) {
    mkdirSync(join(root, dirname(lib)), { recursive: true });
    copyFileSync(lib, join(root, lib));
  }
  await run("sh", ["-c", `tar -C '${root}' -c . | podman ${podman.join(" ")} import - ${base}`]);
}

describe("the container image (apps/operator/Dockerfile)", () => {
  const dir = mkdtempSync(join(tmpdir(), "nebula-operator-image-"));
  afterAll(async () => {
    await run("podman", [...podman, "rm", "-f", "-t", "0", container]).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
    await run("podman", [...podman, "rmi", "-f", image, base]).catch(() => undefined);
  });

  it("builds offline and runs --help as a non-root user", async () => {
    await assembleBase(dir);
    await run(
      "podman",
      [
        ...podman,
        "build",
        "--pull=never",
        "--build-arg",
        `BASE=${base}`,
        "-t",
        image,
        "-f",
        join(appDir, "Dockerfile"),
        appDir,
      ],
      { maxBuffer: 16 * 1024 * 1024 },
    );
    const help = await run("podman", [
      ...podman,
      "run",
      "--rm",
      ...limits,
      "--network=none",
      image,
      "--help",
    ]);
    expect(help.stdout).toMatch(/^Usage: nebula-operator/);
    expect(help.stdout).toContain("compute.nebula.dev");
    const user = await run("podman", [
      ...podman,
      "image",
      "inspect",
      "--format",
      "{{.Config.User}}",
      image,
    ]);
    expect(user.stdout.trim()).toBe("65532:65532");
  });

  it("runs the operator against the real kube-apiserver", async () => {
    const { controlPlane } = useTestPeers();
    const kc = controlPlane.kubeConfig();
    await installCrds(kc);
    const ns = await createNamespace(kc, "image");
    const kubeconfig = join(dir, "kubeconfig");
    writeFileSync(kubeconfig, controlPlane.kubeconfig, { mode: 0o644 });
    const child = spawn(
      "podman",
      [
        ...podman,
        "run",
        "--rm",
        ...limits,
        "--name",
        container,
        "--network=host",
        "-v",
        `${kubeconfig}:/etc/nebula/kubeconfig:ro`,
        image,
        "--kubeconfig=/etc/nebula/kubeconfig",
        `--namespace=${ns}`,
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
      ],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    let stderr = "";
    child.stderr?.on("data", (chunk) => {
      stderr += String(chunk);
    });
    try {
      await createObject(kc, ns, "Workload", "web", {
        spec: { placements: [{ name: "eu", replicas: 1 }] },
      });
      await createObject(kc, ns, "WorkloadDeployment", "web-eu", {
        spec: {
          workloadRef: { name: "web" },
          placement: "eu",
          replicas: 1,
          selector: { matchLabels: { app: "web" } },
        },
      });
      const core = kc.makeApiClient(CoreV1Api);
      const created = await core.createNamespacedPod({
        namespace: ns,
        body: podTemplate("web-0", ns, { app: "web" }),
      });
      await core.replaceNamespacedPodStatus({
        name: "web-0",
        namespace: ns,
        body: { ...created, status: podStatus(created, "crashing") },
      });
      const available = await eventually(
        "the Workload's Available=False InstanceCrashing",
        async () => {
          const status = (await getObject(kc, ns, "Workload", "web")).status as
            | { conditions?: { type: string; status: string; reason: string }[] }
            | undefined;
          const c = status?.conditions?.find((x) => x.type === "Available");
          return c?.reason === "InstanceCrashing" ? c : undefined;
        },
        60_000,
      );
      expect(available.status).toBe("False");
      expect(stderr).toBe("");
    } finally {
      child.kill("SIGTERM");
      await run("podman", [...podman, "stop", "-t", "10", container]).catch(() => undefined);
    }
  });
});
