// @nebula/virtual-node/host: what a Pod's host needs from the API server, read (or requested) by the
// virtual node for a provider that delivers it to the Pod's machine: the ConfigMaps, Secrets and
// Services of the Pod (`readSources`), its bound service-account tokens (`requestToken`) and its
// ServiceAccount's annotations (`readServiceAccount`: the AWS role of IRSA), and what the hosts'
// service proxy needs (`serviceProxy`: the API server's CA, tokens bound to the Node); and where a
// Pod's host agent listens (`HostAgents`, implemented by the provider: the kubelet API relays
// `kubectl exec`, `attach`, `port-forward` to it).
export { podSourceReader } from "../pod-sources.js";
export {
  podServiceAccountReader,
  podTokenRequester,
  serviceProxyAccess,
} from "../pod-tokens.js";
export type { HostAgentLocation, HostAgents } from "../stream-relay.js";
