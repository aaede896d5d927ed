import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { podParameterNames } from "./parameters.js";
import {
  DEFAULT_TOKEN_EXPIRATION_SECONDS,
  podTokenParameterName,
  podTokenParameterValue,
  podTokenRequests,
  tokenPollSeconds,
} from "./tokens.js";

const projected = (...sources: unknown[]) => ({ name: "v", projected: { sources } });

describe("podTokenRequests", () => {
  it("asks one token per distinct audience and lifetime, in order of appearance", () => {
    const pod = {
      spec: {
        volumes: [
          {
            name: "kube-api-access-x1",
            projected: {
              sources: [
                { serviceAccountToken: { expirationSeconds: 3607, path: "token" } },
                { configMap: { name: "kube-root-ca.crt" } },
              ],
            },
          },
          projected({ serviceAccountToken: { audience: "sts.amazonaws.com", path: "t" } }),
          projected({ serviceAccountToken: { expirationSeconds: 3607, path: "again" } }),
        ],
      },
    };
    expect(podTokenRequests(pod)).toEqual([
      { key: "0", subject: "pod", audience: undefined, expirationSeconds: 3607 },
      {
        key: "1",
        subject: "pod",
        audience: "sts.amazonaws.com",
        expirationSeconds: DEFAULT_TOKEN_EXPIRATION_SECONDS,
      },
    ]);
  });

  it("takes a lifetime the API server would refuse as the default", () => {
    for (const expirationSeconds of [59, 599, 600.5, "3600", -1]) {
      const pod = {
        spec: { volumes: [projected({ serviceAccountToken: { expirationSeconds } })] },
      };
      expect(podTokenRequests(pod)[0]?.expirationSeconds).toBe(DEFAULT_TOKEN_EXPIRATION_SECONDS);
    }
  });

  it("asks the service proxy's token last, under key p, unless the Pod uses the host's network", () => {
    const pod = { spec: { volumes: [projected({ serviceAccountToken: { path: "token" } })] } };
    expect(podTokenRequests(pod, { serviceProxy: true })).toEqual([
      { key: "0", subject: "pod", audience: undefined, expirationSeconds: 3600 },
      { key: "p", subject: "serviceProxy", audience: undefined, expirationSeconds: 3600 },
    ]);
    expect(podTokenRequests({ spec: {} }, { serviceProxy: true })).toEqual([
      { key: "p", subject: "serviceProxy", audience: undefined, expirationSeconds: 3600 },
    ]);
    expect(podTokenRequests({ spec: { hostNetwork: true } }, { serviceProxy: true })).toEqual([]);
    expect(podTokenRequests({ spec: {} }, { serviceProxy: false })).toEqual([]);
  });

  it("is total: any value gives a list, never a throw", () => {
    fc.assert(
      fc.property(fc.anything(), (pod) => {
        expect(Array.isArray(podTokenRequests(pod))).toBe(true);
        expect(podTokenRequests(pod, { serviceProxy: true }).length).toBeLessThanOrEqual(1);
        expect(Array.isArray(podTokenRequests({ spec: { volumes: [pod, projected(pod)] } }))).toBe(
          true,
        );
      }),
    );
  });
});

describe("the token parameter", () => {
  it("is one of the Pod's parameter names, so teardown deletes it", () => {
    expect(podParameterNames("prod", "u-1")).toContain(podTokenParameterName("prod", "u-1"));
  });

  it("holds key:token pairs and refuses what is not a compact JWS", () => {
    const jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln-_";
    expect(
      podTokenParameterValue([
        { key: "0", token: jwt },
        { key: "1", token: jwt },
      ]),
    ).toEqual({
      ok: true,
      value: `0:${jwt} 1:${jwt}`,
    });
    for (const token of ["", "a b.c.d", 'x.y"z.w', "x.y.z\n0:evil.a.b", "nodots"]) {
      const result = podTokenParameterValue([{ key: "0", token }]);
      expect(result.ok ? "" : result.error.code).toBe("InvalidPod");
    }
    for (const key of ["0 ", "q", "pp", "1000"]) {
      const bad = podTokenParameterValue([{ key, token: jwt }]);
      expect(bad.ok ? "" : bad.error.code).toBe("InvalidPod");
    }
    expect(podTokenParameterValue([{ key: "p", token: jwt }])).toEqual({
      ok: true,
      value: `p:${jwt}`,
    });
  });

  it("refuses tokens that do not fit one parameter", () => {
    const token = `a.${"b".repeat(2100)}.c`;
    const result = podTokenParameterValue([
      { key: "0", token },
      { key: "1", token },
    ]);
    expect(result.ok ? "" : result.error.code).toBe("SourceTooLarge");
  });

  it("is read by the host every tenth of the shortest lifetime, never more often than a minute", () => {
    expect(
      tokenPollSeconds([
        { key: "0", subject: "pod", audience: undefined, expirationSeconds: 3607 },
      ]),
    ).toBe(360);
    expect(
      tokenPollSeconds([{ key: "0", subject: "pod", audience: undefined, expirationSeconds: 600 }]),
    ).toBe(60);
    expect(tokenPollSeconds([])).toBe(60);
  });
});
