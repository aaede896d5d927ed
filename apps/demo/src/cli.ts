import { parseArgs } from "node:util";
import { z } from "zod";
import { SCENARIO_IDS, type ScenarioId } from "./scenarios.js";
import { DEFAULT_WARM_PODS } from "./warm.js";

/** The demo's options, after parsing. */
export interface DemoOptions {
  /** Leave everything running at the end and print how to reach it. */
  readonly keep: boolean;
  /** Replicas of the Deployment whose containers print and exit. */
  readonly replicas: number;
  /** No redrawing: one progress line per change and a last `SUMMARY <json>` line. */
  readonly ci: boolean;
  /** The whole run's deadline, in seconds. */
  readonly timeoutSeconds: number;
  /** The scenarios to run (default: every one); the samples no chosen scenario needs are not applied. */
  readonly scenarios: readonly ScenarioId[];
  /** Rounds of the warm pool's comparison. */
  readonly warmRounds: number;
  /** Pods per side and round of the warm pool's comparison (also the pool's size). */
  readonly warmPods: number;
  /**
   * How long the simulated hosts take, in ms: a first boot (after `RunInstances`), a boot after
   * `StartInstances`, an image pull a host's volume does not hold yet. Default: the simulator's
   * own speed (0.5 s boots, instant pulls).
   */
  readonly hostTimes: HostTimes;
}

/** The simulated hosts' times (`--host-times`), in ms. */
export interface HostTimes {
  readonly firstBootMs: number;
  readonly restartBootMs: number;
  readonly pullMs: number;
}

/** The simulator's own speed: what the demo runs with unless `--host-times` says otherwise. */
export const DEFAULT_HOST_TIMES: HostTimes = { firstBootMs: 500, restartBootMs: 500, pullMs: 0 };

/** The result of {@link parseDemoArgs}: options, a request for help, or a message naming the problem. */
export type ParsedArgs =
  | { readonly kind: "run"; readonly options: DemoOptions }
  | { readonly kind: "help" }
  | { readonly kind: "error"; readonly message: string };

/** The default number of replicas of the Deployment whose containers print and exit (sized for a 2-core machine). */
export const DEFAULT_REPLICAS = 6;
/** The most replicas the demo accepts (each one is an instance the local simulator runs). */
const MAX_REPLICAS = 30;
/** The default deadline of a whole run, in seconds. */
export const DEFAULT_TIMEOUT_SECONDS = 600;

const count = (max: number) =>
  z
    .string()
    .regex(/^\d+$/, "must be a whole number")
    .transform(Number)
    .pipe(z.number().int().min(1).max(max));

const Options = z.strictObject({
  keep: z.boolean().default(false),
  ci: z.boolean().default(false),
  help: z.boolean().default(false),
  replicas: z
    .string()
    .regex(/^\d+$/, "must be a whole number")
    .transform(Number)
    .pipe(z.number().int().min(1).max(MAX_REPLICAS))
    .default(DEFAULT_REPLICAS),
  timeout: z
    .string()
    .regex(/^\d+$/, "must be a whole number of seconds")
    .transform(Number)
    .pipe(z.number().int().min(30).max(3600))
    .default(DEFAULT_TIMEOUT_SECONDS),
  only: z
    .string()
    .transform((text) => text.split(",").filter((id) => id !== ""))
    .pipe(
      z
        .array(z.enum(SCENARIO_IDS, { error: (i) => `names no scenario: ${String(i.input)}` }))
        .min(1, "names no scenario"),
    )
    .optional(),
  "warm-rounds": count(10).default(1),
  "warm-pods": count(8).default(DEFAULT_WARM_PODS),
  "host-times": z
    .string()
    .regex(
      /^\d+(\.\d+)?,\d+(\.\d+)?,\d+(\.\d+)?$/,
      "must be three numbers of seconds, <first boot>,<restart boot>,<pull> (e.g. 30,12,5)",
    )
    .transform((text) => text.split(",").map((n) => Math.round(Number(n) * 1000)))
    .pipe(
      z
        .array(z.number().int().max(300_000, "each time is at most 300 seconds"))
        .length(3)
        .transform(
          ([firstBootMs = 0, restartBootMs = 0, pullMs = 0]): HostTimes => ({
            firstBootMs,
            restartBootMs,
            pullMs,
          }),
        ),
    )
    .optional(),
});

