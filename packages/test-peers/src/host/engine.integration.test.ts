/**
 * A guest killed while its `docker start` is in flight leaves nothing behind. podman has no
 * daemon: a `podman start` killed after `runc create` and before it records the container as
 * running leaves a container podman forgets while conmon and `runc init` live on (two CI runs left
 * such a conmon). The OCI runtime here is runc behind a wrapper that holds the end of `runc create`
 * for as long as the test says, so the kill lands in that window every time.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EC2Client, TerminateInstancesCommand } from "@aws-sdk/client-ec2";
import { afterAll, beforeAll, expect, it } from "vitest";
import { MOTO_CREDENTIALS, type Moto, startMoto } from "../moto.js";
import { launch, processesMatching } from "../testing/guests.js";
import { GUEST_PAUSE_IMAGE } from "./images.js";
import { dockerShim, WATCHDOG_SCRIPT } from "./shims.js";
import { startInstanceHosts } from "./simulator.js";

let moto: Moto;
let dir: string;

beforeAll(async () => {
  moto = await startMoto();
  dir = mkdtempSync(join(tmpdir(), "nebula-engine-kill-"));
});

afterAll(async () => {
  await moto?.stop();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/**
 * runc, but after `runc create` has made the container (conmon and `runc init` alive, podman not
 * yet told) it records the container's ID in `<dir>/creating/` and holds `holdSeconds`: podman's
 * `docker run` is then in the window where a kill makes podman forget a container that runs.
 */
function slowCreateRuntime(name: string, holdSeconds: number): string {
  const path = join(dir, name);
  writeFileSync(
    path,
    [
      "#!/bin/bash",
      '/usr/sbin/runc "$@"',
      "rc=$? held=",
      'for a; do [ "$a" != create ] || held=1; done',
      'if [ -n "$held" ]; then',
      `  mkdir -p ${dir}/creating; : >"${dir}/creating/$a"`,
      `  sleep ${holdSeconds}`,
      "fi",
      'exit "$rc"',
      "",
    ].join("\n"),
    { mode: 0o755 },
  );
  return path;
}

/** runc's containers made for this guest (their `--cidfile` annotation names the instance). */
function runcStates(containersDir: string, instanceId: string): string[] {
  const prefix = `io.podman.annotations.cid-file=${containersDir}/${instanceId}.`;
  return readdirSync("/run/runc").filter((id) => {
    try {
      return readFileSync(join("/run/runc", id, "state.json"), "utf8").includes(prefix);
    } catch {
      return false;
    }
  });
}

