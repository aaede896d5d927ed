import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { INSTANCE_REASONS, toInstanceReason, toInstanceState, toPodStatus } from "./index.js";
import { b64, crashLooping, ec2, exited, NOW, pod, report, running } from "./test-fixtures.js";

const status = (c: Partial<V1ContainerStatus>[], extra: Record<string, unknown> = {}) => ({
  phase: "Running",
  containerStatuses: c.map((s) => ({
    name: "app",
    image: "registry.example/app:1",
    imageID: "",
    restartCount: 0,
    ready: false,
    ...s,
  })),
  ...extra,
});

describe("toInstanceReason on a Pod", () => {
  it("words a crash loop as a crash loop, although the phase is Running", () => {
    expect(
      toInstanceReason(
        status([
          {
            restartCount: 3,
            state: { waiting: { reason: "CrashLoopBackOff", message: "back-off 40s" } },
            lastState: { terminated: { exitCode: 1, reason: "Error" } },
          },
        ]),
      ),
    ).toEqual({
      reason: "InstanceCrashing",
      ready: false,
      message:
        'container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.',
    });
  });

  it("quotes the termination message the application wrote, and names a signal", () => {
    expect(
      toInstanceReason(
        status([
          {
            restartCount: 1,
            state: { waiting: { reason: "CrashLoopBackOff" } },
            lastState: {
              terminated: {
                exitCode: 1,
                reason: "Error",
                message: 'config file "/etc/app.yaml" not found\n',
              },
            },
          },
        ]),
      ).message,
    ).toBe(
      'container "app" has exited and restarted 1 time without staying up for 10 minutes. Its last exit was with code 1 and the message "config file \'/etc/app.yaml\' not found".',
    );
    expect(
      toInstanceReason(
        status([{ state: { terminated: { exitCode: 137, signal: 9, reason: "Error" } } }], {
          phase: "Failed",
        }),
      ),
    ).toEqual({
      reason: "InstanceCrashing",
      ready: false,
      message: 'container "app" was killed by signal 9 (SIGKILL).',
    });
  });

  it("says OutOfMemory with the limit from the Pod spec", () => {
    const p: V1Pod = {
      spec: {
        containers: [{ name: "app", image: "x", resources: { limits: { memory: "512Mi" } } }],
      },
      status: status([
        {
          restartCount: 2,
          state: { waiting: { reason: "CrashLoopBackOff" } },
          lastState: { terminated: { exitCode: 137, reason: "OOMKilled" } },
        },
      ]),
    };
    expect(toInstanceReason(p)).toEqual({
      reason: "OutOfMemory",
      ready: false,
      message: 'container "app" was killed because it ran out of memory (limit 512Mi).',
    });
    expect(toInstanceReason(p.status).message).toBe(
      'container "app" was killed because it ran out of memory.',
    );
  });

  it("says ImageUnavailable for pull failures", () => {
    expect(
      toInstanceReason(
        status(
          [
            {
              image: "x",
              state: {
                waiting: { reason: "ImagePullBackOff", message: 'Back-off pulling image "x"' },
              },
            },
          ],
          { phase: "Pending" },
        ),
      ),
    ).toEqual({
      reason: "ImageUnavailable",
      ready: false,
      message: 'container "app" could not pull its image "x": Back-off pulling image \'x\'.',
    });
  });

  it("says ConfigurationError for config and start failures", () => {
    expect(
      toInstanceReason(
        status([
          {
            state: {
              waiting: { reason: "CreateContainerConfigError", message: 'secret "db" not found' },
            },
          },
        ]),
      ),
    ).toMatchObject({
      reason: "ConfigurationError",
      message:
        "container \"app\" could not be started because of its configuration: secret 'db' not found.",
    });
    expect(
      toInstanceReason(
        status([
          {
            state: {
              terminated: {
                exitCode: 128,
                reason: "ContainerCannotRun",
                message: "exec: /app: not found",
              },
            },
          },
        ]),
      ),
    ).toMatchObject({
      reason: "ConfigurationError",
      message: 'container "app" could not be started: exec: /app: not found.',
    });
  });

  it("ranks the worst container first", () => {
    const result = toInstanceReason(
      status([
        { name: "puller", image: "x", state: { waiting: { reason: "ErrImagePull" } } },
        {
          name: "app",
          restartCount: 4,
          state: { waiting: { reason: "CrashLoopBackOff" } },
          lastState: { terminated: { exitCode: 2, reason: "Error" } },
        },
        { name: "ok", ready: true, state: { running: {} } },
      ]),
    );
    expect(result.reason).toBe("InstanceCrashing");
    expect(result.ready).toBe(false);
  });

  it("says Ready, Completed, Starting and Provisioning when nothing is wrong", () => {
    expect(toInstanceReason(status([{ ready: true, state: { running: {} } }]))).toEqual({
      reason: "Ready",
      ready: true,
      message: 'container "app" is running and ready.',
    });
    expect(
      toInstanceReason(
        status([{ state: { terminated: { exitCode: 0, reason: "Completed" } } }], {
          phase: "Succeeded",
        }),
      ).reason,
    ).toBe("Completed");
    expect(toInstanceReason(status([{ state: { running: {} } }])).reason).toBe("Starting");
    expect(
      toInstanceReason(status([{ state: { waiting: { reason: "ContainerCreating" } } }])).reason,
    ).toBe("Starting");
    expect(toInstanceReason({ phase: "Pending" })).toEqual({
      reason: "Provisioning",
      ready: false,
      message: "the instance is being provisioned.",
    });
  });

  it("says NoMatchingLocation for an unschedulable Pod, InstanceLost for a failed one without containers", () => {
    expect(
      toInstanceReason({
        phase: "Pending",
        conditions: [
          {
            type: "PodScheduled",
            status: "False",
            reason: "Unschedulable",
            message: "0/3 nodes are available",
          },
        ],
      }),
    ).toEqual({
      reason: "NoMatchingLocation",
      ready: false,
      message: "the instance could not be placed: 0/3 nodes are available.",
    });
    expect(
      toInstanceReason({
        phase: "Pending",
        conditions: [{ type: "PodScheduled", status: "False", reason: "SchedulingGated" }],
      }).reason,
    ).toBe("Provisioning");
    expect(
      toInstanceReason({
        phase: "Failed",
        reason: "Evicted",
        message: "The node was low on resource: memory.",
      }),
    ).toEqual({
      reason: "InstanceLost",
      ready: false,
      message: "The node was low on resource: memory.",
    });
  });

  it("reads the Pod's own status.reason when no container says more", () => {
    expect(
      toInstanceReason({
        phase: "Pending",
        reason: "InsufficientCapacity",
        message: "launch is being retried: RunInstances failed (InsufficientInstanceCapacity)",
        containerStatuses: [
          {
            name: "app",
            image: "x",
            imageID: "",
            restartCount: 0,
            ready: false,
            state: { waiting: { reason: "ContainerCreating" } },
          },
        ],
      }),
    ).toEqual({
      reason: "InsufficientCapacity",
      ready: false,
      message: "launch is being retried: RunInstances failed (InsufficientInstanceCapacity).",
    });
    expect(toInstanceReason({ phase: "Pending", reason: "InvalidPodSpec" }).reason).toBe(
      "InvalidSpec",
    );
    expect(toInstanceReason({ phase: "Pending", reason: "QuotaExceeded" }).reason).toBe(
      "QuotaExceeded",
    );
    // EC2 refused the launch for the provider's own configuration (an AMI, a subnet): the
    // operator's to fix, so platform blocked, not the customer's ConfigurationError.
    expect(
      toInstanceReason({
        phase: "Pending",
        reason: "InvalidConfiguration",
        message: "launch is being retried: RunInstances failed (InvalidAMIID.NotFound).",
      }).reason,
    ).toBe("PlatformMisconfigured");
    // Every refusal the provider writes before launch (Failed at once, with the refusal's code as
    // the reason and a message naming the field) is a rejected spec, never "starting".
    for (const reason of [
      "InvalidPod",
      "SecretInUserData",
      "UnsupportedEnvSource",
      "UnsupportedVolume",
      "UnsupportedField",
      "UserDataTooLarge",
      "InstanceTypeNotAllowed",
    ]) {
      const found = toInstanceReason({
        phase: "Failed",
        reason,
        message: `spec.containers[app]: refused by ${reason}`,
      });
      expect({ reason, found }).toEqual({
        reason,
        found: {
          reason: "InvalidSpec",
          ready: false,
          message: `spec.containers[app]: refused by ${reason}.`,
        },
      });
    }
    expect(toInstanceReason({ phase: "Failed", reason: "Evicted" }).reason).toBe("InstanceLost");
    // Past activeDeadlineSeconds: the customer's deadline, while its containers stop and after
    // (killed by the stop: not a crash); a container that failed on its own still says so.
    const deadline = (state: Record<string, unknown>) =>
      toInstanceReason({
        ...status([{ ready: false, state }]),
        phase: "Failed",
        reason: "DeadlineExceeded",
        message: "Pod was active on the node longer than the specified deadline",
      });
    for (const state of [
      { running: {} },
      { terminated: { exitCode: 137, reason: "Error" } },
      { terminated: { exitCode: 143, reason: "Error" } },
    ]) {
      expect(deadline(state)).toEqual({
        reason: "ConfigurationError",
        ready: false,
        message: "Pod was active on the node longer than the specified deadline.",
      });
    }
    expect(deadline({ terminated: { exitCode: 1, reason: "Error" } }).reason).toBe(
      "InstanceCrashing",
    );
    // A reason that is not a failure never hides what the containers say.
    expect(
      toInstanceReason({ ...status([{ ready: true, state: { running: {} } }]), reason: "Ready" })
        .reason,
    ).toBe("Ready");
  });

  it("is total: arbitrary JSON gives one of INSTANCE_REASONS", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const result = toInstanceReason(value);
        expect(INSTANCE_REASONS).toContain(result.reason);
        expect(result.message).toBeTypeOf("string");
        expect(result.ready).toBeTypeOf("boolean");
        toInstanceReason({ status: value, spec: value });
        toInstanceReason({ containerStatuses: [value], conditions: [value] });
      }),
      { numRuns: 300 },
    );
  });
});