/** Usage text of `npm run demo -- --help`. */
export const USAGE = `npm run demo [-- <flags>]

Starts a whole local world on this machine — kube-apiserver + etcd + kube-controller-manager +
kube-scheduler, the moto EC2 server, the instance-host simulator (each instance runs its real
user-data, with podman as its Docker), the event channel (an SQS queue, EventBridge, EC2's
events) — then two nebula-vnodes (one with the channel, one polling) and nebula-operator from their
bundles, applies the samples in samples/, shows a live table, and ends with a summary of what each scenario
should show against what it showed. Everything it started is stopped on exit, on Ctrl-C and on
errors.

Scenarios (samples/):
  prints-and-exits   a Deployment whose containers print and exit: every exit is reported
  workload-healthy   a Workload placement that serves: Available=True
  workload-crashing  a placement that exits 1 on start: Available=False, InstanceCrashing
  workload           the Workload over both: Available=True, lists InstanceCrashing
  image-unavailable  an image that cannot be pulled: ErrImagePull / ImagePullBackOff
  job-completes      a Pod that exits 0 (restartPolicy Never): Succeeded, instance terminated
  logs-after-terminated  kubectl logs job-completes, once its instance is terminated, prints its output
  oom-killed         a Pod that runs out of memory: Failed/OOMKilled, instance terminated
                     (locally with the simulator's image nebula-sim/oomkill: it cannot OOM-kill)
  kubectl-delete     kubectl delete of a running Pod: instance terminated, then the Pod is gone
  event-channel      the same 5 Pods on both vnodes: every exit shown; exit → status side by side
  warm-pool          nebula-demo keeps a warm pool (3 prepared, stopped t3.small hosts, busybox
                     pulled); once it is ready, 3 Pods on t3.small and 3 on t3.micro are created
                     at the same moment: the first take pool hosts (StartInstances), the others
                     launch cold; created → container running and → Ready, warm vs cold, p50/p99
From the first scenario to the end a watch checks each second's sample: no Workload or
WorkloadDeployment Available=True while none of its Pods is available (a crash loop included),
no ContainerStatusUnknown for an instance that reported, no deleted Pod past its deadline.
At the end every sample is deleted and the instances left running are counted (must be 0).

Flags:
  --replicas <n>   replicas of the print-and-exit Deployment (default ${DEFAULT_REPLICAS}, at most ${MAX_REPLICAS})
  --keep           leave everything running at the end; prints how to point kubectl and the
                   AWS CLI at it; Ctrl-C stops it
  --ci             no redrawing: one progress line per change, then SUMMARY <json> as the last line;
                   exit 0 only when every scenario is ok, no instance is left and the
                   watch saw no contradiction
  --timeout <s>    deadline of the whole run in seconds (default ${DEFAULT_TIMEOUT_SECONDS})
  --only <ids>     run only these scenarios (comma-separated), e.g. --only warm-pool
  --warm-rounds <n>  rounds of the warm pool's comparison (default 1, at most 10), each waiting
                   for the pool to be ready again
  --warm-pods <n>  Pods per side and round, and the pool's size (default ${DEFAULT_WARM_PODS}, at most 8)
  --host-times <first>,<restart>,<pull>
                   seconds a simulated host takes to boot after RunInstances, to boot after
                   StartInstances, and to pull an image its volume does not hold yet (default
                   0.5,0.5,0: the simulator's own speed); 30,12,5 plays a real EC2 host's times
                   (the README's estimate), so that the warm pool's comparison shows what a pool saves
  -h, --help       this text

First use prepares what it needs (Node.js 24, Debian packages, moto, the control plane built from
source: about 16 minutes on 2 cores, once); later runs start in seconds.`;

/** Parses the demo's command line. Never throws: problems come back as a message naming the flag. */
export function parseDemoArgs(argv: readonly string[]): ParsedArgs {
  let values: Record<string, unknown>;
  try {
    values = parseArgs({
      args: [...argv],
      options: {
        keep: { type: "boolean" },
        ci: { type: "boolean" },
        help: { type: "boolean", short: "h" },
        replicas: { type: "string" },
        timeout: { type: "string" },
        only: { type: "string" },
        "warm-rounds": { type: "string" },
        "warm-pods": { type: "string" },
        "host-times": { type: "string" },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (error) {
    return { kind: "error", message: (error as Error).message };
  }
  const parsed = Options.safeParse(values);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const flag = issue?.path[0] === undefined ? "" : `--${String(issue.path[0])} `;
    return { kind: "error", message: `${flag}${issue?.message ?? "is invalid"}` };
  }
  if (parsed.data.help) return { kind: "help" };
  return {
    kind: "run",
    options: {
      keep: parsed.data.keep,
      ci: parsed.data.ci,
      replicas: parsed.data.replicas,
      timeoutSeconds: parsed.data.timeout,
      scenarios: parsed.data.only ?? SCENARIO_IDS,
      warmRounds: parsed.data["warm-rounds"],
      warmPods: parsed.data["warm-pods"],
      hostTimes: parsed.data["host-times"] ?? DEFAULT_HOST_TIMES,
    },
  };
}
