// @nebula/kube/controller: the controller loop and the manager that runs controllers.
export { abortableSleep } from "../sleep.js";
export {
  Controller,
  type ControllerOptions,
  type KeyMapper,
  type ReconcileResult,
  type Reconciler,
} from "./controller.js";
export {
  Manager,
  type ManagerExit,
  type ManagerLeaderElection,
  type ManagerOptions,
  type Runnable,
} from "./manager.js";