async function runGuest(
  holdSeconds: number,
  engineGraceMs: number,
): Promise<{ events: string; id: string; containers: string }> {
  const workDir = mkdtempSync(join(dir, "hosts-"));
  const hosts = await startInstanceHosts({
    ec2Endpoint: moto.endpoint,
    region: moto.region,
    bootDelayMs: 100,
    workDir,
    runtime: slowCreateRuntime(`runc-${holdSeconds}`, holdSeconds),
    engineGraceMs,
  });
  const ec2 = new EC2Client({
    endpoint: hosts.ec2Endpoint,
    region: moto.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
  try {
    // A Pod sandbox with a network namespace of its own, as the supervisor makes one.
    const id = await launch(
      ec2,
      `#!/bin/bash\ndocker run -d --name sandbox --network=bridge ${GUEST_PAUSE_IMAGE}\n`,
      { cluster: "engine-test", podUid: "pod-engine" },
    );
    const guest = await hosts.waitForPhase(id, "running");
    const creating = join(dir, "creating");
    for (let tries = 0; !existsSync(creating) || readdirSync(creating).length === 0; tries++) {
      expect(tries, guest.console()).toBeLessThan(600);
      await new Promise((r) => setTimeout(r, 50));
    }
    rmSync(creating, { recursive: true, force: true });
    // `docker run` waits for `runc create` now: terminate the instance under it.
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
    await hosts.waitForPhase(id, "terminated", 60_000);
    // The guest is torn down (containers removed, orphans reaped) by the time close() returns.
    await hosts.close();
    return {
      events: readFileSync(guest.eventsPath, "utf8"),
      id,
      containers: join(workDir, "containers"),
    };
  } finally {
    ec2.destroy();
    await hosts.close();
  }
}

it("a terminate during `docker run` lets the run finish, then removes the container: no conmon, runc state or namespace is left", async () => {
  const { events, id, containers } = await runGuest(2, 20_000);
  expect(events).toMatch(/user-data exited/);
  expect(events).not.toMatch(/podman still busy/);
  expect(events).not.toMatch(/outlived podman's record/);
  expect(processesMatching(`conmon .*-n nsim-${id}--`)).toEqual([]);
  expect(runcStates(containers, id)).toEqual([]);
});

it("a `docker run` that outlasts the grace is killed, and what podman then forgot is reaped: its conmon, runc state and network namespace", async () => {
  const namespacesBefore = new Set(readdirSync("/run/netns"));
  const { events, id, containers } = await runGuest(600, 1_000);
  expect(events).toMatch(
    /podman still busy 1000 ms into a kill; killing it: .*podman .*(run|start) /,
  );
  expect(events).toMatch(/outlived podman's record of it .*removed \/run\/netns\/netns-/);
  expect(processesMatching(`conmon .*-n nsim-${id}--`)).toEqual([]);
  expect(runcStates(containers, id)).toEqual([]);
  expect(processesMatching(`${dir}/runc-600`)).toEqual([]);
  const reaped = events.match(/removed (\/run\/netns\/[^\s,]+)/)?.[1] ?? "";
  expect(namespacesBefore.has(reaped.slice("/run/netns/".length))).toBe(false);
  expect(existsSync(reaped)).toBe(false);
});

it("the watchdog (the simulator's process died) kills a `docker run` half-way, then ends what podman forgot", async () => {
  const runId = `eng${Date.now().toString(36)}`;
  const work = mkdtempSync(join(dir, "watchdog-"));
  const containersDir = join(work, "containers");
  const runtime = slowCreateRuntime("runc-watchdog", 600);
  const docker = join(work, "docker");
  writeFileSync(
    docker,
    dockerShim({
      instanceId: "i-watchdog",
      runId,
      stateDir: join(work, "state"),
      containersDir,
      runtime,
      nofile: "",
      nproc: "",
      network: "host",
    }),
    { mode: 0o755 },
  );
  const guest = spawn(docker, ["run", "-d", "--network=bridge", GUEST_PAUSE_IMAGE], {
    detached: true,
    stdio: "ignore",
  });
  const creating = join(dir, "creating");
  for (let tries = 0; !existsSync(creating) || readdirSync(creating).length === 0; tries++) {
    expect(tries).toBeLessThan(600);
    await new Promise((r) => setTimeout(r, 50));
  }
  const id = readdirSync(creating)[0] ?? "";
  rmSync(creating, { recursive: true, force: true });
  const netns = readFileSync(join("/run/runc", id, "state.json"), "utf8").match(
    /"(\/run\/netns\/[^"]+)"/,
  )?.[1];
  expect(netns).toBeDefined();
  writeFileSync(join(work, "pgids"), `${guest.pid}\n`);
  const parent = spawn("sleep", ["600"], { stdio: "ignore" });
  const watchdog = spawn(
    "bash",
    ["-c", WATCHDOG_SCRIPT, "watchdog", String(parent.pid), join(work, "pgids"), runId, runtime],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let stderr = "";
  watchdog.stderr?.on("data", (chunk) => {
    stderr += String(chunk);
  });
  const done = new Promise((resolve) => watchdog.once("exit", resolve));
  parent.kill("SIGKILL");
  await done;
  expect(stderr).toMatch(new RegExp(`ended container ${id}, which podman had forgotten`));
  expect(processesMatching(`conmon .*-c ${id}`)).toEqual([]);
  expect(existsSync(join("/run/runc", id))).toBe(false);
  expect(existsSync(netns ?? "")).toBe(false);
  expect(processesMatching(runtime)).toEqual([]);
});
