/**
 * Test helper: the API server as the kubelet handler's unit tests see it, for the calls it makes
 * (the Pod list, `TokenReview`, `SubjectAccessReview`): every bearer token names its user, and
 * the user "admin" may do anything. The real API server is the integration tests'.
 *
 * @packageDocumentation
 */
import type { V1Pod, V1SubjectAccessReview, V1TokenReview } from "@kubernetes/client-node";
import type { KubeletHandlerOptions } from "../kubelet-handler.js";

/** The handler's `core`, `authentication` and `authorization` answering as above, listing `pods`. */
export function reviewingApis(
  pods: readonly V1Pod[],
): Pick<KubeletHandlerOptions, "core" | "authentication" | "authorization"> {
  return {
    core: { listPodForAllNamespaces: async () => ({ items: [...pods] }) },
    authentication: {
      createTokenReview: async ({ body }: { body: V1TokenReview }): Promise<V1TokenReview> => ({
        ...body,
        status: { authenticated: true, user: { username: body.spec.token ?? "", groups: [] } },
      }),
    },
    authorization: {
      createSubjectAccessReview: async ({
        body,
      }: {
        body: V1SubjectAccessReview;
      }): Promise<V1SubjectAccessReview> => ({
        ...body,
        status: { allowed: body.spec.user === "admin" },
      }),
    },
  };
}
