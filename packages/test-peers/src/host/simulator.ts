import { execFileSync, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import {
  appendFileSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  DescribeInstanceAttributeCommand,
  DescribeInstancesCommand,
  DescribeTagsCommand,
  EC2Client,
  type Instance,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { z } from "zod";
import { TestPeerError } from "../errors.js";
import { listInstanceStates } from "../instance-states.js";
import {
  listContainers,
  reapOrphans,
  removeContainers,
  shareNetnsDir,
  trackedContainerIds,
  warnLoudly,
} from "./containers.js";
import {
  Guest,
  type GuestPhase,
  type PhaseChange,
  type ShutdownOrigin,
  type UnitState,
} from "./guest.js";
import { ensureGuestImages } from "./images.js";
import { type ImdsServer, startImdsServer } from "./imds.js";
import { EC2_STATES, type Ec2State, type InstanceItem, type StateOverride } from "./overlay.js";
import { type OverlayProxy, startOverlayProxy } from "./proxy.js";
import { ENTER_SCRIPT, WATCHDOG_SCRIPT } from "./shims.js";
import { decodeUserData } from "./userdata.js";

/** Tag that marks an instance as Nebula's (set at launch); the simulator plays only such instances. */
export const NEBULA_CLUSTER_TAG = "nebula:cluster";
/** Tag with the Pod UID (set at launch); required too, unless the instance is a warm-pool host. */
export const NEBULA_POD_UID_TAG = "nebula:pod-uid";
/**
 * Tag of a warm-pool host (set at launch, with the pool's name): such an instance has no Pod yet,
 * so it is played with this tag in place of {@link NEBULA_POD_UID_TAG}.
 */
export const NEBULA_POOL_TAG = "nebula:pool";

const OptionsSchema = z.strictObject({
  ec2Endpoint: z.url(),
  region: z.string().min(1),
  credentials: z
    .strictObject({ accessKeyId: z.string().min(1), secretAccessKey: z.string().min(1) })
    .optional(),
  cluster: z.string().min(1).optional(),
  bootDelayMs: z.number().int().nonnegative().optional(),
  firstBootDelayMs: z.number().int().nonnegative().max(2_147_483_647).optional(),
  restartBootDelayMs: z.number().int().nonnegative().max(2_147_483_647).optional(),
  pullDelayMs: z.number().int().nonnegative().max(2_147_483_647).optional(),
  pollIntervalMs: z.number().int().positive().optional(),
  workDir: z.string().min(1).optional(),
  keepOutput: z.boolean().optional(),
  guestEnv: z.record(z.string(), z.string()).optional(),
  hideAwsCli: z.boolean().optional(),
  runtime: z.string().min(1).optional(),
  engineGraceMs: z.number().int().nonnegative().optional(),
  ulimits: z
    .strictObject({ nofile: z.string().regex(/^\d+:\d+$/), nproc: z.string().regex(/^\d+:\d+$/) })
    .optional(),
  containerNetwork: z.string().min(1).optional(),
  busybox: z.string().min(1).optional(),
  beforeBoot: z
    .custom<(instanceId: string) => Promise<void> | void>((value) => typeof value === "function")
    .optional(),
});

/** Options of {@link startInstanceHosts}. Only `ec2Endpoint` and `region` are required. */
export interface InstanceHostsOptions {
  /** moto's endpoint, `http://127.0.0.1:<port>` (e.g. `moto.endpoint`). Guests send their reports here. */
  ec2Endpoint: string;
  /** The region (moto reads it from the signature; guests read it from IMDS). */
  region: string;
  /** Credentials for the simulator's own EC2 calls. Default: moto's dummies. */
  credentials?: { accessKeyId: string; secretAccessKey: string };
  /** Play only instances whose `nebula:cluster` tag has this value. Default: every Nebula instance. */
  cluster?: string;
  /**
   * How long a guest stays `pending` before it runs (ms), on every boot. Default 1000.
   * `firstBootDelayMs` and `restartBootDelayMs` override it for one kind of boot.
   */
  bootDelayMs?: number;
  /**
   * How long a guest's first boot (after RunInstances: EC2's launch, the OS boot and cloud-init's
   * first-boot work) keeps it `pending` before the user-data runs (ms). Default: `bootDelayMs`.
   * On EC2 that is about 30 to 60 s; a test that measures a cold launch may ask for a realistic
   * figure, most tests want it short.
   */
  firstBootDelayMs?: number;
  /**
   * How long a later boot (after a StartInstances of the stopped instance: no launch, no
   * first-boot work) keeps the guest `pending` before its enabled units start (ms). Default:
   * `bootDelayMs`. On EC2 about 10 to 15 s.
   */
  restartBootDelayMs?: number;
  /**
   * How long a guest's `docker` takes to download an image its volume does not hold yet (ms):
   * an explicit `docker pull`, or the implicit pull of `docker run`/`create`. Once a guest pulled
   * an image its volume holds it (recorded per image ID under the guest's own directory, so it
   * stays across stops and starts and goes with the instance): pulling it again costs nothing,
   * as on a prepared warm-pool host. Another guest pays again. While it is not held, `docker
   * inspect --type=image` and `docker image inspect` say `No such image`, as Docker on a fresh
   * volume does. An image that is not on this machine fails at once, as without the option.
   * Default 0: every local image is held by every guest and pulls are instant (no record kept).
   */
  pullDelayMs?: number;
  /** How often moto is polled for launches, stops and terminations done behind the proxy's back (ms). Default 250. */
  pollIntervalMs?: number;
  /**
   * Directory for the guests' output (one subdirectory per instance). Default: a new temporary
   * directory, removed by `close()` unless `keepOutput` is set. A directory you give is kept.
   */
  workDir?: string;
  /** Keep the output directory after `close()`. Default: `true` for a given `workDir`, else `false`. */
  keepOutput?: boolean;
  /** Extra environment for the user-data (e.g. `AWS_CA_BUNDLE`). */
  guestEnv?: Record<string, string>;
  /**
   * Hide the host's `aws` CLI (`/usr/bin/aws`, `/usr/local/bin/aws`) from guests, so that a
   * supervisor that prefers it takes its curl + openssl path instead. Default `false`: guests see
   * the machine's `aws`, as on an AMI that ships it. (Debian's aws CLI 2.9 ignores
   * `AWS_ENDPOINT_URL_EC2`; a caller must pass `--endpoint-url`, as Nebula's supervisor does.)
   */
  hideAwsCli?: boolean;
  /** The OCI runtime podman uses. Default `/usr/sbin/runc`. */
  runtime?: string;
  /**
   * How long killing a guest's processes (a stop, a terminate, `close()`) waits for its podman
   * commands that change the engine's state (`docker create`/`start`/`rm` in flight) to finish
   * before killing them too. podman has no daemon: killed half-way, a `podman start` leaves a
   * container that podman forgets while conmon and runc keep it (such leftovers are then reaped
   * and reported). Default 20 000 ms.
   */
  engineGraceMs?: number;
  /**
   * Container `--ulimit` defaults as `soft:hard` (a guest's own `--ulimit` wins). Default: nofile
   * `1024:<hard limit>`, nproc `<hard limit>:<hard limit>` (at most `kernel.pid_max` and 65536),
   * read from the guest's own limits, because runc cannot raise a limit above its caller's.
   */
  ulimits?: { nofile: string; nproc: string };
  /** Container `--network` when the guest gives none. Default `host` (no per-container network setup). */
  containerNetwork?: string;
  /** The static busybox the guest images are built from. Default `/bin/busybox`. */
  busybox?: string;
  /**
   * Awaited after a guest's boot delay and before it runs: while it has not resolved, the guest
   * stays `booting` and EC2 shows `pending`. Use it to hold an instance in `pending` for as long as a
   * test needs (a rejection is logged and the guest boots). Default: none.
   */
  beforeBoot?: (instanceId: string) => Promise<void> | void;
}

/** One guest as tests see it. */
export interface InstanceHostGuest {
  /** The EC2 instance ID. */
  readonly instanceId: string;
  /** Where the guest is in its life. */
  readonly phase: GuestPhase;
  /** Every phase it went through, in order, with times. */
  readonly history: readonly PhaseChange[];
  /** The guest's output directory. */
  readonly dir: string;
  /** Its serial console file (what it appended to `/dev/console`). */
  readonly consolePath: string;
  /** The user-data's stdout and stderr (`user-data.log`). */
  readonly userDataLogPath: string;
  /** The simulator's timeline of the guest (`events.log`): systemctl calls, signals, power-off. */
  readonly eventsPath: string;
  /** Every `docker` call the guest made (`docker/docker.log`). */
  readonly dockerLogPath: string;
  /** The guest's IMDS endpoint. */
  readonly imdsEndpoint: string;
  /** User-data exit code: `undefined` before it ran, `null` while running or when killed. */
  readonly userDataExit: number | null | undefined;
  /** Whether the guest powered itself off. */
  readonly instanceInitiated: boolean;
  /** The units the guest installed, with their states. */
  units(): { name: string; state: UnitState; pid: number | undefined; exitCode: number | null }[];
  /** The path of a unit's output (its "journal"). */
  unitLogPath(unit: string): string;
  /** The console's text so far. */
  console(): string;
}

/** A running instance-host simulator, from {@link startInstanceHosts}. */
export interface InstanceHosts {
  /**
   * The EC2 endpoint the code under test should use: a proxy in front of moto that shows the
   * intermediate states (`pending`, `stopping`, `shutting-down`) for as long as the guests really
   * take, and the guests' real consoles in `GetConsoleOutput`.
   */
  readonly ec2Endpoint: string;
  /** moto's own endpoint (what guests report to). */
  readonly motoEndpoint: string;
  /** The output directory (one subdirectory per instance). */
  readonly workDir: string;
  /** The guest of an instance, if the simulator has seen it. */
  guest(instanceId: string): InstanceHostGuest | undefined;
  /** Every guest the simulator has seen. */
  guests(): InstanceHostGuest[];
  /**
   * Waits until the instance's guest is in one of `phases`.
   *
   * @throws {@link TestPeerError} `Timeout` after `timeoutMs` (default 60 s), with the guest's console tail.
   */
  waitForPhase(
    instanceId: string,
    phases: GuestPhase | readonly GuestPhase[],
    timeoutMs?: number,
  ): Promise<InstanceHostGuest>;
  /**
   * Stops playing: kills every guest at once, removes their containers (by the IDs their `docker`
   * recorded, then those listed with the run's label), closes the proxy. Then it checks that
   * nothing of the run is left.
   *
   * @throws {@link TestPeerError} `ContainersLeft` when containers of the run are still there
   * (named in the message), or when `podman ps` fails, so that none can be ruled out.
   */
  close(): Promise<void>;
  /**
   * Plays EC2's Spot interruption of an instance: from now on its IMDS serves
   * `spot/instance-action` = `{"action": action, "time": <now + warningMs, ISO, seconds precision, Z>}`
   * (and lists `spot/` under meta-data; for `terminate` also the older `spot/termination-time`),
   * as EC2 does two minutes before it acts. When `warningMs` has passed, EC2 acts: `terminate` →
   * TerminateInstances in moto, and DescribeInstances through the proxy shows the state reason
   * `Server.SpotInstanceTermination` ("Server.SpotInstanceTermination: Spot instance termination");
   * `stop`/`hibernate` → StopInstances, reason `Server.SpotInstanceShutdown` ("Server.SpotInstanceShutdown:
   * Spot instance shutdown"). The guest is shut down the way an API terminate/stop shuts it down
   * (systemd sends SIGTERM to units, waits their `TimeoutStopSec`; EC2 shows `shutting-down` or
   * `stopping` meanwhile). If the instance was stopped or terminated by anyone else in the
   * meantime, EC2 does nothing. A second call while a notice is pending changes nothing and
   * resolves with that notice. `close()` cancels what has not happened yet.
   *
   * @param options - `action` (default `terminate`) and `warningMs` (default 120 000, EC2's two minutes).
   * @returns the notice's action and time, once IMDS serves it.
   * @throws {@link TestPeerError} `UnknownInstance` for an instance the simulator does not play,
   * `InstanceNotRunning` for one that is not running, `InvalidOptions` for a bad option,
   * `Closed` after `close()`.
   * @example
   * ```ts
   * const notice = await hosts.interruptSpot(id, { warningMs: 3000 });
   * await hosts.waitForPhase(id, "terminated");
   * ```
   */
  interruptSpot(
    instanceId: string,
    options?: { action?: "terminate" | "stop" | "hibernate"; warningMs?: number },
  ): Promise<{ action: string; time: Date }>;
  /**
   * From now on the instance's IMDS serves a rebalance recommendation
   * (`events/recommendations/rebalance`, `{"noticeTime": <now, ISO, seconds precision, Z>}`, and
   * lists `events/` under meta-data). Nothing else happens (EC2 does not act on it). A second call
   * resolves with the first recommendation's time.
   *
   * @throws {@link TestPeerError} `UnknownInstance`, `InstanceNotRunning`, `Closed`, as {@link InstanceHosts.interruptSpot}.
   */
  recommendRebalance(instanceId: string): Promise<{ noticeTime: Date }>;
  /** Same as `close()`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
}

function which(command: string): boolean {
  try {
    execFileSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

function view(guest: Guest): InstanceHostGuest {
  return {
    instanceId: guest.instanceId,
    get phase() {
      return guest.phase;
    },
    history: guest.history,
    dir: guest.dir,
    consolePath: guest.consolePath,
    userDataLogPath: join(guest.dir, "user-data.log"),
    eventsPath: join(guest.dir, "events.log"),
    dockerLogPath: join(guest.dir, "docker", "docker.log"),
    imdsEndpoint: guest.imdsEndpoint,
    get userDataExit() {
      return guest.userDataExit;
    },
    get instanceInitiated() {
      return guest.instanceInitiated;
    },
    units: () => guest.units(),
    unitLogPath: (unit: string) => join(guest.dir, "units", `${unit}.log`),
    console: () => {
      try {
        return readFileSync(guest.consolePath, "utf8");
      } catch {
        return "";
      }
    },
  };
}

const INSTANCE_INITIATED = {
  code: "Client.InstanceInitiatedShutdown",
  message: "Client.InstanceInitiatedShutdown: Instance initiated shutdown",
};
const SPOT_TERMINATION = {
  code: "Server.SpotInstanceTermination",
  message: "Server.SpotInstanceTermination: Spot instance termination",
};
const SPOT_SHUTDOWN = {
  code: "Server.SpotInstanceShutdown",
  message: "Server.SpotInstanceShutdown: Spot instance shutdown",
};

const SpotOptionsSchema = z
  .strictObject({
    action: z.enum(["terminate", "stop", "hibernate"]).optional(),
    warningMs: z.number().int().nonnegative().max(2_147_483_647).optional(),
  })
  .optional();

/** A Spot interruption of one instance: the notice IMDS serves, then EC2's act. */
interface SpotInterruption {
  readonly action: "terminate" | "stop" | "hibernate";
  readonly time: Date;
  /** Pending until EC2 acts; cleared by `close()`. */
  timer: NodeJS.Timeout | undefined;
  /** How many phases the guest had gone through at the notice: another one means someone else acted. */
  readonly phasesAtNotice: number;
  /** Set once EC2 acted: the state reason the proxy shows from then on. */
  reason: { readonly code: string; readonly message: string } | undefined;
}

/** An instant as EC2's IMDS writes it: ISO 8601, whole seconds, `Z`. */
function imdsTime(at: Date): string {
  return at.toISOString().replace(/\.\d{3}Z$/, "Z");
}

/**
 * Starts the instance-host simulator: for every instance launched in moto with Nebula's tags
 * (`nebula:cluster`, and `nebula:pod-uid` or, for a warm-pool host, `nebula:pool`), it plays the
 * VM's guest per the guest contract. After a boot delay it runs the decoded user-data with bash
 * as root in a sandbox of its own (private
 * `/etc/systemd/system`, `/usr/local/lib/nebula`, `/var/lib/nebula`, `/dev/console`), with an
 * IMDSv2 endpoint, `systemctl`, `shutdown` and a `docker` backed by podman + runc. A guest
 * power-off becomes StopInstances in moto; a stop or terminate through the API becomes an
 * orderly guest shutdown. Point the code under test at {@link InstanceHosts.ec2Endpoint} to see
 * the intermediate states that moto skips.
 *
 * Needs root, `unshare`, `podman`, `runc`, `curl` and a static busybox (Debian: util-linux,
 * podman, runc, curl, busybox-static).
 *
 * @example
 * ```ts
 * const moto = await startMoto();
 * const hosts = await startInstanceHosts({ ec2Endpoint: moto.endpoint, region: moto.region });
 * const ec2 = new EC2Client({ endpoint: hosts.ec2Endpoint, region: moto.region, credentials: MOTO_CREDENTIALS });
 * // ... RunInstances with Nebula's tags and user-data, then:
 * await hosts.waitForPhase(instanceId, "off");
 * await hosts.close();
 * ```
 */
export async function startInstanceHosts(options: InstanceHostsOptions): Promise<InstanceHosts> {
  const parsed = OptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new TestPeerError(
      "InvalidOptions",
      `startInstanceHosts: ${z.prettifyError(parsed.error)}`,
      {
        cause: parsed.error,
      },
    );
  }
  const o = parsed.data;
  const runtime = o.runtime ?? "/usr/sbin/runc";
  const missing = ["unshare", "podman", "curl", "tar"].filter((c) => !which(c));
  if (!existsSync(runtime)) missing.push(runtime);
  if (typeof process.getuid === "function" && process.getuid() !== 0) missing.push("root (uid 0)");
  if (missing.length > 0) {
    throw new TestPeerError(
      "PrerequisiteMissing",
      `startInstanceHosts needs ${missing.join(", ")} (run bash scripts/bootstrap.sh as root)`,
    );
  }
  await ensureGuestImages(o.busybox);
  try {
    shareNetnsDir();
  } catch (error) {
    throw new TestPeerError(
      "PrerequisiteMissing",
      `startInstanceHosts could not make /run/netns a shared mount point: ${String((error as { stderr?: unknown }).stderr ?? error)}`,
      { cause: error },
    );
  }
  const ownDir = o.workDir === undefined;
  const workDir = o.workDir ?? mkdtempSync(join(tmpdir(), "nebula-hosts-"));
  const keepOutput = o.keepOutput ?? !ownDir;
  // Unix socket paths are limited to 107 bytes: keep the guests' init sockets in a short directory.
  const socketDir = mkdtempSync(join(tmpdir(), "nsim-"));
  const enterScript = join(workDir, "enter.sh");
  writeFileSync(enterScript, ENTER_SCRIPT, { mode: 0o755 });
  const nofile = o.ulimits === undefined ? "" : `nofile=${o.ulimits.nofile}`;
  const nproc = o.ulimits === undefined ? "" : `nproc=${o.ulimits.nproc}`;
  const credentials = o.credentials ?? { accessKeyId: "testing", secretAccessKey: "testing" };
  const ec2 = new EC2Client({
    endpoint: o.ec2Endpoint,
    region: o.region,
    credentials,
    maxAttempts: 5,
  });
  const runId = randomUUID().slice(0, 8);
  const pgidFile = join(workDir, "pgids");
  writeFileSync(pgidFile, "");
  const containersDir = join(workDir, "containers");
  rmSync(containersDir, { recursive: true, force: true });
  mkdirSync(containersDir, { recursive: true });
  const watchdogLog = openSync(join(workDir, "watchdog.log"), "a");
  const watchdog = spawn(
    "bash",
    [
      "-c",
      WATCHDOG_SCRIPT,
      "watchdog",
      String(process.pid),
      pgidFile,
      runId,
      runtime,
      containersDir,
      socketDir,
    ],
    {
      detached: true,
      stdio: ["ignore", watchdogLog, watchdogLog],
    },
  );
  closeSync(watchdogLog);
  watchdog.unref();
  const guests = new Map<string, Guest>();
  const imdsServers = new Map<string, ImdsServer>();
  const spot = new Map<string, SpotInterruption>();
  const rebalance = new Map<string, Date>();
  const starting = new Set<Promise<unknown>>();
  let closed = false;

  const isOurs = (tags: Readonly<Record<string, string>>): boolean =>
    tags[NEBULA_CLUSTER_TAG] !== undefined &&
    (tags[NEBULA_POD_UID_TAG] !== undefined || tags[NEBULA_POOL_TAG] !== undefined) &&
    (o.cluster === undefined || tags[NEBULA_CLUSTER_TAG] === o.cluster);

  const track = <T>(promise: Promise<T>): void => {
    const p = promise.catch(() => undefined);
    starting.add(p);
    void p.finally(() => starting.delete(p));
  };

  const roleOf = async (profileArn: string | undefined): Promise<string | undefined> => {
    if (profileArn === undefined) return undefined;
    const profile = profileArn.split("/").at(-1) ?? profileArn;
    try {
      const date = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d+/, "");
      const response = await fetch(`${o.ec2Endpoint}/`, {
        method: "POST",
        headers: {
          "content-type": "application/x-www-form-urlencoded",
          "x-amz-date": date,
          authorization: `AWS4-HMAC-SHA256 Credential=${credentials.accessKeyId}/${date.slice(0, 8)}/us-east-1/iam/aws4_request, SignedHeaders=host;x-amz-date, Signature=0`,
        },
        body: new URLSearchParams({
          Action: "GetInstanceProfile",
          InstanceProfileName: profile,
          Version: "2010-05-08",
        }),
      });
      const role = /<RoleName>([^<]+)<\/RoleName>/.exec(await response.text())?.[1];
      return role ?? profile;
    } catch {
      return profile;
    }
  };

  const powerOff = async (guest: Guest, origin: ShutdownOrigin): Promise<void> => {
    if (origin !== "guest" || closed) return;
    try {
      const attribute = await ec2.send(
        new DescribeInstanceAttributeCommand({
          InstanceId: guest.instanceId,
          Attribute: "instanceInitiatedShutdownBehavior",
        }),
      );
      const behaviour = attribute.InstanceInitiatedShutdownBehavior?.Value ?? "stop";
      guest.event(
        `power off → ${behaviour === "terminate" ? "TerminateInstances" : "StopInstances"} in moto`,
      );
      if (behaviour === "terminate") {
        await ec2.send(new TerminateInstancesCommand({ InstanceIds: [guest.instanceId] }));
        await guest.terminate();
      } else {
        await ec2.send(new StopInstancesCommand({ InstanceIds: [guest.instanceId] }));
      }
    } catch (error) {
      guest.event(`power off could not reach moto: ${String(error)}; the instance is gone`);
      await guest.terminate();
    }
  };

  const launch = (instanceId: string): Guest => {
    const dir = join(workDir, instanceId);
    mkdirSync(dir, { recursive: true });
    const guest = new Guest({
      instanceId,
      dir,
      socketPath: join(socketDir, `${instanceId}.sock`),
      enterScript,
      ec2Endpoint: o.ec2Endpoint,
      logsEndpoint: o.ec2Endpoint,
      region: o.region,
      guestEnv: o.guestEnv ?? {},
      hidePaths: o.hideAwsCli === true ? ["/usr/bin/aws", "/usr/local/bin/aws"] : [],
      firstBootDelayMs: o.firstBootDelayMs ?? o.bootDelayMs ?? 1000,
      restartBootDelayMs: o.restartBootDelayMs ?? o.bootDelayMs ?? 1000,
      pullDelayMs: o.pullDelayMs ?? 0,
      beforeBoot: o.beforeBoot,
      runtime,
      runId,
      containersDir,
      onSpawn: (pgid: number) => appendFileSync(pgidFile, `${pgid}\n`),
      nofile,
      nproc,
      network: o.containerNetwork ?? "host",
      engineGraceMs: o.engineGraceMs ?? 20_000,
      onPowerOff: powerOff,
    });
    guests.set(instanceId, guest);
    guest.event("discovered");
    track(
      (async () => {
        const described = await ec2.send(
          new DescribeInstancesCommand({ InstanceIds: [instanceId] }),
        );
        const reservation = described.Reservations?.[0];
        const instance: Instance | undefined = reservation?.Instances?.[0];
        const userData = await ec2.send(
          new DescribeInstanceAttributeCommand({ InstanceId: instanceId, Attribute: "userData" }),
        );
        const imds = await startImdsServer({
          instanceId,
          region: o.region,
          availabilityZone: instance?.Placement?.AvailabilityZone ?? `${o.region}a`,
          roleName: await roleOf(instance?.IamInstanceProfile?.Arn),
          instanceProfileArn: instance?.IamInstanceProfile?.Arn,
          imageId: instance?.ImageId ?? "ami-00000000",
          instanceType: instance?.InstanceType ?? "m5.large",
          privateIp: instance?.PrivateIpAddress ?? "10.0.0.10",
          accountId: reservation?.OwnerId ?? "123456789012",
          tokensRequired: instance?.MetadataOptions?.HttpTokens === "required",
          // moto says InstanceLifecycle "spot" for a launch with MarketType "spot", nothing for
          // On-Demand, as EC2 does.
          lifeCycle: instance?.InstanceLifecycle === "spot" ? "spot" : "on-demand",
          // Read live, as EC2 serves them: a tag the controller writes later is seen at once.
          tags:
            instance?.MetadataOptions?.InstanceMetadataTags === "enabled"
              ? async () => {
                  const now = await ec2.send(
                    new DescribeInstancesCommand({ InstanceIds: [instanceId] }),
                  );
                  const found = now.Reservations?.[0]?.Instances?.[0]?.Tags ?? [];
                  return new Map(found.map((t) => [t.Key ?? "", t.Value ?? ""]));
                }
              : undefined,
          // Read live too: what the controller writes while the instance is stopped
          // (ModifyInstanceAttribute) is what the next boot reads.
          userData: async () => {
            const now = await ec2.send(
              new DescribeInstanceAttributeCommand({
                InstanceId: instanceId,
                Attribute: "userData",
              }),
            );
            const value = now.UserData?.Value;
            return value === undefined || value === "" ? undefined : Buffer.from(value, "base64");
          },
        });
        if (guest.phase === "terminated") {
          await imds.close();
          return;
        }
        imdsServers.set(instanceId, imds);
        await guest.prepare(imds);
        if (guest.phase !== "booting") return;
        const encoded = userData.UserData?.Value;
        const decoded = encoded === undefined ? undefined : decodeUserData(encoded);
        if (decoded !== undefined && !decoded.ok) guest.userDataUnreadable(decoded.error.message);
        guest.boot(decoded?.ok === true ? decoded.script : undefined);
      })().catch(async (error: unknown) => {
        guest.event(`could not start the guest: ${String(error)}`);
        await guest.terminate();
      }),
    );
    return guest;
  };

  /** Reconciles a guest with moto's state; returns what the proxy should show. */
  const observe = (item: InstanceItem, sentAt: number): StateOverride | undefined => {
    if (closed || !isOurs(item.tags)) return undefined;
    const moto = item.stateName;
    let guest = guests.get(item.instanceId);
    if (guest === undefined) {
      if (moto !== "running" && moto !== "pending") return undefined;
      guest = launch(item.instanceId);
    } else reconcile(guest, moto, sentAt);
    return overrideFor(guest, moto);
  };

  /** Forgets an instance's Spot interruption (its pending act too); `true` if there was one. */
  const forgetSpot = (instanceId: string): boolean => {
    const interruption = spot.get(instanceId);
    if (interruption?.timer !== undefined) clearTimeout(interruption.timer);
    return spot.delete(instanceId);
  };

  /** `sentAt`: when the view of moto was asked for; a view older than the guest's last power-off is stale. */
  const reconcile = (guest: Guest, moto: string, sentAt: number): void => {
    const phase = guest.phase;
    if (moto === "stopped" || moto === "stopping") {
      if (phase === "booting" || phase === "running") track(guest.shutdown("api-stop"));
    } else if (moto === "terminated" || moto === "shutting-down") {
      // Terminated by someone else after (or during) a Spot stop: the reason is theirs, not EC2's.
      if (spot.get(guest.instanceId)?.action !== "terminate") forgetSpot(guest.instanceId);
      if (phase === "booting" || phase === "running" || phase === "stopping")
        track(guest.shutdown("api-terminate"));
      else if (phase === "off") track(guest.terminate());
    } else if (moto === "running" || moto === "pending") {
      if (phase === "off" && !guest.powerOffInFlight && sentAt > guest.poweredOffAt) {
        guest.event("started again (StartInstances)");
        // A Spot instance EC2 stopped and that is started again is no longer marked.
        if (forgetSpot(guest.instanceId)) {
          imdsServers.get(guest.instanceId)?.setNotice("spot/instance-action", undefined);
          imdsServers.get(guest.instanceId)?.setNotice("spot/termination-time", undefined);
        }
        guest.boot(undefined);
      }
    }
  };

  /** {@link observe} for an answer without tags: only an instance already played is shown. */
  const observeState = (instanceId: string, moto: string, sentAt: number): Ec2State | undefined => {
    const guest = closed ? undefined : guests.get(instanceId);
    if (guest === undefined) return undefined;
    reconcile(guest, moto, sentAt);
    return overlayFor(guest, moto)?.state;
  };

  const overrideFor = (guest: Guest, moto: string): StateOverride | undefined => {
    const shown = overlayFor(guest, moto);
    // EC2 reclaimed a Spot instance: its reason replaces moto's Client.UserInitiatedShutdown.
    const reason = spot.get(guest.instanceId)?.reason;
    const down = guest.phase !== "booting" && guest.phase !== "running";
    if (reason === undefined || (!down && (moto === "running" || moto === "pending"))) return shown;
    return { ...shown, stateReason: reason };
  };

  const overlayFor = (guest: Guest, moto: string): StateOverride | undefined => {
    switch (guest.phase) {
      case "booting":
        return moto === "running" || moto === "pending" ? { state: EC2_STATES.pending } : undefined;
      case "stopping":
        return {
          state: EC2_STATES.stopping,
          ...(guest.instanceInitiated ? { stateReason: INSTANCE_INITIATED } : {}),
        };
      case "shutting-down":
        return { state: EC2_STATES["shutting-down"] };
      default:
        return guest.instanceInitiated && (moto === "stopped" || moto === "terminated")
          ? { stateReason: INSTANCE_INITIATED }
          : undefined;
    }
  };

  const proxy: OverlayProxy = await startOverlayProxy(o.ec2Endpoint, {
    observe,
    observeState,
    stateChanged: (action, ids) => {
      const moto =
        action === "StopInstances"
          ? "stopped"
          : action === "TerminateInstances"
            ? "terminated"
            : "running";
      for (const id of ids) {
        const guest = guests.get(id);
        if (guest !== undefined) reconcile(guest, moto, Date.now());
      }
    },
    userDataChange: (id) => {
      const guest = guests.get(id);
      // EC2 changes an instance's user-data only while it is stopped.
      return guest === undefined || guest.phase === "off"
        ? undefined
        : `The instance '${id}' is not in the 'stopped' state.`;
    },
    consoleOutput: (id) => {
      const guest = guests.get(id);
      if (guest === undefined) return undefined;
      try {
        return readFileSync(guest.consolePath);
      } catch {
        return undefined;
      }
    },
  });

  let timer: NodeJS.Timeout | undefined;
  /**
   * The tags that make an instance this simulator's (`DescribeTags` of those keys): with
   * {@link listInstanceStates}, two small answers instead of a whole `DescribeInstances` listing
   * at every poll (a simulated host's report, an SQS delivery and the vnode's reads all wait on the
   * same moto).
   */
  const listOwnershipTags = async (): Promise<Map<string, Record<string, string>>> => {
    const out = new Map<string, Record<string, string>>();
    let token: string | undefined;
    do {
      const page = await ec2.send(
        new DescribeTagsCommand({
          Filters: [
            { Name: "resource-type", Values: ["instance"] },
            { Name: "key", Values: [NEBULA_CLUSTER_TAG, NEBULA_POD_UID_TAG, NEBULA_POOL_TAG] },
          ],
          ...(token === undefined ? {} : { NextToken: token }),
        }),
      );
      for (const tag of page.Tags ?? []) {
        if (tag.ResourceId === undefined || tag.Key === undefined) continue;
        const tags = out.get(tag.ResourceId) ?? {};
        tags[tag.Key] = tag.Value ?? "";
        out.set(tag.ResourceId, tags);
      }
      token = page.NextToken;
    } while (token !== undefined && token !== "");
    return out;
  };
  const poll = async (): Promise<void> => {
    const seen = new Set<string>();
    const sentAt = Date.now();
    // Tags first: an instance launched between the two reads is listed next time, not taken as
    // someone else's.
    const tagsOf = await listOwnershipTags();
    for (const [instanceId, stateName] of await listInstanceStates(ec2)) {
      const tags = tagsOf.get(instanceId);
      if (tags === undefined || !isOurs(tags)) continue;
      seen.add(instanceId);
      observe({ instanceId, stateName, tags }, sentAt);
    }
    for (const [id, guest] of guests) {
      // A guest discovered (through the proxy) after this poll was sent is not missing from it.
      const discoveredAt = guest.history[0]?.at ?? 0;
      if (
        !seen.has(id) &&
        discoveredAt < sentAt &&
        guest.phase !== "terminated" &&
        !guest.powerOffInFlight
      ) {
        guest.event("the instance vanished from moto (reset?): killing the guest");
        track(guest.destroy());
      }
    }
  };
  const loop = () => {
    if (closed) return;
    poll()
      .catch(() => undefined)
      .finally(() => {
        if (!closed) timer = setTimeout(loop, o.pollIntervalMs ?? 250);
      });
  };
  loop();

  /**
   * The last sweep of close(): removes whatever of the run is still there (recorded by ID, or
   * listed with the run's label), then lists again. Answers what is left, or why it cannot be
   * known (`podman ps` still fails), or `undefined` for nothing.
   */
  const sweepRun = async (): Promise<string | undefined> => {
    const ids = new Set(trackedContainerIds(containersDir));
    const listed = await listContainers(runtime, `nebula-sim.run=${runId}`);
    if (listed.ok) for (const c of listed.containers) ids.add(c.id);
    else warnLoudly(`run ${runId}: podman ps failed (removing by recorded ID): ${listed.error}`);
    const left = await removeContainers(runtime, [...ids], () => undefined);
    await reapOrphans(runtime, { cidfilePrefix: `${containersDir}/` }, (line) =>
      warnLoudly(`run ${runId}: ${line}`),
    );
    // Removing a broken container by its ID may have mended podman ps: ask again either way.
    const again = await listContainers(runtime, `nebula-sim.run=${runId}`);
    const names = new Set(left.map((c) => c.name));
    if (again.ok) for (const c of again.containers) names.add(c.name);
    const problems: string[] = [];
    if (names.size > 0)
      problems.push(`${names.size} containers of the run are left over: ${[...names].join(", ")}`);
    if (!again.ok)
      problems.push(
        `podman ps failed, so containers of the run not recorded by ID cannot be ruled out: ${again.error}`,
      );
    return problems.length === 0 ? undefined : `run ${runId}: ${problems.join("; ")}`;
  };

  /** EC2 acts on a Spot interruption notice, unless the instance was stopped or terminated meanwhile. */
  const reclaim = async (guest: Guest, interruption: SpotInterruption): Promise<void> => {
    interruption.timer = undefined;
    const id = guest.instanceId;
    const moved = guest.history.length !== interruption.phasesAtNotice;
    if (closed || moved || guest.phase !== "running") {
      guest.event(`Spot interruption: the instance is ${guest.phase}; EC2 has nothing to reclaim`);
      return;
    }
    const terminate = interruption.action === "terminate";
    try {
      // A stop or terminate made directly in moto may not have reached the guest yet.
      const now = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
      const state = now.Reservations?.[0]?.Instances?.[0]?.State?.Name;
      if (closed || state !== "running" || guest.history.length !== interruption.phasesAtNotice) {
        guest.event(
          `Spot interruption: moto says ${state ?? "nothing"}; EC2 has nothing to reclaim`,
        );
        return;
      }
      interruption.reason = terminate ? SPOT_TERMINATION : SPOT_SHUTDOWN;
      guest.event(
        `Spot interruption (${interruption.action}): EC2 reclaims the instance → ${terminate ? "TerminateInstances" : "StopInstances"} in moto`,
      );
      await ec2.send(
        terminate
          ? new TerminateInstancesCommand({ InstanceIds: [id] })
          : new StopInstancesCommand({ InstanceIds: [id] }),
      );
      // As the proxy does after an API call: the guest's orderly shutdown.
      reconcile(guest, terminate ? "terminated" : "stopped", Date.now());
    } catch (error) {
      interruption.reason = undefined;
      guest.event(`Spot interruption: moto refused the reclaim: ${String(error)}`);
      warnLoudly(`instance-host simulator: Spot reclaim of ${id} failed: ${String(error)}`);
    }
  };

  /** The guest of a running instance and its IMDS, for the Spot calls; throws as they document. */
  const runningGuest = (instanceId: string, what: string): { guest: Guest; imds: ImdsServer } => {
    if (closed) throw new TestPeerError("Closed", "the instance-host simulator is closed");
    const guest = guests.get(instanceId);
    if (guest === undefined) {
      throw new TestPeerError(
        "UnknownInstance",
        `${what}: the instance-host simulator does not play ${instanceId}`,
      );
    }
    const imds = imdsServers.get(instanceId);
    if (guest.phase !== "running" || imds === undefined) {
      throw new TestPeerError(
        "InstanceNotRunning",
        `${what}: ${instanceId} is not running (its guest is ${guest.phase})`,
      );
    }
    return { guest, imds };
  };

  const hosts: InstanceHosts = {
    ec2Endpoint: proxy.endpoint,
    motoEndpoint: o.ec2Endpoint,
    workDir,
    guest: (id) => {
      const guest = guests.get(id);
      return guest === undefined ? undefined : view(guest);
    },
    guests: () => [...guests.values()].map(view),
    async waitForPhase(instanceId, phases, timeoutMs = 60_000) {
      const wanted = typeof phases === "string" ? [phases] : phases;
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        if (closed) throw new TestPeerError("Closed", "the instance-host simulator is closed");
        const guest = guests.get(instanceId);
        if (guest !== undefined && wanted.includes(guest.phase)) return view(guest);
        if (Date.now() > deadline) {
          const tail = guest === undefined ? "(never seen)" : view(guest).console().slice(-2000);
          throw new TestPeerError(
            "Timeout",
            `guest ${instanceId} did not reach ${wanted.join("|")} in ${timeoutMs} ms (phase ${guest?.phase ?? "none"}); console tail:\n${tail}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async interruptSpot(instanceId, options) {
      const parsedOptions = SpotOptionsSchema.safeParse(options);
      if (!parsedOptions.success) {
        throw new TestPeerError(
          "InvalidOptions",
          `interruptSpot: ${z.prettifyError(parsedOptions.error)}`,
          { cause: parsedOptions.error },
        );
      }
      const { guest, imds } = runningGuest(instanceId, "interruptSpot");
      const pending = spot.get(instanceId);
      if (pending?.timer !== undefined && pending.phasesAtNotice === guest.history.length) {
        return { action: pending.action, time: pending.time };
      }
      forgetSpot(instanceId);
      const action = parsedOptions.data?.action ?? "terminate";
      const warningMs = parsedOptions.data?.warningMs ?? 120_000;
      const time = new Date(Math.floor((Date.now() + warningMs) / 1000) * 1000);
      const interruption: SpotInterruption = {
        action,
        time,
        timer: undefined,
        phasesAtNotice: guest.history.length,
        reason: undefined,
      };
      spot.set(instanceId, interruption);
      imds.setNotice("spot/instance-action", JSON.stringify({ action, time: imdsTime(time) }));
      if (action === "terminate") imds.setNotice("spot/termination-time", imdsTime(time));
      guest.event(`Spot interruption notice: ${action} at ${imdsTime(time)} (in ${warningMs} ms)`);
      interruption.timer = setTimeout(() => track(reclaim(guest, interruption)), warningMs);
      return { action, time };
    },
    async recommendRebalance(instanceId) {
      const { guest, imds } = runningGuest(instanceId, "recommendRebalance");
      const given = rebalance.get(instanceId);
      if (given !== undefined) return { noticeTime: given };
      const noticeTime = new Date(Math.floor(Date.now() / 1000) * 1000);
      rebalance.set(instanceId, noticeTime);
      imds.setNotice(
        "events/recommendations/rebalance",
        JSON.stringify({ noticeTime: imdsTime(noticeTime) }),
      );
      guest.event(`rebalance recommendation at ${imdsTime(noticeTime)}`);
      return { noticeTime };
    },
    async close() {
      if (closed) return;
      closed = true;
      if (timer !== undefined) clearTimeout(timer);
      for (const interruption of spot.values()) {
        if (interruption.timer !== undefined) clearTimeout(interruption.timer);
        interruption.timer = undefined;
      }
      await Promise.allSettled([...guests.values()].map((g) => g.destroy()));
      await Promise.allSettled([...starting]);
      const left = await sweepRun();
      if (watchdog.pid !== undefined) {
        try {
          process.kill(watchdog.pid, "SIGTERM");
        } catch {
          // Gone.
        }
      }
      await proxy.close();
      ec2.destroy();
      rmSync(socketDir, { recursive: true, force: true });
      if (!keepOutput) rmSync(workDir, { recursive: true, force: true });
      if (left !== undefined) {
        warnLoudly(left);
        throw new TestPeerError("ContainersLeft", `instance-host simulator ${left}`);
      }
    },
    [Symbol.asyncDispose]() {
      return hosts.close();
    },
  };
  return hosts;
}
