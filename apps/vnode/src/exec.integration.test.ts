/**
 * `kubectl exec`, `attach`, `cp` and `port-forward` into a Nebula Pod (issue #35), end to end: the
 * real kubectl asks the real kube-apiserver, which upgrades to the virtual node's kubelet API
 * (authorized as `nodes/proxy`), which relays byte for byte over mutual TLS to the host agent
 * (apps/host-agent's `nebula-agent`, started by the host supervisor beside the Pod) at the
 * instance's private address, pinning the certificate the host reported in its `nebula:agent`
 * tag; the agent runs the command with the host's docker. In the simulator every instance is this
 * machine, so each host's private address is put on the loopback link before it boots (what the
 * VPC does on EC2) and removed after.
 */
import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { get } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "node:tls";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { DescribeInstancesCommand } from "@aws-sdk/client-ec2";
import { CoreV1Api, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { freePort, type InstanceHosts, kubectlPath } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  nodeInstances,
  podReadyWithIp,
  startVnode,
  startWorld,
  until,
  VNODE_GROUPS,
  VNODE_USER,
  type VnodeProcess,
  vnodeConfig,
} from "./testing/e2e.js";

const run = promisify(execFile);
const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const ec2 = moto.ec2();
const NODE = "vnode-exec";
const NS = "vnode-exec";
/** The host agent this change builds (`npm run build -w @nebula/host-agent`). */
const AGENT = fileURLToPath(new URL("../../host-agent/dist/nebula-agent", import.meta.url));

let hosts: InstanceHosts;
let vnode: VnodeProcess;
let dir: string;
let agentPort: number;
/** Private addresses this test put on `lo`. */
const addresses = new Set<string>();

/** Runs the real kubectl as the cluster admin (or with extra flags first); rejects with its output and code. */
function kubectl(
  args: readonly string[],
  input?: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(kubectlPath(), [
      "--kubeconfig",
      controlPlane.kubeconfigPath ?? "",
      ...args,
    ]);
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    if (input !== undefined) child.stdin.end(input);
    else child.stdin.end();
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "nebula-exec-"));
  // The virtual node's client certificate for the agents (the chart makes one; here openssl).
  await selfSignedClient("client");
  agentPort = await freePort();
  const world = await startWorld({
    admin,
    ec2,
    moto,
    cluster: NODE,
    namespace: NS,
    // Each host's private address on this machine's loopback, before its supervisor asks IMDS.
    beforeBoot: async (instanceId) => {
      const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
      const ip = out.Reservations?.[0]?.Instances?.[0]?.PrivateIpAddress;
      if (ip === undefined) throw new Error(`${instanceId} has no private address`);
      await run("ip", ["address", "add", `${ip}/32`, "dev", "lo"]).catch((error: unknown) => {
        if (!String(error).includes("File exists")) throw error;
      });
      addresses.add(ip);
    },
  });
  hosts = world.hosts;
  const config = vnodeConfig({
    cluster: NODE,
    region: moto.region,
    world,
    endpoint: hosts.ec2Endpoint,
    capacity: { cpu: "100", memory: "400Gi", pods: "20" },
    pollIntervalSeconds: 2,
    batchWindowMs: 50,
  }) as { provider: Record<string, unknown> };
  config.provider.podDelivery = "parameters";
  config.provider.hostAgent = {
    clientCertFile: join(dir, "client.crt"),
    clientKeyFile: join(dir, "client.key"),
    binary: AGENT,
    port: agentPort,
  };
  // The load test's 20 sessions into one Pod, and a port-forward beside them.
  (config as { kubeletApi?: Record<string, unknown> }).kubeletApi = { maxStreamSessionsPerPod: 24 };
  vnode = await startVnode({
    nodeName: NODE,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    moto,
    config,
  });
  await core.createNamespacedPod({
    namespace: NS,
    body: barePod("shell", NODE, {
      command: [
        "sh",
        "-c",
        // An HTTP server on the Pod's own loopback: port-forward reaches it only from inside the
        // Pod's network namespace.
        "mkdir -p /www && echo hello-forwarded >/www/index.html && httpd -p 127.0.0.1:8080 -h /www && echo started && exec sleep 3600",
      ],
    }),
  });
  await podReadyWithIp(core, NS, "shell");
}, 300_000);

afterAll(async () => {
  const code = await vnode?.stop();
  await deleteNode(admin, NODE);
  await hosts?.close();
  for (const ip of addresses) {
    await run("ip", ["address", "delete", `${ip}/32`, "dev", "lo"]).catch(() => undefined);
  }
  ec2.destroy();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  expect(code).toBe(0);
});

