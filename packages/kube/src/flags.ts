/**
 * The apps' command line: the flags every controller app shares (`--kubeconfig`, `--log-level`,
 * `--leader-elect`, `--leader-election-namespace`, `--metrics-bind-address`,
 * `--health-probe-bind-address`, `--help`, `--version`), extended by each app with its own,
 * validated with zod, and a usage text built from the same definitions.
 *
 * Parsing never throws: an unknown option or a bad value comes back as a message naming the
 * option; {@link runCli} prints it with the usage and returns exit code 2.
 *
 * @packageDocumentation
 */
import { parseArgs } from "node:util";
import { z } from "zod";
import { LOG_LEVELS } from "./observability/logger.js";
import { parseBindAddress } from "./observability/server.js";

/** One command-line option. */
interface FlagDefinition<S extends z.ZodType = z.ZodType> {
  /** `string` takes a value (`--name value` or `--name=value`); `boolean` is a switch. */
  readonly type: "string" | "boolean";
  /** Validates (and defaults) the raw value: a string, a boolean, or `undefined` when absent. */
  readonly schema: S;
  /** One line for the usage text (mention the default). */
  readonly description: string;
  /** Value placeholder in the usage text, e.g. `<path>` (default `<value>`). */
  readonly placeholder?: string;
  /** One-letter alias, e.g. `n` for `-n`. */
  readonly short?: string;
  /**
   * The program cannot run without it, though `--help` and `--version` can: a command line that
   * runs and lacks it is bad input (exit code 2 from {@link runCli}).
   */
  readonly requiredToRun?: boolean;
}

/** Options by long name (without `--`). */
export type FlagDefinitions = Readonly<Record<string, FlagDefinition>>;

/** The values of a set of definitions. */
type FlagValues<F extends FlagDefinitions> = {
  -readonly [K in keyof F]: z.output<F[K]["schema"]>;
};

const rfc1123Label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const bindAddress = (fallback: string) =>
  z
    .string()
    .refine((text) => parseBindAddress(text) !== null, "must be host:port, :port, or 0 to disable")
    .default(fallback);

/** The flags every app has. */
export const COMMON_FLAGS = {
  kubeconfig: {
    type: "string",
    schema: z.string().min(1, "must not be empty").optional(),
    placeholder: "<path>",
    description:
      "kubeconfig to use (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config)",
  },
  "log-level": {
    type: "string",
    schema: z.enum(LOG_LEVELS).default("info"),
    placeholder: "<level>",
    description: `one of ${LOG_LEVELS.join(", ")} (default: info)`,
  },
  "leader-elect": {
    type: "boolean",
    schema: z.boolean().default(false),
    description: "take part in leader election on a Lease before reconciling (default: off)",
  },
  "leader-election-namespace": {
    type: "string",
    schema: z.string().regex(rfc1123Label, "must be a lowercase RFC 1123 label").max(63).optional(),
    placeholder: "<name>",
    description: "namespace of the leader-election Lease (default: this Pod's namespace)",
  },
  "metrics-bind-address": {
    type: "string",
    schema: bindAddress(":8080"),
    placeholder: "<addr>",
    description: "where /metrics listens, host:port or :port; 0 disables (default: :8080)",
  },
  "health-probe-bind-address": {
    type: "string",
    schema: bindAddress(":8081"),
    placeholder: "<addr>",
    description: "where /healthz and /readyz listen; 0 disables (default: :8081)",
  },
  help: {
    type: "boolean",
    short: "h",
    schema: z.boolean().default(false),
    description: "show this help and exit",
  },
  version: {
    type: "boolean",
    short: "v",
    schema: z.boolean().default(false),
    description: "print the version and exit",
  },
} as const satisfies FlagDefinitions;

/** The values of the shared flags. */
export type CommonFlags = FlagValues<typeof COMMON_FLAGS>;

/** An app's flags: the shared ones plus its own (its own win on a name clash). */
export type CliFlags<F extends FlagDefinitions> = Omit<CommonFlags, keyof F> & FlagValues<F>;

/** The outcome of parsing a command line: flags, or a message for the user naming the option. */
type CliParseResult<T> =
  | { readonly ok: true; readonly flags: T }
  | { readonly ok: false; readonly message: string };

/** What an app declares about its command line. */
export interface CliSpec<F extends FlagDefinitions> {
  /** Binary name, e.g. `nebula-vnode`. */
  readonly name: string;
  /** A paragraph under the usage line saying what the program does. */
  readonly summary: string;
  /** The app's own flags (listed before the shared ones in the usage text). */
  readonly flags?: F;
}

/** A command line: usage text and parser. */
export interface Cli<T> {
  /** Binary name. */
  readonly name: string;
  /** The `--help` text. */
  readonly usage: string;
  /** Parses `argv` (without node and the script). Never throws. */
  parse(argv: readonly string[]): CliParseResult<T>;
}

