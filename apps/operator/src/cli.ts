import { parseArgs } from "node:util";
import { z } from "zod";

/** Usage text printed by `nebula-operator --help`. */
export const usage = `Usage: nebula-operator [options]

Watches Workload, WorkloadDeployment and Instance objects (group compute.nebula.dev) and
writes their status by rolling instance failure reasons up to the user-facing workload.

Options:
  --kubeconfig <path>     kubeconfig to use (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config)
  --namespace <name>      watch only this namespace (default: all namespaces)
  --leader-elect          take part in leader election before reconciling (default: off)
  --log-level <level>     one of debug, info, warn, error (default: info)
  -h, --help              show this help and exit
  -v, --version           print the version and exit
`;

const Flags = z.object({
  kubeconfig: z.string().min(1).optional(),
  namespace: z
    .string()
    .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, "must be a lowercase RFC 1123 label")
    .max(63)
    .optional(),
  "leader-elect": z.boolean().default(false),
  "log-level": z.enum(["debug", "info", "warn", "error"]).default("info"),
  help: z.boolean().default(false),
  version: z.boolean().default(false),
});

/** Parsed and validated command line of `nebula-operator`. */
export type OperatorFlags = z.infer<typeof Flags>;

/** The outcome of parsing a command line: flags, or a message for the user. */
export type ParseResult = { ok: true; flags: OperatorFlags } | { ok: false; message: string };

/**
 * Parses `nebula-operator`'s command line. Never throws: unknown options and invalid
 * values come back as a message that names the option.
 */
export function parseCommandLine(argv: readonly string[]): ParseResult {
  let values: Record<string, unknown>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        kubeconfig: { type: "string" },
        namespace: { type: "string" },
        "leader-elect": { type: "boolean" },
        "log-level": { type: "string" },
        help: { type: "boolean", short: "h" },
        version: { type: "boolean", short: "v" },
      },
    }));
  } catch (error) {
    return { ok: false, message: error instanceof Error ? error.message : String(error) };
  }
  const parsed = Flags.safeParse(values);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { ok: false, message: `--${String(issue?.path[0])}: ${issue?.message}` };
  }
  return { ok: true, flags: parsed.data };
}
