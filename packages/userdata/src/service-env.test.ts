import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type ServiceEnvSource, serviceEnvironment } from "./service-env.js";

const service = (
  namespace: string,
  name: string,
  clusterIP: string,
  ports: Array<{ name?: string; port: number; protocol?: string }>,
): ServiceEnvSource => ({ metadata: { name, namespace }, spec: { clusterIP, ports } });

const kubernetes = service("default", "kubernetes", "10.96.0.1", [
  { name: "https", port: 443, protocol: "TCP" },
]);

describe("serviceEnvironment", () => {
  it("gives the kubelet's variables for a Service of the Pod's namespace and the kubernetes Service", () => {
    const env = serviceEnvironment(
      [
        kubernetes,
        service("web", "redis-primary", "10.0.0.11", [
          { port: 6379, protocol: "TCP" },
          { name: "metrics", port: 9121, protocol: "TCP" },
        ]),
      ],
      "web",
      true,
    );
    // The names and values a kubelet sets (pkg/kubelet/envvars), in name order.
    expect(env).toEqual([
      ["KUBERNETES_SERVICE_HOST", "10.96.0.1"],
      ["KUBERNETES_SERVICE_PORT", "443"],
      ["KUBERNETES_SERVICE_PORT_HTTPS", "443"],
      ["KUBERNETES_PORT", "tcp://10.96.0.1:443"],
      ["KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"],
      ["KUBERNETES_PORT_443_TCP_PROTO", "tcp"],
      ["KUBERNETES_PORT_443_TCP_PORT", "443"],
      ["KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"],
      ["REDIS_PRIMARY_SERVICE_HOST", "10.0.0.11"],
      ["REDIS_PRIMARY_SERVICE_PORT", "6379"],
      ["REDIS_PRIMARY_SERVICE_PORT_METRICS", "9121"],
      ["REDIS_PRIMARY_PORT", "tcp://10.0.0.11:6379"],
      ["REDIS_PRIMARY_PORT_6379_TCP", "tcp://10.0.0.11:6379"],
      ["REDIS_PRIMARY_PORT_6379_TCP_PROTO", "tcp"],
      ["REDIS_PRIMARY_PORT_6379_TCP_PORT", "6379"],
      ["REDIS_PRIMARY_PORT_6379_TCP_ADDR", "10.0.0.11"],
      ["REDIS_PRIMARY_PORT_9121_TCP", "tcp://10.0.0.11:9121"],
      ["REDIS_PRIMARY_PORT_9121_TCP_PROTO", "tcp"],
      ["REDIS_PRIMARY_PORT_9121_TCP_PORT", "9121"],
      ["REDIS_PRIMARY_PORT_9121_TCP_ADDR", "10.0.0.11"],
    ]);
  });

  it("with enableServiceLinks false gives only the kubernetes Service's", () => {
    const env = serviceEnvironment(
      [kubernetes, service("web", "db", "10.0.0.12", [{ port: 5432 }])],
      "web",
      false,
    );
    expect(env.map(([name]) => name).every((n) => n.startsWith("KUBERNETES_"))).toBe(true);
    expect(env).toHaveLength(8);
  });

  it("leaves out other namespaces, headless and ExternalName Services and malformed ones", () => {
    const env = serviceEnvironment(
      [
        service("other", "db", "10.0.0.12", [{ port: 5432 }]),
        service("web", "headless", "None", [{ port: 80 }]),
        { metadata: { name: "external", namespace: "web" }, spec: { ports: [{ port: 80 }] } },
        service("web", "no-ports", "10.0.0.13", []),
        service("web", "Bad_Name", "10.0.0.14", [{ port: 80 }]),
        service("web", "odd-ip", "10.0.0.300", [{ port: 80 }]),
        {},
      ],
      "web",
      true,
    );
    expect(env).toEqual([]);
  });

  it("names UDP and SCTP ports by their protocol and brackets an IPv6 cluster IP", () => {
    const env = new Map(
      serviceEnvironment(
        [
          service("web", "dns", "fd00::a", [
            { name: "dns", port: 53, protocol: "UDP" },
            { name: "sig", port: 2905, protocol: "SCTP" },
          ]),
        ],
        "web",
        true,
      ),
    );
    expect(env.get("DNS_PORT")).toBe("udp://[fd00::a]:53");
    expect(env.get("DNS_PORT_53_UDP_PROTO")).toBe("udp");
    expect(env.get("DNS_PORT_2905_SCTP")).toBe("sctp://[fd00::a]:2905");
    expect(env.get("DNS_SERVICE_PORT_SIG")).toBe("2905");
    expect(env.get("DNS_PORT_53_UDP_ADDR")).toBe("fd00::a");
  });

  it("a Service of the Pod's namespace named kubernetes wins over the default one, whatever the order", () => {
    const mine = service("web", "kubernetes", "10.0.0.99", [{ port: 8443 }]);
    for (const order of [
      [kubernetes, mine],
      [mine, kubernetes],
    ]) {
      const env = new Map(serviceEnvironment(order, "web", true));
      expect(env.get("KUBERNETES_SERVICE_HOST")).toBe("10.0.0.99");
    }
  });

  it("with apiServer, the kubernetes Service's variables name where the hosts reach the API server, with or without the Service", () => {
    const eks = { host: "abc123.gr7.eu-west-1.eks.amazonaws.com", port: 443 };
    for (const services of [[kubernetes], []]) {
      const env = serviceEnvironment(services, "web", false, eks);
      expect(env).toEqual([
        ["KUBERNETES_SERVICE_HOST", eks.host],
        ["KUBERNETES_SERVICE_PORT", "443"],
        ["KUBERNETES_SERVICE_PORT_HTTPS", "443"],
        ["KUBERNETES_PORT", `tcp://${eks.host}:443`],
        ["KUBERNETES_PORT_443_TCP", `tcp://${eks.host}:443`],
        ["KUBERNETES_PORT_443_TCP_PROTO", "tcp"],
        ["KUBERNETES_PORT_443_TCP_PORT", "443"],
        ["KUBERNETES_PORT_443_TCP_ADDR", eks.host],
      ]);
    }
    const env = new Map(
      serviceEnvironment([kubernetes], "web", true, { host: "fd00::10", port: 6443 }),
    );
    expect(env.get("KUBERNETES_SERVICE_HOST")).toBe("fd00::10");
    expect(env.get("KUBERNETES_SERVICE_PORT")).toBe("6443");
    expect(env.get("KUBERNETES_PORT")).toBe("tcp://[fd00::10]:6443");
    // The Pod's own namespace's Service named kubernetes still wins, as on a kubelet.
    const mine = service("web", "kubernetes", "10.0.0.99", [{ port: 8443 }]);
    expect(
      new Map(serviceEnvironment([mine], "web", true, eks)).get("KUBERNETES_SERVICE_HOST"),
    ).toBe("10.0.0.99");
  });

  it("is total: any input gives valid, distinct variable names and never throws", () => {
    fc.assert(
      fc.property(
        fc.array(fc.anything(), { maxLength: 8 }),
        fc.string(),
        fc.boolean(),
        (services, namespace, links) => {
          const env = serviceEnvironment(services as ServiceEnvSource[], namespace, links);
          const names = env.map(([name]) => name);
          expect(new Set(names).size).toBe(names.length);
          for (const name of names) expect(name).toMatch(/^[A-Z][A-Z0-9_]*$/);
        },
      ),
    );
  });

  it("every Service of the Pod's namespace gives its host, port and first link variable", () => {
    const label = fc.stringMatching(/^[a-z][a-z0-9]{0,10}(-[a-z0-9]{1,5})?$/);
    fc.assert(
      fc.property(
        fc.uniqueArray(label, { maxLength: 6 }),
        fc.integer({ min: 1, max: 65535 }),
        (names, port) => {
          const env = new Map(
            serviceEnvironment(
              names.map((n, i) => service("ns", n, `10.1.0.${i + 1}`, [{ port }])),
              "ns",
              true,
            ),
          );
          names.forEach((n, i) => {
            const prefix = n.toUpperCase().replaceAll("-", "_");
            expect(env.get(`${prefix}_SERVICE_HOST`)).toBe(`10.1.0.${i + 1}`);
            expect(env.get(`${prefix}_SERVICE_PORT`)).toBe(String(port));
            expect(env.get(`${prefix}_PORT`)).toBe(`tcp://10.1.0.${i + 1}:${port}`);
          });
        },
      ),
    );
  });
});