function usageText(name: string, summary: string, flags: FlagDefinitions): string {
  const rows = Object.entries(flags).map(([long, def]) => {
    const names = `${def.short === undefined ? "" : `-${def.short}, `}--${long}`;
    const left = def.type === "string" ? `${names} ${def.placeholder ?? "<value>"}` : names;
    return [left, def.description] as const;
  });
  const width = Math.max(...rows.map(([left]) => left.length)) + 2;
  const lines = rows.map(([left, description]) => `  ${left.padEnd(width)}${description}`);
  return `Usage: ${name} [options]\n\n${summary.trim()}\n\nOptions:\n${lines.join("\n")}\n`;
}

/**
 * Defines an app's command line from the shared flags and its own.
 *
 * @example
 * ```ts
 * export const cli = defineCli({
 *   name: "nebula-vnode",
 *   summary: "Registers a virtual Node and runs its Pods on EC2 instances.",
 *   flags: {
 *     "node-name": {
 *       type: "string",
 *       schema: z.string().regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, "must be a lowercase RFC 1123 name").default("nebula-vnode"),
 *       placeholder: "<name>",
 *       description: "name of the virtual Node (default: nebula-vnode)",
 *     },
 *   },
 * });
 * cli.parse(["--node-name", "vn-1", "--leader-elect"]);
 * // { ok: true, flags: { "node-name": "vn-1", "leader-elect": true, "log-level": "info", ... } }
 * cli.parse(["--log-level", "loud"]); // { ok: false, message: "--log-level: Invalid option: ..." }
 * ```
 */
export function defineCli<F extends FlagDefinitions = Record<never, never>>(
  spec: CliSpec<F>,
): Cli<CliFlags<F>> {
  const own: FlagDefinitions = spec.flags ?? {};
  const common: FlagDefinitions = Object.fromEntries(
    Object.entries(COMMON_FLAGS).filter(([name]) => !(name in own)),
  );
  // The app's own flags first; --help and --version last.
  const { help, version, ...shared } = common;
  const all: FlagDefinitions = {
    ...own,
    ...shared,
    ...(help === undefined ? {} : { help }),
    ...(version === undefined ? {} : { version }),
  };
  const schema = z.object(
    Object.fromEntries(Object.entries(all).map(([name, def]) => [name, def.schema])),
  );
  const options = Object.fromEntries(
    Object.entries(all).map(([name, def]) => [
      name,
      def.short === undefined ? { type: def.type } : { type: def.type, short: def.short },
    ]),
  );
  return {
    name: spec.name,
    usage: usageText(spec.name, spec.summary, all),
    parse(argv) {
      let values: Record<string, unknown>;
      try {
        ({ values } = parseArgs({
          args: [...argv],
          strict: true,
          allowPositionals: false,
          options,
        }));
      } catch (error) {
        return { ok: false, message: error instanceof Error ? error.message : String(error) };
      }
      const parsed = schema.safeParse(values);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        return { ok: false, message: `--${String(issue?.path[0])}: ${issue?.message}` };
      }
      const data = parsed.data as Record<string, unknown>;
      if (data.help !== true && data.version !== true) {
        const missing = Object.entries(all).find(
          ([name, def]) => def.requiredToRun === true && data[name] === undefined,
        );
        if (missing !== undefined) return { ok: false, message: `--${missing[0]}: is required` };
      }
      return { ok: true, flags: parsed.data as CliFlags<F> };
    },
  };
}

/** Output streams and version of {@link runCli}. */
export interface RunCliOptions {
  /** The program's version, printed by `--version`. */
  readonly version: string;
  /** Where help and version go (default `process.stdout`). */
  readonly stdout?: { write(text: string): unknown };
  /** Where errors go (default `process.stderr`). */
  readonly stderr?: { write(text: string): unknown };
}

/**
 * Parses `argv`, handles `--help` (usage, 0), `--version` (version, 0) and bad input (message and
 * usage on stderr, 2); otherwise runs `main` with the flags and returns its exit code. A rejection
 * of `main` is printed and gives 1. Never throws.
 *
 * @example
 * ```ts
 * process.exitCode = await runCli(cli, process.argv.slice(2), { version: "0.1.0" }, async (flags) => {
 *   const { kubeConfig } = connect(flags.kubeconfig === undefined ? {} : { kubeconfig: flags.kubeconfig });
 *   const manager = new Manager({ name: cli.name, kubeConfig, ... });
 *   return (await manager.run()).exitCode;
 * });
 * ```
 */
export async function runCli<T extends { help: boolean; version: boolean }>(
  cli: Cli<T>,
  argv: readonly string[],
  options: RunCliOptions,
  main: (flags: T) => Promise<number> | number,
): Promise<number> {
  const stdout = options.stdout ?? process.stdout;
  const stderr = options.stderr ?? process.stderr;
  const result = cli.parse(argv);
  if (!result.ok) {
    stderr.write(`${cli.name}: ${result.message}\n\n${cli.usage}`);
    return 2;
  }
  if (result.flags.help) {
    stdout.write(cli.usage);
    return 0;
  }
  if (result.flags.version) {
    stdout.write(`${options.version}\n`);
    return 0;
  }
  try {
    return await main(result.flags);
  } catch (error) {
    stderr.write(`${cli.name}: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
}