/**
 * Runs `kubectl port-forward` to the shell Pod's port 8080 while `body` runs with the local port;
 * stops it after.
 */
async function withPortForward<T>(body: (local: string) => Promise<T>): Promise<T> {
  const child = spawn(kubectlPath(), [
    "--kubeconfig",
    controlPlane.kubeconfigPath ?? "",
    "port-forward",
    "-n",
    NS,
    "pod/shell",
    ":8080",
  ]);
  const closed = once(child, "close");
  try {
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    const local = await until(
      "kubectl port-forward to listen",
      () => /Forwarding from 127\.0\.0\.1:(\d+) -> 8080/.exec(out)?.[1],
    );
    return await body(local);
  } finally {
    child.kill();
    await closed;
  }
}

/** An HTTP GET of `url`: its body as text and its length in bytes (counted as it comes). */
function httpGet(url: string, keep = true): Promise<{ text: string; bytes: number }> {
  return new Promise((resolve, reject) => {
    get(url, (response) => {
      let text = "";
      let bytes = 0;
      response.on("data", (chunk: Buffer) => {
        bytes += chunk.length;
        if (keep) text += chunk.toString();
      });
      response.on("end", () => resolve({ text, bytes }));
    }).on("error", reject);
  });
}

/** A self-signed client certificate and its key, made by openssl, in `dir` as `<name>.crt`/`.key`. */
async function selfSignedClient(name: string): Promise<{ cert: string; key: string }> {
  await run("openssl", [
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
    join(dir, `${name}.key`),
    "-out",
    join(dir, `${name}.crt`),
    "-subj",
    "/CN=nebula-vnode-exec",
    "-days",
    "1",
  ]);
  return {
    cert: readFileSync(join(dir, `${name}.crt`), "utf8"),
    key: readFileSync(join(dir, `${name}.key`), "utf8"),
  };
}

/** The nebula-agent processes on this machine (the simulated hosts'). */
async function agents(): Promise<string[]> {
  const { stdout } = await run("pgrep", ["-f", `${AGENT} --listen`]).catch(() => ({ stdout: "" }));
  return stdout.split("\n").filter((line) => line !== "");
}

/** The Pod's host agent as its tag reports it: address, port and pinned fingerprint. */
async function agentOf(pod: string): Promise<{ address: string; fingerprint: string }> {
  const uid = (await core.readNamespacedPod({ name: pod, namespace: NS })).metadata?.uid;
  const [instance] = (await nodeInstances(ec2, NODE)).filter((i) =>
    i.Tags?.some((t) => t.Key === "nebula:pod-uid" && t.Value === uid),
  );
  const tag = instance?.Tags?.find((t) => t.Key === "nebula:agent")?.Value ?? "";
  const match = /^v1 port=(\d+) sha256=([0-9a-f]{64})$/.exec(tag);
  if (match === null || Number(match[1]) !== agentPort) throw new Error(`agent tag ${tag}`);
  return { address: instance?.PrivateIpAddress ?? "", fingerprint: match[2] ?? "" };
}

