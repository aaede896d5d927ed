export {
  type ObserveInput,
  TeardownError,
  type TeardownEvent,
  TeardownExecutor,
  type TickResult,
} from "./executor.js";
export {
  decodeLaunch,
  LaunchEntry,
  type LedgerEntry,
  MemoryPodLedger,
  type PodLedger,
} from "./ledger.js";
export { defineTeardown, type JsonValue, type SubjectPatch } from "./machine.js";
export {
  AuxiliaryObject,
  type InstanceObservation,
  type PodTeardownEffect,
  type PodTeardownObservation,
  PodTeardownParams,
  type PodTeardownParamsInput,
  podTeardown,
} from "./pod.js";
export { COMPLETE_PHASE, decodeRecord, encodeRecord } from "./record.js";
export {
  MemoryStore,
  type StoreSnapshot,
  type StoreWrite,
  type TeardownStore,
  type WriteOutcome,
} from "./store.js";
