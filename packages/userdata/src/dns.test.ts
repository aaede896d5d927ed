import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DNS_CONFIG_FORMING, dnsFlags, type PodDnsFields, podDns } from "./dns.js";

const CLUSTER = { clusterDNS: ["10.96.0.10"], clusterDomain: "cluster.local" };
const NONE = { clusterDNS: [], clusterDomain: "cluster.local" };
const resolver = (r: ReturnType<typeof podDns>) => {
  if ("error" in r) throw new Error(r.error.message);
  return r.resolver;
};

describe("podDns, the kubelet's resolver for a Pod", () => {
  it("ClusterFirst (the default): the cluster DNS, <ns>.svc, svc, the domain, ndots:5", () => {
    expect(resolver(podDns("shop", {}, false, CLUSTER))).toEqual({
      nameservers: ["10.96.0.10"],
      searches: ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"],
      options: ["ndots:5"],
    });
    expect(
      resolver(podDns("shop", { dnsPolicy: "ClusterFirstWithHostNet" }, false, CLUSTER)),
    ).toEqual(resolver(podDns("shop", {}, false, CLUSTER)));
  });

  it("dnsConfig merged as the kubelet's appendDNSConfig: appended, duplicates dropped, options by name", () => {
    const spec: PodDnsFields = {
      dnsConfig: {
        nameservers: ["10.0.0.2", "10.96.0.10"],
        searches: ["corp.example", "svc.cluster.local"],
        options: [{ name: "ndots", value: "2" }, { name: "edns0" }],
      },
    };
    expect(resolver(podDns("shop", spec, false, CLUSTER))).toEqual({
      nameservers: ["10.96.0.10", "10.0.0.2"],
      searches: ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"],
      options: ["ndots:2", "edns0"],
    });
  });

  it("None: exactly dnsConfig, with or without cluster DNS; an empty one is an empty resolver", () => {
    const spec: PodDnsFields = {
      dnsPolicy: "None",
      dnsConfig: {
        nameservers: ["1.1.1.1"],
        searches: ["a.example."],
        options: [{ name: "rotate" }],
      },
    };
    const want = { nameservers: ["1.1.1.1"], searches: ["a.example"], options: ["rotate"] };
    expect(resolver(podDns("shop", spec, false, CLUSTER))).toEqual(want);
    expect(resolver(podDns("shop", spec, false, NONE))).toEqual(want);
    expect(resolver(podDns("shop", { dnsPolicy: "None" }, false, NONE))).toEqual({
      nameservers: [],
      searches: [],
      options: [],
    });
  });

  it("Default, or no cluster DNS configured (the kubelet's fallback): the host's resolver, and a dnsConfig there is said not to apply", () => {
    expect(podDns("shop", { dnsPolicy: "Default" }, false, CLUSTER)).toEqual({
      resolver: undefined,
    });
    expect(podDns("shop", {}, false, NONE)).toEqual({ resolver: undefined });
    const withConfig = podDns("shop", { dnsConfig: { nameservers: ["10.0.0.2"] } }, false, NONE);
    expect(withConfig).toMatchObject({
      resolver: undefined,
      notice: { reason: DNS_CONFIG_FORMING, message: expect.stringContaining("no cluster DNS") },
    });
  });

  it("a hostNetwork Pod keeps the host's resolver; a policy asking otherwise is said not to apply", () => {
    expect(podDns("shop", {}, true, CLUSTER)).toEqual({ resolver: undefined });
    expect(podDns("shop", { dnsPolicy: "ClusterFirstWithHostNet" }, true, CLUSTER)).toMatchObject({
      resolver: undefined,
      notice: { reason: DNS_CONFIG_FORMING },
    });
  });

  it("cuts to the kubelet's limits: 3 nameservers, 32 search domains", () => {
    const spec: PodDnsFields = {
      dnsConfig: {
        nameservers: ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        searches: Array.from({ length: 40 }, (_, i) => `d${i}.example`),
      },
    };
    const r = resolver(podDns("shop", spec, false, CLUSTER));
    expect(r?.nameservers).toEqual(["10.96.0.10", "10.0.0.1", "10.0.0.2"]);
    expect(r?.searches).toHaveLength(32);
    expect(r?.searches.slice(0, 3)).toEqual([
      "shop.svc.cluster.local",
      "svc.cluster.local",
      "cluster.local",
    ]);
  });

  it("refuses, naming the field, what no resolv.conf can hold", () => {
    const bad = (dnsConfig: PodDnsFields["dnsConfig"]) =>
      podDns("shop", { dnsPolicy: "None", dnsConfig }, false, NONE);
    expect(bad({ nameservers: ["dns.example"] })).toMatchObject({
      error: { path: "spec.dnsConfig.nameservers[0]" },
    });
    expect(bad({ searches: ["ok.example", "bad domain\nnameserver 6.6.6.6"] })).toMatchObject({
      error: { path: "spec.dnsConfig.searches[1]" },
    });
    expect(bad({ options: [{ name: "ndots", value: "5 rotate" }] })).toMatchObject({
      error: { path: "spec.dnsConfig.options[0]" },
    });
  });

  it("is total, and whatever it answers fits a resolv.conf: at most 3 nameservers and 32 searches, no whitespace (property)", () => {
    const text = fc.oneof(
      fc.string(),
      fc.constantFrom("10.0.0.1", "fd00::1", "a.example", "ndots"),
    );
    const fields = fc.record(
      {
        dnsPolicy: fc.option(
          fc.constantFrom("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None", "Other"),
          { nil: undefined },
        ),
        dnsConfig: fc.option(
          fc.record(
            {
              nameservers: fc.array(text, { maxLength: 6 }),
              searches: fc.array(text, { maxLength: 40 }),
              options: fc.array(
                fc.record({ name: text, value: fc.option(text, { nil: undefined }) }),
                { maxLength: 4 },
              ),
            },
            { requiredKeys: [] },
          ),
          { nil: undefined },
        ),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(fields, fc.boolean(), fc.boolean(), (spec, hostNetwork, cluster) => {
        const out = podDns("ns", spec, hostNetwork, cluster ? CLUSTER : NONE);
        if ("error" in out) return;
        const r = out.resolver;
        if (r === undefined) return;
        expect(r.nameservers.length).toBeLessThanOrEqual(3);
        expect(r.searches.length).toBeLessThanOrEqual(32);
        for (const flag of dnsFlags(r)) expect(flag).not.toMatch(/\s/);
      }),
    );
  });
});

describe("dnsFlags", () => {
  it("writes the resolver as the sandbox's docker flags; none for the host's; an empty search list is '.'", () => {
    expect(dnsFlags(undefined)).toEqual([]);
    expect(
      dnsFlags({ nameservers: ["10.96.0.10"], searches: ["a.b"], options: ["ndots:5"] }),
    ).toEqual(["--dns=10.96.0.10", "--dns-search=a.b", "--dns-option=ndots:5"]);
    expect(dnsFlags({ nameservers: [], searches: [], options: [] })).toEqual(["--dns-search=."]);
  });
});
