import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  disproveOwnership,
  disprovePoolHost,
  isPoolToken,
  type OwnershipRules,
  POOL_TOKEN_PREFIX,
} from "./ownership.js";
import type { ObservedInstance } from "./poll.js";

const PROFILE = "arn:aws:iam::123456789012:instance-profile/nebula-host";
const POD = "6f1c2a8e-0b7d-4c55-9d0e-1f2a3b4c5d6e";

function rules(assigned: Record<string, string> = {}): OwnershipRules {
  return {
    clusterName: "prod",
    nodeName: "nebula",
    instanceProfile: "nebula-host",
    clientToken: true,
    assignedInstance: (uid) => assigned[uid],
  };
}

function poolHost(tags: Record<string, string> = {}, token = `${POOL_TOKEN_PREFIX}abc`) {
  return {
    instanceId: "i-0123456789abcdef0",
    state: "stopped",
    stateReasonCode: undefined,
    stateReasonMessage: undefined,
    launchTime: undefined,
    podUid: tags["nebula:pod-uid"],
    podKey: undefined,
    orphanedAt: undefined,
    privateIp: undefined,
    publicIp: undefined,
    instanceType: "m7i.large",
    availabilityZone: undefined,
    subnetId: undefined,
    capacityType: "on-demand",
    clientToken: token,
    instanceProfileArn: PROFILE,
    tags: new Map(
      Object.entries({
        "nebula:cluster": "prod",
        "nebula:node": "nebula",
        "nebula:pool": "small",
        ...tags,
      }),
    ),
    raw: {},
  } satisfies ObservedInstance;
}

describe("warm-pool hosts", () => {
  it("an idle pool host is the pool's, and no Pod's", () => {
    expect(disprovePoolHost(poolHost(), rules())).toBeUndefined();
    expect(disproveOwnership(poolHost(), undefined, rules())).toMatch(/no nebula:pod-uid tag/);
  });

  it("a taken host is the Pod's only when the ledger assigned it to that Pod", () => {
    const taken = poolHost({ "nebula:pod-uid": POD });
    expect(disproveOwnership(taken, POD, rules({ [POD]: taken.instanceId }))).toBeUndefined();
    expect(disproveOwnership(taken, POD, rules())).toMatch(/did not assign/);
    expect(disproveOwnership(taken, POD, rules({ [POD]: "i-0000000000000000f" }))).toMatch(
      /did not assign/,
    );
    // Any Pod's (the leak collector's question): its pool launch is enough.
    expect(disproveOwnership(taken, undefined, rules())).toBeUndefined();
  });

  it("a Pod UID tag written on a pool host does not make it that Pod's", () => {
    fc.assert(
      fc.property(fc.uuid(), (uid) => {
        const forged = poolHost({ "nebula:pod-uid": uid });
        expect(disproveOwnership(forged, uid, rules())).toBeDefined();
      }),
    );
  });

  it("no pool host without the pool's launch token, tags, profile", () => {
    expect(disprovePoolHost(poolHost({}, POD), rules())).toMatch(/not a pool launch/);
    const untagged = poolHost();
    untagged.tags.delete("nebula:pool");
    expect(disprovePoolHost(untagged, rules())).toMatch(/no nebula:pool tag/);
    expect(disprovePoolHost(poolHost({ "nebula:node": "other" }), rules())).toMatch(/nebula:node/);
    expect(
      disprovePoolHost(
        { ...poolHost(), instanceProfileArn: "arn:aws:iam::1:instance-profile/x" },
        rules(),
      ),
    ).toMatch(/instance profile/);
  });

  it("isPoolToken is total", () => {
    fc.assert(fc.property(fc.anything(), (x) => typeof isPoolToken(x) === "boolean"));
    expect(isPoolToken(`${POOL_TOKEN_PREFIX}1`)).toBe(true);
    expect(isPoolToken(POD)).toBe(false);
  });
});
