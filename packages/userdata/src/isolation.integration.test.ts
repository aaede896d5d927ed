/**
 * A Pod's containers cannot reach IMDS, against REAL containers (podman + runc as the host's docker
 * CLI, the supervisor's real iptables rule in the host's raw table).
 *
 * 169.254.169.254 cannot be the harness's loopback IMDS, so the test builds EC2's topology: a
 * network namespace of its own holds 169.254.169.254 on one end of a veth pair, the host routes
 * that address into it (as an instance routes it out of its interface), and busybox httpd listens
 * there, serving a stand-in for the role's credentials. The host reaches it through OUTPUT, a
 * container on the bridge through PREROUTING and FORWARD, exactly as on an instance.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { HOST_NETWORK_ANNOTATION, type RenderOptionsInput, renderUserData } from "./index.js";
import { TestHost } from "./testing/host.js";
import { reapConmons } from "./testing/reap.js";

const ROOT = join(tmpdir(), "nebula-userdata-podman");
const IMAGE = "localhost/nebula-busybox-isolation:1";
const NS = `nebula-imds-${process.pid}`;
const VETH = `nimds${process.pid % 100000}`;
const SECRET = "stand-in-for-the-instance-role-credentials";
const podmanArgs = [
  "--root",
  join(ROOT, "storage"),
  "--runroot",
  join(ROOT, "run"),
  "--runtime",
  "/usr/sbin/runc",
  "--cgroup-manager=cgroupfs",
  "--events-backend=file",
];
const podman = (...args: string[]) =>
  execFileSync("podman", [...podmanArgs, ...args], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
const sh = (cmd: string, ...args: string[]) =>
  execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
/** Deletes every copy of the supervisor's IMDS rules (they are host-wide). */
function dropBlockRules(): void {
  for (const [tool, dest] of [
    ["iptables", "169.254.169.254/32"],
    ["ip6tables", "fd00:ec2::254/128"],
  ] as const) {
    for (let n = 0; n < 20; n++) {
      const r = spawnSync(tool, [
        "-w",
        "5",
        "-t",
        "raw",
        "-D",
        "PREROUTING",
        "-d",
        dest,
        "-j",
        "DROP",
      ]);
      if (r.status !== 0) break;
    }
  }
}

/** An HTTP/1.0 GET of `path` on stdout, for busybox nc (this busybox's wget crashes without NSS). */
const GET = (path: string) => `printf 'GET ${path} HTTP/1.0\\r\\n\\r\\n'`;

const FAST: RenderOptionsInput = {
  backoff: { initialSeconds: 1, maxSeconds: 2, resetAfterSeconds: 600 },
  imagePull: { maxAttempts: 2 },
  report: { retryAttempts: 8, retryBaseMs: 50 },
  sandbox: { image: IMAGE, command: ["sleep", "2147483647"] },
};

let httpd: ChildProcess | undefined;
let www = "";
beforeAll(() => {
  mkdirSync(ROOT, { recursive: true });
  if (spawnSync("podman", [...podmanArgs, "image", "exists", IMAGE]).status !== 0) {
    const rootfs = mkdtempSync(join(tmpdir(), "nebula-busybox-iso-"));
    mkdirSync(join(rootfs, "bin"));
    mkdirSync(join(rootfs, "tmp"));
    writeFileSync(join(rootfs, "bin/busybox"), readFileSync("/bin/busybox"), { mode: 0o755 });
    for (const applet of sh("/bin/busybox", "--list").split("\n")) {
      if (applet && applet !== "busybox") symlinkSync("busybox", join(rootfs, "bin", applet));
    }
    const tar = join(rootfs, "..", `${rootfs.split("/").pop()}.tar`);
    sh("tar", "-C", rootfs, "-cf", tar, ".");
    podman("import", "--change", "ENV PATH=/bin", tar, IMAGE);
    rmSync(rootfs, { recursive: true, force: true });
    rmSync(tar, { force: true });
  }
  // EC2's topology for IMDS: 169.254.169.254 in a namespace of its own, routed from the host.
  dropBlockRules();
  sh("ip", "netns", "add", NS);
  sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", "imds0", "netns", NS);
  sh("ip", "addr", "add", "169.254.1.1/32", "dev", VETH);
  sh("ip", "link", "set", VETH, "up");
  sh("ip", "route", "add", "169.254.169.254/32", "dev", VETH);
  sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up");
  sh("ip", "netns", "exec", NS, "ip", "addr", "add", "169.254.169.254/32", "dev", "imds0");
  sh("ip", "netns", "exec", NS, "ip", "link", "set", "imds0", "up");
  sh("ip", "netns", "exec", NS, "ip", "route", "add", "default", "dev", "imds0");
  www = mkdtempSync(join(tmpdir(), "nebula-imds-www-"));
  writeFileSync(join(www, "credentials"), SECRET);
  httpd = spawn("ip", ["netns", "exec", NS, "/bin/busybox", "httpd", "-f", "-p", "80", "-h", www], {
    stdio: "ignore",
  });
}, 300_000);

