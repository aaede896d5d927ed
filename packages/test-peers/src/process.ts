import { type ChildProcess, spawn } from "node:child_process";
import { rmSync } from "node:fs";
import { TestPeerError } from "./errors.js";

/** How much of a peer's latest output is kept for error messages. */
const OUTPUT_TAIL_BYTES = 16 * 1024;

/** Options of {@link spawnPeer}. */
export interface SpawnPeerOptions {
  /** A short name for messages, e.g. `"etcd"`. */
  name: string;
  /** The executable to run. */
  command: string;
  /** Its arguments. */
  args: readonly string[];
  /** Its environment; the current process's when left out. */
  env?: NodeJS.ProcessEnv;
  /** Paths to delete if this Node process dies without stopping the peer. */
  cleanupPaths?: readonly string[];
}

/** A running peer process in a process group of its own. */
export interface PeerProcess {
  /** The name given to {@link spawnPeer}. */
  readonly name: string;
  /** Its process id, which is also its process group id. */
  readonly pid: number;
  /** Resolves with the exit code (or the signal name) once the process has exited. */
  readonly exited: Promise<number | string>;
  /** True once the process has exited. */
  hasExited(): boolean;
  /** The last 16 KiB the process wrote to stdout and stderr. */
  outputTail(): string;
  /** Stops the whole process group: SIGTERM, then SIGKILL after `graceMs` (default 10 s). */
  stop(graceMs?: number): Promise<void>;
}

interface Live {
  pid: number;
  watchdog: number | undefined;
  cleanupPaths: readonly string[];
  /** Resolves once the peer and its watchdog have exited and been reaped. */
  reaped: Promise<unknown>;
}

const live = new Set<Live>();
const paths = new Set<string>();
let handlersInstalled = false;

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // Already gone.
  }
}

function endWatchdog(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(pid, "SIGTERM");
  } catch {
    // Already gone.
  }
}

function killEverythingNow(): Promise<unknown>[] {
  const reaped: Promise<unknown>[] = [];
  for (const entry of live) {
    reaped.push(entry.reaped);
    killGroup(entry.pid, "SIGKILL");
    endWatchdog(entry.watchdog);
    for (const path of entry.cleanupPaths) rmSync(path, { recursive: true, force: true });
  }
  live.clear();
  for (const path of paths) rmSync(path, { recursive: true, force: true });
  paths.clear();
  return reaped;
}

/**
 * Deletes `path` (recursively) if this process exits or is interrupted before the returned
 * function is called; calling it deletes the path now and forgets it.
 */
export function trackPath(path: string): () => void {
  installHandlers();
  paths.add(path);
  return () => {
    rmSync(path, { recursive: true, force: true });
    paths.delete(path);
  };
}

function installHandlers(): void {
  if (handlersInstalled) return;
  handlersInstalled = true;
  process.on("exit", () => {
    killEverythingNow();
  });
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    const onSignal = (): void => {
      const reaped = killEverythingNow();
      // Alone on this signal, we replaced Node's default (exit). Reap the killed peers first
      // (an orphan is left to an init that may never reap it), then restore it and re-raise.
      if (process.listenerCount(signal) === 1) {
        let raised = false;
        const reraise = (): void => {
          if (raised) return;
          raised = true;
          clearTimeout(timer);
          process.removeListener(signal, onSignal);
          process.kill(process.pid, signal);
        };
        const timer = setTimeout(reraise, 3_000);
        void Promise.all(reaped).then(reraise);
      }
    };
    process.on(signal, onSignal);
  }
}

// Kills the peer's group and deletes its paths when this Node process disappears without
// stopping it (SIGKILL, crash): a signal handler cannot run then.
const WATCHDOG = `parent=$1; pid=$2; shift 2; s=
trap 'kill "$s" 2>/dev/null; wait "$s" 2>/dev/null; exit 0' TERM
while kill -0 "$parent" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 1 & s=$!; wait "$s"; done
if ! kill -0 "$parent" 2>/dev/null; then kill -KILL "-$pid" 2>/dev/null; rm -rf -- "$@"; fi`;

/**
 * Spawns a peer process in its own process group, keeps the tail of its output, and makes sure
 * it does not outlive this Node process: an `exit`/signal handler kills it, and a small shell
 * watchdog kills it (and deletes `cleanupPaths`) if Node is killed outright.
 *
 * Use it for every long-running peer (etcd, kube-apiserver, moto_server).
 *
 * @example
 * ```ts
 * const moto = spawnPeer({ name: "moto", command: "moto_server", args: ["-p", "5000"] });
 * await moto.stop();
 * ```
 */
