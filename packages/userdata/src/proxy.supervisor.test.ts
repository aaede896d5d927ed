/**
 * The service proxy of the host supervisor (src/supervisor/proxy.sh) in real bash, with real
 * nsenter: the installed supervisor sourced without its `main "$@"`; `docker inspect` names a
 * process of the test as the sandbox (so nsenter enters this test's own network namespace), and
 * kube-proxy and iptables are stand-ins on PATH that record what they are given. The real
 * kube-proxy in a real Pod sandbox is apps/vnode's services.integration.test.ts.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { supervisorScript } from "./index.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const LIBRARY = supervisorScript().replace(/\nmain "\$@"\n$/, "\n");
const CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

/**
 * Runs `body` in bash after sourcing the supervisor, as pod.sh would set the proxy up. `$T/bin`
 * is first on PATH: `kube-proxy` records its arguments in $T/args (once its TERM trap is set) and
 * runs until killed (or exits at once with $T/exit-now); `iptables` shows the synced chain once $T/synced exists. The sandbox
 * is a `sleep` of the test (its pid in $SANDBOX_PID), ended with the script.
 */
function bash(body: string): { out: string; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), "nebula-proxy-"));
  dirs.push(dir);
  writeFileSync(join(dir, "lib.sh"), LIBRARY);
  execFileSync("mkdir", ["-p", join(dir, "bin")]);
  writeFileSync(
    join(dir, "bin/kube-proxy"),
    `#!/bin/bash\ntrap 'echo term >>"${dir}/signals"; exit 0' TERM\nprintf '%s\\n' "$*" >>"${dir}/args"\n[ ! -e "${dir}/exit-now" ] || exit 3\nwhile :; do sleep 0.1; done\n`,
    { mode: 0o755 },
  );
  writeFileSync(
    join(dir, "bin/iptables"),
    `#!/bin/bash\n[ "$*" = "-w 5 -t nat -S KUBE-POSTROUTING" ] && [ -e "${dir}/synced" ] && echo '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully'\nexit 0\n`,
    { mode: 0o755 },
  );
  const harness = `
T=${JSON.stringify(dir)}
. "$T/lib.sh"
export PATH="$T/bin:$PATH"
RUN=$T/run SECRETS=$T/secrets PROXY_DIR=$T/secrets/service-proxy PROXY_SYNC_SECONDS=2 PROXY_RESTART_SECONDS=1
mkdir -p "$RUN" "$SECRETS"
PROXY_SERVER=https://10.1.2.3:6443
PROXY_CA=${Buffer.from(CA).toString("base64")}
PROXY_NODE=nebula
PROXY_BIN=kube-proxy
PROXY_TOKEN=$T/secrets/service-proxy/token
sleep 60 &
SANDBOX_PID=$!
trap 'kill $SANDBOX_PID 2>/dev/null; [ -z "$PROXY_PID" ] || kill -9 "$PROXY_PID" 2>/dev/null' EXIT
docker() { [ "$1 $2 $3" = "inspect --format {{.State.Pid}}" ] && echo "$SANDBOX_PID"; }
log() { printf 'log: %s\\n' "$*" >>"$T/log"; }
${body}
`;
  const out = execFileSync("bash", ["-c", harness], { encoding: "utf8" });
  return { out, dir };
}
const read = (dir: string, name: string) =>
  existsSync(join(dir, name)) ? readFileSync(join(dir, name), "utf8") : "";