describe("kubectl exec, attach, cp and port-forward into a Nebula Pod (kubectl, kube-apiserver, nebula-vnode, nebula-agent, moto, the host simulator)", () => {
  it("passes the command's exit code, stdin, stdout and stderr through", async () => {
    const exit = await kubectl(["exec", "-n", NS, "shell", "--", "sh", "-c", "exit 7"]);
    expect(exit.code).toBe(7);
    const cat = await kubectl(["exec", "-i", "-n", NS, "shell", "--", "cat"], "through stdin\n");
    expect(cat).toMatchObject({ code: 0, stdout: "through stdin\n" });
    const both = await kubectl([
      "exec",
      "-n",
      NS,
      "shell",
      "--",
      "sh",
      "-c",
      "echo to-out; echo to-err >&2",
    ]);
    expect(both).toMatchObject({ code: 0, stdout: "to-out\n", stderr: "to-err\n" });
    // The virtual node audited each session, start and end.
    const started = vnode.lines.filter((l) => l.msg === "stream session started");
    expect(started.length).toBeGreaterThanOrEqual(3);
    expect(started.at(-1)).toMatchObject({
      kind: "exec",
      namespace: NS,
      pod: "shell",
      container: "app",
    });
    await until("the sessions' end lines", () =>
      vnode.lines.filter((l) => l.msg === "stream session ended").length >= 3 ? true : undefined,
    );
  });

  it("gives a terminal with -it: its size reaches the process, Ctrl-C reaches the process", async () => {
    // script(1) gives kubectl a terminal of 33 rows and 101 columns.
    const tty = await run(
      "script",
      [
        "-qec",
        `stty rows 33 cols 101; ${kubectlPath()} --kubeconfig ${controlPlane.kubeconfigPath} exec -it -n ${NS} shell -- sh -c 'stty size; tty'`,
        "/dev/null",
      ],
      { timeout: 60_000 },
    );
    expect(tty.stdout).toContain("33 101");
    expect(tty.stdout).toMatch(/\/dev\/pts\/\d+/);
    // Ctrl-C typed into the terminal interrupts the command in the container, whose exit code
    // kubectl then exits with.
    const child = spawn("script", [
      "-qec",
      `${kubectlPath()} --kubeconfig ${controlPlane.kubeconfigPath} exec -it -n ${NS} shell -- sh -c 'trap "echo got-sigint; exit 3" INT; echo ready; while :; do sleep 0.2; done'; echo "kubectl=$?"`,
      "/dev/null",
    ]);
    try {
      let out = "";
      child.stdout.on("data", (chunk: Buffer) => {
        out += chunk.toString();
      });
      await until(
        "the shell to be ready",
        () => (out.includes("ready") ? true : undefined),
        60_000,
      );
      child.stdin.write("\x03");
      await until("kubectl to end", () => (/kubectl=\d+/.test(out) ? true : undefined), 60_000);
      expect(out).toContain("got-sigint");
      expect(out).toMatch(/kubectl=3/);
    } finally {
      child.kill();
    }
  }, 120_000);

  it("copies files both ways with kubectl cp (tar through exec)", async () => {
    writeFileSync(join(dir, "up.txt"), "copied up\n");
    const up = await kubectl(["cp", join(dir, "up.txt"), `${NS}/shell:/tmp/up.txt`]);
    expect(up).toMatchObject({ code: 0 });
    const seen = await kubectl(["exec", "-n", NS, "shell", "--", "cat", "/tmp/up.txt"]);
    expect(seen.stdout).toBe("copied up\n");
    const down = await kubectl(["cp", `${NS}/shell:/www/index.html`, join(dir, "down.txt")]);
    expect(down).toMatchObject({ code: 0 });
    expect(readFileSync(join(dir, "down.txt"), "utf8")).toBe("hello-forwarded\n");
  });

  it("forwards a local port to a port the Pod listens on inside its own network namespace", async () => {
    const { text } = await withPortForward((local) => httpGet(`http://127.0.0.1:${local}/`));
    expect(text).toBe("hello-forwarded\n");
  });

  it("attaches to a container's stdin and stdout (stdin: true)", async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod("talker", NODE, {
        stdin: true,
        command: ["sh", "-c", 'echo listening; while read -r line; do echo "got $line"; done'],
      }),
    });
    await podReadyWithIp(core, NS, "talker", 90_000).catch(async (error: unknown) => {
      const pod = await core.readNamespacedPod({ name: "talker", namespace: NS });
      console.log(JSON.stringify(pod.status, null, 1));
      throw error;
    });
    const child = spawn(kubectlPath(), [
      "--kubeconfig",
      controlPlane.kubeconfigPath ?? "",
      "attach",
      "-i",
      "-n",
      NS,
      "talker",
    ]);
    const closed = once(child, "close");
    try {
      let out = "";
      let err = "";
      child.stdout.on("data", (chunk: Buffer) => {
        out += chunk.toString();
      });
      child.stderr.on("data", (chunk: Buffer) => {
        err += chunk.toString();
      });
      child.stdin.on("error", () => undefined);
      // Lines written after the attach began come back through it (the earlier ones are logs).
      await until(
        "the attach to answer",
        () => {
          if (child.exitCode !== null)
            throw new Error(`kubectl attach ended ${child.exitCode}: ${err}`);
          child.stdin.write("hello\n");
          return out.includes("got hello") ? true : undefined;
        },
        60_000,
      ).catch((error: unknown) => {
        throw new Error(`${String(error)} (kubectl said: ${err})`);
      });
    } finally {
      child.kill();
      await closed;
    }
    await core.deleteNamespacedPod({ name: "talker", namespace: NS, gracePeriodSeconds: 0 });
  }, 300_000);

  it("holds 20 exec sessions and a 100 MB port-forward at once with the virtual node's memory bounded (piped, never buffered whole)", async () => {
    await kubectl([
      "exec",
      "-n",
      NS,
      "shell",
      "--",
      "dd",
      "if=/dev/zero",
      "of=/www/big",
      "bs=1048576",
      "count=100",
    ]);
    const rss = () =>
      Number(
        /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${vnode.child.pid}/status`, "utf8"))?.[1] ??
          "0",
      ) * 1024;
    const before = rss();
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, rss());
    }, 100);
    try {
      await withPortForward(async (local) => {
        // 20 sessions that each hold on for 5 s, and the download, all at once.
        const sessions = Array.from({ length: 20 }, (_, i) =>
          kubectl(["exec", "-n", NS, "shell", "--", "sh", "-c", `sleep 5; echo session-${i}`]),
        );
        const downloaded = httpGet(`http://127.0.0.1:${local}/big`, false);
        const results = await Promise.all(sessions);
        expect(results.map((r) => r.stdout)).toEqual(
          Array.from({ length: 20 }, (_, i) => `session-${i}\n`),
        );
        expect((await downloaded).bytes).toBe(100 * 1024 * 1024);
      });
    } finally {
      clearInterval(sampler);
    }
    console.log(
      `vnode RSS ${(before / 2 ** 20).toFixed(1)} MiB before, peak ${(peak / 2 ** 20).toFixed(1)} MiB while 100 MiB and 20 sessions went through`,
    );
    // Less than the data moved: the relay cannot have held it whole (seen: +3 to +38 MiB).
    expect(peak - before).toBeLessThan(100 * 2 ** 20);
  }, 300_000);

  it("refuses a user without pods/exec at the API server, and any client of the agent but the virtual node", async () => {
    // "someone" may read the Pod, not exec into it.
    const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
    await rbac.createNamespacedRole({
      namespace: NS,
      body: {
        metadata: { name: "read-pods" },
        rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["get", "list"] }],
      },
    });
    await rbac.createNamespacedRoleBinding({
      namespace: NS,
      body: {
        metadata: { name: "someone-reads-pods" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "read-pods" },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: "someone" }],
      },
    });
    const denied = await until("the Role to apply", async () => {
      const got = await kubectl(["--as=someone", "exec", "-n", NS, "shell", "--", "true"]);
      return got.stderr.includes("pods/exec") ? got : undefined;
    });
    expect(denied.code).not.toBe(0);
    expect(denied.stderr).toMatch(/forbidden: User "someone" cannot create resource "pods\/exec"/);
    // Straight to the agent: with no client certificate, and with one that is not the vnode's.
    const { address, fingerprint } = await agentOf("shell");
    const attempt = (cert?: { cert: string; key: string }) =>
      new Promise<string>((resolve) => {
        const socket = connect({
          host: address,
          port: agentPort,
          rejectUnauthorized: false,
          ...(cert ?? {}),
        });
        socket.on("secureConnect", () => {
          const seen = createHash("sha256").update(socket.getPeerCertificate().raw).digest("hex");
          socket.write(`GET /healthz HTTP/1.1\r\nHost: ${address}\r\nConnection: close\r\n\r\n`);
          let text = "";
          socket.on("data", (chunk: Buffer) => {
            text += chunk.toString();
          });
          socket.on("close", () => resolve(`${seen === fingerprint ? "pinned" : "other"} ${text}`));
        });
        socket.on("error", (error) => resolve(`refused: ${error.message}`));
      });
    expect(await attempt()).toMatch(/^refused|^pinned $/);
    const other = await selfSignedClient("other");
    expect(await attempt(other)).toMatch(/^refused|^pinned $/);
    // The virtual node's own certificate gets an answer: the refusals above are the pinning's.
    const own = {
      cert: readFileSync(join(dir, "client.crt"), "utf8"),
      key: readFileSync(join(dir, "client.key"), "utf8"),
    };
    expect(await attempt(own)).toMatch(/^pinned HTTP\/1\.1 200/);
  });

  it("ends a session when its Pod is deleted, and leaves no agent behind", async () => {
    // The shell Pod's agent alone (the attach test's Pod and its host are gone or going).
    await until("one agent", async () => ((await agents()).length === 1 ? true : undefined));
    const child = spawn(kubectlPath(), [
      "--kubeconfig",
      controlPlane.kubeconfigPath ?? "",
      "exec",
      "-n",
      NS,
      "shell",
      "--",
      "sh",
      "-c",
      "echo in; exec sleep 600",
    ]);
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    const closed = once(child, "close");
    try {
      await until("the session to start", () => (out.includes("in") ? true : undefined), 60_000);
      await core.deleteNamespacedPod({ name: "shell", namespace: NS });
      await Promise.race([
        closed,
        new Promise((_, reject) =>
          setTimeout(() => reject(new Error("the session outlived its Pod by 60 s")), 60_000),
        ),
      ]);
    } finally {
      child.kill();
    }
    await until("the Pod to be gone", async () =>
      (await core.listNamespacedPod({ namespace: NS })).items.length === 0 ? true : undefined,
    );
    await until("no agent left", async () => ((await agents()).length === 0 ? true : undefined));
  }, 180_000);
});
