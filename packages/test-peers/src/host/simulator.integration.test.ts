import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  CreateTagsCommand,
  DescribeInstancesCommand,
  EC2Client,
  GetConsoleOutputCommand,
  type Instance,
  RunInstancesCommand,
  StartInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEc2Proxy } from "../ec2-proxy.js";
import { TestPeerError } from "../errors.js";
import { MOTO_CREDENTIALS, type Moto, NEBULA_INSTANCE_PROFILE, startMoto } from "../moto.js";
import type { InstanceHosts } from "./simulator.js";
import { startInstanceHosts } from "./simulator.js";

let moto: Moto;
let hosts: InstanceHosts;
let ec2: EC2Client;
/** While set, guests stay booting (EC2 `pending`) until it resolves. */
let holdBoot: Promise<void> | undefined;

beforeAll(async () => {
  moto = await startMoto();
  hosts = await startInstanceHosts({
    ec2Endpoint: moto.endpoint,
    region: moto.region,
    bootDelayMs: 500,
    beforeBoot: () => holdBoot,
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

async function launch(
  userData: string,
  podUid: string,
  market: "on-demand" | "spot" = "on-demand",
): Promise<string> {
  const out = await ec2.send(
    new RunInstancesCommand({
      ...(market === "spot"
        ? {
            InstanceMarketOptions: {
              MarketType: "spot",
              SpotOptions: {
                SpotInstanceType: "one-time",
                InstanceInterruptionBehavior: "terminate",
              },
            },
          }
        : {}),
      ImageId: "ami-12345678",
      InstanceType: "m5.large",
      MinCount: 1,
      MaxCount: 1,
      ClientToken: podUid,
      UserData: Buffer.from(userData).toString("base64"),
      IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
      InstanceInitiatedShutdownBehavior: "stop",
      MetadataOptions: { HttpTokens: "required", HttpPutResponseHopLimit: 1 },
      TagSpecifications: [
        {
          ResourceType: "instance",
          Tags: [
            { Key: "nebula:cluster", Value: "sim-test" },
            { Key: "nebula:pod-uid", Value: podUid },
            { Key: "nebula:pod", Value: `default/${podUid}` },
          ],
        },
      ],
    }),
  );
  const id = out.Instances?.[0]?.InstanceId;
  if (id === undefined) throw new Error("RunInstances returned no instance");
  return id;
}

async function describeOne(id: string): Promise<Instance> {
  const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
  const instance = out.Reservations?.[0]?.Instances?.[0];
  if (instance === undefined) throw new Error(`${id} not found`);
  return instance;
}

async function until<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 60_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Order of the first occurrence of each marker in text; -1 for a missing one. */
function positions(text: string, markers: string[]): number[] {
  return markers.map((m) => text.indexOf(m));
}

// A user-data that reports through the channels of the guest contract: IMDSv2 for identity and
// role credentials, CreateTags signed with those credentials (curl --aws-sigv4) against
// AWS_ENDPOINT_URL_EC2, the serial console, then `shutdown -h now`.
const TAG_AND_POWER_OFF = `#!/bin/bash
set -euo pipefail
imds=$AWS_EC2_METADATA_SERVICE_ENDPOINT
token=$(curl -sSf -X PUT "$imds/latest/api/token" -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
md() { curl -sSf -H "X-aws-ec2-metadata-token: $token" "$imds/latest/meta-data/$1"; }
id=$(md instance-id)
region=$(md placement/region)
role=$(md iam/security-credentials/)
creds=$(md "iam/security-credentials/$role")
field() { printf '%s\\n' "$creds" | sed -n "s/.*\\"$1\\" *: *\\"\\([^\\"]*\\)\\".*/\\1/p"; }
echo "guest $id in $region has role $role, life cycle $(md instance-life-cycle)" >>/dev/console
curl -sSf --aws-sigv4 "aws:amz:$region:ec2" --user "$(field AccessKeyId):$(field SecretAccessKey)" \\
  -H "x-amz-security-token: $(field Token)" \\
  --data-urlencode Action=CreateTags --data-urlencode Version=2016-11-15 \\
  --data-urlencode "ResourceId.1=$id" --data-urlencode Tag.1.Key=nebula:test \\
  --data-urlencode "Tag.1.Value=written by $id" "$AWS_ENDPOINT_URL_EC2/" >/dev/null
echo "tag written; powering off" >>/dev/console
shutdown -h now
`;

describe("startInstanceHosts", () => {
  it("plays a guest that writes a tag with its IMDS credentials and powers off: the instance ends stopped with its tag", async () => {
    let release: () => void = () => {};
    holdBoot = new Promise<void>((resolve) => {
      release = resolve;
    });
    const id = await launch(TAG_AND_POWER_OFF, "pod-tag-and-off");
    // While the guest boots, EC2 says pending (moto alone says running at once).
    expect((await describeOne(id)).State?.Name).toBe("pending");
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect((await describeOne(id)).State?.Name).toBe("pending");
    holdBoot = undefined;
    release();
    const guest = await hosts.waitForPhase(id, "off");
    expect(guest.userDataExit === 0 || guest.userDataExit === null).toBe(true);
    const instance = await describeOne(id);
    expect(instance.State?.Name).toBe("stopped");
    expect(instance.StateReason?.Code).toBe("Client.InstanceInitiatedShutdown");
    expect(instance.Tags).toContainEqual({ Key: "nebula:test", Value: `written by ${id}` });
    expect(guest.history.map((h) => h.phase)).toEqual(["booting", "running", "stopping", "off"]);
    // An On-Demand launch: its IMDS says so.
    expect(guest.console()).toContain(
      `guest ${id} in ${moto.region} has role ${NEBULA_INSTANCE_PROFILE}, life cycle on-demand`,
    );
    // moto itself agrees (the proxy only adds what moto cannot show).
    const direct = moto.ec2();
    const raw = await direct.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
    expect(raw.Reservations?.[0]?.Instances?.[0]?.State?.Name).toBe("stopped");
    direct.destroy();
    // The console channel is the guest's real console.
    const consoleOut = await ec2.send(new GetConsoleOutputCommand({ InstanceId: id }));
    expect(Buffer.from(consoleOut.Output ?? "", "base64").toString()).toContain(
      "tag written; powering off",
    );
  });

  it("stops the unit in order when the controller stops the instance, showing stopping meanwhile, and boots it again on start", async () => {
    const supervisor = `#!/bin/bash
log() { echo "supervisor: $*" >>/dev/console; }
docker run -d --name app localhost/nebula-sim/busybox:latest sh -c 'while :; do sleep 1; done' >/dev/null
log "app running=$(docker inspect --format '{{.State.Running}}' app) started=$(docker inspect --format '{{.State.StartedAt}}' app)"
on_term() {
  log "SIGTERM received"
  docker stop -t 2 app >/dev/null
  log "app stopped exit=$(docker inspect --format '{{.State.ExitCode}}' app)"
  while [ ! -e /var/lib/nebula/release ]; do sleep 0.1; done
  curl -sSf "$AWS_EC2_METADATA_SERVICE_ENDPOINT/latest/meta-data/instance-id" -H "X-aws-ec2-metadata-token: $(curl -sSf -X PUT "$AWS_EC2_METADATA_SERVICE_ENDPOINT/latest/api/token" -H 'X-aws-ec2-metadata-token-ttl-seconds: 60')" >/dev/null
  log "final report written"
  exit 0
}
trap on_term TERM
log "ready"
while :; do sleep 1 & wait $!; done
`;
    const userData = `#!/bin/bash
set -euo pipefail
mkdir -p /usr/local/lib/nebula /var/lib/nebula
cat >/usr/local/lib/nebula/supervisor.sh <<'SUPERVISOR'
${supervisor}SUPERVISOR
chmod 755 /usr/local/lib/nebula/supervisor.sh
cat >/etc/systemd/system/nebula-supervisor.service <<UNIT
[Unit]
Description=Nebula host supervisor
[Service]
Type=simple
ExecStart=/usr/local/lib/nebula/supervisor.sh
KillMode=mixed
TimeoutStopSec=40
Environment=AWS_EC2_METADATA_SERVICE_ENDPOINT=$AWS_EC2_METADATA_SERVICE_ENDPOINT
Environment=AWS_ENDPOINT_URL_EC2=$AWS_ENDPOINT_URL_EC2
[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now --no-block nebula-supervisor.service
`;
    const id = await launch(userData, "pod-controller-stop");
    const guest = await hosts.waitForPhase(id, "running");
    await until("the supervisor to be ready", () =>
      guest.console().includes("supervisor: ready") ? true : undefined,
    );
    expect(guest.units()).toMatchObject([{ name: "nebula-supervisor.service", state: "active" }]);
    expect(guest.console()).toMatch(
      /app running=true started=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/,
    );
    // Private paths: the unit file exists for the guest, not on this machine.
    expect(existsSync(join(guest.dir, "root/etc/systemd/system/nebula-supervisor.service"))).toBe(
      true,
    );

    const stop = await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    expect(stop.StoppingInstances?.[0]?.CurrentState?.Name).toBe("stopping");
    await until("the app container to be stopped", () =>
      guest.console().includes("app stopped") ? true : undefined,
    );
    // The supervisor cannot finish until the test releases it: EC2 must still say stopping.
    expect((await describeOne(id)).State?.Name).toBe("stopping");
    expect(guest.units()[0]?.state).toBe("deactivating");
    writeFileSync(join(guest.dir, "root/var/lib/nebula/release"), "");
    await hosts.waitForPhase(id, "off");
    const instance = await describeOne(id);
    expect(instance.State?.Name).toBe("stopped");
    expect(instance.StateReason?.Code).toBe("Client.UserInitiatedShutdown");
    expect(guest.units()[0]?.state).toBe("inactive");
    const order = positions(guest.console(), [
      "supervisor: SIGTERM received",
      "supervisor: app stopped exit=137",
      "supervisor: final report written",
      "Stopped nebula-supervisor.service",
      "reboot: Power down",
    ]);
    expect(order.every((p) => p >= 0)).toBe(true);
    expect([...order].sort((a, b) => a - b)).toEqual(order);
    expect(readFileSync(guest.eventsPath, "utf8")).toContain("killMode=mixed timeoutStopMs=40000");

    // Started again: it boots (pending), the enabled unit starts, the user-data does not run twice.
    const userDataLog = readFileSync(guest.userDataLogPath, "utf8");
    let release: () => void = () => {};
    holdBoot = new Promise<void>((resolve) => {
      release = resolve;
    });
    await ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    expect((await describeOne(id)).State?.Name).toBe("pending");
    holdBoot = undefined;
    release();
    await hosts.waitForPhase(id, "running");
    await until("the supervisor to be ready again", () =>
      guest.console().split("supervisor: ready").length === 3 ? true : undefined,
    );
    expect(guest.units()).toMatchObject([{ name: "nebula-supervisor.service", state: "active" }]);
    expect(readFileSync(guest.userDataLogPath, "utf8")).toBe(userDataLog);
    expect((await describeOne(id)).State?.Name).toBe("running");
    expect(guest.history.map((h) => h.phase)).toEqual([
      "booting",
      "running",
      "stopping",
      "off",
      "booting",
      "running",
    ]);
  });

  it("reports a scripted OOM kill through docker, and kills a unit that outlives its TimeoutStopSec on terminate", async () => {
    const userData = `#!/bin/bash
set -euo pipefail
docker pull nebula-sim/oomkill >/dev/null
docker run -d --name hog -e NEBULA_SIM_OOM_AFTER=0.5 nebula-sim/oomkill >/dev/null
echo "hog exited $(docker wait hog)" >>/dev/console
echo "hog state $(docker inspect --format '{{.State.OOMKilled}} {{.State.ExitCode}}' hog)" >>/dev/console
if docker pull example.com/not-here:1 2>>/dev/console; then echo "pull: ok" >>/dev/console; else echo "pull: failed" >>/dev/console; fi
cat >/etc/systemd/system/stubborn.service <<'UNIT'
[Service]
ExecStart=/bin/bash -c 'trap "echo stubborn ignores TERM >>/dev/console" TERM; echo stubborn up >>/dev/console; while :; do sleep 1; done'
TimeoutStopSec=5
UNIT
systemctl enable --now stubborn
`;
    const id = await launch(userData, "pod-oom-and-terminate");
    const guest = await hosts.waitForPhase(id, "running");
    await until("the stubborn unit", () =>
      guest.console().includes("stubborn up") ? true : undefined,
    );
    expect(guest.console()).toContain("hog exited 137");
    expect(guest.console()).toContain("hog state true 137");
    expect(guest.console()).toContain("pull: failed");
    // Without pullDelayMs every local image is on every guest's volume: nothing is recorded.
    expect(existsSync(join(guest.dir, "root/var/lib/docker/nebula-sim-images"))).toBe(false);

    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
    expect((await describeOne(id)).State?.Name).toBe("shutting-down");
    // EC2 refuses to stop an instance that is shutting down: the EC2 proxy in front of the
    // simulator says so (moto alone would stop it and bring it back as stopped).
    const strict = await startEc2Proxy({ upstream: hosts.ec2Endpoint, refuseStops: true });
    const strictEc2 = strict.ec2();
    try {
      const refused = await strictEc2.send(new StopInstancesCommand({ InstanceIds: [id] })).then(
        () => "stopped",
        (error: Error) => error.name,
      );
      expect(refused).toBe("IncorrectInstanceState");
    } finally {
      strictEc2.destroy();
      await strict.close();
    }
    await hosts.waitForPhase(id, "terminated");
    expect((await describeOne(id)).State?.Name).toBe("terminated");
    expect(guest.units()).toMatchObject([{ name: "stubborn.service", state: "failed" }]);
    expect(guest.console()).toContain("stubborn ignores TERM");
    expect(readFileSync(guest.eventsPath, "utf8")).toContain(
      "unit stubborn.service stop timed out: SIGKILL",
    );
  });

  it("notices a stop made directly in moto, behind the proxy's back, and shuts the guest down", async () => {
    const id = await launch(
      `#!/bin/bash
cat >/etc/systemd/system/idle.service <<'UNIT'
[Service]
ExecStart=/bin/bash -c 'trap "echo idle got TERM >>/dev/console; exit 0" TERM; while :; do sleep 1 & wait $!; done'
UNIT
systemctl enable --now idle.service
`,
      "pod-direct-stop",
    );
    const guest = await hosts.waitForPhase(id, "running");
    await until("the idle unit", () => (guest.units()[0]?.state === "active" ? true : undefined));
    const direct = moto.ec2();
    await direct.send(new StopInstancesCommand({ InstanceIds: [id] }));
    direct.destroy();
    await hosts.waitForPhase(id, "off");
    expect(readFileSync(guest.eventsPath, "utf8")).toContain("shutdown requested by api-stop");
    expect(guest.console()).toContain("idle got TERM");
    expect(guest.units()).toMatchObject([{ name: "idle.service", state: "inactive" }]);
    expect((await describeOne(id)).State?.Name).toBe("stopped");
  });

  it("answers a RunInstances repeated with its ClientToken with the instance launched first, as EC2 does (moto alone launches again)", async () => {
    const first = await launch("#!/bin/bash\nsleep 600\n", "pod-idempotent");
    // An SDK's retry after a lost answer, twice at once.
    const again = await Promise.all([
      launch("#!/bin/bash\nsleep 600\n", "pod-idempotent"),
      launch("#!/bin/bash\nsleep 600\n", "pod-idempotent"),
    ]);
    expect(again).toEqual([first, first]);
    const listed = await ec2.send(
      new DescribeInstancesCommand({
        Filters: [{ Name: "tag:nebula:pod-uid", Values: ["pod-idempotent"] }],
      }),
    );
    const ids = (listed.Reservations ?? []).flatMap((r) => r.Instances ?? []);
    expect(ids.map((i) => i.InstanceId)).toEqual([first]);
    // Another token is another launch.
    const other = await launch("#!/bin/bash\nsleep 600\n", "pod-idempotent-2");
    expect(other).not.toBe(first);
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [first, other] }));
    await hosts.waitForPhase(first, "terminated");
    await hosts.waitForPhase(other, "terminated");
  });

  it("leaves instances without Nebula's tags alone and forgets guests whose instance vanished", async () => {
    const other = await ec2.send(
      new RunInstancesCommand({ ImageId: "ami-12345678", MinCount: 1, MaxCount: 1 }),
    );
    const otherId = other.Instances?.[0]?.InstanceId ?? "";
    expect((await describeOne(otherId)).State?.Name).toBe("running");
    expect(hosts.guest(otherId)).toBeUndefined();

    const id = await launch("#!/bin/bash\nsleep 600\n", "pod-vanishes");
    await hosts.waitForPhase(id, "running");
    await ec2.send(new CreateTagsCommand({ Resources: [id], Tags: [{ Key: "x", Value: "y" }] }));
    await moto.reset();
    const guest = await hosts.waitForPhase(id, "terminated");
    expect(readFileSync(guest.eventsPath, "utf8")).toContain("vanished from moto");
  });
});

// A user-data that watches IMDS for a Spot notice (IMDSv2, every 0.2 s) and says on the console
// what it saw, and that takes SIGTERM as a workload would: says so, cleans up for a second, exits.
const SPOT_WATCHER = `#!/bin/bash
imds=\${AWS_EC2_METADATA_SERVICE_ENDPOINT%/}
on_term() { echo "got SIGTERM" >>/dev/console; sleep 1; echo "cleaned up" >>/dev/console; exit 0; }
trap on_term TERM
token=$(curl -sSf -X PUT "$imds/latest/api/token" -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
md() { curl -sf -H "X-aws-ec2-metadata-token: $token" "$imds/latest/meta-data/$1"; }
echo "watching for a Spot notice" >>/dev/console
spot= rebalance=
while :; do
  if [ -z "$spot" ] && body=$(md spot/instance-action); then echo "spot notice: $body" >>/dev/console; spot=1; fi
  if [ -z "$rebalance" ] && body=$(md events/recommendations/rebalance); then echo "rebalance: $body" >>/dev/console; rebalance=1; fi
  sleep 0.2 & wait $!
done
`;

/** The JSON the guest echoed after `prefix` on its console, once it has. */
async function echoed(id: string, prefix: string): Promise<unknown> {
  const line = await until(`"${prefix}" on the console of ${id}`, () =>
    hosts
      .guest(id)
      ?.console()
      .split("\n")
      .find((l) => l.startsWith(prefix)),
  );
  return JSON.parse(line.slice(prefix.length));
}

describe("startInstanceHosts: Spot", () => {
  it("serves a Spot interruption notice on IMDS, then reclaims the instance as EC2 does: an orderly shutdown, terminated with Server.SpotInstanceTermination", async () => {
    const id = await launch(SPOT_WATCHER, "pod-spot-terminate", "spot");
    const guest = await hosts.waitForPhase(id, "running");
    await until("the watcher", () =>
      guest.console().includes("watching for a Spot notice") ? true : undefined,
    );
    const asked = Date.now();
    const notice = await hosts.interruptSpot(id, { warningMs: 3000 });
    // During the warning nothing else happens, and a second call changes nothing.
    expect((await describeOne(id)).State?.Name).toBe("running");
    expect(await hosts.interruptSpot(id, { action: "stop", warningMs: 10 })).toEqual(notice);
    expect(notice.action).toBe("terminate");
    expect(notice.time.getMilliseconds()).toBe(0);
    expect(Math.abs(notice.time.getTime() - (asked + 3000))).toBeLessThan(1500);
    // The guest read it from IMDS, in EC2's format.
    const seen = await echoed(id, "spot notice: ");
    expect(seen).toEqual({
      action: "terminate",
      time: notice.time.toISOString().replace(/\.\d{3}Z$/, "Z"),
    });
    if (Date.now() < notice.time.getTime()) {
      expect((await describeOne(id)).State?.Name).toBe("running");
      expect(guest.console()).not.toContain("got SIGTERM");
    }
    // Then EC2 acts: shutting-down while the guest shuts down in order, then terminated.
    const shown = new Set<string>();
    const ended = await until(
      "the instance to be terminated",
      async () => {
        const instance = await describeOne(id);
        const state = instance.State?.Name ?? "";
        if (state !== "running") shown.add(`${state} ${instance.StateReason?.Code ?? ""}`);
        return state === "terminated" ? instance : undefined;
      },
      60_000,
    );
    expect(shown).toContain("shutting-down Server.SpotInstanceTermination");
    expect(ended.StateReason).toEqual({
      Code: "Server.SpotInstanceTermination",
      Message: "Server.SpotInstanceTermination: Spot instance termination",
    });
    await hosts.waitForPhase(id, "terminated");
    const downAt = guest.history.find((h) => h.phase === "shutting-down")?.at ?? 0;
    expect(downAt).toBeGreaterThanOrEqual(notice.time.getTime());
    expect(guest.history.map((h) => h.phase)).toEqual([
      "booting",
      "running",
      "shutting-down",
      "terminated",
    ]);
    const order = positions(guest.console(), [
      "spot notice: ",
      "got SIGTERM",
      "cleaned up",
      "reboot: Power down",
    ]);
    expect(order.every((p) => p >= 0)).toBe(true);
    expect([...order].sort((a, b) => a - b)).toEqual(order);
    expect(guest.instanceInitiated).toBe(false);
    // The reason stays (moto's own is Client.UserInitiatedShutdown), also after a poll or two.
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect((await describeOne(id)).StateReason?.Code).toBe("Server.SpotInstanceTermination");
    const direct = moto.ec2();
    const raw = await direct.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
    direct.destroy();
    expect(raw.Reservations?.[0]?.Instances?.[0]?.State?.Name).toBe("terminated");
    expect(raw.Reservations?.[0]?.Instances?.[0]?.StateReason?.Code).toBe(
      "Client.UserInitiatedShutdown",
    );
    // The instance is gone: no second notice.
    const refused = await hosts.interruptSpot(id).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(TestPeerError);
    expect((refused as TestPeerError).code).toBe("InstanceNotRunning");
  });

  it("stops a Spot instance whose action is stop, with Server.SpotInstanceShutdown, and does nothing when someone else terminated it first", async () => {
    const [stopped, raced] = await Promise.all([
      launch(SPOT_WATCHER, "pod-spot-stop", "spot"),
      launch(SPOT_WATCHER, "pod-spot-raced", "spot"),
    ]);
    await hosts.waitForPhase(stopped, "running");
    await hosts.waitForPhase(raced, "running");
    const [stopNotice] = await Promise.all([
      hosts.interruptSpot(stopped, { action: "stop", warningMs: 1000 }),
      hosts.interruptSpot(raced, { warningMs: 2000 }),
    ]);
    expect(stopNotice.action).toBe("stop");
    expect(await echoed(stopped, "spot notice: ")).toMatchObject({ action: "stop" });
    // The controller terminates the other one within its warning.
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [raced] }));
    const stoppedGuest = await hosts.waitForPhase(stopped, "off");
    const instance = await describeOne(stopped);
    expect(instance.State?.Name).toBe("stopped");
    expect(instance.StateReason).toEqual({
      Code: "Server.SpotInstanceShutdown",
      Message: "Server.SpotInstanceShutdown: Spot instance shutdown",
    });
    expect(stoppedGuest.console()).toContain("got SIGTERM");
    const racedGuest = await hosts.waitForPhase(raced, "terminated");
    // Past its warning: EC2 found nothing to reclaim, and the reason is the controller's.
    await until("the raced warning to pass", () =>
      readFileSync(racedGuest.eventsPath, "utf8").includes("EC2 has nothing to reclaim")
        ? true
        : undefined,
    );
    expect((await describeOne(raced)).StateReason?.Code).toBe("Client.UserInitiatedShutdown");
    expect(readFileSync(racedGuest.eventsPath, "utf8")).not.toContain("EC2 reclaims");
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [stopped] }));
    await hosts.waitForPhase(stopped, "terminated");
    // The reason of the latest state change wins: a terminate after the Spot stop is the user's.
    const terminated = await describeOne(stopped);
    expect(terminated.State?.Name).toBe("terminated");
    expect(terminated.StateReason?.Code).toBe("Client.UserInitiatedShutdown");
  });

  it("serves a rebalance recommendation on IMDS and leaves the instance running", async () => {
    const id = await launch(SPOT_WATCHER, "pod-spot-rebalance", "spot");
    const guest = await hosts.waitForPhase(id, "running");
    await until("the watcher", () =>
      guest.console().includes("watching for a Spot notice") ? true : undefined,
    );
    const asked = Date.now();
    const { noticeTime } = await hosts.recommendRebalance(id);
    expect(Math.abs(noticeTime.getTime() - asked)).toBeLessThan(1500);
    expect(await echoed(id, "rebalance: ")).toEqual({
      noticeTime: noticeTime.toISOString().replace(/\.\d{3}Z$/, "Z"),
    });
    // Listed under meta-data; no interruption notice.
    const imds = guest.imdsEndpoint;
    const token = await (
      await fetch(`${imds}latest/api/token`, {
        method: "PUT",
        headers: { "x-aws-ec2-metadata-token-ttl-seconds": "60" },
      })
    ).text();
    const get = (path: string) =>
      fetch(`${imds}latest/meta-data/${path}`, { headers: { "x-aws-ec2-metadata-token": token } });
    expect((await (await get("")).text()).split("\n")).toContain("events/");
    expect((await get("spot/instance-action")).status).toBe(404);
    // Launched with MarketType spot (moto: InstanceLifecycle "spot"): its IMDS says so.
    expect(await (await get("instance-life-cycle")).text()).toBe("spot");
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect((await describeOne(id)).State?.Name).toBe("running");
    expect(guest.phase).toBe("running");
    expect(guest.console()).not.toContain("got SIGTERM");
    const unknown = await hosts.recommendRebalance("i-00000000000000000").catch((e: unknown) => e);
    expect((unknown as TestPeerError).code).toBe("UnknownInstance");
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
    await hosts.waitForPhase(id, "terminated");
    expect((await describeOne(id)).StateReason?.Code).toBe("Client.UserInitiatedShutdown");
  });
});
