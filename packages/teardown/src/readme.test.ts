/** Runs the example at the top of README.md (with `console.log` captured). */
import { expect, it } from "vitest";
import {
  MemoryStore,
  type PodTeardownObservation,
  podTeardown,
  TeardownExecutor,
} from "./index.js";

it("the README example runs and prints what the README says", async () => {
  const lines: string[] = [];
  const console = {
    log: (...args: unknown[]) => {
      lines.push(args.map(String).join(" "));
    },
  };

  // --- README example, verbatim from here ---
  const store = new MemoryStore();
  store.put("default/web-0", { metadata: { name: "web-0" } }, "pod-uid-1");

  let instance: "running" | "stopped" | "terminated" = "running";
  let now = Date.parse("2026-11-30T06:00:00Z");

  const executor = new TeardownExecutor({
    teardown: podTeardown,
    store,
    handlers: {
      StopInstance: () => {
        instance = "stopped";
      },
      TerminateInstance: () => {
        instance = "terminated";
      },
      DeleteAuxiliary: ({ object }) => console.log("delete", object.kind, object.name),
      DeletePod: ({ uid, gracePeriodSeconds }) => {
        console.log("delete Pod", uid, "grace", gracePeriodSeconds);
        store.remove("default/web-0");
      },
    },
    observe: (): PodTeardownObservation => ({
      instance,
      pod: store.get("default/web-0") ? "present" : "absent",
    }),
    now: () => now,
    onEvent: (e) => {
      if (e.type === "transition")
        console.log(e.transition.from, "→", e.transition.to, e.transition.reason);
    },
  });

  await executor.request("default/web-0", {
    cause: "DeletionRequested",
    params: {
      namespace: "default",
      name: "web-0",
      podUid: "pod-uid-1",
      instanceId: "i-0123456789abcdef0",
      gracePeriodSeconds: 30,
      auxiliaries: [{ apiVersion: "v1", kind: "Secret", namespace: "default", name: "web-0-env" }],
    },
  });
  while ((await executor.tick("default/web-0")).status !== "absent") now += 1_000;
  // --- end of the README example ---

  expect(lines).toEqual([
    "null → stopping Started",
    "stopping → terminating Done",
    "terminating → releasing Done",
    "delete Secret web-0-env",
    "releasing → removing Done",
    "delete Pod pod-uid-1 grace 0",
  ]);
});
