/**
 * The simulator's boot and pull made as slow as a test asks (issue #32: a warm pool's hosts
 * against cold launches): a first boot waits `firstBootDelayMs`, a restart `restartBootDelayMs`,
 * and a pull of an image the guest's volume does not hold yet `pullDelayMs`, once per guest.
 *
 * Boot delays are asserted through the order of events: the test arms timers of its own beside
 * the guest's boot timer, in this same process, and Node runs due timers in the order they fall
 * due, however loaded the machine is. A timer of a boot's delay armed before the launch (or the
 * StartInstances) fires before that boot's delay is over, since the guest's timer is armed later;
 * one armed after StartInstances has answered (the proxy begins the boot before it answers) with
 * a longer delay fires after it. The `beforeBoot` hook marks the end of a guest's boot delay.
 * Measured durations are lower bounds only: from the guest's discovery (several moto calls before
 * its boot begins) to the end of its first boot's delay, and around a guest's `docker` command,
 * which spans its wait.
 */
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import {
  DescribeInstancesCommand,
  EC2Client,
  StartInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MOTO_CREDENTIALS } from "../moto.js";
import { launch } from "../testing/guests.js";
import { useTestPeers } from "../vitest.js";
import { type InstanceHosts, startInstanceHosts } from "./simulator.js";

const RUN = randomBytes(4).toString("hex");
const CLUSTER = `slow-boot-${RUN}`;
const BOOT_MS = 100;
const FIRST_BOOT_MS = 1500;
const RESTART_BOOT_MS = 600;
const PULL_MS = 1000;

const { moto } = useTestPeers();
let hosts: InstanceHosts;
let ec2: EC2Client;
/** What happened, in order: the test's timers and the ends of the guests' boot delays. */
const order: string[] = [];
/** When each guest's boot delays were over (`Date.now()`), in order. */
const delayOverAt = new Map<string, number[]>();
/** While set, a guest whose boot delay is over stays booting (EC2 `pending`) until it resolves. */
let gate: Promise<void> | undefined;

