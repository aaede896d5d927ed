/**
 * Runs kstatus itself: the Go program in `apps/operator/kstatus` over sigs.k8s.io/cli-utils'
 * kstatus library, built by `bash scripts/bootstrap.sh kstatus`. Test-only.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const source = fileURLToPath(new URL("../../kstatus/", import.meta.url));

/** Where the bootstrap step puts the binary: `$NEBULA_CACHE_DIR/kstatus/<hash of its sources>/kstatus`. */
function kstatusBinary(): string {
  if (process.env.NEBULA_KSTATUS) return process.env.NEBULA_KSTATUS;
  const hash = createHash("sha256");
  for (const file of ["go.mod", "go.sum", "main.go"]) hash.update(readFileSync(join(source, file)));
  const cache = process.env.NEBULA_CACHE_DIR ?? join(homedir(), ".cache/nebula");
  const binary = join(cache, "kstatus", hash.digest("hex").slice(0, 16), "kstatus");
  if (!existsSync(binary)) {
    throw new Error(`kstatus is not built at ${binary}: run bash scripts/bootstrap.sh kstatus`);
  }
  return binary;
}

/** kstatus' verdict on one object. */
export interface KstatusResult {
  name: string;
  status: string;
  message: string;
}

/** Runs kstatus' `status.Compute` on each object. */
export function kstatus(objects: readonly unknown[]): KstatusResult[] {
  const out = execFileSync(kstatusBinary(), [], {
    input: JSON.stringify(objects),
    encoding: "utf8",
    timeout: 30_000,
  });
  return out
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line) as KstatusResult);
}
