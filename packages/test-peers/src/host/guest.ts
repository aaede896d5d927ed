import { type ChildProcess, execFile, spawn } from "node:child_process";
import {
  appendFileSync,
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer, type Server } from "node:http";
import { constants } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { z } from "zod";
import {
  AwslogsForwarder,
  checkLogConfig,
  imdsCredentials,
  parseAwslogsOptions,
} from "./awslogs.js";
import {
  existingContainers,
  listContainers,
  reapOrphans,
  removeContainers,
  trackedContainerIds,
  warnLoudly,
} from "./containers.js";
import { killGroupSparingEngine, signalGroupSparingEngine } from "./engine.js";
import type { ImdsServer } from "./imds.js";
import { dockerShim, shutdownShim, systemctlShim } from "./shims.js";
import { parseServiceUnit, type ServiceUnit } from "./unit.js";

const run = promisify(execFile);

/**
 * Where a guest is in its life, as the simulator plays it.
 *
 * - `booting` — launched, boot delay running (EC2 shows `pending`).
 * - `running` — booted: user-data ran or is running, enabled units started.
 * - `stopping` — shutting down for a stop (guest power-off or StopInstances): units stopping in order.
 * - `shutting-down` — shutting down for TerminateInstances.
 * - `off` — powered off (the instance is `stopped`); a StartInstances boots it again.
 * - `terminated` — gone for good (terminated, or vanished from moto); nothing of it runs.
 */
export type GuestPhase =
  | "booting"
  | "running"
  | "stopping"
  | "shutting-down"
  | "off"
  | "terminated";

/** Why a guest shuts down: its own `shutdown`/`poweroff`, or an API call seen in moto. */
export type ShutdownOrigin = "guest" | "api-stop" | "api-terminate";

/** The state of one systemd unit in a guest, as `systemctl is-active` prints it. */
export type UnitState = "active" | "deactivating" | "inactive" | "failed";

/** A phase change, with the wall-clock time it happened (for debugging and ordering assertions). */
export interface PhaseChange {
  /** The new phase. */
  readonly phase: GuestPhase;
  /** `Date.now()` when it changed. */
  readonly at: number;
}

/** Everything a guest needs from the simulator. */
export interface GuestSettings {
  /** The EC2 instance ID the guest plays. */
  readonly instanceId: string;
  /** The guest's own directory (created if absent). */
  readonly dir: string;
  /** Unix socket path of the guest's init (short: sockets are limited to 107 bytes). */
  readonly socketPath: string;
  /** Path of the sandbox entry script (`ENTER_SCRIPT` of `shims.ts`). */
  readonly enterScript: string;
  /** EC2 endpoint the guest's report goes to (`AWS_ENDPOINT_URL_EC2`). */
  readonly ec2Endpoint: string;
  /**
   * moto's endpoint for CloudWatch Logs and CloudWatch (`AWS_ENDPOINT_URL_LOGS`,
   * `AWS_ENDPOINT_URL_CLOUDWATCH`); also where the awslogs driver sends when a container names no
   * `awslogs-endpoint`.
   */
  readonly logsEndpoint: string;
  /** The instance's region (the awslogs driver's default region). */
  readonly region: string;
  /** Extra environment for the user-data. */
  readonly guestEnv: Readonly<Record<string, string>>;
  /** Files to hide from the guest (their directory is replaced by a view without them). */
  readonly hidePaths: readonly string[];
  /** Delay of the first boot (after RunInstances), in milliseconds: the guest stays `booting`. */
  readonly firstBootDelayMs: number;
  /** Delay of every later boot (after StartInstances), in milliseconds. */
  readonly restartBootDelayMs: number;
  /**
   * How long the guest's `docker` takes to pull an image its volume does not hold yet (ms); 0:
   * every local image is held and pulls are instant (see the `docker` shim's `pullDelayMs`).
   */
  readonly pullDelayMs: number;
  /** Awaited after the boot delay, before the guest runs (a test's gate on the `pending` state). */
  readonly beforeBoot: ((instanceId: string) => Promise<void> | void) | undefined;
  /** podman's OCI runtime. */
  readonly runtime: string;
  /** The simulator run's ID (container label `nebula-sim.run`). */
  readonly runId: string;
  /** The run's containers directory, where the `docker` shim records each container's ID. */
  readonly containersDir: string;
  /** Called with the process group of every guest process the simulator spawns. */
  readonly onSpawn: (pgid: number) => void;
  /** `--ulimit` default for open files (`nofile=soft:hard`); empty: derived from the guest's limits. */
  readonly nofile: string;
  /** `--ulimit` default for processes (`nproc=soft:hard`); empty: derived from the guest's limits. */
  readonly nproc: string;
  /** `--network` default for containers. */
  readonly network: string;
  /**
   * How long a kill waits for the guest's podman commands that change the engine's state (a
   * `docker start` in flight) to finish before killing them too (see `engine.ts`).
   */
  readonly engineGraceMs: number;
  /** Called when the guest has shut down; for `guest` origin it makes moto stop (or terminate) the instance. */
  readonly onPowerOff: (guest: Guest, origin: ShutdownOrigin) => Promise<void>;
}

