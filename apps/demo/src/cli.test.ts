import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  DEFAULT_HOST_TIMES,
  DEFAULT_REPLICAS,
  DEFAULT_TIMEOUT_SECONDS,
  parseDemoArgs,
  USAGE,
} from "./cli.js";
import { SCENARIO_IDS } from "./scenarios.js";

describe("parseDemoArgs", () => {
  it("defaults: replicas 6, no keep, no ci, the default deadline", () => {
    expect(parseDemoArgs([])).toEqual({
      kind: "run",
      options: {
        keep: false,
        ci: false,
        replicas: DEFAULT_REPLICAS,
        timeoutSeconds: DEFAULT_TIMEOUT_SECONDS,
        scenarios: SCENARIO_IDS,
        warmRounds: 1,
        warmPods: 3,
        hostTimes: DEFAULT_HOST_TIMES,
      },
    });
  });

  it("reads every flag", () => {
    expect(
      parseDemoArgs([
        "--keep",
        "--ci",
        "--replicas",
        "3",
        "--timeout=120",
        "--only",
        "warm-pool,job-completes",
        "--warm-rounds",
        "4",
        "--warm-pods",
        "2",
        "--host-times",
        "30,12.5,5",
      ]),
    ).toEqual({
      kind: "run",
      options: {
        keep: true,
        ci: true,
        replicas: 3,
        timeoutSeconds: 120,
        scenarios: ["warm-pool", "job-completes"],
        warmRounds: 4,
        warmPods: 2,
        hostTimes: { firstBootMs: 30_000, restartBootMs: 12_500, pullMs: 5_000 },
      },
    });
  });

  it("--help and -h win over everything else", () => {
    expect(parseDemoArgs(["--help"])).toEqual({ kind: "help" });
    expect(parseDemoArgs(["--ci", "-h"])).toEqual({ kind: "help" });
  });

  it.each([
    [["--replicas", "0"], "--replicas"],
    [["--replicas", "31"], "--replicas"],
    [["--replicas", "two"], "--replicas must be a whole number"],
    [["--timeout", "5"], "--timeout"],
    [["--only", "warm-pool,nope"], "--only names no scenario: nope"],
    [["--only", ","], "--only names no scenario"],
    [["--warm-rounds", "0"], "--warm-rounds"],
    [["--warm-pods", "9"], "--warm-pods"],
    [["--host-times", "30,12"], "--host-times must be three numbers"],
    [["--host-times", "30,-1,5"], "--host-times must be three numbers"],
    [["--host-times", "301,1,1"], "--host-times each time is at most 300 seconds"],
    [["--bogus"], "bogus"],
    [["extra"], "extra"],
  ])("refuses %j naming the problem", (argv, fragment) => {
    const parsed = parseDemoArgs(argv);
    expect(parsed.kind).toBe("error");
    expect(parsed.kind === "error" ? parsed.message : "").toContain(fragment);
  });

  it("never throws, whatever the command line", () => {
    fc.assert(
      fc.property(fc.array(fc.string()), (argv) => {
        const parsed = parseDemoArgs(argv);
        expect(["run", "help", "error"]).toContain(parsed.kind);
      }),
    );
  });

  it("the usage names every flag and scenario", () => {
    for (const word of [
      "--replicas",
      "--keep",
      "--ci",
      "--timeout",
      "--only",
      "--warm-rounds",
      "--warm-pods",
      "--host-times",
      "--help",
    ])
      expect(USAGE).toContain(word);
    for (const id of SCENARIO_IDS) expect(USAGE).toContain(id);
  });
});
