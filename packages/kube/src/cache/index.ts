// @nebula/kube/cache: informers (list + watch into a local cache).
export {
  type CustomObjectInformerOptions,
  customObjectInformer,
  Informer,
  type InformerEvent,
  type InformerHandler,
  type InformerOptions,
  objectKey,
  type PodInformerOptions,
  podInformer,
  type Store,
} from "./informer.js";
export { withSignal } from "./request-options.js";
