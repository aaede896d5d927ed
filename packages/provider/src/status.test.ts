import { toInstanceState } from "@nebula/state-mapping";
import { describe, expect, it } from "vitest";
import { ProviderError } from "./errors.js";
import {
  CREATE_CONTAINER_CONFIG_ERROR,
  configErrorStatus,
  EC2_UNAVAILABLE_REASON,
  isTerminalStatus,
  LAUNCHED_CONDITION,
  podStatus,
} from "./status.js";
import { testPod } from "./testing/fixtures.js";

const now = new Date("2026-11-30T06:00:00Z");
const pod = testPod("web", "00000000-0000-4000-8000-000000000001");
const pending = toInstanceState(undefined, { now, launchedAt: now });
const lost = toInstanceState(
  { InstanceId: "i-0123456789abcdef0", State: { Name: "stopped" } },
  { now, consoleOutput: "boot log without a report" },
);

describe("podStatus", () => {
  it("shows a launch being retried on a Pending Pod", () => {
    const status = podStatus({
      pod,
      state: pending,
      now,
      launchError: new ProviderError("InsufficientCapacity", "no m7i.large in eu-west-1a"),
    });
    expect(status.phase).toBe("Pending");
    expect(status.reason).toBe("InsufficientCapacity");
    expect(status.message).toBe("launch is being retried: no m7i.large in eu-west-1a");
  });

  it("marks a live Pod not ready during an EC2 outage, and leaves a terminal one alone", () => {
    const outage = podStatus({ pod, state: pending, now, ec2Unavailable: "EC2 is down" });
    const ready = outage.conditions?.find((c) => c.type === "Ready");
    expect(ready).toMatchObject({
      status: "False",
      reason: EC2_UNAVAILABLE_REASON,
      message: "EC2 is down",
    });
    const finished = podStatus({ pod, state: lost, now, ec2Unavailable: "EC2 is down" });
    expect(isTerminalStatus(finished)).toBe(true);
    expect(finished.phase).toBe("Failed");
    expect(finished.conditions?.some((c) => c.reason === EC2_UNAVAILABLE_REASON)).toBe(false);
  });
});

describe("configErrorStatus", () => {
  it("holds every container waiting with CreateContainerConfigError; an unchanged world gives the same status", () => {
    const withInit = {
      ...pod,
      spec: {
        ...pod.spec,
        containers: pod.spec?.containers ?? [],
        initContainers: [{ name: "init", image: "busybox" }],
      },
    };
    const first = configErrorStatus(withInit, 'secret "db" not found', now);
    expect(first.phase).toBe("Pending");
    for (const c of [...(first.initContainerStatuses ?? []), ...(first.containerStatuses ?? [])]) {
      expect(c.state).toEqual({
        waiting: { reason: CREATE_CONTAINER_CONFIG_ERROR, message: 'secret "db" not found' },
      });
      expect(c.ready).toBe(false);
    }
    expect(first.conditions?.find((c) => c.type === "Ready")?.status).toBe("False");
    expect(first.conditions?.find((c) => c.type === "ContainersReady")?.status).toBe("False");
    expect(first.conditions?.find((c) => c.type === LAUNCHED_CONDITION)).toMatchObject({
      status: "False",
      reason: CREATE_CONTAINER_CONFIG_ERROR,
      message: 'secret "db" not found',
    });
    const later = new Date(now.getTime() + 60_000);
    const stored = JSON.parse(JSON.stringify(first));
    const again = configErrorStatus(
      { ...withInit, status: stored },
      'secret "db" not found',
      later,
    );
    expect(JSON.stringify(again)).toBe(JSON.stringify(stored));
  });
});
