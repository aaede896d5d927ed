import { describe, expect, it } from "vitest";
import { TestPeerError } from "./errors.js";
import { spawnPeer, waitUntil } from "./process.js";

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// These spawn real processes: allow for a loaded machine.
describe("spawnPeer", { timeout: 30_000 }, () => {
  it("keeps the output tail and stops the whole process group, grandchildren included", async () => {
    const peer = spawnPeer({
      name: "shell",
      command: "/bin/sh",
      args: ["-c", "echo started; sleep 300 & echo child=$!; wait"],
    });
    await waitUntil(async () => /child=\d+/.test(peer.outputTail()), {
      what: "the child pid",
      timeoutMs: 10_000,
      process: peer,
    });
    const grandchild = Number(/child=(\d+)/.exec(peer.outputTail())?.[1]);
    expect(peer.outputTail()).toContain("started");
    expect(alive(grandchild)).toBe(true);

    await peer.stop();
    expect(peer.hasExited()).toBe(true);
    await expect(peer.exited).resolves.toBe("SIGTERM");
    await waitUntil(async () => !alive(grandchild), {
      what: "the grandchild to go",
      timeoutMs: 5_000,
    });
  });

  it("escalates to SIGKILL when the peer ignores SIGTERM", async () => {
    const peer = spawnPeer({
      name: "stubborn",
      command: "/bin/sh",
      args: ["-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"],
    });
    await waitUntil(async () => peer.outputTail().includes("ready"), {
      what: "ready",
      timeoutMs: 10_000,
      process: peer,
    });
    await peer.stop(200);
    await expect(peer.exited).resolves.toBe("SIGKILL");
  });

  it("reports a command that cannot be spawned as an exited peer", async () => {
    const peer = spawnPeer({ name: "missing", command: "/nonexistent/peer", args: [] });
    await expect(peer.exited).resolves.toBe("spawn-error");
    expect(peer.outputTail()).toContain("ENOENT");
    await peer.stop();
  });
});

describe("waitUntil", { timeout: 30_000 }, () => {
  it("fails with StartFailed and the output when the process exits first", async () => {
    const peer = spawnPeer({
      name: "quitter",
      command: "/bin/sh",
      args: ["-c", "echo bye; exit 3"],
    });
    const error = await waitUntil(async () => false, {
      what: "never",
      timeoutMs: 10_000,
      process: peer,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TestPeerError);
    expect((error as TestPeerError).code).toBe("StartFailed");
    expect((error as TestPeerError).message).toContain("bye");
    await expect(peer.exited).resolves.toBe(3);
  });

  it("fails with NotReady, keeping the check's last error as cause, when time runs out", async () => {
    const cause = new Error("connection refused");
    const error = await waitUntil(
      async () => {
        throw cause;
      },
      { what: "a peer that never answers", timeoutMs: 50, intervalMs: 10 },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TestPeerError);
    expect((error as TestPeerError).code).toBe("NotReady");
    expect((error as TestPeerError).cause).toBe(cause);
  });

  it("resolves as soon as the check holds", async () => {
    let calls = 0;
    await waitUntil(async () => ++calls === 3, {
      what: "three calls",
      timeoutMs: 10_000,
      intervalMs: 1,
    });
    expect(calls).toBe(3);
  });
});
