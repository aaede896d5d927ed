/**
 * The host agent of the host supervisor (src/supervisor/host-agent.sh) in real bash: the installed
 * supervisor sourced without its `main "$@"`, and a stand-in `nebula-agent` on PATH that records
 * its arguments, writes a fingerprint into its state directory as the real one does, and runs
 * until killed. The real agent (apps/host-agent) behind the real virtual node is apps/vnode's
 * exec.integration.test.ts.
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

const LIBRARY = supervisorScript({ delivery: "parameters" }).replace(/\nmain "\$@"\n$/, "\n");
const FP = "ab".repeat(32);
const CLIENT = "cd".repeat(32);

/**
 * Runs `body` in bash after sourcing the supervisor, as pod.sh would set the agent up (two
 * containers, a sandbox). `$T/bin/nebula-agent` records its arguments in $T/args (once its TERM
 * trap is set), writes $FP to `<state dir>/fingerprint` (unless $T/no-fingerprint exists) and runs
 * until killed (or exits at once with $T/exit-now).
 */
function bash(body: string): { out: string; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), "nebula-agent-"));
  dirs.push(dir);
  writeFileSync(join(dir, "lib.sh"), LIBRARY);
  execFileSync("mkdir", ["-p", join(dir, "bin")]);
  writeFileSync(
    join(dir, "bin/nebula-agent"),
    `#!/bin/bash
trap 'echo term >>"${dir}/signals"; exit 0' TERM
printf '%s\\n' "$*" >>"${dir}/args"
[ ! -e "${dir}/exit-now" ] || exit 3
while [ $# -gt 0 ]; do [ "$1" = --state-dir ] && state=$2; shift; done
[ -e "${dir}/no-fingerprint" ] || printf '%s' "${FP}" >"$state/fingerprint"
while :; do sleep 0.1; done
`,
    { mode: 0o755 },
  );
  const harness = `
T=${JSON.stringify(dir)}
. "$T/lib.sh"
export PATH="$T/bin:$PATH"
RUN=$T/run AGENT_DIR=$T/state/host-agent AGENT_RESTART_SECONDS=1
mkdir -p "$RUN"
AGENT_BIN=nebula-agent AGENT_PORT=10250 AGENT_CLIENT_FP=${CLIENT}
HOST_IP=10.0.0.7 INSTANCE_ID=i-0123456789abcdef0
POD_NAMESPACE=team-a POD_NAME=web-0 POD_UID=uid-1 N=2 NAMES=(app side) NET=container:abc
trap '[ -z "$AGENT_PID" ] || kill -9 "$AGENT_PID" 2>/dev/null' EXIT
log() { printf 'log: %s\\n' "$*" >>"$T/log"; }
${body}
`;
  const out = execFileSync("bash", ["-c", harness], { encoding: "utf8" });
  return { out, dir };
}
const read = (dir: string, name: string) =>
  existsSync(join(dir, name)) ? readFileSync(join(dir, name), "utf8") : "";

