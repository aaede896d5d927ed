// @nebula/virtual-node/host: what a Pod's host needs from the API server, read (or requested) by the
// virtual node for a provider that delivers it to the Pod's machine: the ConfigMaps, Secrets and
// Services of the Pod (`readSources`), its bound service-account tokens (`requestToken`) and its
// ServiceAccount's annotations (`readServiceAccount`: the AWS role of IRSA).
export { podSourceReader } from "../pod-sources.js";
export { podServiceAccountReader, podTokenRequester } from "../pod-tokens.js";
