import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import type { V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { type RenderOptionsInput, renderUserData } from "./index.js";
import { renderPoolUserData } from "./pool/index.js";
import { SUPERVISOR_FRAGMENTS } from "./supervisor/fragments.js";
import { typicalPod } from "./testing/pods.js";

/** The files a user-data script writes: the script itself, and each heredoc it installs. */
function parts(script: string): Record<string, { text: string; shell: string }> {
  const out: Record<string, { text: string; shell: string }> = {
    "user-data": { text: script, shell: "bash" },
  };
  for (const m of script.matchAll(
    /^(cat|base64 -d) >(\S+) <<'(NEBULA_[A-Z]+)'\n([\s\S]*?)^\3$/gm,
  )) {
    const [, how, path, , body] = m;
    const text =
      how === "cat"
        ? (body ?? "")
        : Buffer.from((body ?? "").replace(/\n/g, ""), "base64").toString("utf8");
    out[path ?? ""] = { text, shell: path?.includes("shim") ? "sh" : "bash" };
  }
  return out;
}

const variants: [string, V1Pod, RenderOptionsInput][] = [
  ["typical app + sidecar", typicalPod(), {}],
  ["minimal", { spec: { containers: [{ name: "a", image: "busybox" }] } }, {}],
  [
    "init containers, volumes, hostile strings, unlimited restarts",
    {
      metadata: { name: "x", annotations: { "nebula.dev/restart-limit": "unlimited" } },
      spec: {
        restartPolicy: "OnFailure",
        initContainers: [
          {
            name: "init",
            image: "busybox",
            command: ["sh", "-c", "echo '$(x)' `id` \"$HOME\"\nexit 0"],
          },
        ],
        containers: [
          {
            name: "app",
            image: "busybox",
            args: ["--flag", "ünï", "'", "\\"],
            // biome-ignore lint/suspicious/noTemplateCurlyInString: a literal shell expression, on purpose
            env: [{ name: "A", value: "$(B) ${C} `d`" }],
            volumeMounts: [{ name: "data", mountPath: "/data" }],
          },
        ],
        volumes: [{ name: "data", hostPath: { path: "/mnt/data", type: "DirectoryOrCreate" } }],
      },
    },
    {},
  ],
  [
    "agents",
    typicalPod(),
    { agents: [{ name: "sandd", command: ["/opt/sandd", "--x='1'", "$(y)"] }] },
  ],
  [
    "agents and the doorbell on",
    typicalPod(),
    {
      agents: [{ name: "sandd", command: ["/opt/sandd", "--x='1'", "$(y)"] }],
      doorbell: { queueUrl: "https://sqs.eu-west-1.amazonaws.com/123456789012/nebula-prod-events" },
    },
  ],
  [
    "logs and metrics on",
    typicalPod(),
    { logs: { group: "/nebula/prod" }, metrics: { sampleSeconds: 10 } },
  ],
  [
    "the Parameter Store delivery (the bootstrap)",
    { metadata: { uid: "u-1" }, spec: { containers: [{ name: "a", image: "busybox" }] } },
    { cluster: "prod", delivery: "parameters" },
  ],
];

describe("shellcheck (Debian's package) passes on every generated script", () => {
  const version = spawnSync("shellcheck", ["--version"], { encoding: "utf8" });
  it("is installed", () => {
    expect(version.status).toBe(0);
  });

  for (const [name, pod, options] of variants) {
    it(name, () => {
      const result = renderUserData(pod, options);
      if (!result.ok) throw result.error;
      const dir = mkdtempSync(join(tmpdir(), "nebula-shellcheck-"));
      const files = Object.entries(parts(result.value.script));
      const viaParameters = result.value.parameters.length > 0;
      expect(files.map(([path]) => path)).toEqual(
        expect.arrayContaining(
          viaParameters
            ? ["user-data", "/usr/local/lib/nebula/pod.ref"]
            : ["user-data", "/usr/local/lib/nebula/supervisor.sh", "/usr/local/lib/nebula/pod.sh"],
        ),
      );
      if (viaParameters) {
        // pod.sh and the supervisor as the host gets them from their parameters.
        const join64 = (ps: readonly { value: string }[]) =>
          gunzipSync(Buffer.from(ps.map((p) => p.value).join(""), "base64")).toString("utf8");
        files.push([
          "pod.sh (parameters)",
          { text: join64(result.value.parameters), shell: "bash" },
        ]);
        files.push([
          "supervisor.sh (parameters)",
          { text: join64(result.value.sharedParameters), shell: "bash" },
        ]);
      }
      try {
        for (const [path, { text, shell }] of files) {
          const file = join(dir, path.replaceAll("/", "_"));
          writeFileSync(file, text);
          const check = spawnSync("shellcheck", ["--shell", shell, "--severity", "style", file], {
            encoding: "utf8",
          });
          expect(`${path}: ${check.stdout}`).toBe(`${path}: `);
          expect(check.status).toBe(0);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});

// The supervisor's source, src/supervisor/*.sh: each fragment passes as a file of its own, with
// only the directives of its header (its shell, and the disables its cross-fragment names need).
describe("shellcheck passes on every supervisor fragment on its own", () => {
  for (const name of SUPERVISOR_FRAGMENTS) {
    it(name, () => {
      const file = fileURLToPath(new URL(`./supervisor/${name}`, import.meta.url));
      const check = spawnSync("shellcheck", ["--severity", "style", file], { encoding: "utf8" });
      expect(`${name}: ${check.stdout}${check.stderr}`).toBe(`${name}: `);
      expect(check.status).toBe(0);
    });
  }
});

// The warm-pool user-data (src/pool.ts) and the boot program it installs.
describe("shellcheck passes on the pool user-data and its boot program", () => {
  for (const [name, options] of [
    ["no images", {}],
    [
      "images and a budget",
      { images: ["busybox:1.36", "ghcr.io/a/b@sha256:00"], prepareSeconds: 60 },
    ],
  ] as const) {
    it(name, () => {
      const files = Object.entries(parts(renderPoolUserData(options).script));
      expect(files.map(([path]) => path)).toEqual([
        "user-data",
        "/usr/local/lib/nebula/pool-boot.sh",
      ]);
      const dir = mkdtempSync(join(tmpdir(), "nebula-shellcheck-"));
      try {
        for (const [path, { text }] of files) {
          const file = join(dir, path.replaceAll("/", "_"));
          writeFileSync(file, text);
          const check = spawnSync("shellcheck", ["--shell", "bash", "--severity", "style", file], {
            encoding: "utf8",
          });
          expect(`${path}: ${check.stdout}`).toBe(`${path}: `);
          expect(check.status).toBe(0);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
