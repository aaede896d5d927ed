import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { type InstanceHosts, type Moto, startInstanceHosts, startMoto } from "@nebula/test-peers";
import { DEFAULT_POD_FINALIZER } from "@nebula/virtual-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ec2PodProvider } from "./provider.js";
import { type MotoNetwork, motoConfig, nodeInstances, prepareMoto } from "./testing/moto-env.js";
import { testTeardown } from "./testing/teardown.js";

let moto: Moto;
let hosts: InstanceHosts;
let network: MotoNetwork;

beforeAll(async () => {
  moto = await startMoto();
  network = await prepareMoto(moto);
  hosts = await startInstanceHosts({
    ec2Endpoint: moto.endpoint,
    region: moto.region,
    cluster: "sim",
    bootDelayMs: 500,
  });
});

afterAll(async () => {
  await hosts?.close();
  await moto?.stop();
});

function pod(name: string, uid: string, container: Record<string, unknown>): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: "default", uid, finalizers: [DEFAULT_POD_FINALIZER] },
    spec: {
      nodeName: "sim-node",
      restartPolicy: "Never",
      terminationGracePeriodSeconds: 5,
      containers: [{ name: "app", image: "busybox", ...container }],
    },
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("with the instance-host simulator (real user-data, real containers)", () => {
  it("exit 0 / exit 1 / OOM kill: the right Pod status, and every instance terminated", async () => {
    const pods = [
      pod("exits-0", "22222222-0000-4000-8000-000000000000", { command: ["sh", "-c", "exit 0"] }),
      pod("exits-1", "22222222-0000-4000-8000-000000000001", {
        command: ["sh", "-c", "echo boom >&2; exit 1"],
      }),
      pod("oom", "22222222-0000-4000-8000-000000000002", {
        image: "nebula-sim/oomkill",
        env: [{ name: "NEBULA_SIM_OOM_AFTER", value: "0.5" }],
      }),
    ];
    const statuses = new Map<string, V1PodStatus>();
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "sim-node"),
        clusterName: "sim",
        endpoint: hosts.ec2Endpoint,
        pollIntervalSeconds: 1,
        apiHeadroomSeconds: 5,
      },
      livePodUids: () => pods.map((p) => p.metadata?.uid ?? ""),
    });
    provider.notifyPods(({ pod: changed, status }) => {
      statuses.set(changed.metadata?.name ?? "", status);
    });
    for (const p of pods) await provider.createPod(p);

    const ec2 = moto.ec2();
    const teardown = testTeardown(provider);
    const finished = (p: V1Pod) =>
      ["Succeeded", "Failed"].includes(statuses.get(p.metadata?.name ?? "")?.phase ?? "");
    const done = async () => {
      const instances = await nodeInstances(ec2, "sim-node");
      return pods.every(finished) && instances.every((i) => i.State?.Name === "terminated");
    };
    for (let i = 0; i < 180 && !(await done()); i++) {
      await provider.pollOnce();
      // The Pod controller tears each finished Pod down (the one driver, `deleting: false`).
      for (const p of pods.filter(finished)) {
        await teardown.step(p, { deleting: false });
      }
      await sleep(1000);
    }
    await provider.stop();

    const terminated = (name: string) =>
      statuses.get(name)?.containerStatuses?.[0]?.state?.terminated;
    expect(statuses.get("exits-0")?.phase).toBe("Succeeded");
    expect(terminated("exits-0")).toMatchObject({ exitCode: 0, reason: "Completed" });
    expect(statuses.get("exits-1")?.phase).toBe("Failed");
    expect(terminated("exits-1")).toMatchObject({ exitCode: 1, reason: "Error" });
    expect(statuses.get("oom")?.phase).toBe("Failed");
    expect(terminated("oom")).toMatchObject({ reason: "OOMKilled" });
    const instances = await nodeInstances(ec2, "sim-node");
    expect(instances).toHaveLength(3);
    expect(instances.map((i) => i.State?.Name)).toEqual(["terminated", "terminated", "terminated"]);
    ec2.destroy();
  });
});
