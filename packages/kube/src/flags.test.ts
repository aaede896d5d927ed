import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { defineCli, runCli } from "./flags.js";

const cli = defineCli({
  name: "demo",
  summary: "A demo controller.",
  flags: {
    "node-name": {
      type: "string",
      schema: z
        .string()
        .regex(/^[a-z]+$/, "must be lowercase letters")
        .default("node"),
      placeholder: "<name>",
      description: "the node (default: node)",
    },
    dry: { type: "boolean", schema: z.boolean().default(false), description: "change nothing" },
  },
});

describe("defineCli", () => {
  it("applies the shared defaults and the app's own", () => {
    expect(cli.parse([])).toEqual({
      ok: true,
      flags: {
        "node-name": "node",
        dry: false,
        "log-level": "info",
        "leader-elect": false,
        "metrics-bind-address": ":8080",
        "health-probe-bind-address": ":8081",
        help: false,
        version: false,
      },
    });
  });

  it("reads every shared flag", () => {
    const result = cli.parse([
      "--kubeconfig=/tmp/kc",
      "--log-level",
      "debug",
      "--leader-elect",
      "--leader-election-namespace",
      "nebula-system",
      "--metrics-bind-address",
      "127.0.0.1:9090",
      "--health-probe-bind-address",
      "0",
      "--node-name",
      "vn",
    ]);
    expect(result).toMatchObject({
      ok: true,
      flags: {
        kubeconfig: "/tmp/kc",
        "log-level": "debug",
        "leader-elect": true,
        "leader-election-namespace": "nebula-system",
        "metrics-bind-address": "127.0.0.1:9090",
        "health-probe-bind-address": "0",
        "node-name": "vn",
      },
    });
  });

  it("names the option that is wrong", () => {
    expect(cli.parse(["--node-name", "X1"])).toEqual({
      ok: false,
      message: "--node-name: must be lowercase letters",
    });
    expect(cli.parse(["--metrics-bind-address", "localhost"])).toEqual({
      ok: false,
      message: "--metrics-bind-address: must be host:port, :port, or 0 to disable",
    });
    expect(cli.parse(["--log-level", "loud"])).toMatchObject({
      ok: false,
      message: expect.stringMatching(/^--log-level: /),
    });
    expect(cli.parse(["--bogus"])).toMatchObject({
      ok: false,
      message: expect.stringContaining("--bogus"),
    });
    expect(cli.parse(["stray"])).toMatchObject({ ok: false });
  });

  it("never throws, whatever the arguments", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.string(),
            fc.constantFrom(
              "--log-level",
              "--leader-elect",
              "-h",
              "--node-name",
              "--metrics-bind-address",
            ),
          ),
        ),
        (argv) => {
          const result = cli.parse(argv);
          expect(typeof result.ok).toBe("boolean");
          if (!result.ok) expect(result.message.length).toBeGreaterThan(0);
        },
      ),
    );
  });

  it("lists the app's flags, then the shared ones, then help and version", () => {
    const lines = cli.usage.split("\n");
    expect(lines[0]).toBe("Usage: demo [options]");
    const options = lines.filter((l) => l.startsWith("  -")).map((l) => l.trim().split(" ")[0]);
    expect(options).toEqual([
      "--node-name",
      "--dry",
      "--kubeconfig",
      "--log-level",
      "--leader-elect",
      "--leader-election-namespace",
      "--metrics-bind-address",
      "--health-probe-bind-address",
      "-h,",
      "-v,",
    ]);
  });

  it("lets an app override a shared flag", () => {
    const elect = defineCli({
      name: "x",
      summary: "x",
      flags: {
        "leader-elect": {
          type: "boolean",
          schema: z.boolean().default(true),
          description: "on by default here",
        },
      },
    });
    expect(elect.parse([])).toMatchObject({ ok: true, flags: { "leader-elect": true } });
  });
});

describe("runCli", () => {
  const io = () => {
    const out: string[] = [];
    const err: string[] = [];
    return {
      out,
      err,
      options: {
        version: "1.2.3",
        stdout: { write: (t: string) => out.push(t) },
        stderr: { write: (t: string) => err.push(t) },
      },
    };
  };

  it("prints help and version with exit code 0 without running main", async () => {
    const help = io();
    let ran = false;
    const main = () => {
      ran = true;
      return 0;
    };
    expect(await runCli(cli, ["--help"], help.options, main)).toBe(0);
    expect(help.out.join("")).toBe(cli.usage);
    const version = io();
    expect(await runCli(cli, ["-v"], version.options, main)).toBe(0);
    expect(version.out.join("")).toBe("1.2.3\n");
    expect(ran).toBe(false);
  });

  it("bad input: message naming the option and the usage on stderr, exit code 2", async () => {
    const bad = io();
    expect(await runCli(cli, ["--log-level", "loud"], bad.options, () => 0)).toBe(2);
    expect(bad.err.join("")).toMatch(/^demo: --log-level: .*\n\nUsage: demo/s);
  });

  it("a flag required to run: missing is bad input (2), but --help and --version need it not", async () => {
    const withConfig = defineCli({
      name: "needs",
      summary: "Needs a configuration.",
      flags: {
        config: {
          type: "string",
          schema: z.string().min(1).optional(),
          description: "configuration file (required to run)",
          requiredToRun: true,
        },
      },
    });
    let ran = 0;
    const main = () => {
      ran++;
      return 0;
    };
    const missing = io();
    expect(await runCli(withConfig, [], missing.options, main)).toBe(2);
    expect(missing.err.join("")).toMatch(/^needs: --config: is required\n\nUsage: needs/s);
    expect(await runCli(withConfig, ["--help"], io().options, main)).toBe(0);
    expect(await runCli(withConfig, ["--version"], io().options, main)).toBe(0);
    expect(ran).toBe(0);
    expect(await runCli(withConfig, ["--config", "c.json"], io().options, main)).toBe(0);
    expect(ran).toBe(1);
  });

  it("runs main with the flags and returns its code; a failing main gives 1", async () => {
    const ok = io();
    expect(
      await runCli(cli, ["--node-name", "ab"], ok.options, (flags) =>
        flags["node-name"] === "ab" ? 7 : 0,
      ),
    ).toBe(7);
    const failing = io();
    expect(
      await runCli(cli, [], failing.options, async () => {
        throw new Error("boom");
      }),
    ).toBe(1);
    expect(failing.err.join("")).toBe("demo: boom\n");
  });
});
