import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { connect, SERVICE_ACCOUNT_DIR } from "./connect.js";
import { KubeError } from "./errors.js";

const kubeconfig = (server: string, namespace?: string) => `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "${server}"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u${namespace ? `, namespace: ${namespace}` : ""}}}]
current-context: x
`;

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "nebula-connect-"));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

function file(name: string, content: string): string {
  const path = join(dir, name);
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, content);
  return path;
}

function inCluster(): { prefix: string; env: Record<string, string> } {
  const prefix = join(dir, "root");
  file(`root${SERVICE_ACCOUNT_DIR}/token`, "sa-token");
  file(`root${SERVICE_ACCOUNT_DIR}/ca.crt`, "");
  file(`root${SERVICE_ACCOUNT_DIR}/namespace`, "nebula-system");
  return { prefix, env: { KUBERNETES_SERVICE_HOST: "10.0.0.1", KUBERNETES_SERVICE_PORT: "443" } };
}

describe("connect", () => {
  it("an explicit kubeconfig wins over everything", () => {
    const flag = file("flag.yaml", kubeconfig("https://flag:6443", "ns1"));
    const cluster = inCluster();
    const home = join(dir, "home");
    file("home/.kube/config", kubeconfig("https://home:6443"));
    const result = connect({
      kubeconfig: flag,
      env: cluster.env,
      inClusterPathPrefix: cluster.prefix,
      homeDir: home,
    });
    expect(result.source).toBe("flag");
    expect(result.namespace).toBe("ns1");
    expect(result.kubeConfig.getCurrentCluster()?.server).toBe("https://flag:6443");
  });

  it("in-cluster comes before $KUBECONFIG and ~/.kube/config", () => {
    const cluster = inCluster();
    const env = { ...cluster.env, KUBECONFIG: file("env.yaml", kubeconfig("https://env:6443")) };
    file("home/.kube/config", kubeconfig("https://home:6443"));
    const result = connect({
      env,
      inClusterPathPrefix: cluster.prefix,
      homeDir: join(dir, "home"),
    });
    expect(result.source).toBe("in-cluster");
    expect(result.namespace).toBe("nebula-system");
    expect(result.kubeConfig.getCurrentCluster()?.server).toBe("https://10.0.0.1:443");
  });

  it("then $KUBECONFIG (missing entries skipped, the rest merged), then ~/.kube/config", () => {
    const a = file("a.yaml", kubeconfig("https://a:6443", "from-a"));
    const env = { KUBECONFIG: [join(dir, "missing.yaml"), a].join(delimiter) };
    file("home/.kube/config", kubeconfig("https://home:6443"));
    const fromEnv = connect({ env, homeDir: join(dir, "home") });
    expect(fromEnv).toMatchObject({ source: "env", path: a, namespace: "from-a" });
    const fromHome = connect({ env: {}, homeDir: join(dir, "home") });
    expect(fromHome.source).toBe("home");
    expect(fromHome.kubeConfig.getCurrentCluster()?.server).toBe("https://home:6443");
  });

  it("fails with one typed error when there is nothing, and another for a broken file", () => {
    const none = () => connect({ env: {}, homeDir: join(dir, "nobody") });
    expect(none).toThrow(KubeError);
    expect(none).toThrow(/no cluster configuration/);
    try {
      none();
    } catch (error) {
      expect((error as KubeError).code).toBe("KubeconfigNotFound");
    }
    expect(() => connect({ kubeconfig: join(dir, "absent.yaml") })).toThrow(
      expect.objectContaining({ code: "KubeconfigNotFound" }),
    );
    const broken = file("broken.yaml", "clusters: [: nope");
    expect(() => connect({ kubeconfig: broken })).toThrow(
      expect.objectContaining({ code: "KubeconfigInvalid" }),
    );
  });
});
