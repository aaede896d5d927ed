/**
 * The Pod statuses this package builds, written to a real kube-apiserver (the local control plane
 * of `@nebula/test-peers`) with `replaceNamespacedPodStatus`, must pass its validation, survive the
 * round trip, and map back to the same instance reason.
 */
import { CoreV1Api, type V1Pod, type V1PodStatus } from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { beforeAll, describe, expect, it } from "vitest";
import { type InstanceState, toInstanceReason, toInstanceState, toPodStatus } from "./index.js";
import { REPORT_CONDITION_TYPE } from "./pod-status.js";
import { encodeConsoleLine } from "./report.js";
import { b64, crashLooping, ec2, exited, NOW, pod, report, running } from "./test-fixtures.js";

const NAMESPACE = "default";
let api: CoreV1Api;
let counter = 0;

beforeAll(() => {
  api = useTestPeers().controlPlane.kubeConfig().makeApiClient(CoreV1Api);
});

/** Creates a Pod bound to a (virtual) node, as the scheduler would have. */
async function createPod(template: V1Pod): Promise<V1Pod> {
  counter++;
  const body: V1Pod = {
    ...template,
    metadata: { name: `state-mapping-${Date.now().toString(36)}-${counter}`, namespace: NAMESPACE },
    spec: {
      ...template.spec,
      containers: template.spec?.containers ?? [],
      nodeName: "nebula-vnode",
    },
  };
  delete body.status;
  return api.createNamespacedPod({ namespace: NAMESPACE, body });
}

/** Writes `status` through the status subresource and returns the Pod the server stored. */
async function writeStatus(current: V1Pod, status: V1PodStatus): Promise<V1Pod> {
  return api.replaceNamespacedPodStatus({
    name: current.metadata?.name ?? "",
    namespace: NAMESPACE,
    body: { ...current, status },
  });
}

async function roundTrip(
  template: V1Pod,
  state: InstanceState,
): Promise<{ sent: V1PodStatus; stored: V1Pod }> {
  const created = await createPod(template);
  const sent = toPodStatus(created, state, { now: NOW });
  const stored = await writeStatus(created, sent);
  return { sent, stored };
}

/** Plain JSON, without what the server fills in for absent fields (`lastState: {}`, `null` times). */
function plain(value: unknown): unknown {
  return JSON.parse(
    JSON.stringify(value ?? null, (key, v) =>
      (key !== "" && v === null) ||
      (key === "lastState" && typeof v === "object" && Object.keys(v).length === 0)
        ? undefined
        : v,
    ),
  );
}

const live = (rep: ReturnType<typeof report>) =>
  toInstanceState(ec2("running", { report: rep }), { now: NOW });

