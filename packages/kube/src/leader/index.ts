// @nebula/kube/leader: Lease leader election.
export {
  type LeaderElectionOptionsInput,
  LeaderElector,
  type LeadershipCallbacks,
  type StoppedLeadingReason,
} from "./leader-elector.js";
