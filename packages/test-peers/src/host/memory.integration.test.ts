import { readdirSync, readFileSync } from "node:fs";
import { DescribeInstancesCommand, EC2Client, RunInstancesCommand } from "@aws-sdk/client-ec2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MOTO_CREDENTIALS, type Moto, NEBULA_INSTANCE_PROFILE, startMoto } from "../moto.js";
import { type InstanceHosts, startInstanceHosts } from "./simulator.js";

// The incident ran 30 replicas; the simulator must hold 30 idle guests at once on this machine.
// This test starts them, checks every one is really up (unit active, container running), and
// prints what they cost in memory. It asserts no memory figure: it reports one.
const GUESTS = 30;

const USER_DATA = `#!/bin/bash
set -euo pipefail
mkdir -p /usr/local/lib/nebula
cat >/usr/local/lib/nebula/supervisor.sh <<'SUPERVISOR'
#!/bin/bash
docker run -d --name app busybox sh -c 'while :; do sleep 5; done' >/dev/null
echo "idle: app running=$(docker inspect --format '{{.State.Running}}' app)" >>/dev/console
trap 'docker stop -t 1 app >/dev/null; exit 0' TERM
while :; do sleep 5 & wait $!; done
SUPERVISOR
chmod 755 /usr/local/lib/nebula/supervisor.sh
cat >/etc/systemd/system/nebula-supervisor.service <<'UNIT'
[Service]
ExecStart=/usr/local/lib/nebula/supervisor.sh
KillMode=mixed
TimeoutStopSec=30
UNIT
systemctl enable --now --no-block nebula-supervisor.service
`;

let moto: Moto;
let hosts: InstanceHosts;
let ec2: EC2Client;

beforeAll(async () => {
  moto = await startMoto();
  hosts = await startInstanceHosts({
    ec2Endpoint: moto.endpoint,
    region: moto.region,
    bootDelayMs: 500,
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
  await moto?.stop();
});

function memAvailableKiB(): number {
  const line = readFileSync("/proc/meminfo", "utf8")
    .split("\n")
    .find((l) => l.startsWith("MemAvailable:"));
  return Number(line?.split(/\s+/)[1] ?? 0);
}

/** Proportional set size of a process in KiB (0 if it is gone). */
function pssKiB(pid: number): number {
  try {
    const line = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8")
      .split("\n")
      .find((l) => l.startsWith("Pss:"));
    return Number(line?.split(/\s+/)[1] ?? 0);
  } catch {
    return 0;
  }
}

/** Every live process as pid → [ppid, pgid]. */
function processTable(): Map<number, [number, number]> {
  const table = new Map<number, [number, number]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      table.set(Number(entry), [Number(fields[1]), Number(fields[2])]);
    } catch {
      // Exited meanwhile.
    }
  }
  return table;
}

/** PIDs of the conmon processes of these guests' containers (named `nsim-<instance>--<name>`). */
function conmonPidsOf(
  instanceIds: readonly string[],
  table: Map<number, [number, number]>,
): number[] {
  const prefixes = instanceIds.map((id) => `nsim-${id}--`);
  const found: number[] = [];
  for (const pid of table.keys()) {
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    } catch {
      continue; // Exited meanwhile.
    }
    if (!argv[0]?.endsWith("conmon")) continue;
    const name = argv[argv.indexOf("-n") + 1] ?? "";
    if (argv.includes("-n") && prefixes.some((prefix) => name.startsWith(prefix))) found.push(pid);
  }
  return found;
}

function withDescendants(
  roots: Iterable<number>,
  table: Map<number, [number, number]>,
): Set<number> {
  const found = new Set(roots);
  let grew = true;
  while (grew) {
    grew = false;
    for (const [pid, [ppid]] of table) {
      if (!found.has(pid) && found.has(ppid)) {
        found.add(pid);
        grew = true;
      }
    }
  }
  return found;
}