describe("Pod statuses written to a real kube-apiserver", () => {
  it.each([
    [
      "a running, ready container",
      pod("Always"),
      live(report(1, false, [running()])),
      "Running",
      "Ready",
    ],
    [
      "a crash loop",
      pod("Always"),
      live(report(4, false, [crashLooping(3)])),
      "Running",
      "InstanceCrashing",
    ],
    [
      "a booting instance",
      pod("Always"),
      toInstanceState(ec2("running"), { now: NOW }),
      "Pending",
      "Provisioning",
    ],
    [
      "an image pull failure",
      pod("Always"),
      live(
        report(2, false, [
          {
            name: "app",
            init: false,
            state: "waiting",
            restarts: 0,
            reason: "ImagePullBackOff",
            messageB64: b64('Back-off pulling image "registry.example/app:1"'),
          },
        ]),
      ),
      "Pending",
      "ImageUnavailable",
    ],
    [
      "a successful final report",
      pod("Never"),
      live(report(5, true, [exited(0, "app", { messageB64: b64("done") })])),
      "Succeeded",
      "Completed",
    ],
    [
      "an OOM kill",
      pod("Never"),
      live(report(5, true, [exited(137, "app", { reason: "OOMKilled" })])),
      "Failed",
      "OutOfMemory",
    ],
    [
      "a crash loop the supervisor gave up on",
      pod("Always"),
      live(report(9, true, [crashLooping(5)])),
      "Failed",
      "InstanceCrashing",
    ],
    [
      "an image never pulled (final report)",
      pod("Always"),
      live(
        report(9, true, [
          { name: "app", init: false, state: "waiting", restarts: 0, reason: "ImagePullBackOff" },
        ]),
      ),
      "Failed",
      "ImageUnavailable",
    ],
    [
      "a spot interruption without a report",
      pod("OnFailure"),
      toInstanceState(ec2("stopped", { code: "Server.SpotInstanceTermination" }), { now: NOW }),
      "Failed",
      "InstanceLost",
    ],
    [
      "an unreadable report",
      pod("Always"),
      toInstanceState(
        ec2("running", { tags: { "nebula:report": "v9 seq=1 chunks=1 sha256=0000000000000000" } }),
        {
          now: NOW,
        },
      ),
      "Unknown",
      "Unknown",
    ],
    [
      "a Spot interruption the supervisor reported (stopRequested)",
      pod("Always"),
      toInstanceState(
        ec2("stopped", {
          code: "Server.SpotInstanceTermination",
          report: {
            ...report(5, true, [exited(143, "app", { signal: 15 })]),
            stopRequested: true,
          },
        }),
        { now: NOW },
      ),
      "Failed",
      "InstanceLost",
    ],
    [
      "init containers still running",
      pod("Always", [{ name: "app" }], [{ name: "migrate" }]),
      live(report(1, false, [{ ...running("migrate"), init: true }])),
      "Pending",
      "Starting",
    ],
  ] as const)(
    "%s passes validation and round-trips",
    async (_name, template, state, phase, reason) => {
      const { sent, stored } = await roundTrip(template, state);
      expect(stored.status?.phase).toBe(phase);
      expect(plain(stored.status?.containerStatuses)).toEqual(plain(sent.containerStatuses));
      expect(plain(stored.status?.initContainerStatuses)).toEqual(
        plain(sent.initContainerStatuses),
      );
      expect(stored.status?.conditions?.map((c) => [c.type, c.status, c.reason])).toEqual(
        sent.conditions?.map((c) => [c.type, c.status, c.reason]),
      );
      expect(stored.status?.podIP).toBe(sent.podIP);
      expect(toInstanceReason(stored).reason).toBe(reason);
    },
  );

  it("accepts a later, better report after the instance was first seen stopped", async () => {
    const template = pod("OnFailure");
    let current = await createPod(template);
    const booting = toInstanceState(ec2("running"), { now: NOW });
    current = await writeStatus(current, toPodStatus(current, booting, { now: NOW }));
    const runningState = toInstanceState(
      ec2("running", { report: report(1, false, [running()]) }),
      {
        now: NOW,
        previous: booting,
      },
    );
    current = await writeStatus(current, toPodStatus(current, runningState, { now: NOW }));
    expect(current.status?.phase).toBe("Running");

    const lost = toInstanceState(ec2("stopped", { code: "Client.InstanceInitiatedShutdown" }), {
      now: NOW,
      previous: runningState,
    });
    expect(lost.kind).toBe("Lost");
    current = await writeStatus(current, toPodStatus(current, lost, { now: NOW }));
    expect(current.status?.phase).toBe("Failed");
    expect(current.status?.containerStatuses?.[0]?.state?.terminated?.reason).toBe(
      "ContainerStatusUnknown",
    );

    const found = toInstanceState(ec2("stopped", { code: "Client.InstanceInitiatedShutdown" }), {
      now: NOW,
      previous: lost,
      consoleOutput: encodeConsoleLine(report(2, true, [exited(0)])),
    });
    expect(found.kind).toBe("Terminal");
    current = await writeStatus(current, toPodStatus(current, found, { now: NOW }));
    expect(current.status?.phase).toBe("Succeeded");
    expect(current.status?.containerStatuses?.[0]?.state?.terminated).toMatchObject({
      exitCode: 0,
      reason: "Completed",
    });
    expect(toInstanceReason(current).reason).toBe("Completed");
  });

  it("accepts Running → Unknown (unreadable report) → Running, and a crash loop's restarts", async () => {
    let current = await createPod(pod("Always"));
    const first = toInstanceState(ec2("running", { report: report(1, false, [running()]) }), {
      now: NOW,
    });
    current = await writeStatus(current, toPodStatus(current, first, { now: NOW }));
    expect(current.status?.phase).toBe("Running");

    const unreadable = toInstanceState(
      ec2("running", { tags: { "nebula:report": "v1 seq=2 chunks=1 sha256=0000000000000000" } }),
      { now: NOW, previous: first },
    );
    current = await writeStatus(current, toPodStatus(current, unreadable, { now: NOW }));
    expect(current.status?.phase).toBe("Unknown");
    expect(current.status?.reason).toBe("ReportUnreadable");

    const crashing = toInstanceState(
      ec2("running", { report: report(3, false, [crashLooping(1)]) }),
      {
        now: NOW,
        previous: unreadable,
      },
    );
    current = await writeStatus(current, toPodStatus(current, crashing, { now: NOW }));
    expect(current.status?.phase).toBe("Running");
    expect(current.status?.reason).toBeUndefined();
    expect(current.status?.containerStatuses?.[0]?.restartCount).toBe(1);
    expect(toInstanceReason(current).reason).toBe("InstanceCrashing");
  });

  it("keeps a stored terminal status and its cause through a restart, read back from the server", async () => {
    let current = await createPod(pod("Never"));
    const spot = toInstanceState(
      ec2("stopped", {
        code: "Server.SpotInstanceTermination",
        report: report(4, false, [running()]),
      }),
      { now: NOW },
    );
    current = await writeStatus(current, toPodStatus(current, spot, { now: NOW }));
    expect(current.status).toMatchObject({ phase: "Failed", reason: "SpotInterruption" });
    const record = current.status?.conditions?.find((c) => c.type === REPORT_CONDITION_TYPE);
    expect(record?.message).toBe("seq=4 cause=SpotInterruption");

    // A restart: no previous state; the controller has terminated the instance since.
    const later = new Date(NOW.getTime() + 600_000);
    const terminated = toInstanceState(
      ec2("terminated", { code: "Client.UserInitiatedShutdown" }),
      { now: later },
    );
    const read = await api.readNamespacedPod({
      name: current.metadata?.name ?? "",
      namespace: NAMESPACE,
    });
    const next = toPodStatus(read, terminated, { now: later });
    expect(plain(next)).toEqual(plain(read.status));
  });

  it("stores hostile messages as written, so the next reconcile writes nothing", async () => {
    const message = `\u001b[31mboom\u001b[0m ${"x".repeat(190)}😀 tail\u0000\u202e ${"é".repeat(5000)}`;
    const state = toInstanceState(
      ec2("stopped", { report: report(2, true, [exited(1, "app", { messageB64: b64(message) })]) }),
      { now: NOW },
    );
    let current = await createPod(pod("Never"));
    const sent = toPodStatus(current, state, { now: NOW });
    current = await writeStatus(current, sent);
    expect(plain(current.status?.containerStatuses)).toEqual(plain(sent.containerStatuses));
    const reason = toInstanceReason({ ...current, status: sent });
    expect(toInstanceReason(current)).toEqual(reason);
    // The same world again: the status computed from the stored Pod equals the stored status.
    expect(plain(toPodStatus(current, state, { now: NOW }))).toEqual(plain(current.status));
  });
});