afterAll(() => {
  httpd?.kill("SIGKILL");
  spawnSync("ip", ["link", "del", VETH]);
  spawnSync("ip", ["netns", "del", NS]);
  dropBlockRules();
  rmSync(www, { recursive: true, force: true });
  spawnSync("podman", [...podmanArgs, "rm", "-af", "-t", "0"]);
  const missed = reapConmons(ROOT);
  if (missed.length > 0) {
    throw new Error(`podman rm -af left these running (now killed):\n${missed.join("\n")}`);
  }
});

const hosts: TestHost[] = [];
const outs: string[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
  for (const dir of outs.splice(0)) rmSync(dir, { recursive: true, force: true });
  // Podman removes a Pod sandbox only after the containers that joined it: it can take two passes.
  for (let pass = 1; ; pass++) {
    try {
      podman("rm", "-af", "-t", "0");
      break;
    } catch (error) {
      if (pass >= 3) throw error;
    }
  }
  const missed = reapConmons(ROOT);
  if (missed.length > 0) {
    throw new Error(`podman rm -af left these running (now killed):\n${missed.join("\n")}`);
  }
});

/** From the host, as the supervisor reads IMDS: the body, or the failure. */
function fromHost(): string {
  const r = spawnSync("curl", ["-sS", "--max-time", "5", "http://169.254.169.254/credentials"], {
    encoding: "utf8",
  });
  return r.status === 0 ? r.stdout : `curl failed (${r.status}): ${r.stderr}`;
}

/** A container that tries IMDS and a sibling on localhost:7000, recording each outcome in /out. */
function probePod(out: string, spec: Partial<V1Pod["spec"]> = {}, annotations = {}): V1Pod {
  const mounts = [{ name: "out", mountPath: "/out" }];
  return {
    metadata: { name: "iso", namespace: "test", uid: "uid-iso", annotations },
    spec: {
      restartPolicy: "Never",
      terminationGracePeriodSeconds: 2,
      containers: [
        {
          name: "app",
          image: IMAGE,
          command: [
            "sh",
            "-c",
            [
              `${GET("/credentials")} | nc -w 4 169.254.169.254 80 >/out/imds; echo $? >/out/imds.rc`,
              `i=0; until ${GET("/hello")} | nc -w 2 127.0.0.1 7000 >/out/sibling && grep -q sibling /out/sibling; do i=$((i+1)); [ $i -lt 20 ] || break; sleep 0.2; done`,
              "echo done >/out/done",
            ].join("\n"),
          ],
          volumeMounts: mounts,
        },
        {
          name: "side",
          image: IMAGE,
          command: [
            "sh",
            "-c",
            "mkdir -p /tmp/www && echo sibling >/tmp/www/hello && httpd -p 127.0.0.1:7000 -h /tmp/www && i=0; while [ ! -e /out/done ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done",
          ],
          volumeMounts: mounts,
        },
      ],
      volumes: [{ name: "out", hostPath: { path: out } }],
      ...spec,
    },
  };
}

async function runPod(p: V1Pod, options: RenderOptionsInput = {}): Promise<TestHost> {
  const rendered = renderUserData(p, { ...FAST, ...options });
  if (!rendered.ok) throw rendered.error;
  const h = new TestHost({ images: {}, docker: "podman", env: { NEBULA_PODMAN_ROOT: ROOT } });
  hosts.push(h);
  expect(await h.boot(rendered.value)).toBe(0);
  expect(await h.finished(120_000)).toBe(0);
  return h;
}

function outDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "nebula-userdata-iso-"));
  chmodSync(dir, 0o777);
  outs.push(dir);
  return dir;
}
const read = (file: string) => {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "<absent>";
  }
};

