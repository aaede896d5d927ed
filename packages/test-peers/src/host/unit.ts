import { TestPeerError } from "../errors.js";

/** How systemd signals a unit's processes when stopping it (`KillMode=`). */
type KillMode = "control-group" | "mixed" | "process" | "none";

/** The parts of a `.service` unit the simulator's init acts on. */
export interface ServiceUnit {
  /** `ExecStart=` split into argv (prefixes such as `-` and `@` removed, `${VAR}` expanded). */
  readonly execStart: readonly string[];
  /** `ExecStart=` began with `-`: a non-zero exit does not mark the unit failed. */
  readonly ignoreFailure: boolean;
  /** `Environment=` assignments, in order (later wins). */
  readonly environment: Readonly<Record<string, string>>;
  /** `TimeoutStopSec=` (or `TimeoutSec=`) in milliseconds; `null` for `infinity`. Default 90 s. */
  readonly timeoutStopMs: number | null;
  /** `KillMode=`; default `control-group`. */
  readonly killMode: KillMode;
  /** `Type=`; only `simple` (the default) and `exec` are started faithfully, others are treated as `simple`. */
  readonly type: string;
}

/** The outcome of {@link parseServiceUnit}. */
export type ParsedUnit =
  | { readonly ok: true; readonly unit: ServiceUnit }
  | { readonly ok: false; readonly error: TestPeerError };

const DEFAULT_TIMEOUT_STOP_MS = 90_000;

const DURATION_UNITS: Readonly<Record<string, number>> = {
  us: 0.001,
  usec: 0.001,
  ms: 1,
  msec: 1,
  s: 1000,
  sec: 1000,
  second: 1000,
  seconds: 1000,
  m: 60_000,
  min: 60_000,
  minute: 60_000,
  minutes: 60_000,
  h: 3_600_000,
  hr: 3_600_000,
  hour: 3_600_000,
  hours: 3_600_000,
};

/**
 * Parses a systemd time span (`90`, `90s`, `1min 30s`, `500ms`, `infinity`) into milliseconds,
 * as `TimeoutStopSec=` takes it (a bare number is seconds). `null` means infinity; `undefined`
 * means the text is not a time span.
 *
 * @example
 * ```ts
 * parseTimeSpan("1min 30s"); // 90000
 * ```
 */
export function parseTimeSpan(text: string): number | null | undefined {
  const value = text.trim();
  if (value === "infinity") return null;
  if (/^\d+(\.\d+)?$/.test(value)) return Math.round(Number(value) * 1000);
  const parts = value.match(/\d+(?:\.\d+)?\s*[a-z]+/g);
  if (parts === null || parts.join("").replace(/\s+/g, "") !== value.replace(/\s+/g, "")) {
    return undefined;
  }
  let total = 0;
  for (const part of parts) {
    const match = /^(\d+(?:\.\d+)?)\s*([a-z]+)$/.exec(part);
    const factor = match?.[2] === undefined ? undefined : DURATION_UNITS[match[2]];
    if (match?.[1] === undefined || factor === undefined) return undefined;
    total += Number(match[1]) * factor;
  }
  return Math.round(total);
}

/**
 * Splits a systemd command line or assignment list into words: whitespace separates, double and
 * single quotes group, backslash escapes (`\"`, `\\`, `\n`, `\t`). Returns `undefined` on an
 * unterminated quote.
 */
export function splitUnitWords(text: string): string[] | undefined {
  const words: string[] = [];
  let current = "";
  let inWord = false;
  let quote: '"' | "'" | null = null;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i] as string;
    if (ch === "\\" && quote !== "'" && i + 1 < text.length) {
      const next = text[++i] as string;
      current += next === "n" ? "\n" : next === "t" ? "\t" : next;
      inWord = true;
    } else if (quote !== null) {
      if (ch === quote) quote = null;
      else current += ch;
    } else if (ch === '"' || ch === "'") {
      quote = ch;
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) words.push(current);
      current = "";
      inWord = false;
    } else {
      current += ch;
      inWord = true;
    }
  }
  if (quote !== null) return undefined;
  if (inWord) words.push(current);
  return words;
}

function expand(word: string, env: Readonly<Record<string, string>>): string {
  return word.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, name: string) => env[name] ?? "");
}

function invalid(message: string): ParsedUnit {
  return { ok: false, error: new TestPeerError("UnitInvalid", message) };
}

/**
 * Parses the `[Service]` section of a systemd unit file into what the simulator's init needs
 * (guest contract §5): `ExecStart=`, `Environment=`, `TimeoutStopSec=`/`TimeoutSec=`,
 * `KillMode=`, `Type=`. Other keys are ignored. Total: a unit the simulator cannot run gives
 * `{ ok: false }` with an `UnitInvalid` error.
 *
 * @param text - the unit file's content.
 * @example
 * ```ts
 * const parsed = parseServiceUnit("[Service]\nExecStart=/bin/sleep 5\nTimeoutStopSec=40\n");
 * if (parsed.ok) parsed.unit.timeoutStopMs; // 40000
 * ```
 */
export function parseServiceUnit(text: string): ParsedUnit {
  const lines = text.replace(/\\\r?\n/g, " ").split(/\r?\n/);
  let section = "";
  let execStart: string | undefined;
  const environment: Record<string, string> = {};
  let timeoutStopMs: number | null = DEFAULT_TIMEOUT_STOP_MS;
  let killMode: KillMode = "control-group";
  let type = "simple";
  for (const raw of lines) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    const header = /^\[(.+)\]$/.exec(line);
    if (header?.[1] !== undefined) {
      section = header[1];
      continue;
    }
    if (section !== "Service") continue;
    const eq = line.indexOf("=");
    if (eq < 0) continue;
    const key = line.slice(0, eq).trim();
    const value = line.slice(eq + 1).trim();
    switch (key) {
      case "ExecStart":
        execStart = value === "" ? undefined : value;
        break;
      case "Environment": {
        const words = splitUnitWords(value);
        if (words === undefined) return invalid(`unterminated quote in Environment=${value}`);
        if (words.length === 0)
          for (const name of Object.keys(environment)) delete environment[name];
        for (const word of words) {
          const at = word.indexOf("=");
          if (at > 0) environment[word.slice(0, at)] = word.slice(at + 1);
        }
        break;
      }
      case "TimeoutStopSec":
      case "TimeoutSec": {
        const span = parseTimeSpan(value);
        if (span === undefined) return invalid(`${key}=${value} is not a time span`);
        timeoutStopMs = span === 0 ? null : span;
        break;
      }
      case "KillMode":
        if (
          value !== "control-group" &&
          value !== "mixed" &&
          value !== "process" &&
          value !== "none"
        ) {
          return invalid(`KillMode=${value} is not one of control-group, mixed, process, none`);
        }
        killMode = value;
        break;
      case "Type":
        type = value;
        break;
      default:
        break;
    }
  }
  if (execStart === undefined) return invalid("the unit has no ExecStart= in [Service]");
  const prefix = /^[-@:+!]+/.exec(execStart)?.[0] ?? "";
  const words = splitUnitWords(execStart.slice(prefix.length));
  if (words === undefined || words.length === 0) {
    return invalid(`cannot split ExecStart=${execStart}`);
  }
  return {
    ok: true,
    unit: {
      execStart: words.map((word) => expand(word, environment)),
      ignoreFailure: prefix.includes("-"),
      environment,
      timeoutStopMs,
      killMode,
      type,
    },
  };
}