/** One container's awslogs forwarding: the run being forwarded, and where the log file's next run starts. */
interface AwslogsRun {
  forwarder: AwslogsForwarder | undefined;
  done: Promise<number> | undefined;
  offset: number;
}

const ContainerIdSchema = z.string().regex(/^[0-9a-f]{64}$/);
const AwslogsStartSchema = z.tuple([ContainerIdSchema], z.string().regex(/^[^=]+=/));
const AwslogsStartedSchema = z.tuple([ContainerIdSchema, z.enum(["started", "failed"])]);

interface UnitRuntime {
  readonly name: string;
  spec: ServiceUnit;
  state: UnitState;
  child: ChildProcess | undefined;
  exited: Promise<void>;
  order: number;
  exitCode: number | null;
}

/** The contract's private paths (guest contract §5), relative to the guest's `root/`. */
const PRIVATE_DIRS = [
  "etc/systemd/system",
  "usr/local/lib/nebula",
  "var/lib/nebula",
  "run/nebula",
] as const;
const UNIT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

function signalGroup(pid: number | undefined, signal: NodeJS.Signals, group: boolean): void {
  if (pid === undefined) return;
  try {
    process.kill(group ? -pid : pid, signal);
  } catch {
    // Already gone.
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * One guest: its sandbox, its init (units, shutdown) and its lifecycle. Created and driven by
 * {@link startInstanceHosts}; tests read it through {@link InstanceHostGuest}.
 */
export class Guest {
  /** The EC2 instance ID. */
  readonly instanceId: string;
  /** The guest's output directory. */
  readonly dir: string;
  /** Every phase it went through, in order. */
  readonly history: PhaseChange[] = [];
  /** Exit code of the user-data: `undefined` before it ran, `null` while it runs or when killed. */
  userDataExit: number | null | undefined;
  /** The guest powered itself off (EC2 shows `Client.InstanceInitiatedShutdown`). */
  instanceInitiated = false;
  /** A power-off is being turned into a StopInstances/TerminateInstances. */
  powerOffInFlight = false;
  /** `Date.now()` when the guest last finished powering off; moto views older than this are stale. */
  poweredOffAt = 0;
  #phase: GuestPhase = "booting";
  readonly #settings: GuestSettings;
  readonly #units = new Map<string, UnitRuntime>();
  readonly #enabled = new Set<string>();
  #unitOrder = 0;
  #userData: ChildProcess | undefined;
  #userDataScript: Buffer | undefined;
  #userDataRan = false;
  #bootTimer: NodeJS.Timeout | undefined;
  /** How many boots began (the first one waits `firstBootDelayMs`, the others `restartBootDelayMs`). */
  #boots = 0;
  #shutdown: Promise<void> | undefined;
  #control: Server | undefined;
  #imds: ImdsServer | undefined;
  #destroyed: Promise<void> | undefined;
  /** Set the moment destruction begins: nothing of the guest may start after it. */
  #closing = false;
  readonly #kills = new Set<Promise<void>>();
  /** The awslogs forwarding of each container (podman ID) that has the driver. */
  readonly #awslogs = new Map<string, AwslogsRun>();

  /** A guest in phase `booting`; call {@link Guest.prepare}, then {@link Guest.boot}. */
  constructor(settings: GuestSettings) {
    this.#settings = settings;
    this.instanceId = settings.instanceId;
    this.dir = settings.dir;
    this.history.push({ phase: "booting", at: Date.now() });
  }

  /** The current phase. */
  get phase(): GuestPhase {
    return this.#phase;
  }

  /** Path of the guest's serial console (what it wrote to `/dev/console`). */
  get consolePath(): string {
    return join(this.dir, "console");
  }

  /**
   * Where the guest's volume records the images it pulled (one file per image ID), when pulls take
   * time (`pullDelayMs`): under its own `root/`, so it stays across stops and starts.
   */
  get imagesDir(): string {
    return join(this.dir, "root", "var/lib/docker/nebula-sim-images");
  }

  /** The IMDS endpoint of this guest. */
  get imdsEndpoint(): string {
    return this.#imds?.endpoint ?? "";
  }

  /** The units the guest installed and the simulator started, with their states. */
  units(): { name: string; state: UnitState; pid: number | undefined; exitCode: number | null }[] {
    return [...this.#units.values()].map((u) => ({
      name: u.name,
      state: u.state,
      pid: u.child?.pid,
      exitCode: u.exitCode,
    }));
  }

  #setPhase(phase: GuestPhase): void {
    if (this.#phase === phase) return;
    this.#phase = phase;
    this.history.push({ phase, at: Date.now() });
    this.event(`phase ${phase}`);
  }

  /** Appends a line to the guest's `events.log` (the simulator's own timeline of it). */
  event(line: string): void {
    try {
      appendFileSync(join(this.dir, "events.log"), `${new Date().toISOString()} ${line}\n`);
    } catch {
      // The directory is gone (closed); nothing to record.
    }
  }

  /** Appends a line to the guest's console, as the kernel or systemd would. */
  #console(line: string): void {
    try {
      appendFileSync(this.consolePath, `${line}\n`);
    } catch {
      // Gone.
    }
  }

  /** Creates the guest's directories, shims and init socket; takes ownership of its IMDS server. */
  async prepare(imds: ImdsServer): Promise<void> {
    this.#imds = imds;
    const { dir, socketPath, instanceId } = this.#settings;
    rmSync(socketPath, { force: true });
    for (const sub of PRIVATE_DIRS) mkdirSync(join(dir, "root", sub), { recursive: true });
    for (const sub of ["sbin", "docker", "units"]) mkdirSync(join(dir, sub), { recursive: true });
    writeFileSync(this.consolePath, "", { flag: "a" });
    const sbin = join(dir, "sbin");
    const write = (name: string, text: string) => {
      writeFileSync(join(sbin, name), text);
      chmodSync(join(sbin, name), 0o755);
    };
    write("systemctl", systemctlShim(socketPath));
    for (const verb of ["shutdown", "poweroff", "halt", "reboot"])
      write(verb, shutdownShim(socketPath, verb));
    write(
      "docker",
      dockerShim({
        instanceId,
        runId: this.#settings.runId,
        stateDir: join(dir, "docker"),
        containersDir: this.#settings.containersDir,
        runtime: this.#settings.runtime,
        nofile: this.#settings.nofile,
        nproc: this.#settings.nproc,
        network: this.#settings.network,
        initSocket: socketPath,
        pullDelayMs: this.#settings.pullDelayMs,
        imagesDir: this.imagesDir,
        eventsLog: join(dir, "events.log"),
      }),
    );
    mkdirSync(join(dir, "hide"), { recursive: true });
    const mounts = [
      ...PRIVATE_DIRS.map((sub) => `bind\t${join(dir, "root", sub)}\t/${sub}`),
      `bind\t${this.consolePath}\t/dev/console`,
      `bind\t${sbin}\t/usr/local/sbin`,
      ...this.#settings.hidePaths
        .filter((p) => existsSync(p))
        .map((p) => `hide\t${join(dir, "hide")}\t${p}`),
    ];
    writeFileSync(join(dir, "mounts"), `${mounts.join("\n")}\n`);
    this.#control = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        const args = Buffer.concat(chunks).toString("utf8").split("\0");
        if (args.at(-1) === "") args.pop();
        const answer =
          req.url === "/shutdown"
            ? this.#shutdownCommand(args)
            : req.url?.startsWith("/docker/") === true
              ? this.#dockerDaemon(req.url, args)
              : this.#systemctl(args);
        answer.then(
          ({ code, output }) => res.end(`${code}\n${output}`),
          (error: unknown) => res.end(`1\n${String(error)}`),
        );
      });
    });
    const control = this.#control;
    await new Promise<void>((resolve, reject) => {
      control.once("error", reject);
      control.listen(socketPath, () => resolve());
    });
    // Destroyed (moto reset, close) while preparing: release what was just opened.
    if (this.#destroyed !== undefined) {
      this.#control = undefined;
      control.close();
      await imds.close();
    }
  }

  /**
   * Boots the guest: after the boot delay (`firstBootDelayMs` the first time, `restartBootDelayMs`
   * after), starts the enabled units and (first boot only) runs the user-data.
   */
  boot(userData: Buffer | undefined): void {
    if (userData !== undefined) this.#userDataScript = userData;
    this.#setPhase("booting");
    this.instanceInitiated = false;
    this.#shutdown = undefined;
    const first = this.#boots === 0;
    this.#boots += 1;
    const delayMs = first ? this.#settings.firstBootDelayMs : this.#settings.restartBootDelayMs;
    this.event(
      `boot ${this.#boots} (${first ? "first boot, after RunInstances" : "a restart, after StartInstances"}): pending for ${delayMs} ms`,
    );
    this.#console(
      `[    0.000000] Linux version (nebula instance-host simulator) booting ${this.instanceId}`,
    );
    this.#bootTimer = setTimeout(() => {
      this.#bootTimer = undefined;
      const gate = this.#settings.beforeBoot;
      const opened =
        gate === undefined
          ? Promise.resolve()
          : Promise.resolve().then(() => gate(this.instanceId));
      void opened
        .catch((error: unknown) =>
          this.event(`beforeBoot failed (booting anyway): ${String(error)}`),
        )
        .then(() => {
          if (this.#phase !== "booting") return;
          this.#setPhase("running");
          this.#console("[  OK  ] Reached target Multi-User System.");
          for (const name of this.#enabled) this.#startUnit(name);
          if (!this.#userDataRan) this.#runUserData();
        });
    }, delayMs);
  }

  /** Records that the user-data cannot be decoded; the guest boots without it, as cloud-init would. */
  userDataUnreadable(reason: string): void {
    this.#userDataRan = true;
    this.#console(`cloud-init: user-data could not be decoded: ${reason}`);
    appendFileSync(join(this.dir, "user-data.log"), `user-data could not be decoded: ${reason}\n`);
  }

  #spawn(argv: readonly string[], env: Record<string, string>, logPath: string): ChildProcess {
    const fd = openSync(logPath, "a");
    try {
      const child = spawn(
        "unshare",
        [
          "--mount",
          // The entry script makes every mount private but /run/netns (see ENTER_SCRIPT).
          "--propagation",
          "unchanged",
          "--",
          "/bin/bash",
          this.#settings.enterScript,
          join(this.dir, "mounts"),
          ...argv,
        ],
        { detached: true, env, stdio: ["ignore", fd, fd] },
      );
      if (child.pid !== undefined) this.#settings.onSpawn(child.pid);
      return child;
    } finally {
      closeSync(fd);
    }
  }

  #runUserData(): void {
    const script = this.#userDataScript;
    this.#userDataRan = true;
    if (this.#closing) return;
    if (script === undefined || script.length === 0) {
      this.event("no user-data");
      return;
    }
    const path = join(this.dir, "user-data");
    writeFileSync(path, script);
    chmodSync(path, 0o700);
    const argv = script.subarray(0, 2).toString() === "#!" ? [path] : ["/bin/bash", path];
    const env: Record<string, string> = {
      PATH: UNIT_PATH,
      HOME: "/root",
      LANG: "C.UTF-8",
      AWS_EC2_METADATA_SERVICE_ENDPOINT: this.imdsEndpoint,
      AWS_ENDPOINT_URL_EC2: this.#settings.ec2Endpoint,
      // moto serves every service on one endpoint: the Pod's SSM parameters come from there too,
      // and the SQS queue the host's doorbell rings after each report (@nebula/userdata's `doorbell`).
      AWS_ENDPOINT_URL_SSM: this.#settings.ec2Endpoint,
      AWS_ENDPOINT_URL_SQS: this.#settings.ec2Endpoint,
      // ... and CloudWatch Logs and CloudWatch (the awslogs driver's logs, the usage metrics).
      AWS_ENDPOINT_URL_LOGS: this.#settings.logsEndpoint,
      AWS_ENDPOINT_URL_CLOUDWATCH: this.#settings.logsEndpoint,
      ...this.#settings.guestEnv,
    };
    this.userDataExit = null;
    this.event("user-data started");
    const child = this.#spawn(argv, env, join(this.dir, "user-data.log"));
    this.#userData = child;
    child.on("error", (error) => this.event(`user-data could not start: ${error.message}`));
    child.on("exit", (code, signal) => {
      this.userDataExit = code;
      this.#userData = undefined;
      this.event(`user-data exited code=${code} signal=${signal}`);
    });
  }

  #unitFile(name: string): string {
    return join(this.dir, "root", "etc/systemd/system", name);
  }

  #loadUnit(name: string): { ok: true; spec: ServiceUnit } | { ok: false; message: string } {
    const path = this.#unitFile(name);
    if (!existsSync(path)) return { ok: false, message: `Unit ${name} not found.` };
    const parsed = parseServiceUnit(readFileSync(path, "utf8"));
    if (!parsed.ok)
      return { ok: false, message: `Unit ${name} is not valid: ${parsed.error.message}` };
    return { ok: true, spec: parsed.unit };
  }

  #startUnit(name: string): { ok: boolean; message: string } {
    if (this.#closing) return { ok: false, message: `System is going down; not starting ${name}.` };
    if (this.#phase !== "running")
      return { ok: false, message: `System is ${this.#phase}; not starting ${name}.` };
    const existing = this.#units.get(name);
    if (
      existing !== undefined &&
      (existing.state === "active" || existing.state === "deactivating")
    ) {
      return { ok: true, message: "" };
    }
    const loaded = this.#loadUnit(name);
    if (!loaded.ok) return { ok: false, message: loaded.message };
    const { spec } = loaded;
    const env: Record<string, string> = { PATH: UNIT_PATH, LANG: "C.UTF-8", ...spec.environment };
    const child = this.#spawn(spec.execStart, env, join(this.dir, "units", `${name}.log`));
    let resolveExit: () => void = () => {};
    const unit: UnitRuntime = {
      name,
      spec,
      state: "active",
      child,
      exited: new Promise<void>((resolve) => {
        resolveExit = resolve;
      }),
      order: ++this.#unitOrder,
      exitCode: null,
    };
    this.#units.set(name, unit);
    this.#console(`[  OK  ] Started ${name}.`);
    this.event(
      `unit ${name} started pid=${child.pid} killMode=${spec.killMode} timeoutStopMs=${spec.timeoutStopMs}`,
    );
    child.on("error", (error) => this.event(`unit ${name} could not start: ${error.message}`));
    child.on("exit", (code, signal) => {
      unit.exitCode = code ?? (signal === null ? null : 128 + (constants.signals[signal] ?? 0));
      this.event(`unit ${name} main process exited code=${code} signal=${signal}`);
      // Whatever is left of the unit's process group goes with it (systemd cleans the cgroup).
      if (spec.killMode !== "none" && spec.killMode !== "process") void this.#killGroup(child.pid);
      if (unit.state === "active") {
        unit.state = code === 0 || spec.ignoreFailure ? "inactive" : "failed";
      }
      resolveExit();
    });
    return { ok: true, message: "" };
  }

  async #stopUnit(name: string): Promise<void> {
    const unit = this.#units.get(name);
    if (unit === undefined || unit.state !== "active") {
      if (unit?.state === "deactivating") await unit.exited;
      return;
    }
    const { spec } = unit;
    const pid = unit.child?.pid;
    unit.state = "deactivating";
    this.#console(`         Stopping ${name}...`);
    this.event(
      `unit ${name} stopping (SIGTERM, KillMode=${spec.killMode}, TimeoutStopSec=${spec.timeoutStopMs ?? "infinity"}ms)`,
    );
    if (spec.killMode === "control-group") signalGroupSparingEngine(pid, "SIGTERM");
    else if (spec.killMode !== "none") signalGroup(pid, "SIGTERM", false);
    let timedOut = false;
    if (spec.timeoutStopMs === null) await unit.exited;
    else {
      let timer: NodeJS.Timeout | undefined;
      timedOut = await Promise.race([
        unit.exited.then(() => false),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(true), spec.timeoutStopMs ?? 0);
        }),
      ]);
      clearTimeout(timer);
    }
    if (timedOut) {
      this.#console(`[ TIME ] Timed out stopping ${name}; killing.`);
      this.event(`unit ${name} stop timed out: SIGKILL`);
      if (spec.killMode === "process") signalGroup(pid, "SIGKILL", false);
      else if (spec.killMode !== "none") await this.#killGroup(pid);
      await unit.exited;
    }
    unit.state = timedOut ? "failed" : "inactive";
    this.#console(timedOut ? `[FAILED] Failed to stop ${name}.` : `[  OK  ] Stopped ${name}.`);
    this.event(`unit ${name} ${unit.state}`);
  }

  async #systemctl(argv: string[]): Promise<{ code: number; output: string }> {
    const flags = new Set(argv.filter((a) => a.startsWith("-")));
    const [verb, ...rest] = argv.filter((a) => !a.startsWith("-"));
    const names = rest.map((n) => (n.includes(".") ? n : `${n}.service`));
    const noBlock = flags.has("--no-block");
    this.event(`systemctl ${argv.join(" ")}`);
    switch (verb) {
      case "daemon-reload":
      case "daemon-reexec":
        return { code: 0, output: "" };
      case "enable":
      case "disable": {
        const out: string[] = [];
        for (const name of names) {
          if (!existsSync(this.#unitFile(name)))
            return { code: 1, output: `Failed to ${verb} unit: Unit file ${name} does not exist.` };
          if (verb === "enable") {
            this.#enabled.add(name);
            out.push(
              `Created symlink /etc/systemd/system/multi-user.target.wants/${name} → /etc/systemd/system/${name}.`,
            );
          } else {
            this.#enabled.delete(name);
            out.push(`Removed /etc/systemd/system/multi-user.target.wants/${name}.`);
          }
        }
        if (flags.has("--now")) {
          const next = await this.#systemctl([
            verb === "enable" ? "start" : "stop",
            ...[...flags],
            ...names,
          ]);
          if (next.code !== 0) return next;
        }
        return { code: 0, output: out.join("\n") };
      }
      case "start":
      case "restart": {
        for (const name of names) {
          if (verb === "restart") await this.#stopUnit(name);
          const started = this.#startUnit(name);
          if (!started.ok)
            return { code: 5, output: `Failed to start ${name}: ${started.message}` };
        }
        return { code: 0, output: "" };
      }
      case "stop": {
        const stopping = Promise.all(names.map((name) => this.#stopUnit(name)));
        if (!noBlock) await stopping;
        return { code: 0, output: "" };
      }
      case "is-active":
      case "is-failed": {
        const states = names.map((name) => this.#units.get(name)?.state ?? "inactive");
        const ok =
          verb === "is-active"
            ? states.every((s) => s === "active")
            : states.some((s) => s === "failed");
        return {
          code: ok ? 0 : 3,
          output: flags.has("-q") || flags.has("--quiet") ? "" : states.join("\n"),
        };
      }
      case "is-enabled": {
        const states = names.map((name) => (this.#enabled.has(name) ? "enabled" : "disabled"));
        return { code: states.every((s) => s === "enabled") ? 0 : 1, output: states.join("\n") };
      }
      case "status": {
        const lines = names.map((name) => {
          const unit = this.#units.get(name);
          const state = unit?.state ?? "inactive";
          return `● ${name}\n     Active: ${state}${unit?.child?.pid === undefined ? "" : `\n   Main PID: ${unit.child.pid}`}`;
        });
        const allActive = names.every((name) => this.#units.get(name)?.state === "active");
        return { code: allActive ? 0 : 3, output: lines.join("\n") };
      }
      case "poweroff":
      case "halt":
        return this.#shutdownCommand(["poweroff"]);
      default:
        return {
          code: 1,
          output: `systemctl ${verb ?? ""}: not supported by the Nebula instance-host simulator`,
        };
    }
  }

  async #shutdownCommand(argv: string[]): Promise<{ code: number; output: string }> {
    const [verb, ...rest] = argv;
    this.event(`${argv.join(" ")}`);
    if (verb === "reboot" || rest.includes("-r") || rest.includes("--reboot")) {
      return { code: 1, output: "reboot is not supported by the Nebula instance-host simulator" };
    }
    if (rest.includes("-c"))
      return { code: 1, output: "shutdown -c: nothing to cancel (shutdowns are immediate)" };
    void this.shutdown("guest");
    return { code: 0, output: "" };
  }

  /**
   * Shuts the guest down in order: every active unit is stopped (newest first) with its
   * KillMode and TimeoutStopSec, leftover guest processes are killed, the guest's containers
   * lose power, then `onPowerOff` runs. Idempotent; a terminate during a stop turns the phase
   * into `shutting-down`.
   */
  shutdown(origin: ShutdownOrigin): Promise<void> {
    if (this.#shutdown !== undefined) {
      if (origin === "api-terminate" && this.#phase === "stopping") this.#setPhase("shutting-down");
      return this.#shutdown;
    }
    if (this.#phase === "off" || this.#phase === "terminated") return Promise.resolve();
    if (this.#bootTimer !== undefined) clearTimeout(this.#bootTimer);
    this.#bootTimer = undefined;
    this.#setPhase(origin === "api-terminate" ? "shutting-down" : "stopping");
    this.event(`shutdown requested by ${origin}`);
    this.#shutdown = (async () => {
      this.#console("         Stopping all units (system is going down)...");
      const active = [...this.#units.values()]
        .filter((u) => u.state === "active")
        .sort((a, b) => b.order - a.order);
      for (const unit of active) await this.#stopUnit(unit.name);
      await this.#killUserData();
      await this.#killsDone();
      await this.#powerOffContainers();
      await this.#drainAwslogs();
      this.#console("[  OK  ] Reached target Power-Off.");
      this.#console("reboot: Power down");
      if (origin === "guest") this.instanceInitiated = true;
      this.powerOffInFlight = true;
      try {
        await this.#settings.onPowerOff(this, origin);
      } finally {
        this.powerOffInFlight = false;
      }
      this.poweredOffAt = Date.now();
      if (this.#phase === "shutting-down") await this.terminate();
      else if (this.#phase !== "terminated") this.#setPhase("off");
    })();
    return this.#shutdown;
  }

  async #killUserData(): Promise<void> {
    const child = this.#userData;
    if (child?.pid === undefined) return;
    signalGroupSparingEngine(child.pid, "SIGTERM");
    await Promise.race([new Promise((resolve) => child.once("exit", resolve)), delay(2000)]);
    await this.#killGroup(child.pid);
  }

  /**
   * Kills a process group of the guest but lets its podman engine writes in flight finish first
   * (`engine.ts`); every such kill is awaited before the guest's containers are removed.
   */
  #killGroup(pgid: number | undefined): Promise<void> {
    const done = killGroupSparingEngine(pgid, this.#settings.engineGraceMs, (commands) =>
      this.#warn(
        `podman still busy ${this.#settings.engineGraceMs} ms into a kill; killing it: ${commands.join("; ").slice(0, 500)}`,
      ),
    );
    this.#kills.add(done);
    void done.finally(() => this.#kills.delete(done));
    return done;
  }

  /** Waits for every kill in flight ({@link Guest.#killGroup}). */
  async #killsDone(): Promise<void> {
    while (this.#kills.size > 0) await Promise.allSettled([...this.#kills]);
  }

  async #podman(args: string[]): Promise<string> {
    try {
      const { stdout } = await run("podman", [
        "--runtime",
        this.#settings.runtime,
        "--cgroup-manager=cgroupfs",
        ...args,
      ]);
      return stdout;
    } catch (error) {
      this.event(`podman ${args.join(" ")} failed: ${String(error).slice(0, 300)}`);
      return "";
    }
  }

  /** A cleanup problem: in events.log and on stderr. */
  #warn(line: string): void {
    this.event(line);
    warnLoudly(`${this.instanceId}: ${line}`);
  }

  /**
   * The guest's containers: the IDs its `docker` shim recorded, and (an extra sweep) those
   * `podman ps` lists with the guest's label. A failing `podman ps` is reported, not taken for none.
   */
  async #containerIds(): Promise<string[]> {
    const ids = new Set(trackedContainerIds(this.#settings.containersDir, this.instanceId));
    const listed = await listContainers(
      this.#settings.runtime,
      `nebula-sim.guest=${this.instanceId}`,
    );
    if (listed.ok) for (const c of listed.containers) ids.add(c.id);
    else
      this.#warn(
        `podman ps failed (removing the ${ids.size} containers recorded by ID only): ${listed.error}`,
      );
    return [...ids];
  }

  async #powerOffContainers(): Promise<void> {
    const running = (
      await existingContainers(this.#settings.runtime, await this.#containerIds())
    ).filter((c) => c.running);
    if (running.length > 0) await this.#podman(["kill", ...running.map((c) => c.id)]);
  }

  /**
   * The parts of Docker's daemon that the guest's `docker` shim asks for (guest contract §3): the
   * log configuration check of `docker create` and the awslogs driver's work around a start.
   * Answers `{ code, output }`; a non-zero code comes with Docker's error message.
   */
  async #dockerDaemon(path: string, args: string[]): Promise<{ code: number; output: string }> {
    this.event(`docker daemon ${path} ${args.join(" ")}`);
    switch (path) {
      case "/docker/log-config": {
        const [driver, ...opts] = args;
        const checked = checkLogConfig(driver, opts);
        return checked.ok
          ? { code: 0, output: checked.driver }
          : { code: 125, output: checked.message };
      }
      case "/docker/awslogs-start": {
        const parsed = AwslogsStartSchema.safeParse(args);
        if (!parsed.success)
          return { code: 1, output: `awslogs-start: ${z.prettifyError(parsed.error)}` };
        const [id, ...opts] = parsed.data;
        return this.#awslogsStart(id, opts);
      }
      case "/docker/awslogs-started": {
        const parsed = AwslogsStartedSchema.safeParse(args);
        if (!parsed.success)
          return { code: 1, output: `awslogs-started: ${z.prettifyError(parsed.error)}` };
        const [id, result] = parsed.data;
        await this.#awslogsStarted(id, result);
        return { code: 0, output: "" };
      }
      default:
        return { code: 1, output: `${path}: not a daemon call of the instance-host simulator` };
    }
  }

  /** Before a start: the previous run's forwarding ends, the stream is created, the file opened. */
  async #awslogsStart(id: string, opts: string[]): Promise<{ code: number; output: string }> {
    if (this.#closing) return { code: 1, output: "the instance is going down" };
    const run = this.#awslogs.get(id) ?? { forwarder: undefined, done: undefined, offset: 0 };
    this.#awslogs.set(id, run);
    const [logPath = "", running] = (
      await this.#podman([
        "inspect",
        "--format",
        "{{.HostConfig.LogConfig.Path}}\t{{.State.Running}}",
        id,
      ])
    )
      .trim()
      .split("\t");
    if (logPath === "") return { code: 1, output: `No such container: ${id}` };
    // Already running and forwarded (a start of a running container changes nothing).
    if (running === "true" && run.done !== undefined) return { code: 0, output: "" };
    if (run.forwarder !== undefined) run.offset = await (run.done ?? run.forwarder.finish());
    run.forwarder = undefined;
    run.done = undefined;
    try {
      run.forwarder = await AwslogsForwarder.open({
        containerId: id,
        logPath,
        offset: run.offset,
        options: parseAwslogsOptions(opts),
        defaultRegion: this.#settings.region,
        defaultEndpoint: this.#settings.logsEndpoint,
        credentials: imdsCredentials(this.imdsEndpoint),
        report: (line) => this.event(line),
      });
    } catch (error) {
      return { code: 1, output: error instanceof Error ? error.message : String(error) };
    }
    this.event(`awslogs ${run.forwarder.stream}: stream ready for ${id.slice(0, 12)}`);
    return { code: 0, output: "" };
  }

  /** After a start: follow the run until its conmon exits (or drop it, if the start failed). */
  async #awslogsStarted(id: string, result: "started" | "failed"): Promise<void> {
    const run = this.#awslogs.get(id);
    const forwarder = run?.forwarder;
    if (run === undefined || forwarder === undefined || run.done !== undefined) return;
    const conmon =
      result === "started"
        ? Number((await this.#podman(["inspect", "--format", "{{.State.ConmonPid}}", id])).trim())
        : 0;
    run.done = forwarder.follow(Number.isFinite(conmon) ? conmon : 0).then((offset) => {
      run.offset = offset;
      this.event(`awslogs ${forwarder.stream}: run forwarded (${forwarder.sent} events)`);
      return offset;
    });
  }

  /**
   * Waits for every awslogs forwarding to deliver its run's last lines (the containers are gone or
   * killed by now); one that does not end within 30 s is ended after a final read and flush.
   */
  async #drainAwslogs(): Promise<void> {
    const runs = [...this.#awslogs.values()];
    const endings = () =>
      Promise.allSettled(runs.map((run) => run.done ?? run.forwarder?.finish()));
    let timer: NodeJS.Timeout | undefined;
    const late = await Promise.race([
      endings().then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), 30_000);
      }),
    ]);
    clearTimeout(timer);
    if (late) {
      this.event("awslogs: forwarding did not end within 30 s of power-off; ending it");
      await Promise.allSettled(runs.map((run) => run.forwarder?.finish()));
    }
  }

  /** Marks the guest terminated (the instance is gone) and removes its containers. */
  async terminate(): Promise<void> {
    if (this.#phase === "terminated") return;
    this.#setPhase("terminated");
    await this.destroy();
  }

  /**
   * Kills everything of the guest at once (no orderly shutdown): used when moto forgot the
   * instance (reset) and when the simulator closes. Removes its containers, closes its servers.
   */
  destroy(): Promise<void> {
    this.#destroyed ??= this.#destroy();
    return this.#destroyed;
  }

  async #destroy(): Promise<void> {
    this.#closing = true;
    if (this.#bootTimer !== undefined) clearTimeout(this.#bootTimer);
    this.#bootTimer = undefined;
    const killAll = async () => {
      for (const unit of this.#units.values()) void this.#killGroup(unit.child?.pid);
      void this.#killGroup(this.#userData?.pid);
      await this.#killsDone();
    };
    await killAll();
    await removeContainers(this.#settings.runtime, await this.#containerIds(), (line) =>
      this.#warn(line),
    );
    // A podman command killed half-way after all (past the grace) may have left a container
    // that podman forgot but runc still runs: end it, with its conmon and network namespace.
    await reapOrphans(
      this.#settings.runtime,
      {
        cidfilePrefix: `${join(this.#settings.containersDir, this.instanceId)}.`,
        namePrefix: `nsim-${this.instanceId}--`,
      },
      (line) => this.#warn(line),
    );
    await this.#drainAwslogs();
    await this.#imds?.close();
    this.#imds = undefined;
    const control = this.#control;
    this.#control = undefined;
    if (control !== undefined) {
      control.closeAllConnections();
      await new Promise<void>((resolve) => control.close(() => resolve()));
    }
    // Once more, now that no request can arrive: a unit started while the containers were being
    // removed (a `systemctl start` already in flight) is killed too.
    await killAll();
    if (this.#phase !== "terminated") this.#setPhase("terminated");
  }
}
