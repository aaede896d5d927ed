// @nebula/virtual-node/kubelet: the kubelet API a virtual node serves (`kubectl logs`,
// `/stats/summary`, `/metrics/resource`, `/pods`, `/runningpods/`): the request handler with the
// kubelet's authentication and authorization, its HTTPS listener and settings, and what a provider
// implements for logs and usage.
export type {
  ContainerLogSource,
  ContainerRunRef,
  ContainerUsageSample,
  LogLine,
  LogReadOptions,
  PodUsage,
  UsageSource,
} from "../kubelet-api.js";
export {
  apiServerClientCa,
  createKubeletHandler,
  type KubeletHandler,
  type KubeletHandlerOptions,
} from "../kubelet-handler.js";
export {
  type KubeletApiConfig,
  KubeletApiConfigSchema,
  type KubeletApiServerOptions,
  kubeletApiServer,
} from "../kubelet-server.js";
