import { defineCli } from "@nebula/kube/cli";
import { z } from "zod";

/** `nebula-vnode`'s command line: the shared controller flags plus the virtual node's own. */
export const cli = defineCli({
  name: "nebula-vnode",
  summary: `Registers a Nebula virtual Node in a Kubernetes cluster and runs every Pod bound to it
on a dedicated EC2 instance (one Pod = one instance), reporting truthful Pod status.`,
  flags: {
    "node-name": {
      type: "string",
      schema: z
        .string()
        .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, "must be a lowercase RFC 1123 name")
        .max(253)
        .default("nebula-vnode"),
      placeholder: "<name>",
      description: "name of the virtual Node to register (default: nebula-vnode)",
    },
    cluster: {
      type: "string",
      schema: z.string().min(1, "is required").optional(),
      placeholder: "<name>",
      description:
        "cluster name written to the nebula:cluster tag of every instance (default: provider.clusterName)",
    },
    config: {
      type: "string",
      schema: z.string().min(1).optional(),
      placeholder: "<path>",
      description:
        "configuration file (JSON: { node, provider }; see deploy/vnode/README.md) (required to run)",
      requiredToRun: true,
    },
    namespace: {
      type: "string",
      schema: z
        .string()
        .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, "must be a lowercase RFC 1123 label")
        .max(63)
        .optional(),
      placeholder: "<name>",
      description:
        "the app's namespace: the Pod ledger lives there (default: this Pod's namespace, else nebula-system)",
    },
  },
});