describe("toInstanceReason on a Pod whose instance state is unknown", () => {
  const unreadable = {
    "nebula:report": "v1 seq=9 chunks=1 sha256=0000000000000000",
    "nebula:report:1": "x",
  };

  it("says Unknown for an unreadable report on a live instance, never Starting", () => {
    const state = toInstanceState(ec2("running", { tags: unreadable }), { now: NOW });
    const p = pod("Always");
    const result = toInstanceReason({ ...p, status: toPodStatus(p, state, { now: NOW }) });
    expect(result.reason).toBe("Unknown");
    expect(result.message).toMatch(/^the exit report of instance i-0abc could not be read: /);
  });

  it("says Unknown for phase Unknown without a reason", () => {
    expect(
      toInstanceReason(status([{ state: { running: {} } }], { phase: "Unknown" })).reason,
    ).toBe("Unknown");
  });

  it("lets a crash the last readable report showed outrank Unknown", () => {
    const previous = toInstanceState(
      ec2("running", { report: report(3, false, [crashLooping(3)]) }),
      {
        now: NOW,
      },
    );
    const state = toInstanceState(ec2("running", { tags: unreadable }), { now: NOW, previous });
    expect(state.kind).toBe("Unknown");
    const p = pod("Always");
    expect(toInstanceReason({ ...p, status: toPodStatus(p, state, { now: NOW }) }).reason).toBe(
      "InstanceCrashing",
    );
  });

  it("says Unknown for a status it cannot read", () => {
    expect(toInstanceReason("not a status")).toMatchObject({
      reason: "Unknown",
      message: "the instance's status could not be read.",
    });
  });
});