describe("IMDS from a Pod's containers, with real podman and the real firewall rule", () => {
  it("the topology is sound: before any rule, a container on the bridge reaches the listener", () => {
    dropBlockRules();
    expect(fromHost()).toBe(SECRET);
    const got = podman(
      "run",
      "--rm",
      "--ulimit",
      "nofile=1024:1024",
      "--ulimit",
      "nproc=1024:1024",
      "--network=bridge",
      "--",
      IMAGE,
      "sh",
      "-c",
      `${GET("/credentials")} | nc -w 4 169.254.169.254 80`,
    );
    expect(got).toContain(SECRET);
  });

  it("a Pod's container cannot reach 169.254.169.254 while the host still can; siblings share localhost", async () => {
    const out = outDir();
    const h = await runPod(probePod(out));
    expect(h.supervisorLog()).toContain("IMDS blocked for the Pod's network");
    expect(read(join(out, "imds.rc")).trim()).not.toBe("0");
    expect(read(join(out, "imds"))).not.toContain(SECRET);
    expect(read(join(out, "sibling"))).toContain("sibling");
    // The supervisor's side of the host: IMDS still answers.
    expect(fromHost()).toBe(SECRET);
    const rules = sh("iptables", "-w", "5", "-t", "raw", "-S", "PREROUTING");
    expect(rules).toContain("-A PREROUTING -d 169.254.169.254/32 -j DROP");
  });

  it("hostAliases reach every container's /etc/hosts, the sandbox's and with hostNetwork", async () => {
    const aliases = [{ ip: "10.0.0.5", hostnames: ["db", "db.internal"] }];
    const hostsPod = (out: string, spec: Partial<V1Pod["spec"]> = {}, annotations = {}): V1Pod => {
      const base = probePod(out, spec, annotations);
      const containers = (base.spec?.containers ?? []).map((c) => ({
        ...c,
        command: ["sh", "-c", `cat /etc/hosts >/out/hosts-${c.name}`],
      }));
      return { ...base, spec: { ...base.spec, containers, hostAliases: aliases } };
    };
    const entry = /^10\.0\.0\.5\s+db(\s|$)/m;
    const entry2 = /^10\.0\.0\.5\s+(db\s+)?db\.internal(\s|$)/m;
    const out = outDir();
    await runPod(hostsPod(out));
    for (const c of ["app", "side"]) {
      expect(read(join(out, `hosts-${c}`))).toMatch(entry);
      expect(read(join(out, `hosts-${c}`))).toMatch(entry2);
    }
    const hostOut = outDir();
    await runPod(hostsPod(hostOut, { hostNetwork: true }, { [HOST_NETWORK_ANNOTATION]: "true" }));
    expect(read(join(hostOut, "hosts-app"))).toMatch(entry);
    // The host's own /etc/hosts is not touched.
    expect(readFileSync("/etc/hosts", "utf8")).not.toMatch(entry);
  });

  it("dnsPolicy and dnsConfig reach every container's /etc/resolv.conf, as the kubelet writes it", async () => {
    const resolvPod = (out: string, spec: Partial<V1Pod["spec"]>): V1Pod => {
      const base = probePod(out);
      const containers = (base.spec?.containers ?? []).map((c) => ({
        ...c,
        command: ["sh", "-c", `cat /etc/resolv.conf >/out/resolv-${c.name}`],
      }));
      return { ...base, spec: { ...base.spec, containers, ...spec } };
    };
    const lines = (text: string) =>
      text
        .split("\n")
        .map((l) => l.trim().replace(/\s+/g, " "))
        .filter((l) => /^(nameserver|search|options) /.test(l))
        .sort(); // The runtime chooses the lines' order (podman writes search first).
    // ClusterFirst (the default) with a cluster DNS configured, and the Pod's dnsConfig merged.
    const cluster = outDir();
    await runPod(
      resolvPod(cluster, {
        dnsConfig: { searches: ["corp.example"], options: [{ name: "edns0" }] },
      }),
      { dns: { clusterDNS: ["10.96.0.10"] } },
    );
    for (const c of ["app", "side"]) {
      expect(lines(read(join(cluster, `resolv-${c}`))), c).toEqual([
        "nameserver 10.96.0.10",
        "options ndots:5 edns0",
        "search test.svc.cluster.local svc.cluster.local cluster.local corp.example",
      ]);
    }
    // None: exactly the Pod's dnsConfig, nothing of the host's.
    const none = outDir();
    await runPod(
      resolvPod(none, {
        dnsPolicy: "None",
        dnsConfig: {
          nameservers: ["10.0.0.53"],
          searches: ["a.example"],
          options: [{ name: "ndots", value: "2" }],
        },
      }),
    );
    expect(lines(read(join(none, "resolv-app")))).toEqual([
      "nameserver 10.0.0.53",
      "options ndots:2",
      "search a.example",
    ]);
  });

  it("with the hostNetwork opt-in, a container does reach IMDS (what the annotation grants)", async () => {
    const out = outDir();
    await runPod(probePod(out, { hostNetwork: true }, { [HOST_NETWORK_ANNOTATION]: "true" }));
    expect(read(join(out, "imds.rc")).trim()).toBe("0");
    expect(read(join(out, "imds"))).toContain(SECRET);
  });
});