describe("host_agent_up: the agent for this host's Pod", () => {
  it("starts it on the private address with the Pod, its containers, the sandbox and the client fingerprints, and reads its certificate's fingerprint", () => {
    const { out, dir } = bash(`host_agent_up; echo "rc=$? fp=$AGENT_FP"`);
    expect(out).toBe(`rc=0 fp=${FP}\n`);
    expect(read(dir, "args").trim().split(" ")).toEqual([
      "--listen",
      "10.0.0.7:10250",
      "--state-dir",
      `${dir}/state/host-agent`,
      "--name",
      "i-0123456789abcdef0",
      "--client-fingerprint",
      CLIENT,
      "--namespace",
      "team-a",
      "--pod",
      "web-0",
      "--pod-uid",
      "uid-1",
      "--sandbox",
      "nebula-sandbox",
      "--container",
      "app=nebula-app",
      "--container",
      "side=nebula-side",
    ]);
    expect(read(dir, "log")).toMatch(
      new RegExp(`host agent \\(pid \\d+\\) on 10.0.0.7:10250, certificate sha256 ${FP}`),
    );
    // Its state directory (the key) is the supervisor's alone.
    expect(
      execFileSync("stat", ["-c", "%a", join(dir, "state/host-agent")], { encoding: "utf8" }),
    ).toBe("700\n");
  });

  it("gives a hostNetwork Pod's agent no sandbox (port-forward dials the host's loopback)", () => {
    const { dir } = bash(`NET=host; host_agent_up`);
    expect(read(dir, "args")).not.toContain("--sandbox");
  });

  it("reports the fingerprint with every report, in the nebula:agent tag", () => {
    const { out } = bash(`
      host_agent_up
      BODY=abc SEQ=4
      tag_pairs
      for j in "\${!KEYS[@]}"; do echo "\${KEYS[j]}=\${VALUES[j]}"; done
    `);
    expect(out.split("\n")).toContain(`nebula:agent=v1 port=10250 sha256=${FP}`);
    expect(out.split("\n")[0]).toMatch(/^nebula:report=v1 seq=4 chunks=1 sha256=[0-9a-f]{16}$/);
  });

  it("leaves the Pod running without exec when the host has no agent, saying what to install; no tag", () => {
    const { out, dir } = bash(`
      AGENT_BIN=/nonexistent/nebula-agent; host_agent_up; echo "rc=$? fp=[$AGENT_FP]"
      BODY=abc SEQ=1; tag_pairs; echo "tags=\${#KEYS[@]}"
    `);
    expect(out).toBe("rc=0 fp=[]\ntags=2\n");
    expect(read(dir, "log")).toContain(
      "the host agent cannot start: /nonexistent/nebula-agent is not on this host (deploy/host-image/install.sh --agent installs it)",
    );
  });

  it("says so when the agent ends before it has a certificate (bad flags, a taken port)", () => {
    const { out, dir } = bash(`touch "$T/exit-now"; host_agent_up; echo "rc=$? fp=[$AGENT_FP]"`);
    expect(out).toBe("rc=0 fp=[]\n");
    expect(read(dir, "log")).toContain("the host agent did not start");
  });

  it("ends an agent an earlier run of the supervisor left behind", () => {
    const { out } = bash(`
      cp "$(command -v sleep)" "$T/bin/ag"
      "$T/bin/ag" 300 &
      old=$!
      disown
      echo "$old" >"$RUN/host-agent.pid"
      AGENT_BIN=ag
      # (ag is a copy of sleep, so /proc/<pid>/exe names it; the new agent it starts is ag too.)
      host_agent_up 2>/dev/null
      for n in $(seq 10); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$old" 2>/dev/null && echo "old alive" || echo "old gone"
    `);
    expect(out).toBe("old gone\n");
  });
});

describe("host_agent_tick and host_agent_down", () => {
  it("starts an ended agent again after AGENT_RESTART_SECONDS, saying why once", () => {
    const { out, dir } = bash(`
      host_agent_up
      first=$AGENT_PID
      for n in $(seq 50); do [ -s "$T/args" ] && break; sleep 0.1; done
      kill -9 "$first"; wait "$first" 2>/dev/null
      host_agent_tick; echo "after first tick: $([ "$AGENT_PID" = "$first" ] && echo same)"
      sleep 1.2
      host_agent_tick
      [ "$AGENT_PID" != "$first" ] && kill -0 "$AGENT_PID" && echo restarted
      for n in $(seq 50); do [ "$(wc -l <"$T/args")" = 2 ] && break; sleep 0.1; done
    `);
    expect(out).toBe("after first tick: same\nrestarted\n");
    expect(read(dir, "args").trim().split("\n")).toHaveLength(2);
    expect(read(dir, "log").match(/the host agent ended; starting it again in 1s/g)).toHaveLength(
      1,
    );
  });

  it("stops it with SIGTERM when the Pod finishes, and forgets it", () => {
    const { out, dir } = bash(`
      host_agent_up
      pid=$AGENT_PID
      for n in $(seq 50); do [ -s "$T/args" ] && break; sleep 0.1; done
      host_agent_down
      kill -0 "$pid" 2>/dev/null && echo alive || echo gone
      echo "pid=[$AGENT_PID] file=$([ -e "$RUN/host-agent.pid" ] && echo kept || echo removed)"
      host_agent_tick; echo "tick: [$AGENT_PID]"
    `);
    expect(out).toBe("gone\npid=[] file=removed\ntick: []\n");
    expect(read(dir, "signals")).toBe("term\n");
  });
});
