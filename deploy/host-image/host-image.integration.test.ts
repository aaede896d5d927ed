/**
 * The host image recipe against what it is for. check.sh runs as the user-data of an instance of
 * the local world (the instance-host simulator: real bash, the guest's docker, systemctl and
 * shutdown), where the host supervisor itself is tested, and must find everything it looks for;
 * on a machine without curl, docker and cloud-init it must name each and fail.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import {
  DescribeInstancesCommand,
  EC2Client,
  RunInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import {
  type InstanceHosts,
  MOTO_CREDENTIALS,
  NEBULA_INSTANCE_PROFILE,
  startInstanceHosts,
} from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const CHECK = fileURLToPath(new URL("./check.sh", import.meta.url));
const CHECK_TEXT = readFileSync(CHECK, "utf8");

const { moto } = useTestPeers();
let hosts: InstanceHosts;
let ec2: EC2Client;

beforeAll(async () => {
  hosts = await startInstanceHosts({
    ec2Endpoint: moto.endpoint,
    region: moto.region,
    bootDelayMs: 200,
  });
  ec2 = new EC2Client({
    endpoint: hosts.ec2Endpoint,
    region: moto.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
}, 300_000);

afterAll(async () => {
  ec2?.destroy();
  await hosts?.close();
});

async function until<T>(what: string, probe: () => T | undefined, ms: number): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const got = probe();
    if (got !== undefined) return got;
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("deploy/host-image/check.sh", () => {
  it("finds every requirement on the local world's instance, run as its user-data", async () => {
    const userData = `#!/bin/bash\nbash -s -- --at-boot <<'NEBULA_HOST_CHECK'\n${CHECK_TEXT}\nNEBULA_HOST_CHECK\n`;
    const launched = await ec2.send(
      new RunInstancesCommand({
        ImageId: "ami-12345678",
        MinCount: 1,
        MaxCount: 1,
        UserData: Buffer.from(userData).toString("base64"),
        IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
        MetadataOptions: { HttpTokens: "required" },
        TagSpecifications: [
          {
            ResourceType: "instance",
            Tags: [
              { Key: "nebula:cluster", Value: "host-image" },
              { Key: "nebula:pod-uid", Value: "check" },
            ],
          },
        ],
      }),
    );
    const id = launched.Instances?.[0]?.InstanceId ?? "";
    expect(id).toMatch(/^i-/);
    try {
      const guest = await until(
        "the user-data's exit",
        () => {
          const g = hosts.guest(id);
          return g !== undefined && typeof g.userDataExit === "number" ? g : undefined;
        },
        120_000,
      );
      const output = readFileSync(guest.userDataLogPath, "utf8");
      expect(output, output).toContain(
        "nebula-host-check: this machine can run Nebula's host supervisor",
      );
      expect(guest.userDataExit, output).toBe(0);
      expect(output).not.toContain("MISSING");
      for (const line of [
        "ok      bash ",
        "ok      GNU date and base64",
        "ok      curl ",
        "ok      iptables and ip6tables",
        "ok      systemd (systemctl, shutdown)",
        "ok      cloud-init (it ran this user-data)",
      ])
        expect(output).toContain(`nebula-host-check: ${line}`);
      // The guest's docker is podman behind the simulator's shim: a server answers, named as such.
      expect(output).toMatch(/nebula-host-check: ok {6}docker CLI, server \d+\.\d+/);
    } finally {
      await ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
      await hosts.waitForPhase(id, ["terminated", "off"], 60_000);
      const state = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
      expect(state.Reservations?.[0]?.Instances?.[0]?.State?.Name).toMatch(
        /terminated|shutting-down/,
      );
    }
  }, 180_000);

  it("names each missing piece with what to do, and fails, on a machine without curl, docker and cloud-init", async () => {
    // A PATH of this machine's own programs, less those three.
    const bin = mkdtempSync(join(tmpdir(), "nebula-host-check-bin-"));
    try {
      const wanted = [
        "bash",
        "base64",
        "cut",
        "date",
        "head",
        "install",
        "mkfifo",
        "od",
        "sha256sum",
        "sleep",
        "stat",
        "tail",
        "tee",
        "timeout",
        "tr",
        "wc",
        "grep",
        "sed",
        "gzip",
        "kill",
        "dmesg",
        "iptables",
        "ip6tables",
        "systemctl",
        "shutdown",
        "awk",
        "sort",
        "printf",
      ];
      const dirs = (process.env.PATH ?? "").split(delimiter);
      for (const name of wanted) {
        const found = (
          await run("bash", [
            "-c",
            `PATH=${JSON.stringify(dirs.join(delimiter))} command -v ${name} || true`,
          ])
        ).stdout.trim();
        if (found.startsWith("/")) symlinkSync(found, join(bin, name));
      }
      const result = await run("bash", [CHECK], { env: { PATH: bin } }).then(
        (r) => ({ code: 0, stdout: r.stdout }),
        (e: { code: number; stdout: string }) => ({ code: e.code, stdout: e.stdout }),
      );
      expect(result.code, result.stdout).toBe(1);
      expect(result.stdout).toContain("MISSING curl: install curl 7.75 or newer");
      expect(result.stdout).toContain("MISSING docker: install Docker Engine 20.10 or newer");
      expect(result.stdout).toContain("MISSING cloud-init: it runs the user-data at boot");
      expect(result.stdout).toContain("nebula-host-check: ok      GNU date and base64");
      expect(result.stdout).toContain("cannot run Nebula's host supervisor yet");
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it("refuses an option it does not know, with the ones it does", async () => {
    const wrong = await run("bash", [CHECK, "--at-build"]).catch(
      (e: { code: number; stderr: string }) => e,
    );
    expect(wrong).toMatchObject({ code: 2 });
    expect((wrong as { stderr: string }).stderr).toContain(
      "unknown option '--at-build' (--at-boot, --help)",
    );
  });
});
