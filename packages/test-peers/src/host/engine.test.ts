import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isEngineWrite, type ProcessInfo, parseStat, sparedPids } from "./engine.js";

const P = ["podman", "--runtime", "/usr/sbin/runc", "--cgroup-manager=cgroupfs"];

describe("isEngineWrite", () => {
  it.each([
    [[...P, "start", "abc"], true],
    [[...P, "create", "--name", "x", "busybox"], true],
    [[...P, "rm", "-f", "-t", "0", "abc"], true],
    [["/usr/bin/podman", "container", "kill", "abc"], true],
    [["podman", "--root", "/tmp/r", "--runroot", "/tmp/s", "run", "-d", "busybox"], true],
    [[...P, "wait", "abc"], false],
    [[...P, "inspect", "--format", "{{.State.Pid}}", "abc"], false],
    [[...P, "logs", "-f", "abc"], false],
    // A value flag's value is not the subcommand.
    [["podman", "--runtime", "start", "inspect", "x"], false],
    [["/usr/sbin/runc", "start", "abc"], false],
    [["bash", "/tmp/docker", "start", "abc"], false],
    [["podman"], false],
    [[], false],
  ])("%j → %s", (argv, expected) => {
    expect(isEngineWrite(argv)).toBe(expected);
  });

  it("answers every command line without throwing", () => {
    fc.assert(
      fc.property(fc.array(fc.string()), (argv) => typeof isEngineWrite(argv) === "boolean"),
    );
  });
});

function proc(pid: number, ppid: number, argv: string[], state = "S"): ProcessInfo {
  return { pid, ppid, pgrp: 100, state, argv };
}

describe("sparedPids", () => {
  it("spares engine writes and what runs below them, nothing else", () => {
    const members = [
      proc(100, 1, ["bash", "/user-data"]),
      proc(101, 100, ["bash", "/usr/local/bin/docker", "start", "abc"]),
      proc(102, 101, [...P, "start", "abc"]),
      proc(103, 102, ["/usr/sbin/runc", "start", "abc"]),
      proc(104, 103, ["sleep", "1"]),
      proc(105, 100, [...P, "wait", "abc"]),
      proc(106, 102, ["/usr/lib/cni/bridge"], "Z"),
    ];
    expect([...sparedPids(members)].sort()).toEqual([102, 103, 104]);
  });

  it("is total over any process table, cycles included", () => {
    const info = fc.record({
      pid: fc.integer({ min: 1, max: 20 }),
      ppid: fc.integer({ min: 0, max: 20 }),
      pgrp: fc.constant(1),
      state: fc.constantFrom("S", "R", "Z", "D"),
      argv: fc.oneof(
        fc.array(fc.string()),
        fc.constant([...P, "start", "x"]),
        fc.constant(["sleep", "1"]),
      ),
    });
    fc.assert(
      fc.property(fc.array(info, { maxLength: 30 }), (members) => {
        const spared = sparedPids(members);
        for (const pid of spared) expect(members.some((p) => p.pid === pid)).toBe(true);
        for (const p of members)
          if (isEngineWrite(p.argv) && p.state !== "Z") expect(spared.has(p.pid)).toBe(true);
      }),
    );
  });
});

describe("parseStat", () => {
  it("reads state, parent and group past a command name with spaces and parentheses", () => {
    expect(parseStat("4242 (my (odd) name) S 17 4242 4242 0 -1 4194560 ...")).toEqual({
      state: "S",
      ppid: 17,
      pgrp: 4242,
    });
  });

  it("answers undefined for text that is not a stat line", () => {
    expect(parseStat("")).toBeUndefined();
    expect(parseStat("12 (x) S")).toBeUndefined();
  });
});
