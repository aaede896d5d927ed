/**
 * The container image (apps/operator/Dockerfile), built offline on a base assembled from this
 * machine's Node.js, run as its non-root user: `--help`, then the operator itself against the
 * real kube-apiserver (host network, the kubeconfig mounted read-only), rolling a crash up.
 */
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import {
  type AppImage,
  buildAppImage,
  containerLimits,
  PODMAN_FLAGS as podman,
} from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, describe, expect, it } from "vitest";
import {
  createCrashingWeb,
  createNamespace,
  eventually,
  getObject,
  installCrds,
} from "./testing/cluster.js";

const run = promisify(execFile);
const appDir = fileURLToPath(new URL("..", import.meta.url));
const container = `nebula-operator-test-${process.pid}`;

describe("the container image (apps/operator/Dockerfile)", () => {
  const dir = mkdtempSync(join(tmpdir(), "nebula-operator-image-"));
  let built: AppImage | undefined;
  let image = "";
  afterAll(async () => {
    await run("podman", [...podman, "rm", "-f", "-t", "0", container]).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
    await built?.remove();
  });

  it("builds offline and runs --help as a non-root user", async () => {
    built = await buildAppImage(appDir, "nebula-operator");
    image = built.image;
    const help = await run("podman", [
      ...podman,
      "run",
      "--rm",
      ...(await containerLimits()),
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
        ...(await containerLimits()),
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
      await createCrashingWeb(kc, ns);
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
