/**
 * The host side of a warm pool (issue #32) end to end: the instance-host simulator of
 * `@nebula/test-peers` boots the real pool user-data of instances launched in moto (podman playing
 * Docker's `pull`); the test plays the controller through the simulator's EC2 endpoint
 * (`ModifyInstanceAttribute` of the user-data while stopped, `StartInstances`) and reads the
 * outcome from EC2 (state, state reason, report tags) and the guests' files.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import {
  CreateTagsCommand,
  DescribeInstanceAttributeCommand,
  DescribeInstancesCommand,
  DescribeTagsCommand,
  EC2Client,
  ModifyInstanceAttributeCommand,
  RunInstancesCommand,
  StartInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { decodeReportTags } from "@nebula/state-mapping";
import {
  type InstanceHostGuest,
  type InstanceHosts,
  MOTO_CREDENTIALS,
  type Moto,
  NEBULA_INSTANCE_PROFILE,
  startInstanceHosts,
  startMoto,
} from "@nebula/test-peers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { renderUserData } from "./index.js";
import { POOL_BOOT_UNIT, renderPoolUserData } from "./pool/index.js";

/** The processes whose command line contains `text` (`pgrep -af`), as `<pid> <command>` lines. */
function processesMatching(text: string): string[] {
  try {
    return execFileSync("pgrep", ["-af", "--", text], { encoding: "utf8" }).trim().split("\n");
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

describe("warm-pool hosts: the instance-host simulator boots the pool user-data against moto", () => {
  const RUN = randomBytes(4).toString("hex");
  const CLUSTER = `pool-${RUN}`;
  const POOL = renderPoolUserData({ images: ["busybox"] });
  let moto: Moto;
  let sim: InstanceHosts;
  let ec2: EC2Client;
  /** Held boots: a guest whose ID is here stays `booting` (EC2 `pending`) until it is opened. */
  const gates = new Map<string, Promise<void>>();
  const launched: string[] = [];
  const figures: string[] = [];

  beforeAll(async () => {
    moto = await startMoto();
    sim = await startInstanceHosts({
      ec2Endpoint: moto.endpoint,
      region: moto.region,
      cluster: CLUSTER,
      bootDelayMs: 200,
      beforeBoot: (id) => gates.get(id),
    });
    ec2 = new EC2Client({
      endpoint: sim.ec2Endpoint,
      region: moto.region,
      credentials: { ...MOTO_CREDENTIALS },
    });
  }, 180_000);
  afterAll(async () => {
    ec2?.destroy();
    await sim?.close();
    await moto?.stop();
    if (figures.length > 0) console.log(`warm-pool figures:\n  ${figures.join("\n  ")}`);
  });

  /** A file of the guest's private `/var/lib/nebula`, or `undefined`. */
  const state = (guest: InstanceHostGuest, name: string): string | undefined => {
    const path = join(guest.dir, "root/var/lib/nebula", name);
    return existsSync(path) ? readFileSync(path, "utf8") : undefined;
  };
  const describeOne = async (id: string) =>
    (await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }))).Reservations?.[0]
      ?.Instances?.[0];
  /** Starts the instance and waits until its guest has booted and powered itself off again. */
  const startUntilOff = async (id: string): Promise<InstanceHostGuest> => {
    const before = sim.guest(id)?.history.length ?? 0;
    await ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    const guest = await sim.waitForPhase(id, "off", 120_000);
    expect(guest.history.slice(before).map((c) => c.phase)).toEqual([
      "booting",
      "running",
      "stopping",
      "off",
    ]);
    return guest;
  };

  /** Launches a pool host as the controller does and waits until it is prepared and stopped. */
  async function preparedHost(): Promise<{ id: string; guest: InstanceHostGuest }> {
    const sentAt = Date.now();
    const run = await ec2.send(
      new RunInstancesCommand({
        ImageId: "ami-12345678",
        InstanceType: "m5.large",
        MinCount: 1,
        MaxCount: 1,
        UserData: POOL.userData,
        InstanceInitiatedShutdownBehavior: "stop",
        IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
        MetadataOptions: { HttpTokens: "required", InstanceMetadataTags: "enabled" },
        TagSpecifications: [
          {
            ResourceType: "instance",
            Tags: [
              { Key: "nebula:cluster", Value: CLUSTER },
              { Key: "nebula:pool", Value: "default" },
            ],
          },
        ],
      }),
    );
    const id = run.Instances?.[0]?.InstanceId ?? "";
    launched.push(id);
    const guest = await sim.waitForPhase(id, "off", 180_000);
    const instance = await describeOne(id);
    expect(instance?.State?.Name, guest.console()).toBe("stopped");
    expect(instance?.StateReason?.Code).toBe("Client.InstanceInitiatedShutdown");
    const offAt = guest.history.find((c) => c.phase === "off")?.at ?? Date.now();
    figures.push(`${id}: RunInstances → stopped (prepared) in ${offAt - sentAt} ms`);
    return { id, guest };
  }

  let pooled: { id: string; guest: InstanceHostGuest };

  it("prepares a host: boot unit enabled, its own SHA-256 recorded, images pulled, then stopped by itself", async () => {
    pooled = await preparedHost();
    const { guest } = pooled;
    const prepared = (state(guest, "pool-prepared") ?? "").split("\n");
    expect(prepared[0]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    // The Pod sandbox image first (every Pod's host runs it), then the entry's.
    expect(prepared.slice(1)).toEqual(["registry.k8s.io/pause:3.10", "busybox", ""]);
    // The SHA-256 of the user-data as the guest's IMDS served it: the script's.
    expect(state(guest, "pool-user-data.sha256")).toBe(`${POOL.sha256}\n`);
    expect(readFileSync(guest.dockerLogPath, "utf8")).toMatch(/pull -- busybox/);
    const unit = readFileSync(join(guest.dir, "root/etc/systemd/system", POOL_BOOT_UNIT), "utf8");
    expect(unit).toContain("ExecStart=/usr/local/lib/nebula/pool-boot.sh\n");
    expect(unit).toContain(`Environment=AWS_EC2_METADATA_SERVICE_ENDPOINT=${guest.imdsEndpoint}\n`);
    expect(unit).toContain(`Environment=AWS_ENDPOINT_URL_EC2=${moto.endpoint}\n`);
    expect(guest.console()).toContain("nebula pool: prepared, 2 of 2 images pulled: powering off");
    // Enabled, not started: the boot program did not run on the first boot.
    expect(guest.units()).toEqual([]);
    expect(state(guest, "pool-assigned")).toBeUndefined();
  });

  it("(a) started with its user-data unchanged, it powers off again by itself and runs nothing; EC2 refuses a user-data change while it is not stopped", async () => {
    const { id } = pooled;
    // Hold the boot, so that the instance is certainly pending while the change is tried.
    let open: () => void = () => {};
    gates.set(
      id,
      new Promise<void>((resolve) => {
        open = resolve;
      }),
    );
    const before = sim.guest(id)?.history.length ?? 0;
    await ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    expect((await describeOne(id))?.State?.Name).toBe("pending");
    const refused = await ec2
      .send(
        new ModifyInstanceAttributeCommand({
          InstanceId: id,
          UserData: { Value: Buffer.from("#!/bin/bash\necho never\n") },
        }),
      )
      .then(
        () => undefined,
        (error: Error) => ({ name: error.name, message: error.message }),
      );
    expect(refused).toEqual({
      name: "IncorrectInstanceState",
      message: `The instance '${id}' is not in the 'stopped' state.`,
    });
    gates.delete(id);
    open();
    const guest = await sim.waitForPhase(id, "off", 120_000);
    expect(guest.history.slice(before).map((c) => c.phase)).toEqual([
      "booting",
      "running",
      "stopping",
      "off",
    ]);
    const instance = await describeOne(id);
    expect(instance?.State?.Name).toBe("stopped");
    expect(instance?.StateReason?.Code).toBe("Client.InstanceInitiatedShutdown");
    expect(guest.console()).toContain(
      "nebula pool: started without a Pod: powering off (its user-data is the pool's own)",
    );
    // The boot program ran (its power-off stopped it, as systemd stops every unit then).
    expect(guest.units().map((u) => u.name)).toEqual([POOL_BOOT_UNIT]);
    expect(state(guest, "pool-assigned")).toBeUndefined();
    expect(state(guest, "pod-user-data")).toBeUndefined();
    // The user-data is still the pool's: the refused change never reached moto.
    const attribute = await ec2.send(
      new DescribeInstanceAttributeCommand({ InstanceId: id, Attribute: "userData" }),
    );
    expect(attribute.UserData?.Value).toBe(POOL.userData);
  });

  it("(b) with a Pod's user-data written while stopped, the next boot runs it, marked assigned, with the unit's endpoints", async () => {
    const { id } = pooled;
    const script = [
      "#!/bin/bash",
      "date +%s%3N >>/var/lib/nebula/pod-ran",
      'echo "$AWS_ENDPOINT_URL_EC2" >/var/lib/nebula/pod-env',
      "test -e /var/lib/nebula/pool-assigned && echo assigned-before >/var/lib/nebula/pod-saw",
      "echo 'the pod script ran' >>/dev/console",
      "shutdown -h now",
      "",
    ].join("\n");
    await ec2.send(
      new ModifyInstanceAttributeCommand({
        InstanceId: id,
        // The SDK base64-encodes a blob itself: it takes the bytes.
        UserData: { Value: Buffer.from(script) },
      }),
    );
    const attribute = await ec2.send(
      new DescribeInstanceAttributeCommand({ InstanceId: id, Attribute: "userData" }),
    );
    expect(Buffer.from(attribute.UserData?.Value ?? "", "base64").toString()).toBe(script);
    const startedAt = Date.now();
    const guest = await startUntilOff(id);
    const ran = (state(guest, "pod-ran") ?? "").trim().split("\n");
    expect(ran).toHaveLength(1);
    figures.push(
      `${id}: StartInstances → the Pod's script running in ${Number(ran[0]) - startedAt} ms`,
    );
    expect(state(guest, "pool-assigned")).toBe("");
    expect(state(guest, "pod-saw")).toBe("assigned-before\n");
    expect(state(guest, "pod-env")).toBe(`${moto.endpoint}\n`);
    expect(state(guest, "pod-user-data")).toBe(script);
    expect(guest.console()).toContain("nebula pool: running the assigned Pod's user-data");
    expect(guest.console()).toContain("the pod script ran");
    const instance = await describeOne(id);
    expect(instance?.State?.Name).toBe("stopped");
    expect(instance?.StateReason?.Code).toBe("Client.InstanceInitiatedShutdown");
  });

  it("(c) started once more, the Pod's script does not run again (and the host stays up until stopped)", async () => {
    const { id } = pooled;
    const previousPid = sim
      .guest(id)
      ?.units()
      .find((u) => u.name === POOL_BOOT_UNIT)?.pid;
    await ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    const guest = await sim.waitForPhase(id, "running", 60_000);
    // Until this boot's run of the boot program has ended.
    for (const deadline = Date.now() + 60_000; ; ) {
      const unit = guest.units().find((u) => u.name === POOL_BOOT_UNIT);
      if (unit !== undefined && unit.pid !== previousPid && unit.state !== "active") break;
      if (Date.now() > deadline)
        throw new Error(`${POOL_BOOT_UNIT} did not end: ${guest.console()}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(guest.units().find((u) => u.name === POOL_BOOT_UNIT)).toMatchObject({
      state: "inactive",
      exitCode: 0,
    });
    expect((state(guest, "pod-ran") ?? "").trim().split("\n")).toHaveLength(1);
    expect(guest.phase).toBe("running");
    expect((await describeOne(id))?.State?.Name).toBe("running");
    // The controller's stop.
    await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    await sim.waitForPhase(id, "off", 60_000);
    expect((state(guest, "pod-ran") ?? "").trim().split("\n")).toHaveLength(1);
  });

  it("a real Pod (renderUserData, gzipped user-data delivery) runs on a pool host and reports through its tags", async () => {
    const { id } = await preparedHost();
    const uid = `uid-pool-${RUN}`;
    const rendered = renderUserData(
      {
        metadata: { name: "pooled", namespace: "test", uid },
        spec: {
          restartPolicy: "Never",
          terminationGracePeriodSeconds: 5,
          containers: [
            {
              name: "app",
              image: "busybox",
              imagePullPolicy: "IfNotPresent",
              command: ["sh", "-c", "echo hello from a pool host; exit 0"],
            },
          ],
        },
      },
      { cluster: CLUSTER, report: { retryAttempts: 8, retryBaseMs: 50 } },
    );
    if (!rendered.ok) throw rendered.error;
    expect(rendered.value.gzipped).toBe(true);
    // The controller's assignment: the Pod's user-data, its UID tag, a start.
    await ec2.send(
      new ModifyInstanceAttributeCommand({
        InstanceId: id,
        UserData: { Value: Buffer.from(rendered.value.userData, "base64") },
      }),
    );
    await ec2.send(
      new CreateTagsCommand({ Resources: [id], Tags: [{ Key: "nebula:pod-uid", Value: uid }] }),
    );
    const startedAt = Date.now();
    const guest = await startUntilOff(id);
    figures.push(
      `${id}: StartInstances → the Pod completed, reported and stopped in ${(guest.history.at(-1)?.at ?? startedAt) - startedAt} ms`,
    );
    const journal = readFileSync(guest.unitLogPath("nebula-supervisor.service"), "utf8");
    const tags = await ec2.send(
      new DescribeTagsCommand({ Filters: [{ Name: "resource-id", Values: [id] }] }),
    );
    const report = decodeReportTags(
      Object.fromEntries((tags.Tags ?? []).map((t) => [t.Key ?? "", t.Value ?? ""])),
    );
    if (report.kind !== "report")
      throw new Error(`no report: ${JSON.stringify(report)}\n${journal}`);
    expect(report.report.containers[0]).toMatchObject({
      name: "app",
      state: "terminated",
      reason: "Completed",
      exitCode: 0,
      restarts: 0,
    });
    expect(state(guest, "pool-assigned")).toBe("");
    // The gunzipped script, as cloud-init would have run it.
    expect(state(guest, "pod-user-data")).toBe(rendered.value.script);
    expect(guest.console()).toContain("nebula pool: running the assigned Pod's user-data");
    const instance = await describeOne(id);
    expect(instance?.State?.Name).toBe("stopped");
    expect(instance?.StateReason?.Code).toBe("Client.InstanceInitiatedShutdown");
  });

  it("terminates every host; nothing of them outlives the simulator", async () => {
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: launched }));
    for (const id of launched) await sim.waitForPhase(id, "terminated", 120_000);
    for (const id of launched) expect((await describeOne(id))?.State?.Name).toBe("terminated");
    const workDir = sim.workDir;
    // close() removes the run's containers and fails (ContainersLeft) if any is left.
    await sim.close();
    expect(processesMatching(workDir)).toEqual([]);
    for (const id of launched) expect(processesMatching(`nsim-${id}`)).toEqual([]);
    expect(existsSync(workDir)).toBe(false);
  });
});
