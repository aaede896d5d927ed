import { describe, expect, it } from "vitest";
import {
  controllerList,
  controllerManagerArgs,
  DEFAULT_CONTROLLERS,
  schedulerArgs,
} from "./components.js";
import { withOverrides } from "./control-plane.js";

const paths = {
  kubeconfig: "/d/pki/cm.kubeconfig",
  port: 40001,
  tlsCert: "/d/pki/apiserver.crt",
  tlsKey: "/d/pki/apiserver.key",
  serviceAccountKey: "/d/pki/sa-signer.key",
  rootCa: "/d/pki/serving-ca.crt",
  signingCert: "/d/pki/client-ca.crt",
  signingKey: "/d/pki/client-ca.key",
};

const flag = (args: readonly string[], name: string): string | undefined =>
  args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);

describe("controllerList", () => {
  it("expands true to the defaults and keeps a given list as it is", () => {
    expect(controllerList(true)).toEqual([...DEFAULT_CONTROLLERS]);
    expect(controllerList(["deployment", "-ttl"])).toEqual(["deployment", "-ttl"]);
    expect(DEFAULT_CONTROLLERS).toContain("garbage-collector-controller");
    expect(DEFAULT_CONTROLLERS).toContain("node-lifecycle-controller");
  });
});

describe("controllerManagerArgs", () => {
  it("runs with its own identity, service-account credentials, no leader election, on loopback", () => {
    const args = controllerManagerArgs(paths, ["deployment-controller", "job-controller"], 7);
    expect(flag(args, "kubeconfig")).toBe(paths.kubeconfig);
    expect(flag(args, "use-service-account-credentials")).toBe("true");
    expect(flag(args, "service-account-private-key-file")).toBe(paths.serviceAccountKey);
    expect(flag(args, "root-ca-file")).toBe(paths.rootCa);
    expect(flag(args, "leader-elect")).toBe("false");
    expect(flag(args, "bind-address")).toBe("127.0.0.1");
    expect(flag(args, "secure-port")).toBe("40001");
    expect(flag(args, "controllers")).toBe("deployment-controller,job-controller");
    expect(flag(args, "node-monitor-grace-period")).toBe("7s");
  });

  it("lets a test replace any flag", () => {
    const args = withOverrides(controllerManagerArgs(paths, ["*"], 20), [
      "--node-monitor-period=2s",
      "--v=4",
    ]);
    expect(args.filter((a) => a.startsWith("--node-monitor-period="))).toEqual([
      "--node-monitor-period=2s",
    ]);
    expect(args).toContain("--v=4");
  });
});

describe("schedulerArgs", () => {
  it("runs with its own kubeconfig, no leader election, on loopback", () => {
    const args = schedulerArgs(paths);
    expect(flag(args, "kubeconfig")).toBe(paths.kubeconfig);
    expect(flag(args, "leader-elect")).toBe("false");
    expect(flag(args, "bind-address")).toBe("127.0.0.1");
    expect(flag(args, "tls-cert-file")).toBe(paths.tlsCert);
  });
});
