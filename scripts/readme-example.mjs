// The runnable example at the top of a package's README, run as written against the packed
// package (by scripts/check-package.mjs, in its consumer project):
//
//   - the first ```ts or ```js block of README.md is written to readme-example.mts;
//   - it type-checks with the consumer's TypeScript settings (nodenext, strict);
//   - it runs with `node` (Node.js strips the types) and exits 0 within its deadline;
//   - when the README follows it with "prints" / "It prints:" and a fenced block, the output must be
//     exactly that block.
//
// Examples that talk to a cluster or to EC2 get real peers from @nebula/test-peers (a kube-apiserver
// with etcd, or moto) through the environment a user would set (KUBECONFIG, AWS_ENDPOINT_URL_EC2, ...);
// what each needs is in PEERS below.
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join, normalize } from "node:path";

/**
 * The first TypeScript or JavaScript example of a README, and the output the README says it prints.
 * @param {string} readme
 * @returns {{ code: string, expected: string | undefined } | undefined}
 */
function readmeExample(readme) {
  const lines = readme.split("\n");
  const start = lines.findIndex((l) => /^```(ts|js|typescript|javascript)\s*$/.test(l));
  if (start < 0) return undefined;
  const end = lines.findIndex((l, i) => i > start && /^```\s*$/.test(l));
  if (end < 0) return undefined;
  const code = lines.slice(start + 1, end).join("\n");
  let i = end + 1;
  while (i < lines.length && lines[i].trim() === "") i += 1;
  let expected;
  if (/^(it )?prints:?$/i.test(lines[i]?.trim() ?? "")) {
    i += 1;
    while (i < lines.length && lines[i].trim() === "") i += 1;
    if (/^```/.test(lines[i] ?? "")) {
      const close = lines.findIndex((l, j) => j > i && /^```\s*$/.test(l));
      if (close > i) expected = lines.slice(i + 1, close).join("\n");
    }
  }
  return { code, expected };
}

/**
 * The relative links of a README (to files, not anchors or URLs) that point at nothing in the
 * package's tarball, whose file list is `shipped` (paths relative to the package root). On npm a
 * README is shown without the repository around it: a link out of the package must be a URL.
 * @param {string} readme
 * @param {readonly string[]} shipped
 * @returns {string[]}
 */
export function brokenReadmeLinks(readme, shipped) {
  const files = new Set(shipped);
  const dirs = new Set(
    shipped.flatMap((f) =>
      f
        .split("/")
        .slice(0, -1)
        .map((_, i, parts) => parts.slice(0, i + 1).join("/")),
    ),
  );
  const broken = [];
  for (const match of readme.matchAll(/\]\(([^)\s]+)\)/g)) {
    const target = match[1].split("#")[0];
    if (target === "" || /^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
    const path = normalize(target.replace(/^\.\//, "")).replace(/\/$/, "");
    if (path.startsWith("..") || !(files.has(path) || dirs.has(path))) broken.push(match[1]);
  }
  return broken;
}

/**
 * What an example needs to run, by package: the peers, what to prepare in them, and, for an
 * example that runs until interrupted, when it has shown what it does (then it gets SIGINT).
 */
const PEERS = {
  "@nebula/kube": {
    peers: { controlPlane: true },
    // "the Pod default/web-0 must exist" (the README's words).
    async prepare({ controlPlane, kube }) {
      const core = controlPlane.kubeConfig().makeApiClient(kube.CoreV1Api);
      await core.createNamespacedPod({
        namespace: "default",
        body: {
          metadata: { name: "web-0" },
          spec: { containers: [{ name: "app", image: "registry.example/app:1" }] },
        },
      });
    },
  },
  "@nebula/virtual-node": {
    peers: { controlPlane: true },
    async doneWhen({ controlPlane, kube }) {
      const core = controlPlane.kubeConfig().makeApiClient(kube.CoreV1Api);
      try {
        const node = await core.readNode({ name: "my-virtual-node" });
        return node.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
      } catch {
        return false;
      }
    },
  },
  "@nebula/provider": { peers: { moto: true } },
};

function runNode(file, cwd, env, deadlineMs, doneWhen) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file], { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => {
      stdout += d;
    });
    child.stderr.on("data", (d) => {
      stderr += d;
    });
    let interrupted = false;
    const timer = setTimeout(() => child.kill("SIGKILL"), deadlineMs);
    let polling;
    if (doneWhen) {
      polling = setInterval(async () => {
        if (!interrupted && (await doneWhen())) {
          interrupted = true;
          child.kill("SIGINT");
        }
      }, 500);
    }
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      if (polling) clearInterval(polling);
      resolve({ code, signal, stdout, stderr, interrupted });
    });
  });
}

/**
 * Type-checks and runs the README example of package `name` in `project` (a consumer project with
 * the packed package installed). Returns a sentence for the log, or throws with what went wrong.
 */
export async function checkReadmeExample({ name, readme, project, tsc }) {
  const example = readmeExample(readme);
  if (!example) throw new Error("README.md has no ```ts or ```js example");
  const file = "readme-example.mts";
  writeFileSync(join(project, file), `${example.code}\n`);
  writeFileSync(
    join(project, "tsconfig.example.json"),
    `${JSON.stringify({ extends: "./tsconfig.json", files: [file] }, null, 2)}\n`,
  );
  await tsc(["-p", "tsconfig.example.json"]);

  const needs = PEERS[name];
  let peers;
  const env = { PATH: process.env.PATH ?? "", HOME: project };
  try {
    if (needs) {
      const testPeers = await import("@nebula/test-peers");
      peers = await testPeers.startTestPeers(needs.peers);
      const kube = await import("@kubernetes/client-node");
      const context = { controlPlane: peers.controlPlane, moto: peers.moto, kube };
      if (peers.controlPlane) {
        const kubeconfig = join(project, "kubeconfig");
        writeFileSync(kubeconfig, peers.controlPlane.kubeconfig);
        env.KUBECONFIG = kubeconfig;
      }
      if (peers.moto) Object.assign(env, peers.moto.env);
      if (needs.prepare) await needs.prepare(context);
      const result = await runNode(
        file,
        project,
        env,
        120_000,
        needs.doneWhen ? () => needs.doneWhen(context) : undefined,
      );
      return verdict(example, result, needs.doneWhen !== undefined);
    }
    return verdict(example, await runNode(file, project, env, 60_000), false);
  } finally {
    await peers?.stop();
  }
}

function verdict(example, result, untilInterrupted) {
  const output = `\n--- stdout\n${result.stdout}--- stderr\n${result.stderr}`;
  if (process.env.CHECK_PACKAGE_TRACE) console.error(`the README example's output:${output}`);
  if (untilInterrupted && !result.interrupted)
    throw new Error(`the README example ended before it did what the README says${output}`);
  if (result.code !== 0)
    throw new Error(
      `the README example exited with ${result.code ?? result.signal}${result.signal === "SIGKILL" ? " (deadline)" : ""}${output}`,
    );
  if (example.expected !== undefined && result.stdout.trimEnd() !== example.expected.trimEnd()) {
    throw new Error(
      `the README example printed something else than the README says:\n--- README\n${example.expected}\n${output}`,
    );
  }
  return `the README example type-checks (strict) and runs${example.expected !== undefined ? ", printing exactly what the README shows" : ""}${untilInterrupted ? " until interrupted" : ""}`;
}
