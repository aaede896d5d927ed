import { expect, it } from "vitest";
import { rollupWorkload, rollupWorkloadDeployment, statusChanged } from "./index.js";

// The README's first example, statement for statement (with `console.log` captured); the
// printed lines are the ones the README shows.
it("prints what the README says it prints", () => {
  const lines: string[] = [];
  const console = { log: (...parts: unknown[]) => lines.push(parts.join(" ")) };

  const input = {
    desiredReplicas: 3,
    generation: 4,
    instances: [
      { name: "web-0", ready: true },
      {
        name: "web-1",
        ready: false,
        reason: "InstanceCrashing",
        message:
          'container "app" has exited and restarted 3 times without staying up for 5 minutes. Its last exit was with code 1.',
      },
      { name: "web-2", ready: false, reason: "ImageUnavailable" },
    ],
  };
  const status = rollupWorkloadDeployment(input, { now: new Date("2026-11-30T05:00:00Z") });
  for (const c of status.conditions) console.log(c.type, c.status, c.reason, "|", c.message);

  // The next reconcile sees the same world an hour later: nothing to write.
  const next = rollupWorkloadDeployment(input, {
    now: new Date("2026-11-30T06:00:00Z"),
    previous: status.conditions,
  });
  console.log(statusChanged(status, next), next.conditions[0]?.lastTransitionTime);

  // The Workload above it, with this deployment as its only placement.
  const workload = rollupWorkload(
    { generation: 2, placements: [{ ...status, name: "eu-west" }] },
    { now: new Date("2026-11-30T05:00:00Z") },
  );
  console.log(workload.conditions[0]?.message);

  expect(lines).toEqual([
    "Available True ReadyInstanceFound | 1/3 instances are ready; 1 is repeatedly exiting and restarting; 1 could not pull its image",
    "ReplicasReady False InstanceCrashing | 1/3 instances are ready; 1 is repeatedly exiting and restarting; 1 could not pull its image",
    'Degraded True InstanceCrashing | 1 of 3 instances is repeatedly exiting and restarting (web-1): container "app" has exited and restarted 3 times without staying up for 5 minutes. Its last exit was with code 1. 1 of 3 instances could not pull its image (web-2).',
    "Progressing False NoInstancePending | No instance is being provisioned or started.",
    "false 2026-11-30T05:00:00Z",
    "1/3 instances are ready; 1 is repeatedly exiting and restarting; 1 could not pull its image",
  ]);
});
