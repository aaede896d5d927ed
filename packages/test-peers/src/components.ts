/**
 * Flags for kube-controller-manager and kube-scheduler run against the test control plane: the
 * pure part of starting them (no I/O), so it can be unit-tested.
 *
 * @packageDocumentation
 */

/**
 * The controllers `startControlPlane({ controllers: true })` runs: what turns Deployments into
 * Pods and cleans up after them, watches node Leases, and keeps ServiceAccounts, Jobs,
 * StatefulSets, DaemonSets and EndpointSlices working. Names as `kube-controller-manager
 * --controllers` takes them (Kubernetes 1.35).
 */
export const DEFAULT_CONTROLLERS: readonly string[] = [
  "deployment-controller",
  "replicaset-controller",
  "garbage-collector-controller",
  "namespace-controller",
  "pod-garbage-collector-controller",
  "node-lifecycle-controller",
  "taint-eviction-controller",
  "serviceaccount-controller",
  "serviceaccount-token-controller",
  "root-ca-certificate-publisher-controller",
  "job-controller",
  "cronjob-controller",
  "ttl-after-finished-controller",
  "statefulset-controller",
  "daemonset-controller",
  "disruption-controller",
  "endpoints-controller",
  "endpointslice-controller",
];

/** The node-monitor grace period used unless a test gives one (kube-controller-manager's default is 50 s). */
export const DEFAULT_NODE_MONITOR_GRACE_SECONDS = 20;

/** The files and ports a component's flags name. */
export interface ComponentPaths {
  /** The component's kubeconfig (its own client certificate). */
  kubeconfig: string;
  /** Its secure port on 127.0.0.1 (`/healthz` there). */
  port: number;
  /** Serving certificate for that port (PEM file). */
  tlsCert: string;
  /** Its private key (PEM file). */
  tlsKey: string;
}

/** What kube-controller-manager's flags need beyond {@link ComponentPaths}. */
export interface ControllerManagerPaths extends ComponentPaths {
  /** The service-account signing key (the apiserver's `--service-account-signing-key-file`). */
  serviceAccountKey: string;
  /** The CA bundle published to Pods (`kube-root-ca.crt`): the apiserver's serving CA. */
  rootCa: string;
  /** CA certificate the CSR signer signs with: the client CA. */
  signingCert: string;
  /** That CA's private key. */
  signingKey: string;
}

/** Which controllers to run: `true` for {@link DEFAULT_CONTROLLERS}, or the names given. */
export function controllerList(option: true | readonly string[]): string[] {
  return option === true ? [...DEFAULT_CONTROLLERS] : [...option];
}

/**
 * kube-controller-manager's flags: its own identity with a service account per controller,
 * leader election off, `/healthz` on a secure loopback port, the node-monitor grace period.
 */
export function controllerManagerArgs(
  paths: ControllerManagerPaths,
  controllers: readonly string[],
  nodeMonitorGraceSeconds: number,
): string[] {
  return [
    `--kubeconfig=${paths.kubeconfig}`,
    `--authentication-kubeconfig=${paths.kubeconfig}`,
    `--authorization-kubeconfig=${paths.kubeconfig}`,
    "--bind-address=127.0.0.1",
    `--secure-port=${paths.port}`,
    `--tls-cert-file=${paths.tlsCert}`,
    `--tls-private-key-file=${paths.tlsKey}`,
    "--leader-elect=false",
    "--use-service-account-credentials=true",
    `--service-account-private-key-file=${paths.serviceAccountKey}`,
    `--root-ca-file=${paths.rootCa}`,
    `--cluster-signing-cert-file=${paths.signingCert}`,
    `--cluster-signing-key-file=${paths.signingKey}`,
    `--controllers=${controllers.join(",")}`,
    // The period must stay below the grace period; 1 s notices a silent node within a second.
    "--node-monitor-period=1s",
    `--node-monitor-grace-period=${nodeMonitorGraceSeconds}s`,
  ];
}

/** kube-scheduler's flags: its own identity, leader election off, `/healthz` on a secure loopback port. */
export function schedulerArgs(paths: ComponentPaths): string[] {
  return [
    `--kubeconfig=${paths.kubeconfig}`,
    `--authentication-kubeconfig=${paths.kubeconfig}`,
    `--authorization-kubeconfig=${paths.kubeconfig}`,
    "--bind-address=127.0.0.1",
    `--secure-port=${paths.port}`,
    `--tls-cert-file=${paths.tlsCert}`,
    `--tls-private-key-file=${paths.tlsKey}`,
    "--leader-elect=false",
  ];
}
