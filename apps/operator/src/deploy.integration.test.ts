/**
 * The deploy manifests on a real kube-apiserver: two replicas of the bundled operator, run as the
 * `nebula-operator` ServiceAccount with exactly the RBAC of `deploy/operator/rbac.yaml`, elect
 * one leader, roll a crash up to the Workload, record the Event, hand over when the leader stops,
 * and never hit a permission error. JSON logs are parsed line by line.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import {
  CoordinationV1Api,
  CoreV1Api,
  EventsV1Api,
  type KubeConfig,
  KubernetesObjectApi,
} from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import {
  createCrashingWeb,
  createNamespace,
  eventually,
  getObject,
  installCrds,
} from "./testing/cluster.js";
import { podStatus } from "./testing/pods.js";

const bundle = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const deployDir = fileURLToPath(new URL("../../../deploy/operator/", import.meta.url));
const SERVICE_ACCOUNT = "system:serviceaccount:nebula-system:nebula-operator";
const SA_GROUPS = [
  "system:serviceaccounts",
  "system:serviceaccounts:nebula-system",
  "system:authenticated",
];

let admin: KubeConfig;
let asOperator: KubeConfig;
let ns: string;
const dir = mkdtempSync(join(tmpdir(), "operator-deploy-"));

interface Replica {
  name: string;
  child: ChildProcess;
  lines: Array<Record<string, unknown>>;
  exited: Promise<number | null>;
}
const replicas: Replica[] = [];

function startReplica(name: string): Replica {
  const child = spawn(
    process.execPath,
    [
      bundle,
      "--kubeconfig",
      join(dir, "kubeconfig"),
      "--leader-elect",
      "--leader-election-namespace",
      "nebula-system",
      "--metrics-bind-address",
      "127.0.0.1:0",
      "--health-probe-bind-address",
      "127.0.0.1:0",
    ],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, POD_NAME: name } },
  );
  const lines: Array<Record<string, unknown>> = [];
  const { stdout, stderr } = child;
  if (stdout === null || stderr === null) throw new Error("spawned without pipes");
  createInterface({ input: stdout }).on("line", (line) => lines.push(JSON.parse(line)));
  createInterface({ input: stderr }).on("line", (line) => lines.push({ stderr: line }));
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => resolve(code)),
  );
  const replica = { name, child, lines, exited };
  replicas.push(replica);
  return replica;
}

async function applyManifests(kc: KubeConfig): Promise<void> {
  const api = KubernetesObjectApi.makeApiClient(kc);
  for (const file of ["namespace.yaml", "serviceaccount.yaml", "rbac.yaml"]) {
    for (const doc of parseAllDocuments(readFileSync(join(deployDir, file), "utf8"))) {
      const object = doc.toJSON();
      try {
        await api.create(object);
      } catch (error) {
        if ((error as { code?: number }).code !== 409) throw error;
      }
    }
  }
}

beforeAll(async () => {
  const { controlPlane } = useTestPeers();
  admin = controlPlane.kubeConfig();
  await installCrds(admin);
  await applyManifests(admin);
  writeFileSync(join(dir, "kubeconfig"), controlPlane.kubeconfigFor(SERVICE_ACCOUNT, SA_GROUPS));
  asOperator = controlPlane.clientFor(SERVICE_ACCOUNT, SA_GROUPS);
  ns = await createNamespace(admin, "deploy");
});

afterAll(async () => {
  for (const r of replicas) r.child.kill("SIGTERM");
  await Promise.all(
    replicas.map((r) => Promise.race([r.exited, new Promise((res) => setTimeout(res, 20_000))])),
  );
  for (const r of replicas) r.child.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

const holder = async () =>
  (
    await admin
      .makeApiClient(CoordinationV1Api)
      .readNamespacedLease({ namespace: "nebula-system", name: "nebula-operator" })
  ).spec?.holderIdentity;

async function availableOf(name: string) {
  const object = (await getObject(admin, ns, "Workload", name)) as {
    status?: { conditions?: { type: string; status: string; reason: string }[] };
  };
  return object.status?.conditions?.find((c) => c.type === "Available");
}

describe("two replicas as the nebula-operator ServiceAccount", () => {
  it("elect one leader, roll a crash up and record the flip, with no permission error", async () => {
    startReplica("operator-a");
    startReplica("operator-b");
    const leader = await eventually("a leader", async () => (await holder()) || undefined);
    expect(["operator-a", "operator-b"]).toContain(leader);

    await createCrashingWeb(admin, ns);
    const core = admin.makeApiClient(CoreV1Api);
    await eventually("Available=False InstanceCrashing", async () => {
      const c = await availableOf("web");
      return c?.status === "False" && c.reason === "InstanceCrashing" ? c : undefined;
    });

    const latest = await core.readNamespacedPod({ name: "web-0", namespace: ns });
    await core.replaceNamespacedPodStatus({
      name: "web-0",
      namespace: ns,
      body: { ...latest, status: podStatus(latest, "ready") },
    });
    await eventually("Available=True", async () =>
      (await availableOf("web"))?.status === "True" ? true : undefined,
    );
    const event = await eventually("the flip's Event", async () =>
      (await admin.makeApiClient(EventsV1Api).listNamespacedEvent({ namespace: ns })).items.find(
        (e) =>
          e.regarding?.name === "web" && e.reportingController === "compute.nebula.dev/operator",
      ),
    );
    expect(event.reportingInstance).toBe(leader);
  });

  it("hands over when the leader stops, and the new leader keeps the status true", async () => {
    const leader = await holder();
    const old = replicas.find((r) => r.name === leader);
    expect(old).toBeDefined();
    old?.child.kill("SIGTERM");
    expect(await old?.exited).toBe(0);
    const next = await eventually("a new leader", async () => {
      const h = await holder();
      return h && h !== leader ? h : undefined;
    });
    expect(next).toBe(replicas.find((r) => r !== old)?.name);

    const core = admin.makeApiClient(CoreV1Api);
    const latest = await core.readNamespacedPod({ name: "web-0", namespace: ns });
    await core.replaceNamespacedPodStatus({
      name: "web-0",
      namespace: ns,
      body: { ...latest, status: podStatus(latest, "image") },
    });
    await eventually("Available=False ImageUnavailable", async () => {
      const c = await availableOf("web");
      return c?.status === "False" && c.reason === "ImageUnavailable" ? c : undefined;
    });
  });

  it("logs JSON lines only, none of them a permission error", () => {
    const all = replicas.flatMap((r) => r.lines);
    expect(all.length).toBeGreaterThan(0);
    expect(all.filter((l) => "stderr" in l)).toEqual([]);
    // A refusal shows as "forbidden" or as HTTP status 403; a bare "403" would also match a
    // timestamp's milliseconds or a resourceVersion.
    const refused = /forbidden|HTTP-Code: 403|"(?:code|statusCode|status)":403\b/i;
    expect(all.filter((l) => refused.test(JSON.stringify(l)))).toEqual([]);
    expect(all.every((l) => typeof l.level === "string" && typeof l.time === "string")).toBe(true);
  });

  it("may not write anything it does not own", async () => {
    const core = asOperator.makeApiClient(CoreV1Api);
    const pod = await admin
      .makeApiClient(CoreV1Api)
      .readNamespacedPod({ name: "web-0", namespace: ns });
    const denied = async (call: () => Promise<unknown>) => {
      try {
        await call();
        return "allowed";
      } catch (error) {
        return (error as { code?: number }).code;
      }
    };
    expect(
      await denied(() =>
        core.replaceNamespacedPodStatus({ name: "web-0", namespace: ns, body: pod }),
      ),
    ).toBe(403);
    expect(await denied(() => core.deleteNamespacedPod({ name: "web-0", namespace: ns }))).toBe(
      403,
    );
    expect(await denied(() => core.listNamespacedSecret({ namespace: ns }))).toBe(403);
  });
});
