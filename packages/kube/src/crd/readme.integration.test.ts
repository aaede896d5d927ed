/**
 * Runs the README's "Status, Events and CRDs" example against the real API server (kubeconfig
 * from @nebula/test-peers) and checks what its comments say.
 */
import { hostname } from "node:os";
import { CustomObjectsApi, dumpYaml, EventsV1Api } from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, expect, it } from "vitest";
import { z } from "zod";
import { EventRecorder } from "../events/index.js";
import { StatusWriter } from "../status/index.js";
import { buildCrd, installCrd } from "./index.js";

const kc = useTestPeers().controlPlane.kubeConfig();

afterAll(async () => {
  const objects = kc.makeApiClient(CustomObjectsApi);
  await objects
    .deleteNamespacedCustomObject({
      group: "example.nebula.dev",
      version: "v1alpha1",
      namespace: "default",
      plural: "jobs",
      name: "hello",
    })
    .catch(() => undefined);
});

it("the README example installs a CRD, writes a status once and aggregates an Event", async () => {
  const printed: unknown[] = [];
  const log = (value: unknown) => printed.push(value);

  // --- README example from here (after loading the kubeconfig; console.log → log) ---
  const Condition = z.object({
    type: z.string(),
    status: z.enum(["True", "False", "Unknown"]),
    reason: z.string().optional(),
    lastTransitionTime: z.iso.datetime(),
  });
  const crd = buildCrd({
    group: "example.nebula.dev",
    kind: "Job",
    plural: "jobs",
    versions: [
      {
        name: "v1alpha1",
        spec: z.object({
          image: z.string().min(1),
          parallelism: z.number().int().min(0).default(1),
          port: z.union([z.number().int(), z.string()]).optional(), // x-kubernetes-int-or-string
        }),
        status: z.object({
          phase: z.enum(["Pending", "Running", "Done"]).optional(),
          conditions: z.array(Condition).optional(), // a list-map keyed by type
        }),
        printerColumns: [{ name: "Phase", type: "string", jsonPath: ".status.phase" }],
      },
    ],
  });
  log(dumpYaml(crd).split("\n").length > 30); // true: a manifest for `kubectl apply -f`
  await installCrd(kc, crd); // server-side apply, then wait (60 s at most) for Established

  const job = await kc.makeApiClient(CustomObjectsApi).createNamespacedCustomObject({
    group: "example.nebula.dev",
    version: "v1alpha1",
    namespace: "default",
    plural: "jobs",
    body: {
      apiVersion: "example.nebula.dev/v1alpha1",
      kind: "Job",
      metadata: { name: "hello" },
      spec: { image: "busybox" },
    },
  });
  log(job.spec); // { image: "busybox", parallelism: 1 }: the default applied by the API server

  const writer = new StatusWriter(kc, {
    resource: { group: "example.nebula.dev", version: "v1alpha1", plural: "jobs", kind: "Job" },
    fieldManager: "example-operator",
  });
  const running = () => ({
    phase: "Running",
    conditions: [
      { type: "Ready", status: "True", reason: "Started", lastTransitionTime: new Date() },
    ],
  });
  const ref = { namespace: "default", name: "hello" };
  log((await writer.write(ref, running())).outcome); // "written"
  log((await writer.write(ref, running())).outcome); // "unchanged": same status, no request sent

  const recorder = new EventRecorder(kc, {
    reportingController: "nebula.dev/example",
    reportingInstance: hostname(),
  });
  const regarding = {
    apiVersion: "example.nebula.dev/v1alpha1",
    kind: "Job",
    namespace: "default",
    name: "hello",
    uid: job.metadata.uid,
  };
  for (let i = 0; i < 3; i++) {
    // "created", then "aggregated" twice
    log(
      await recorder.record({
        regarding,
        type: "Warning",
        reason: "BackOff",
        action: "Restart",
        note: "exit 1",
      }),
    );
  }
  await recorder.close(); // writes the series (count 3) and stops its timer
  // --- end of the README example ---

  expect(printed).toEqual([
    true,
    { image: "busybox", parallelism: 1 },
    "written",
    "unchanged",
    "created",
    "aggregated",
    "aggregated",
  ]);
  const events = await kc.makeApiClient(EventsV1Api).listNamespacedEvent({ namespace: "default" });
  const mine = events.items.filter((e) => e.regarding?.uid === job.metadata.uid);
  expect(mine.map((e) => [e.reason, e.series?.count])).toEqual([["BackOff", 3]]);
});