export function spawnPeer(options: SpawnPeerOptions): PeerProcess {
  installHandlers();
  let child: ChildProcess;
  try {
    child = spawn(options.command, [...options.args], {
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: options.env ?? process.env,
    });
  } catch (cause) {
    throw new TestPeerError("StartFailed", `${options.name}: could not spawn ${options.command}`, {
      cause,
    });
  }
  let tail = "";
  const append = (chunk: Buffer): void => {
    tail = (tail + chunk.toString("utf8")).slice(-OUTPUT_TAIL_BYTES);
  };
  child.stdout?.on("data", append);
  child.stderr?.on("data", append);
  let done = false;
  let entry: Live | undefined;
  const exited = new Promise<number | string>((resolve) => {
    child.once("error", (error) => {
      append(Buffer.from(`\nspawn error: ${error.message}\n`));
      done = true;
      if (entry !== undefined) live.delete(entry);
      resolve("spawn-error");
    });
    child.once("exit", (code, signal) => {
      done = true;
      if (entry !== undefined) {
        live.delete(entry);
        endWatchdog(entry.watchdog);
      }
      resolve(code ?? signal ?? "unknown");
    });
  });
  const pid = child.pid;
  if (pid === undefined) {
    return {
      name: options.name,
      pid: -1,
      exited,
      hasExited: () => true,
      outputTail: () => tail,
      stop: async () => {
        await exited;
      },
    };
  }
  const watchdog = spawn(
    "/bin/sh",
    [
      "-c",
      WATCHDOG,
      "nebula-peer-watchdog",
      String(process.pid),
      String(pid),
      ...(options.cleanupPaths ?? []),
    ],
    { detached: true, stdio: "ignore" },
  );
  const watchdogExited = new Promise<void>((resolve) => {
    watchdog.once("error", () => resolve());
    watchdog.once("exit", () => resolve());
  });
  watchdog.unref();
  entry = {
    pid,
    watchdog: watchdog.pid,
    cleanupPaths: options.cleanupPaths ?? [],
    reaped: Promise.all([exited, watchdogExited]),
  };
  live.add(entry);
  // The peer must never keep a test runner alive on its own: stop() or the exit handler ends it.
  child.unref();
  for (const stream of [child.stdout, child.stderr]) {
    (stream as unknown as { unref?: () => void } | null)?.unref?.();
  }

  return {
    name: options.name,
    pid,
    exited,
    hasExited: () => done,
    outputTail: () => tail,
    async stop(graceMs = 10_000) {
      // Keep the event loop alive until the processes are reaped, or Node could exit first and
      // leave them to an init that may not reap them.
      child.ref();
      watchdog.ref();
      if (!done) {
        killGroup(pid, "SIGTERM");
        const timer = setTimeout(() => killGroup(pid, "SIGKILL"), graceMs);
        await exited;
        clearTimeout(timer);
      }
      // Anything the peer forked into its group goes with it.
      killGroup(pid, "SIGKILL");
      if (entry !== undefined) {
        live.delete(entry);
        endWatchdog(entry.watchdog);
      }
      await watchdogExited;
    },
  };
}

/** Options of {@link waitUntil}. */
export interface WaitUntilOptions {
  /** What is being waited for, for the error message. */
  what: string;
  /** Give up after this many milliseconds. */
  timeoutMs: number;
  /** Time between checks (default 100 ms). */
  intervalMs?: number;
  /** Fail at once when this process exits. */
  process?: PeerProcess;
}

/**
 * Calls `check` until it resolves `true`, failing with `StartFailed` when `process` exits and with
 * `NotReady` after `timeoutMs`. A check that throws counts as "not yet".
 */
export async function waitUntil(
  check: () => Promise<boolean>,
  options: WaitUntilOptions,
): Promise<void> {
  const deadline = Date.now() + options.timeoutMs;
  let lastError: unknown;
  for (;;) {
    if (options.process?.hasExited()) {
      throw new TestPeerError(
        "StartFailed",
        `${options.process.name} exited before ${options.what}:\n${options.process.outputTail()}`,
      );
    }
    try {
      if (await check()) return;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      const output = options.process === undefined ? "" : `:\n${options.process.outputTail()}`;
      throw new TestPeerError("NotReady", `timed out waiting for ${options.what}${output}`, {
        cause: lastError,
      });
    }
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 100));
  }
}