describe("toInstanceReason on our own Pod statuses", () => {
  const mapped = (
    rep: ReturnType<typeof report> | undefined,
    ec2State = "running",
    code?: string,
  ) => {
    const state = toInstanceState(
      ec2State === "absent"
        ? undefined
        : ec2(ec2State, { ...(rep ? { report: rep } : {}), ...(code ? { code } : {}) }),
      { now: NOW },
    );
    const p = pod("Always");
    return toInstanceReason({ ...p, status: toPodStatus(p, state, { now: NOW }) });
  };

  it.each([
    ["crash loop", report(3, false, [crashLooping(3)]), "running", undefined, "InstanceCrashing"],
    ["running", report(1, false, [running()]), "running", undefined, "Ready"],
    [
      "OOM",
      report(2, true, [exited(137, "app", { reason: "OOMKilled" })]),
      "stopped",
      "Client.InstanceInitiatedShutdown",
      "OutOfMemory",
    ],
    [
      "image",
      report(1, false, [
        { name: "app", init: false, state: "waiting", restarts: 0, reason: "ErrImagePull" },
      ]),
      "running",
      undefined,
      "ImageUnavailable",
    ],
    ["spot, no report", undefined, "stopped", "Server.SpotInstanceTermination", "InstanceLost"],
    [
      "capacity, no report",
      undefined,
      "terminated",
      "Server.InsufficientInstanceCapacity",
      "InsufficientCapacity",
    ],
    ["volume limit", undefined, "terminated", "Client.VolumeLimitExceeded", "QuotaExceeded"],
    ["gone", undefined, "absent", undefined, "InstanceLost"],
    ["pending", undefined, "pending", undefined, "Provisioning"],
    [
      "done",
      report(9, true, [exited(0)]),
      "stopped",
      "Client.InstanceInitiatedShutdown",
      "Completed",
    ],
  ] as const)("%s → %s", (_name, rep, ec2State, code, reason) => {
    expect(mapped(rep, ec2State, code).reason).toBe(reason);
  });

  it("carries the termination message through the report, the Pod status and back", () => {
    const rep = report(3, true, [exited(1, "app", { messageB64: b64("cannot reach db:5432") })]);
    expect(mapped(rep, "stopped", "Client.InstanceInitiatedShutdown").message).toBe(
      'container "app" exited with code 1 and the message "cannot reach db:5432".',
    );
  });
});

