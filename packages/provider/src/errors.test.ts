import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { classifyAwsError, isNotFound, ProviderError, toProviderError } from "./errors.js";

describe("classifyAwsError", () => {
  it.each([
    ["InvalidInstanceID.NotFound", "NotFound"],
    ["RequestLimitExceeded", "Throttled"],
    ["InsufficientInstanceCapacity", "InsufficientCapacity"],
    ["InstanceLimitExceeded", "QuotaExceeded"],
    ["VcpuLimitExceeded", "QuotaExceeded"],
    ["InvalidAMIID.NotFound", "InvalidConfiguration"],
    ["InvalidSubnetID.NotFound", "InvalidConfiguration"],
    ["InvalidGroup.NotFound", "InvalidConfiguration"],
    ["UnauthorizedOperation", "Unauthorized"],
    ["IdempotentParameterMismatch", "IdempotencyMismatch"],
    ["InternalError", "Unavailable"],
    ["ServiceUnavailable", "Unavailable"],
    // SSM, for the Pod parameters.
    ["ParameterNotFound", "NotFound"],
    ["InvalidResourceId", "NotFound"],
    ["ThrottlingException", "Throttled"],
    ["TooManyUpdates", "Throttled"],
    ["ParameterLimitExceeded", "QuotaExceeded"],
    ["InvalidKeyId", "InvalidConfiguration"],
    ["AccessDeniedException", "Unauthorized"],
    ["InternalServerError", "Unavailable"],
  ] as const)("%s is %s", (name, code) => {
    expect(classifyAwsError({ name, message: "x" })).toBe(code);
  });

  it("classifies network errors by their code, and unknown server faults by status", () => {
    expect(
      classifyAwsError(Object.assign(new Error("socket hang up"), { code: "ECONNRESET" })),
    ).toBe("Unavailable");
    expect(classifyAwsError({ name: "Weird", $metadata: { httpStatusCode: 502 } })).toBe(
      "Unavailable",
    );
    expect(classifyAwsError({ name: "Weird", $metadata: { httpStatusCode: 429 } })).toBe(
      "Throttled",
    );
    expect(classifyAwsError({ name: "Weird", $fault: "client" })).toBe("InvalidRequest");
  });

  it("takes a timed-out attempt for a transient fault: Unavailable, retryable", () => {
    // The three timeouts of @smithy/node-http-handler (4.x), as it builds them: the request
    // outliving `requestTimeout` (with `throwOnRequestTimeout`), the connection not opened within
    // `connectionTimeout`, the socket idle past its timeout; the SDK adds `$metadata` after its
    // last attempt.
    const timeouts = [
      Object.assign(
        new Error(
          "@smithy/node-http-handler - [ERROR] a request has exceeded the configured 500 ms requestTimeout.",
        ),
        { name: "TimeoutError", code: "ETIMEDOUT", $metadata: { attempts: 2 } },
      ),
      Object.assign(
        new Error(
          "@smithy/node-http-handler - the request socket did not establish a connection with the server within the configured timeout of 5000 ms.",
        ),
        { name: "TimeoutError" },
      ),
      Object.assign(new Error("the request socket timed out after 900000 ms of inactivity"), {
        name: "TimeoutError",
      }),
      Object.assign(new Error("connect ETIMEDOUT 10.0.0.1:443"), { code: "ETIMEDOUT" }),
    ];
    for (const timeout of timeouts) {
      expect(classifyAwsError(timeout)).toBe("Unavailable");
      const wrapped = toProviderError(timeout, "RunInstances for pod default/web");
      expect(wrapped.code).toBe("Unavailable");
      expect(wrapped.retryable).toBe(true);
      expect(wrapped.cause).toBe(timeout);
    }
  });

  it("classifies the Price List endpoint's refusals and a non-AWS answer (moto has no Price List)", () => {
    expect(classifyAwsError({ name: "AccessDeniedException", $fault: "client" })).toBe(
      "Unauthorized",
    );
    // moto answers an HTML 500 page, which the SDK cannot deserialize.
    const html = Object.assign(new SyntaxError("Unexpected token '<'"), {
      $metadata: { httpStatusCode: 500, attempts: 1 },
    });
    expect(classifyAwsError(html)).toBe("Unavailable");
  });

  it("never throws and always answers a code", () => {
    fc.assert(
      fc.property(fc.anything(), (value) => {
        expect(typeof classifyAwsError(value)).toBe("string");
      }),
    );
  });
});

describe("ProviderError", () => {
  it("keeps the cause and the AWS code, and knows what is retryable", () => {
    const sdk = Object.assign(new Error("Request limit exceeded."), {
      name: "RequestLimitExceeded",
    });
    const error = toProviderError(sdk, "DescribeInstances");
    expect(error).toBeInstanceOf(ProviderError);
    expect(error.code).toBe("Throttled");
    expect(error.awsCode).toBe("RequestLimitExceeded");
    expect(error.cause).toBe(sdk);
    expect(error.retryable).toBe(true);
    expect(error.message).toContain("DescribeInstances failed (RequestLimitExceeded)");
    expect(new ProviderError("InvalidConfiguration", "bad").retryable).toBe(false);
    expect(toProviderError(error, "again")).toBe(error);
    expect(isNotFound({ name: "InvalidInstanceID.NotFound" })).toBe(true);
  });
});
