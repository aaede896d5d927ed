import { parseArgs } from "node:util";
import { z } from "zod";

/** Usage text printed by `nebula-vnode --help`. */
export const usage = `Usage: nebula-vnode [options]

Registers a Nebula virtual Node in a Kubernetes cluster and runs every Pod bound to it
on a dedicated EC2 instance (one Pod = one instance), reporting truthful Pod status.

Options:
  --kubeconfig <path>   kubeconfig to use (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config)
  --node-name <name>    name of the virtual Node to register (default: nebula-vnode)
  --cluster <name>      cluster name written to the nebula:cluster tag of every instance (required)
  --config <path>       provider configuration file (JSON; region, subnets, AMI, ...)
  --log-level <level>   one of debug, info, warn, error (default: info)
  -h, --help            show this help and exit
  -v, --version         print the version and exit
`;

const Flags = z.object({
  kubeconfig: z.string().min(1).optional(),
  "node-name": z
    .string()
    .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, "must be a lowercase RFC 1123 name")
    .max(253)
    .default("nebula-vnode"),
  cluster: z.string().min(1, "is required").optional(),
  config: z.string().min(1).optional(),
  "log-level": z.enum(["debug", "info", "warn", "error"]).default("info"),
  help: z.boolean().default(false),
  version: z.boolean().default(false),
});

/** Parsed and validated command line of `nebula-vnode`. */
export type VnodeFlags = z.infer<typeof Flags>;

/** The outcome of parsing a command line: flags, or a message for the user. */
export type ParseResult = { ok: true; flags: VnodeFlags } | { ok: false; message: string };

/**
 * Parses `nebula-vnode`'s command line. Never throws: unknown options and invalid
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
        "node-name": { type: "string" },
        cluster: { type: "string" },
        config: { type: "string" },
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
