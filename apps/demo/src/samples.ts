/**
 * The samples in `samples/` and the two changes the local world needs: the print-and-exit Deployment's replica
 * count, and the OOM sample's image (the simulator cannot OOM-kill a process; its image
 * `nebula-sim/oomkill` is killed by SIGKILL and reported `OOMKilled` by the container runtime).
 * Pure: YAML text in, YAML text out.
 */
import { parseAllDocuments, stringify } from "yaml";
import type { ScenarioId } from "./scenarios.js";

/** The simulator's scripted-OOM image. */
export const OOM_IMAGE = "nebula-sim/oomkill";

/** A sample file and the scenarios that need it. */
export interface SampleFile {
  readonly file: string;
  readonly scenarios: readonly ScenarioId[];
}

/** The samples, in the order they are applied (the namespace first). */
export const SAMPLE_FILES: readonly SampleFile[] = [
  { file: "namespace.yaml", scenarios: [] },
  { file: "prints-and-exits.yaml", scenarios: ["prints-and-exits"] },
  { file: "workload.yaml", scenarios: ["workload-healthy", "workload-crashing", "workload"] },
  { file: "image-unavailable.yaml", scenarios: ["image-unavailable"] },
  { file: "job-completes.yaml", scenarios: ["job-completes", "logs-after-terminated"] },
  { file: "oom-killed.yaml", scenarios: ["oom-killed"] },
  { file: "delete-me.yaml", scenarios: ["kubectl-delete"] },
];

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);

function mapDocuments(text: string, change: (doc: Json) => void): string {
  const docs = parseAllDocuments(text).map((d) => d.toJS() as unknown);
  return docs
    .filter(isObject)
    .map((doc) => {
      change(doc);
      return stringify(doc);
    })
    .join("---\n");
}

/** Sets `spec.replicas` of every Deployment in `text`. */
export function withReplicas(text: string, replicas: number): string {
  return mapDocuments(text, (doc) => {
    if (doc.kind === "Deployment" && isObject(doc.spec)) doc.spec.replicas = replicas;
  });
}

/**
 * Runs every container of every Pod in `text` with the simulator's OOM image (its own command,
 * killed after `afterSeconds`).
 */
export function withSimulatedOom(text: string, afterSeconds: number): string {
  return mapDocuments(text, (doc) => {
    if (doc.kind !== "Pod" || !isObject(doc.spec) || !Array.isArray(doc.spec.containers)) return;
    doc.spec.containers = doc.spec.containers.filter(isObject).map((container) => {
      const { command: _command, args: _args, ...rest } = container;
      const env = Array.isArray(rest.env) ? rest.env : [];
      return {
        ...rest,
        image: OOM_IMAGE,
        env: [...env, { name: "NEBULA_SIM_OOM_AFTER", value: String(afterSeconds) }],
      };
    });
  });
}
