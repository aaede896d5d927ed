/**
 * Request options for the generated client-node APIs that attach an `AbortSignal` to the HTTP
 * request (the generated client sets none, so a request could otherwise wait for undici's own
 * 300 s timeouts).
 *
 * @packageDocumentation
 */
import { Observable, type RequestContext } from "@kubernetes/client-node";

/** Options for any generated API call: the request aborts when `signal` does. */
export function withSignal(signal: AbortSignal) {
  return {
    middleware: [
      {
        pre: (context: RequestContext) => {
          context.setSignal(signal);
          return new Observable(Promise.resolve(context));
        },
        post: <R>(response: R) => new Observable(Promise.resolve(response)),
      },
    ],
    middlewareMergeStrategy: "append" as const,
  };
}
