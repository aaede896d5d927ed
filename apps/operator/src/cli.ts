import { defineCli } from "@nebula/kube/cli";
import { z } from "zod";

/** `nebula-operator`'s command line: the shared controller flags plus the operator's own. */
export const cli = defineCli({
  name: "nebula-operator",
  summary: `Watches Workload, WorkloadDeployment and Instance objects (group compute.nebula.dev) and
writes their status by rolling instance failure reasons up to the user-facing workload.`,
  flags: {
    namespace: {
      type: "string",
      schema: z
        .string()
        .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, "must be a lowercase RFC 1123 label")
        .max(63)
        .optional(),
      placeholder: "<name>",
      description: "watch only this namespace (default: all namespaces)",
    },
    "stability-window-seconds": {
      type: "string",
      schema: z.coerce
        .number()
        .int("must be a whole number of seconds")
        .min(0)
        .max(86_400)
        .optional(),
      placeholder: "<seconds>",
      description:
        "an instance whose container restarted less than this long ago counts as crashing, not available (default 600: the kubelet resets its restart back-off after 10 minutes running)",
    },
  },
});

/**
 * Parses `nebula-operator`'s command line. Never throws: unknown options and invalid
 * values come back as a message that names the option.
 */
export const parseCommandLine = (argv: readonly string[]) => cli.parse(argv);
