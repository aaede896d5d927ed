/**
 * Runs the Argo CD health check (`deploy/operator/argocd/health.lua`) with a real Lua 5.4
 * interpreter (Debian's `lua5.4`), the way Argo CD runs it: `obj` is a global table, the script
 * returns `{ status, message }`. Test-only.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The health check's path. */
export const HEALTH_LUA = fileURLToPath(
  new URL("../../../../deploy/operator/argocd/health.lua", import.meta.url),
);

/** The Lua interpreter: `$LUA`, else `lua5.4` on the PATH. */
const LUA = process.env.LUA ?? "lua5.4";

/** A JSON value as a Lua table constructor (what Argo CD hands the script). */
function toLua(value: unknown): string {
  if (value === null || value === undefined) return "nil";
  if (typeof value === "string") return JSON.stringify(value).replaceAll("\\u", "\\u");
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  if (value instanceof Date) return JSON.stringify(value.toISOString());
  if (Array.isArray(value)) return `{${value.map(toLua).join(", ")}}`;
  const fields = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined && v !== null)
    .map(([k, v]) => `[${JSON.stringify(k)}] = ${toLua(v)}`);
  return `{${fields.join(", ")}}`;
}

/** Argo CD's verdict on one object. */
export interface Health {
  status: string;
  message: string;
}

/** Runs the health check on `object` and returns its verdict. */
export function argoHealth(object: unknown): Health {
  const dir = mkdtempSync(join(tmpdir(), "argocd-health-"));
  try {
    const script = join(dir, "run.lua");
    writeFileSync(
      script,
      `obj = ${toLua(object)}\nlocal function check()\n${readFileSync(HEALTH_LUA, "utf8")}\nend\nlocal hs = check()\nio.write(hs.status, "\\t", hs.message or "")\n`,
    );
    const out = execFileSync(LUA, [script], { encoding: "utf8", timeout: 10_000 });
    const tab = out.indexOf("\t");
    return { status: out.slice(0, tab), message: out.slice(tab + 1) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
