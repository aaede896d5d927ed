/**
 * Closing the simulator while a guest is about to start: nothing of the guest may start after
 * the close began. (A CI run of the demo once found a guest's supervisor alive after Ctrl-C: a
 * boot that finished while the guests were being destroyed started its units after the kill.)
 * And closing with containers left: they are removed by ID, and a `podman ps` that fails makes
 * `close()` fail rather than pass for want of a listing.
 */
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { EC2Client } from "@aws-sdk/client-ec2";
import { afterAll, beforeAll, expect, it } from "vitest";
import { MOTO_CREDENTIALS, type Moto, startMoto } from "../moto.js";
import { launch, processesMatching } from "../testing/guests.js";
import {
  type BrokenContainer,
  brokenContainer,
  containerExists,
  netnsOf,
  removeStrayNetns,
} from "../testing/podman.js";
import { listContainers, trackedContainerIds } from "./containers.js";
import { GUEST_PAUSE_IMAGE } from "./images.js";
import { dockerShim } from "./shims.js";
import { startInstanceHosts } from "./simulator.js";

const run = promisify(execFile);

let moto: Moto;

beforeAll(async () => {
  moto = await startMoto();
});

afterAll(async () => {
  await moto?.stop();
});

it("a boot that completes while the simulator closes starts nothing: no guest process outlives close()", async () => {
  let openGate: () => void = () => {};
  const gate = new Promise<void>((resolve) => {
    openGate = resolve;
  });
  const hosts = await startInstanceHosts({
    ec2Endpoint: moto.endpoint,
    region: moto.region,
    bootDelayMs: 100,
    beforeBoot: () => gate,
  });
  const ec2 = new EC2Client({
    endpoint: hosts.ec2Endpoint,
    region: moto.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
  const marker = `nebula-close-race-${randomUUID()}`;
  try {
    const id = await launch(ec2, `#!/bin/bash\nexec -a ${marker} sleep 600\n`, {
      cluster: "close-test",
      podUid: "pod-close-race",
    });
    // Booting; once the boot delay has passed, the guest waits at the gate.
    await hosts.waitForPhase(id, "booting");
    await new Promise((r) => setTimeout(r, 500));
    expect(hosts.guest(id)?.phase).toBe("booting");
    const closing = hosts.close();
    openGate(); // the boot completes while the guest is being destroyed
    await closing;
  } finally {
    openGate();
    ec2.destroy();
    await hosts.close();
  }
  // Give a late spawn the time to show itself.
  await new Promise((r) => setTimeout(r, 1_000));
  expect(processesMatching(marker)).toEqual([]);
});

// Both the guest and the test make containers that break podman ps (see testing/podman.ts), for
// the few seconds the test takes.
it("close() removes a guest's broken Pod sandbox and its app by ID, and fails while podman ps cannot rule out another leftover", async () => {
  const hosts = await startInstanceHosts({
    ec2Endpoint: moto.endpoint,
    region: moto.region,
    bootDelayMs: 100,
  });
  const ec2 = new EC2Client({
    endpoint: hosts.ec2Endpoint,
    region: moto.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
  const outside = mkdtempSync(join(tmpdir(), "nebula-close-broken-"));
  let stray: BrokenContainer | undefined;
  const namespaces: string[] = [];
  try {
    const id = await launch(
      ec2,
      [
        "#!/bin/bash",
        "set -e",
        // The guest's Pod sandbox and an app container that joined it, in a mount namespace
        // of the guest's own where /run/netns is private.
        "unshare --mount --propagation private -- bash -ec '",
        `  id=$(docker run -d --name sandbox --network=bridge ${GUEST_PAUSE_IMAGE})`,
        '  docker run -d --name app --network="container:$id" busybox sleep 600',
        "'",
      ].join("\n"),
      { cluster: "close-test", podUid: "pod-close-leftovers" },
    );
    const guest = await hosts.waitForPhase(id, "running");
    for (let tries = 0; guest.userDataExit !== 0; tries++) {
      expect(tries, guest.console()).toBeLessThan(600);
      await new Promise((r) => setTimeout(r, 100));
    }
    const ids = trackedContainerIds(join(hosts.workDir, "containers"), id);
    expect(ids).toHaveLength(2);
    for (const container of ids) namespaces.push(await netnsOf(container));
    const listed = await listContainers("/usr/sbin/runc", `nebula-sim.guest=${id}`);
    expect(listed.ok ? "listed" : listed.error).toMatch(/unknown FS magic/);
    const runId = (
      await run("podman", [
        ...["inspect", "--format", '{{index .Config.Labels "nebula-sim.run"}}'],
        ids[0] ?? "",
      ])
    ).stdout.trim();

    // One more of the run's, made outside the simulator: its ID is recorded nowhere the
    // simulator looks, so only podman ps could find it, and podman ps fails.
    const docker = join(outside, "docker");
    writeFileSync(
      docker,
      dockerShim({
        instanceId: "i-outside",
        runId,
        stateDir: join(outside, "state"),
        containersDir: join(outside, "containers"),
        runtime: "/usr/sbin/runc",
        nofile: "",
        nproc: "",
        network: "host",
      }),
    );
    chmodSync(docker, 0o755);
    stray = await brokenContainer(docker);
    namespaces.push(stray.netns);

    await expect(hosts.close()).rejects.toMatchObject({
      code: "ContainersLeft",
      message: expect.stringMatching(/podman ps failed.*unknown FS magic/s),
    });
    for (const container of ids) expect(await containerExists(container)).toBe(false);
    expect(await containerExists(stray.id)).toBe(true);
  } finally {
    ec2.destroy();
    if (stray !== undefined) await run("podman", ["rm", "-f", "-t", "0", "-i", stray.id]);
    for (const netns of namespaces) removeStrayNetns(netns);
    rmSync(outside, { recursive: true, force: true });
    await hosts.close();
  }
});
