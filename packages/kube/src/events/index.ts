// @nebula/kube/events: the Kubernetes Event recorder.
export {
  type EventInput,
  EventRecorder,
  type EventRecorderOptionsInput,
} from "./event-recorder.js";