beforeAll(async () => {
  hosts = await startInstanceHosts({
    ec2Endpoint: moto.endpoint,
    region: moto.region,
    cluster: CLUSTER,
    bootDelayMs: BOOT_MS,
    firstBootDelayMs: FIRST_BOOT_MS,
    restartBootDelayMs: RESTART_BOOT_MS,
    pullDelayMs: PULL_MS,
    beforeBoot: async (instanceId) => {
      order.push(`boot delay over: ${instanceId}`);
      delayOverAt.set(instanceId, [...(delayOverAt.get(instanceId) ?? []), Date.now()]);
      await gate;
    },
  });
  ec2 = new EC2Client({
    endpoint: hosts.ec2Endpoint,
    region: moto.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
});

afterAll(async () => {
  ec2?.destroy();
  await hosts?.close();
});

/** A timer of the test's own: after `ms`, `label` goes into {@link order}. */
function mark(label: string, ms: number): Promise<void> {
  return new Promise((resolve) =>
    setTimeout(() => {
      order.push(label);
      resolve();
    }, ms),
  );
}

/** A gate for the next boots, and the function that opens it. */
function closeGate(): () => void {
  let open: () => void = () => {};
  gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  return () => {
    gate = undefined;
    open();
  };
}

async function stateOf(id: string): Promise<string | undefined> {
  const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
  return out.Reservations?.[0]?.Instances?.[0]?.State?.Name;
}

/** Whether each marker occurs in `text` after the one before it. */
function inOrder(text: string, markers: readonly string[]): boolean {
  let from = 0;
  for (const marker of markers) {
    const at = text.indexOf(marker, from);
    if (at < 0) return false;
    from = at + marker.length;
  }
  return true;
}

/** Microseconds between the two `$EPOCHREALTIME` stamps a guest wrote to a file. */
function elapsedMicros(path: string): number {
  const [start = "", end = ""] = readFileSync(path, "utf8").trim().split(" ");
  return Math.round(Number(end) * 1e6) - Math.round(Number(start) * 1e6);
}

async function until(what: string, probe: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// Guest A: pulls busybox on its first boot (the volume holds nothing yet), pulls it again, enables
// a unit that asks for it on every boot, and powers off.
const USER_DATA_A = `#!/bin/bash
out=/var/lib/nebula/out; mkdir -p "$out"
docker image inspect --format '{{.Id}}' busybox >"$out/inspect-1" 2>&1; echo "exit $?" >>"$out/inspect-1"
t0=$EPOCHREALTIME
docker pull busybox >"$out/pull-1" 2>&1
t1=$EPOCHREALTIME
echo "$t0 $t1" >"$out/pull-1.times"
docker pull busybox >"$out/pull-2" 2>&1
cat >/usr/local/lib/nebula/again.sh <<'SCRIPT'
#!/bin/bash
out=/var/lib/nebula/out
docker image inspect --format '{{.Id}}' busybox >"$out/inspect-3" 2>&1
docker pull busybox >"$out/pull-3" 2>&1
docker run --rm busybox true 2>"$out/run-3.err"
echo "again: done" >>/dev/console
SCRIPT
chmod 755 /usr/local/lib/nebula/again.sh
printf '[Service]\\nExecStart=/usr/local/lib/nebula/again.sh\\n' >/etc/systemd/system/again.service
systemctl enable again.service
shutdown -h now
`;

// Guest B: the implicit pull of docker run, on a volume of its own, then an explicit pull.
const USER_DATA_B = `#!/bin/bash
out=/var/lib/nebula/out; mkdir -p "$out"
t0=$EPOCHREALTIME
docker run --rm busybox echo ran >"$out/run" 2>"$out/run.err"
t1=$EPOCHREALTIME
echo "$t0 $t1" >"$out/run.times"
docker pull busybox >"$out/pull" 2>&1
shutdown -h now
`;

describe("startInstanceHosts with realistic boot and pull times", () => {
  it("waits firstBootDelayMs on a first boot and restartBootDelayMs on a restart (pending meanwhile), and pulls an image once per guest's volume, kept across a stop and start", async () => {
    const openFirst = closeGate();
    // Armed before the launches: it fires before either guest's first boot delay is over.
    const firstBootMs = mark("test: first-boot delay since before the launches", FIRST_BOOT_MS);
    const [a, b] = await Promise.all([
      launch(ec2, USER_DATA_A, { cluster: CLUSTER, podUid: "uid-a" }),
      launch(ec2, USER_DATA_B, { cluster: CLUSTER, podUid: "uid-b" }),
    ]);
    // Booting (its delay, then the gate until this is seen): EC2 says pending.
    expect(await stateOf(a)).toBe("pending");
    expect(await stateOf(b)).toBe("pending");
    openFirst();
    await firstBootMs;
    const [guestA, guestB] = await Promise.all([
      hosts.waitForPhase(a, "off"),
      hosts.waitForPhase(b, "off"),
    ]);
    expect(order).toHaveLength(3);
    expect(order[0]).toBe("test: first-boot delay since before the launches");
    expect(order.slice(1).sort()).toEqual(
      [`boot delay over: ${a}`, `boot delay over: ${b}`].sort(),
    );
    // Measured from each guest's discovery: the first boot's delay is in it, whole.
    for (const guest of [guestA, guestB]) {
      const discovered = guest.history[0]?.at ?? Number.NaN;
      const over = delayOverAt.get(guest.instanceId)?.[0] ?? Number.NaN;
      expect(over - discovered).toBeGreaterThanOrEqual(FIRST_BOOT_MS);
    }

    // Guest A: the first pull waited, the second did not; its volume holds busybox now.
    const outA = join(guestA.dir, "root/var/lib/nebula/out");
    expect(readFileSync(join(outA, "inspect-1"), "utf8")).toBe(
      "Error: No such image: busybox\nexit 1\n",
    );
    expect(readFileSync(join(outA, "pull-1"), "utf8")).toBe(
      "Status: Downloaded newer image for busybox\nbusybox\n",
    );
    expect(elapsedMicros(join(outA, "pull-1.times"))).toBeGreaterThanOrEqual(PULL_MS * 1000);
    expect(readFileSync(join(outA, "pull-2"), "utf8")).toBe(
      "Status: Image is up to date for busybox\nbusybox\n",
    );
    const held = readdirSync(join(guestA.dir, "root/var/lib/docker/nebula-sim-images")).filter(
      (f) => !f.startsWith("."),
    );
    expect(held).toHaveLength(1);

    // Guest B pays again, through docker run's implicit pull; then it holds the image too.
    const outB = join(guestB.dir, "root/var/lib/nebula/out");
    expect(readFileSync(join(outB, "run"), "utf8")).toBe("ran\n");
    expect(readFileSync(join(outB, "run.err"), "utf8")).toBe(
      "Unable to find image 'busybox:latest' locally\nStatus: Downloaded newer image for busybox:latest\n",
    );
    expect(elapsedMicros(join(outB, "run.times"))).toBeGreaterThanOrEqual(PULL_MS * 1000);
    expect(readFileSync(join(outB, "pull"), "utf8")).toBe(
      "Status: Image is up to date for busybox\nbusybox\n",
    );

    // A restart: its own delay, at least restartBootDelayMs and shorter than a first boot's.
    const openRestart = closeGate();
    const restartMs = mark("test: restart delay since before StartInstances", RESTART_BOOT_MS);
    await ec2.send(new StartInstancesCommand({ InstanceIds: [a] }));
    const between = mark(
      "test: between the two delays since StartInstances answered",
      (RESTART_BOOT_MS + FIRST_BOOT_MS) / 2,
    );
    expect(await stateOf(a)).toBe("pending");
    openRestart();
    await Promise.all([restartMs, between]);
    await hosts.waitForPhase(a, "running");
    expect(order.slice(3)).toEqual([
      "test: restart delay since before StartInstances",
      `boot delay over: ${a}`,
      "test: between the two delays since StartInstances answered",
    ]);

    // The unit ran on the restart: the volume still held busybox, so nothing was pulled.
    await until("the unit of the restart", () => guestA.console().includes("again: done"));
    expect(readFileSync(join(outA, "inspect-3"), "utf8")).toBe(`${held[0]}\n`);
    expect(readFileSync(join(outA, "pull-3"), "utf8")).toBe(
      "Status: Image is up to date for busybox\nbusybox\n",
    );
    expect(readFileSync(join(outA, "run-3.err"), "utf8")).toBe("");
    expect(guestA.history.map((h) => h.phase)).toEqual([
      "booting",
      "running",
      "stopping",
      "off",
      "booting",
      "running",
    ]);
    const eventsA = readFileSync(guestA.eventsPath, "utf8");
    expect(
      inOrder(eventsA, [
        `boot 1 (first boot, after RunInstances): pending for ${FIRST_BOOT_MS} ms`,
        "phase running",
        `docker pull busybox: image ${held[0]?.slice(0, 12)} is not on this host's volume: downloading (${PULL_MS} ms)`,
        "downloaded; on this host's volume from now on",
        "is on this host's volume: no download",
        "phase off",
        "started again (StartInstances)",
        `boot 2 (a restart, after StartInstances): pending for ${RESTART_BOOT_MS} ms`,
        "phase running",
        "docker pull busybox: image",
        "is on this host's volume: no download",
      ]),
    ).toBe(true);
    expect(eventsA.split("downloading (").length).toBe(2);
    const eventsB = readFileSync(guestB.eventsPath, "utf8");
    expect(eventsB.split("downloading (").length).toBe(2);

    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [a, b] }));
    await Promise.all([hosts.waitForPhase(a, "terminated"), hosts.waitForPhase(b, "terminated")]);
  });
});
