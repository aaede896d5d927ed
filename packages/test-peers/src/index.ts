export { TestPeerError, type TestPeerErrorCode } from "./errors.js";
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
  DEFAULT_ETCD_VERSION,
  DEFAULT_K8S_VERSION,
  DEFAULT_MOTO_VERSION,
} from "./paths.js";
export { freePort } from "./ports.js";
