/**
 * The apps the demo runs as real processes (`node apps/<app>/dist/main.js`), each in a process
 * group of its own, with a watchdog that ends the group if the demo dies without stopping it.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createWriteStream, type WriteStream } from "node:fs";
import { createInterface } from "node:readline";

/** A running app. */
export interface AppProcess {
  readonly name: string;
  readonly pid: number;
  /** `http://127.0.0.1:<port>`: its `/metrics`, `/healthz` and `/readyz`. */
  readonly url: string;
  /** Its last output lines (stdout and stderr). */
  tail(lines?: number): string[];
  /** The exit code once it exited, else `undefined`. */
  exitCode(): number | null | undefined;
  /** SIGTERM to its group, SIGKILL after `graceMs`; resolves once it exited. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL to its group at once (for a second Ctrl-C). */
  kill(): void;
}

/** What {@link startApp} runs. */
export interface AppSpec {
  readonly name: string;
  readonly bundle: string;
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string | undefined>>;
  /** `127.0.0.1:<port>` given to `--metrics-bind-address` and `--health-probe-bind-address`. */
  readonly address: string;
  /** Where its output goes (a file in the demo's folder). */
  readonly logFile: string;
  /** How long to wait for `/readyz` (ms). */
  readonly readyTimeoutMs: number;
  readonly signal?: AbortSignal;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // Already gone.
  }
}

/**
 * A `/bin/sh` loop that ends the app's group (TERM, then KILL) once the demo's process is gone.
 * It lives in a group of its own so that stopping the app does not stop it, and is killed by
 * `stop()`.
 */
function startWatchdog(appPid: number): ChildProcess {
  const script = `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; kill -TERM -${appPid} 2>/dev/null; sleep 5; kill -KILL -${appPid} 2>/dev/null`;
  const watchdog = spawn("/bin/sh", ["-c", script], { detached: true, stdio: "ignore" });
  watchdog.unref();
  return watchdog;
}

/** Starts an app's bundle and waits until its `/readyz` answers 200. */
export async function startApp(spec: AppSpec): Promise<AppProcess> {
  const log: WriteStream = createWriteStream(spec.logFile, { flags: "a" });
  const child = spawn(
    process.execPath,
    [
      spec.bundle,
      ...spec.args,
      "--metrics-bind-address",
      spec.address,
      "--health-probe-bind-address",
      spec.address,
    ],
    { detached: true, stdio: ["ignore", "pipe", "pipe"], env: { ...spec.env } },
  );
  if (child.pid === undefined) {
    const error = await new Promise<Error>((resolve) => child.once("error", resolve));
    throw new Error(`could not start ${spec.name}: ${error.message}`);
  }
  const pid = child.pid;
  const watchdog = startWatchdog(pid);
  const lines: string[] = [];
  const keep = (line: string) => {
    lines.push(line);
    if (lines.length > 200) lines.shift();
    log.write(`${line}\n`);
  };
  for (const stream of [child.stdout, child.stderr]) {
    if (stream) createInterface({ input: stream }).on("line", keep);
  }
  let code: number | null | undefined;
  const exited = new Promise<void>((resolve) => {
    child.once("exit", (exitCode, signal) => {
      code = exitCode ?? (signal ? null : exitCode);
      resolve();
    });
  });
  const app: AppProcess = {
    name: spec.name,
    pid,
    url: `http://${spec.address}`,
    tail: (n = 20) => lines.slice(-n),
    exitCode: () => code,
    async stop(graceMs = 15_000) {
      if (code === undefined) {
        killGroup(child, "SIGTERM");
        const timer = setTimeout(() => killGroup(child, "SIGKILL"), graceMs);
        await exited;
        clearTimeout(timer);
      }
      // Children the app left in its group go too.
      killGroup(child, "SIGKILL");
      watchdog.kill("SIGKILL");
      await new Promise<void>((resolve) => log.end(resolve));
    },
    kill() {
      killGroup(child, "SIGKILL");
      watchdog.kill("SIGKILL");
    },
  };
  const deadline = Date.now() + spec.readyTimeoutMs;
  for (;;) {
    if (code !== undefined) {
      await app.stop();
      throw new Error(
        `${spec.name} exited with code ${code} before it was ready:\n${app.tail(15).join("\n")}`,
      );
    }
    if (spec.signal?.aborted) {
      await app.stop();
      throw new Error(`${spec.name}: start interrupted`);
    }
    try {
      const response = await fetch(`${app.url}/readyz`, { signal: AbortSignal.timeout(2_000) });
      if (response.status === 200) return app;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) {
      await app.stop();
      throw new Error(
        `${spec.name} was not ready within ${Math.round(spec.readyTimeoutMs / 1000)} s:\n${app.tail(15).join("\n")}`,
      );
    }
    await sleep(250);
  }
}

/** Runs a command to completion (with a deadline); resolves with stdout, rejects with stderr. */
export function run(
  file: string,
  args: readonly string[],
  options: {
    readonly input?: string;
    readonly timeoutMs?: number;
    readonly env?: NodeJS.ProcessEnv;
  } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      file,
      [...args],
      {
        timeout: options.timeoutMs ?? 60_000,
        maxBuffer: 16 * 1024 * 1024,
        env: options.env ?? process.env,
      },
      (error, stdout, stderr) => {
        if (error) {
          reject(
            new Error(
              `${file.split("/").pop()} ${args.join(" ")}: ${stderr.trim() || error.message}`,
            ),
          );
        } else {
          resolve(stdout);
        }
      },
    );
    if (options.input !== undefined) child.stdin?.end(options.input);
  });
}
