export { type AppImage, buildAppImage, containerLimits, PODMAN_FLAGS } from "./app-image.js";
export { DEFAULT_CONTROLLERS, DEFAULT_NODE_MONITOR_GRACE_SECONDS } from "./components.js";
export {
  CONTROL_PLANE_ADMIN,
  type ControlPlane,
  type ControlPlaneConnection,
  type ControlPlaneInfo,
  type ControlPlaneOptions,
  connectControlPlane,
  KUBELET_CLIENT_USER,
  kubectlPath,
  kubeProxyPath,
  startControlPlane,
} from "./control-plane.js";
export { type ClusterDns, type ClusterDnsOptions, startClusterDns } from "./coredns.js";
export {
  createEc2EventRule,
  EC2_EVENT_PATTERN,
  type Ec2Event,
  type Ec2EventRule,
  type Ec2EventSent,
  type Ec2Events,
  type Ec2EventsOptions,
  type Ec2InstanceState,
  type EventBridgeTarget,
  putEc2Events,
  startEc2Events,
} from "./ec2-events.js";
export {
  type Ec2Behaviour,
  type Ec2Hold,
  type Ec2ProxyCounts,
  type Ec2ProxyHandle,
  type Ec2ProxyOptions,
  startEc2Proxy,
} from "./ec2-proxy.js";
export { TestPeerError, type TestPeerErrorCode } from "./errors.js";
export {
  buildTestImage,
  ensureGuestImages,
  GUEST_BUSYBOX_ALIASES,
  GUEST_BUSYBOX_IMAGE,
  GUEST_OOMKILL_IMAGE,
  GUEST_PAUSE_ALIASES,
  GUEST_PAUSE_IMAGE,
  type GuestImages,
  type GuestPhase,
  type InstanceHostGuest,
  type InstanceHosts,
  type InstanceHostsOptions,
  isEngineWrite,
  NEBULA_CLUSTER_TAG,
  NEBULA_POD_UID_TAG,
  NEBULA_POOL_TAG,
  type PhaseChange,
  type ProcessInfo,
  processes,
  type ShutdownOrigin,
  sparedPids,
  startInstanceHosts,
  type TestImageFile,
  type TestImageSpec,
  type UnitState,
} from "./host/index.js";
export {
  type MetricsServer,
  type MetricsServerOptions,
  startMetricsServer,
} from "./metrics-server.js";
export {
  connectMoto,
  MOTO_CREDENTIALS,
  type Moto,
  type MotoConnection,
  type MotoInfo,
  type MotoInstanceProfile,
  type MotoOptions,
  NEBULA_INSTANCE_PROFILE,
  startMoto,
} from "./moto.js";
export {
  cacheDir,
  corednsPath,
  DEFAULT_COREDNS_VERSION,
  DEFAULT_ETCD_VERSION,
  DEFAULT_HELM_VERSION,
  DEFAULT_K8S_VERSION,
  DEFAULT_METRICS_SERVER_VERSION,
  DEFAULT_MOTO_VERSION,
  helmPath,
  metricsServerPath,
} from "./paths.js";
export {
  startTestPeers,
  type TestPeers,
  type TestPeersInfo,
  type TestPeersOptions,
} from "./peers.js";
export { freePort, machineAddresses } from "./ports.js";
