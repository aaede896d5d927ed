import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeCa } from "./certs.js";
import {
  type ControlPlaneInfo,
  connectControlPlane,
  startControlPlane,
  withOverrides,
} from "./control-plane.js";
import { TestPeerError } from "./errors.js";
import { connectMoto, NEBULA_INSTANCE_PROFILE, startMoto } from "./moto.js";

async function codeOf(action: () => unknown): Promise<string | undefined> {
  try {
    await action();
    return undefined;
  } catch (error) {
    return error instanceof TestPeerError ? error.code : `not a TestPeerError: ${String(error)}`;
  }
}

describe("connectControlPlane (no server needed)", () => {
  let dir: string;
  let info: ControlPlaneInfo;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "nebula-connect-test-"));
    const serving = await makeCa(dir, "serving-ca", "serving");
    await makeCa(dir, "client-ca", "client");
    info = {
      server: "https://127.0.0.1:6443",
      kubeconfig: "",
      caCert: serving.cert,
      certDir: dir,
      version: "v1.35.4",
    };
    info.kubeconfig = connectControlPlane({ ...info, kubeconfig: "x" }).kubeconfigFor("admin", [
      "system:masters",
    ]);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("hands client-node a kubeconfig it loads as is", () => {
    const kc = connectControlPlane(info).kubeConfig();
    expect(kc.getCurrentCluster()?.server).toBe("https://127.0.0.1:6443");
    expect(kc.getCurrentUser()?.name).toBe("admin");
    expect(kc.getCurrentUser()?.certData).toBeTruthy();
  });

  it("mints a client for another user", () => {
    const kc = connectControlPlane(info).clientFor("system:node:vnode-1", ["system:nodes"]);
    expect(kc.getCurrentUser()?.name).toBe("system:node:vnode-1");
    const cert = Buffer.from(kc.getCurrentUser()?.certData ?? "", "base64").toString("utf8");
    expect(cert).toContain("BEGIN CERTIFICATE");
  });

  it("refuses malformed info and names with InvalidOptions", async () => {
    expect(await codeOf(() => connectControlPlane({ ...info, server: "not a url" }))).toBe(
      "InvalidOptions",
    );
    const cp = connectControlPlane(info);
    expect(await codeOf(() => cp.clientFor(""))).toBe("InvalidOptions");
    expect(await codeOf(() => cp.clientFor("alice\nbob"))).toBe("InvalidOptions");
    expect(await codeOf(() => cp.clientFor("alice", [" padded "]))).toBe("InvalidOptions");
  });

  it("says NotProvided when the control plane's certificates are gone", async () => {
    const cp = connectControlPlane({ ...info, certDir: join(dir, "gone") });
    expect(await codeOf(() => cp.clientFor("alice"))).toBe("NotProvided");
  });
});

describe("connectMoto (no server needed)", () => {
  const info = {
    endpoint: "http://127.0.0.1:5000",
    region: "eu-west-1",
    instanceProfiles: [
      {
        name: NEBULA_INSTANCE_PROFILE,
        arn: "arn:aws:iam::123456789012:instance-profile/nebula-host",
      },
    ],
  };

  it("points the SDK and child processes at the endpoint", async () => {
    const moto = connectMoto(info);
    expect(moto.env).toMatchObject({
      AWS_ENDPOINT_URL_EC2: "http://127.0.0.1:5000",
      AWS_REGION: "eu-west-1",
    });
    expect(await moto.ec2().config.region()).toBe("eu-west-1");
    expect(moto.info()).toEqual(info);
  });

  it("refuses malformed info with InvalidOptions", async () => {
    expect(await codeOf(() => connectMoto({ ...info, endpoint: "" }))).toBe("InvalidOptions");
  });
});

describe("missing binaries and bad options", () => {
  it("startMoto says BinaryMissing for a moto_server that is not there", async () => {
    expect(await codeOf(() => startMoto({ motoServer: "/nonexistent/moto_server" }))).toBe(
      "BinaryMissing",
    );
  });

  it("startControlPlane says BinaryMissing for binaries that are not there", async () => {
    expect(
      await codeOf(() =>
        startControlPlane({
          kubeApiserver: "/nonexistent/kube-apiserver",
          etcd: "/nonexistent/etcd",
        }),
      ),
    ).toBe("BinaryMissing");
    expect(
      await codeOf(() =>
        startControlPlane({
          controllers: true,
          scheduler: true,
          kubeControllerManager: "/nonexistent/kube-controller-manager",
          kubeScheduler: "/nonexistent/kube-scheduler",
        }),
      ),
    ).toBe("BinaryMissing");
  });

  it("both say InvalidOptions for options that do not parse", async () => {
    expect(await codeOf(() => startMoto({ region: "Mars" }))).toBe("InvalidOptions");
    expect(await codeOf(() => startControlPlane({ apiserverArgs: ["no-dashes"] }))).toBe(
      "InvalidOptions",
    );
    expect(await codeOf(() => startControlPlane({ controllers: ["Deployment Controller"] }))).toBe(
      "InvalidOptions",
    );
    expect(await codeOf(() => startControlPlane({ controllers: [] }))).toBe("InvalidOptions");
    expect(
      await codeOf(() =>
        startControlPlane({ controllers: true, nodeMonitorGracePeriodSeconds: 1 }),
      ),
    ).toBe("InvalidOptions");
  });
});

describe("withOverrides", () => {
  it("replaces defaults by flag name and appends new flags", () => {
    expect(
      withOverrides(
        ["--authorization-mode=RBAC", "--allow-privileged=true"],
        ["--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction"],
      ),
    ).toEqual([
      "--allow-privileged=true",
      "--authorization-mode=Node,RBAC",
      "--enable-admission-plugins=NodeRestriction",
    ]);
  });
});