describe("toInstanceReason on an Instance object", () => {
  it("reads the failure reason from its Ready condition", () => {
    const instance = {
      apiVersion: "compute.nebula.dev/v1alpha1",
      kind: "Instance",
      status: {
        conditions: [
          { type: "Programmed", status: "True", reason: "Programmed" },
          {
            type: "Ready",
            status: "False",
            reason: "ImageUnavailable",
            message: 'container "app" could not pull its image "x".',
          },
        ],
      },
    };
    expect(toInstanceReason(instance)).toEqual({
      reason: "ImageUnavailable",
      ready: false,
      message: 'container "app" could not pull its image "x".',
    });
    expect(
      toInstanceReason({ conditions: [{ type: "Ready", status: "True", reason: "Ready" }] }),
    ).toEqual({ reason: "Ready", ready: true, message: "the instance reports Ready." });
  });
});

describe("toInstanceReason: availability survives a restart (the stability window)", () => {
  const startedAt = "2026-11-30T05:59:58Z";
  const at = (iso: string) => new Date(iso);
  /** Restarted 3 times, running and ready (the kubelet's view) since `startedAt`. */
  const runningAgain = (extra: Partial<V1ContainerStatus> = {}) =>
    status([
      {
        restartCount: 3,
        ready: true,
        started: true,
        state: { running: { startedAt: at(startedAt) } },
        lastState: {
          terminated: {
            exitCode: 1,
            reason: "Error",
            startedAt: at("2026-11-30T05:59:20Z"),
            finishedAt: at("2026-11-30T05:59:22Z"),
          },
        },
        ...extra,
      },
    ]);
  const backingOff = status([
    {
      restartCount: 3,
      state: { waiting: { reason: "CrashLoopBackOff", message: "back-off 40s" } },
      lastState: { terminated: { exitCode: 1, reason: "Error" } },
    },
  ]);
  const crashing =
    'container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.';

  it("counts a ready container that restarted 2 s ago as crashing, with the back-off's own sentence", () => {
    const result = toInstanceReason(runningAgain(), { now: NOW });
    expect(result).toEqual({
      reason: "InstanceCrashing",
      ready: false,
      message: crashing,
      recheckAt: at("2026-11-30T06:09:58Z"),
    });
    // Between two restarts the crash loop reads exactly as during the back-off.
    expect(toInstanceReason(backingOff, { now: NOW })).toEqual({
      reason: "InstanceCrashing",
      ready: false,
      message: crashing,
    });
  });

  it("holds it for the whole window, then gives it back: ready, with no recheck", () => {
    const start = Date.parse(startedAt);
    for (const seconds of [0, 1, 60, 300, 599, 599.999]) {
      const r = toInstanceReason(runningAgain(), { now: new Date(start + seconds * 1000) });
      expect([r.reason, r.ready, r.message]).toEqual(["InstanceCrashing", false, crashing]);
    }
    for (const seconds of [600, 601, 86_400 * 3]) {
      expect(toInstanceReason(runningAgain(), { now: new Date(start + seconds * 1000) })).toEqual({
        reason: "Ready",
        ready: true,
        message: 'container "app" is running and ready.',
      });
    }
  });

  it("takes the window from the options, and states it in the sentence", () => {
    const r = toInstanceReason(runningAgain(), { now: NOW, stabilityWindowSeconds: 30 });
    expect(r.recheckAt).toEqual(at("2026-11-30T06:00:28Z"));
    expect(r.message).toContain("without staying up for 30 seconds.");
    expect(
      toInstanceReason(runningAgain(), {
        now: at("2026-11-30T06:00:28Z"),
        stabilityWindowSeconds: 30,
      }).ready,
    ).toBe(true);
    // 0: no window; a bad value: the default.
    expect(toInstanceReason(runningAgain(), { now: NOW, stabilityWindowSeconds: 0 }).ready).toBe(
      true,
    );
    for (const bad of [Number.NaN, -1, Number.POSITIVE_INFINITY]) {
      expect(
        toInstanceReason(runningAgain(), { now: NOW, stabilityWindowSeconds: bad }).recheckAt,
      ).toEqual(at("2026-11-30T06:09:58Z"));
    }
  });

  it("without now (or with an invalid date) applies no window: the kubelet's ready stands", () => {
    expect(toInstanceReason(runningAgain()).ready).toBe(true);
    expect(toInstanceReason(runningAgain(), { now: new Date(Number.NaN) }).ready).toBe(true);
  });

  it("measures from the last exit when the current run's start is unknown; no time, no window", () => {
    const noStart = runningAgain({ state: { running: {} } });
    const r = toInstanceReason(noStart, { now: NOW });
    expect(r).toMatchObject({ reason: "InstanceCrashing", ready: false });
    expect(r.recheckAt).toEqual(at("2026-11-30T06:09:22Z"));
    const noTime = runningAgain({
      state: { running: {} },
      lastState: { terminated: { exitCode: 1, reason: "Error" } },
    });
    expect(toInstanceReason(noTime, { now: NOW }).ready).toBe(true);
    // Times as the API server sends them (strings) read the same as client-node's Dates.
    const strings = JSON.parse(JSON.stringify(runningAgain()));
    expect(toInstanceReason(strings, { now: NOW })).toEqual(
      toInstanceReason(runningAgain(), { now: NOW }),
    );
  });

  it("never holds a container that has not restarted", () => {
    expect(toInstanceReason(runningAgain({ restartCount: 0 }), { now: NOW })).toMatchObject({
      reason: "Ready",
      ready: true,
    });
  });

  it("says OutOfMemory for a container running again after an OOM kill, and not ready", () => {
    const r = toInstanceReason(
      runningAgain({
        lastState: {
          terminated: { exitCode: 137, reason: "OOMKilled", finishedAt: at(startedAt) },
        },
      }),
      { now: NOW },
    );
    expect(r).toMatchObject({ reason: "OutOfMemory", ready: false });
  });

  it("says InstanceCrashing, not Starting, for a restarted container not ready yet", () => {
    const r = toInstanceReason(runningAgain({ ready: false }), { now: NOW });
    expect(r).toMatchObject({ reason: "InstanceCrashing", ready: false, message: crashing });
  });

  it("holds a restarted native sidecar too, and rechecks at the earliest window end", () => {
    const pod = {
      ...runningAgain(),
      initContainerStatuses: [
        {
          name: "proxy",
          image: "registry.example/proxy:1",
          restartCount: 1,
          ready: true,
          state: { running: { startedAt: "2026-11-30T05:55:00Z" } },
          lastState: { terminated: { exitCode: 2, reason: "Error" } },
        },
      ],
    };
    const r = toInstanceReason(pod, { now: NOW });
    expect(r.ready).toBe(false);
    expect(r.recheckAt).toEqual(at("2026-11-30T06:05:00Z"));
    expect(r.message).toContain('init container "proxy" has exited and restarted 1 time');
  });

  it("reads our own Pod statuses (report → Pod status → reason) through the window", () => {
    const p = pod("Always");
    const rep = report(4, false, [
      {
        ...running("app", 2),
        startedAt: "2026-11-30T05:59:50Z",
        last: {
          exitCode: 1,
          reason: "Error",
          startedAt: "2026-11-30T05:59:30Z",
          finishedAt: "2026-11-30T05:59:32Z",
        },
      },
    ]);
    const podStatus = toPodStatus(
      p,
      toInstanceState(ec2("running", { report: rep }), { now: NOW }),
      {
        now: NOW,
      },
    );
    // The Pod's own Ready is the kubelet's: the container runs and is ready.
    expect(podStatus.containerStatuses?.[0]?.ready).toBe(true);
    expect(podStatus.conditions?.find((c) => c.type === "Ready")?.status).toBe("True");
    const reason = (now: Date) => toInstanceReason({ ...p, status: podStatus }, { now });
    expect(reason(NOW)).toMatchObject({
      reason: "InstanceCrashing",
      ready: false,
      message:
        'container "app" has exited and restarted 2 times without staying up for 10 minutes. Its last exit was with code 1.',
      recheckAt: at("2026-11-30T06:09:50Z"),
    });
    expect(reason(at("2026-11-30T06:09:50Z"))).toMatchObject({ reason: "Ready", ready: true });
  });

  it("gives a held container the sentence of its back-off, whatever its count and exit", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10_000 }),
        fc.integer({ min: 0, max: 255 }),
        fc.integer({ min: 0, max: 599_999 }),
        (restartCount, exitCode, ageMs) => {
          const last = { terminated: { exitCode, reason: exitCode === 0 ? "Completed" : "Error" } };
          const now = new Date(Date.parse(startedAt) + ageMs);
          const held = toInstanceReason(runningAgain({ restartCount, lastState: last }), { now });
          const waiting = toInstanceReason(
            status([
              { restartCount, state: { waiting: { reason: "CrashLoopBackOff" } }, lastState: last },
            ]),
            { now },
          );
          expect(held.ready).toBe(false);
          expect(held.reason).toBe("InstanceCrashing");
          expect(held.message).toBe(waiting.message);
        },
      ),
    );
  });
});