describe("proxy_up: kube-proxy in the sandbox's network namespace", () => {
  it("writes its kubeconfig (the API server, its CA, the token file) and starts it with the flags that keep it to the namespace, then waits for the first sync", () => {
    const { out, dir } = bash(`
      ( sleep 0.5; touch "$T/synced" ) &
      proxy_up; echo "rc=$?"
      echo "pid=$([ "$(cat "$RUN/service-proxy.pid")" = "$PROXY_PID" ] && echo same)"
    `);
    expect(out).toContain("rc=0\npid=same\n");
    const kubeconfig = read(dir, "secrets/service-proxy/kubeconfig");
    expect(kubeconfig).toContain("    server: https://10.1.2.3:6443\n");
    expect(kubeconfig).toContain(
      `    certificate-authority: ${dir}/secrets/service-proxy/ca.crt\n`,
    );
    expect(kubeconfig).toContain(`    tokenFile: ${dir}/secrets/service-proxy/token\n`);
    expect(kubeconfig).toContain("current-context: service-proxy\n");
    expect(read(dir, "secrets/service-proxy/ca.crt")).toBe(CA);
    expect(read(dir, "args").trim().split(" ")).toEqual([
      `--kubeconfig=${dir}/secrets/service-proxy/kubeconfig`,
      "--hostname-override=nebula",
      "--proxy-mode=iptables",
      "--metrics-bind-address=",
      "--healthz-bind-address=",
      "--conntrack-max-per-core=0",
      "--conntrack-tcp-timeout-established=0",
      "--conntrack-tcp-timeout-close-wait=0",
      "--iptables-localhost-nodeports=false",
      "--nodeport-addresses=255.255.255.255/32,::/128",
    ]);
    expect(read(dir, "log")).toMatch(/service proxy \(kube-proxy, pid \d+\) synced/);
  });

  it("lets the containers start when it has not synced in time, saying so", () => {
    const { out, dir } = bash(`proxy_up; echo "rc=$?"`);
    expect(out).toBe("rc=0\n");
    expect(read(dir, "log")).toContain("the service proxy has not synced within 2s");
  });

  it("fails the sandbox with what to do when the host has no kube-proxy", () => {
    const { out } = bash(`PROXY_BIN=/nonexistent/kube-proxy; proxy_up; echo "rc=$? $SANDBOX_ERR"`);
    expect(out).toBe(
      "rc=1 the service proxy cannot start: /nonexistent/kube-proxy is not on this host (the host AMI needs kube-proxy; deploy/host-image/install.sh installs it)\n",
    );
  });

  it("ends a proxy an earlier run of the supervisor left in the old sandbox's namespace", () => {
    const { out } = bash(`
      cp "$(command -v sleep)" "$T/bin/kp"
      "$T/bin/kp" 300 &
      old=$!
      disown
      echo "$old" >"$RUN/service-proxy.pid"
      PROXY_BIN=kp
      proxy_up
      for n in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$old" 2>/dev/null && echo "old alive" || echo "old gone"
    `);
    // (kp is a copy of sleep, so /proc/<pid>/exe names it, as it names a real kube-proxy.)
    expect(out).toBe("old gone\n");
  });
});

describe("proxy_tick and proxy_down", () => {
  it("starts an ended proxy again after PROXY_RESTART_SECONDS, saying why once", () => {
    const { out, dir } = bash(`
      touch "$T/synced"
      proxy_up
      first=$PROXY_PID
      # The stand-in has recorded its start (the sync it is killed after is the test's, not its).
      for n in $(seq 50); do [ -s "$T/args" ] && break; sleep 0.1; done
      kill -9 "$first"; wait "$first" 2>/dev/null
      proxy_tick; echo "after first tick: $([ "$PROXY_PID" = "$first" ] && echo same)"
      sleep 1.2
      proxy_tick
      [ "$PROXY_PID" != "$first" ] && kill -0 "$PROXY_PID" && echo restarted
      for n in $(seq 50); do [ "$(wc -l <"$T/args")" = 2 ] && break; sleep 0.1; done
    `);
    expect(out).toBe("after first tick: same\nrestarted\n");
    expect(read(dir, "args").trim().split("\n")).toHaveLength(2);
    expect(
      read(dir, "log").match(/the service proxy ended; starting it again in 1s/g),
    ).toHaveLength(1);
  });

  it("stops it with SIGTERM before the sandbox goes, and forgets it", () => {
    const { out, dir } = bash(`
      touch "$T/synced"
      proxy_up
      pid=$PROXY_PID
      for n in $(seq 50); do [ -s "$T/args" ] && break; sleep 0.1; done
      proxy_down
      kill -0 "$pid" 2>/dev/null && echo alive || echo gone
      echo "pid=[$PROXY_PID] file=$([ -e "$RUN/service-proxy.pid" ] && echo kept || echo removed)"
      proxy_tick; echo "tick: [$PROXY_PID]"
    `);
    expect(out).toBe("gone\npid=[] file=removed\ntick: []\n");
    expect(read(dir, "signals")).toBe("term\n");
  });

  it("runs nothing more when kube-proxy exits at once (bad flags, no credentials): the containers start", () => {
    const { out, dir } = bash(`touch "$T/exit-now"; proxy_up; echo "rc=$?"`);
    expect(out).toBe("rc=0\n");
    expect(read(dir, "log")).toContain("the service proxy ended before its first sync");
  });
});
