// @nebula/kube/queue: the work queue and its rate limiters.
export {
  BucketRateLimiter,
  defaultControllerRateLimiter,
  ExponentialFailureRateLimiter,
  MaxOfRateLimiter,
  type RateLimiter,
} from "./rate-limiter.js";
export { WorkQueue, type WorkQueueOptions } from "./work-queue.js";
