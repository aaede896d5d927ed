export {
  isEngineWrite,
  type ProcessInfo,
  processes,
  sparedPids,
} from "./engine.js";
export type { GuestPhase, PhaseChange, ShutdownOrigin, UnitState } from "./guest.js";
export {
  buildTestImage,
  ensureGuestImages,
  GUEST_BUSYBOX_ALIASES,
  GUEST_BUSYBOX_IMAGE,
  GUEST_OOMKILL_IMAGE,
  GUEST_PAUSE_ALIASES,
  GUEST_PAUSE_IMAGE,
  type GuestImages,
  type TestImageFile,
  type TestImageSpec,
} from "./images.js";
export {
  type InstanceHostGuest,
  type InstanceHosts,
  type InstanceHostsOptions,
  NEBULA_CLUSTER_TAG,
  NEBULA_POD_UID_TAG,
  NEBULA_POOL_TAG,
  startInstanceHosts,
} from "./simulator.js";