describe(`${GUESTS} idle guests`, () => {
  it("all boot, run their unit and container, and their memory is reported", {
    timeout: 600_000,
  }, async () => {
    const before = memAvailableKiB();
    const launchedAt = Date.now();
    const rssBefore = process.memoryUsage().rss;
    const launched = await ec2.send(
      new RunInstancesCommand({
        ImageId: "ami-12345678",
        MinCount: GUESTS,
        MaxCount: GUESTS,
        UserData: Buffer.from(USER_DATA).toString("base64"),
        IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
        MetadataOptions: { HttpTokens: "required" },
        TagSpecifications: [
          {
            ResourceType: "instance",
            Tags: [
              { Key: "nebula:cluster", Value: "memory" },
              { Key: "nebula:pod-uid", Value: "replica" },
            ],
          },
        ],
      }),
    );
    const ids = (launched.Instances ?? []).map((i) => i.InstanceId ?? "");
    expect(ids).toHaveLength(GUESTS);
    for (const id of ids) {
      const guest = await hosts.waitForPhase(id, "running", 300_000);
      const deadline = Date.now() + 300_000;
      while (!guest.console().includes("idle: app running=true")) {
        if (Date.now() > deadline) throw new Error(`${id} never got idle:\n${guest.console()}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
    const allIdleSeconds = (Date.now() - launchedAt) / 1000;
    const described = await ec2.send(new DescribeInstancesCommand({ InstanceIds: ids }));
    const states = (described.Reservations ?? []).flatMap((r) =>
      (r.Instances ?? []).map((i) => i.State?.Name),
    );
    expect(states).toEqual(Array(GUESTS).fill("running"));
    const guests = ids.map((id) => hosts.guest(id));
    expect(guests.every((g) => g?.units()[0]?.state === "active")).toBe(true);

    // Let the boot settle, then measure.
    await new Promise((resolve) => setTimeout(resolve, 5000));
    const table = processTable();
    const unitGroups = new Set(guests.map((g) => g?.units()[0]?.pid ?? -1));
    const guestPids = [...table].filter(([, [, pgid]]) => unitGroups.has(pgid)).map(([pid]) => pid);
    // This run's containers, found by their conmon processes (`-n nsim-<instance>--<name>`) rather
    // than by `podman ps`, which loads every container in the storage and fails on other suites'
    // containers whose network namespaces live in their own guests' mount namespaces.
    const containerRoots = conmonPidsOf(ids, table);
    const containerPids = withDescendants(containerRoots, table);
    const guestPss = guestPids.reduce((sum, pid) => sum + pssKiB(pid), 0);
    const containerPss = [...containerPids].reduce((sum, pid) => sum + pssKiB(pid), 0);
    const nodeGrowth = Math.round((process.memoryUsage().rss - rssBefore) / 1024);
    const systemDrop = before - memAvailableKiB();
    const figures = {
      guests: GUESTS,
      launchToAllIdleSeconds: +allIdleSeconds.toFixed(1),
      guestProcesses: guestPids.length,
      guestPssMiB: +(guestPss / 1024).toFixed(1),
      containerProcesses: containerPids.size,
      containerAndConmonPssMiB: +(containerPss / 1024).toFixed(1),
      simulatorRssGrowthMiB: +(nodeGrowth / 1024).toFixed(1),
      memAvailableDropMiB: +(systemDrop / 1024).toFixed(1),
      perGuestMiB: +((guestPss + containerPss + nodeGrowth) / 1024 / GUESTS).toFixed(2),
    };
    console.log(
      `instance-host simulator memory, ${GUESTS} idle guests: ${JSON.stringify(figures)}`,
    );
    // One conmon per guest, and under each at least the container's own process.
    expect(containerRoots.length).toBeGreaterThanOrEqual(GUESTS);
    expect(containerPids.size).toBeGreaterThanOrEqual(GUESTS * 2);
  });
});
