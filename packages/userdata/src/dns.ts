/**
 * The resolver of a Pod's containers, as the kubelet's DNS configurer builds it from `dnsPolicy`,
 * `dnsConfig` and its `clusterDNS`/`clusterDomain`: pure, for what a render can know (the host's
 * own `/etc/resolv.conf` is not known here).
 *
 * @packageDocumentation
 */
import { z } from "zod";
import type { ResolvedRenderOptions } from "./options.js";
import type { RenderNotice } from "./parameters.js";

/** A Pod's resolver: what its containers' `/etc/resolv.conf` says. */
export interface PodDns {
  readonly nameservers: readonly string[];
  readonly searches: readonly string[];
  /** `name` or `name:value`, in order. */
  readonly options: readonly string[];
}

/** The Pod fields the resolver is made of. */
export interface PodDnsFields {
  readonly dnsPolicy?: string | undefined;
  readonly dnsConfig?:
    | {
        readonly nameservers?: readonly string[] | undefined;
        readonly searches?: readonly string[] | undefined;
        readonly options?:
          | readonly { readonly name?: string | undefined; readonly value?: string | undefined }[]
          | undefined;
      }
    | undefined;
}

/** What {@link podDns} decided: the resolver (`undefined`: the host's) and what to tell the Pod. */
export type PodDnsResult =
  | { readonly resolver: PodDns | undefined; readonly notice?: RenderNotice }
  | { readonly error: { readonly path: string; readonly message: string } };

/** The kubelet's limits on a Pod's resolver (`MaxDNSNameservers`, `MaxDNSSearchPaths`, its 2048 characters). */
const MAX_NAMESERVERS = 3;
const MAX_SEARCHES = 32;
const MAX_SEARCH_CHARS = 2048;

const IP_ADDRESS = z.union([z.ipv4(), z.ipv6()]);
const DOMAIN =
  /^(?=.{1,253}$)[A-Za-z0-9_]([-A-Za-z0-9_]{0,61}[A-Za-z0-9_])?(\.[A-Za-z0-9_]([-A-Za-z0-9_]{0,61}[A-Za-z0-9_])?)*\.?$/;
const OPTION_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const OPTION_VALUE = /^[A-Za-z0-9_.:-]{0,64}$/;

/** The reason of the Event a Pod gets when part of its DNS settings cannot be applied (the kubelet's). */
export const DNS_CONFIG_FORMING = "DNSConfigForming";

/**
 * The resolver the kubelet gives a Pod's containers:
 *
 * - `None`: exactly `dnsConfig`.
 * - `ClusterFirst` (the default) off the host network, and `ClusterFirstWithHostNet`: the cluster
 *   DNS (`dns.clusterDNS`), the search path `<ns>.svc.<domain> svc.<domain> <domain>` and
 *   `ndots:5`, then `dnsConfig` merged as the kubelet merges it (nameservers and searches
 *   appended, options by name overriding).
 * - `Default`, a cluster policy while no cluster DNS is configured (the kubelet's fallback), and
 *   a hostNetwork Pod: the host's resolver (`undefined`). A `dnsConfig` there is not merged into
 *   the host's file, which a render cannot read, and a notice says so.
 *
 * Duplicates are dropped and the result cut to 3 nameservers and 32 search domains (2048
 * characters). Total: a field no `resolv.conf` can hold (a nameserver that is not an address, a
 * search domain that is not a DNS name, an option with spaces) is an `error` naming it.
 *
 * @example
 * ```ts
 * podDns("shop", {}, false, { clusterDNS: ["10.96.0.10"], clusterDomain: "cluster.local" });
 * // { resolver: { nameservers: ["10.96.0.10"],
 * //   searches: ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"], options: ["ndots:5"] } }
 * ```
 */
export function podDns(
  namespace: string,
  spec: PodDnsFields,
  hostNetwork: boolean,
  dns: ResolvedRenderOptions["dns"],
): PodDnsResult {
  const policy = spec.dnsPolicy ?? "ClusterFirst";
  const config = spec.dnsConfig;
  const nameservers = config?.nameservers ?? [];
  for (const [k, n] of nameservers.entries()) {
    if (!IP_ADDRESS.safeParse(n).success) {
      return error(
        `spec.dnsConfig.nameservers[${k}]`,
        `nameserver ${JSON.stringify(n)} is not an IP address`,
      );
    }
  }
  const searches: string[] = [];
  for (const [k, d] of (config?.searches ?? []).entries()) {
    if (!DOMAIN.test(d)) {
      return error(
        `spec.dnsConfig.searches[${k}]`,
        `search domain ${JSON.stringify(d)} is not a DNS name`,
      );
    }
    searches.push(d.endsWith(".") ? d.slice(0, -1) : d);
  }
  const options: { name: string; value: string | undefined }[] = [];
  for (const [k, o] of (config?.options ?? []).entries()) {
    const name = o.name ?? "";
    if (!OPTION_NAME.test(name) || !OPTION_VALUE.test(o.value ?? "")) {
      return error(
        `spec.dnsConfig.options[${k}]`,
        `resolver option ${JSON.stringify(name)} is not one a resolv.conf can hold`,
      );
    }
    options.push({ name, value: o.value });
  }
  if (policy === "None") {
    return { resolver: withinLimits(nameservers, searches, mergeOptions([], options)) };
  }
  if (hostNetwork) {
    return policy === "Default" || policy === "ClusterFirst"
      ? { resolver: undefined }
      : {
          resolver: undefined,
          notice: {
            reason: DNS_CONFIG_FORMING,
            message: `dnsPolicy ${policy} is not applied to a hostNetwork Pod on Nebula: its containers use the instance's resolver`,
          },
        };
  }
  const cluster = policy === "ClusterFirst" || policy === "ClusterFirstWithHostNet";
  if (cluster && dns.clusterDNS.length > 0) {
    const domain = dns.clusterDomain;
    return {
      resolver: withinLimits(
        [...dns.clusterDNS, ...nameservers],
        [`${namespace}.svc.${domain}`, `svc.${domain}`, domain, ...searches],
        mergeOptions([{ name: "ndots", value: "5" }], options),
      ),
    };
  }
  if (config === undefined) return { resolver: undefined };
  return {
    resolver: undefined,
    notice: {
      reason: DNS_CONFIG_FORMING,
      message: `spec.dnsConfig is not applied: with dnsPolicy ${policy}${cluster ? " and no cluster DNS configured (the kubelet's fallback to Default)" : ""} the containers use the instance's resolver, which Nebula does not merge it with; set dnsPolicy None to give the whole resolver`,
    },
  };
}

/**
 * The Pod sandbox's resolver flags (`docker run --dns …`: the Pod's containers join its network
 * namespace and share its `/etc/resolv.conf`); none for the host's resolver. A resolver without a
 * search domain gets `--dns-search=.` (Docker's "none"), so the host's list does not leak in.
 */
export function dnsFlags(dns: PodDns | undefined): string[] {
  if (dns === undefined) return [];
  return [
    ...dns.nameservers.map((n) => `--dns=${n}`),
    ...(dns.searches.length === 0
      ? ["--dns-search=."]
      : dns.searches.map((d) => `--dns-search=${d}`)),
    ...dns.options.map((o) => `--dns-option=${o}`),
  ];
}

function error(path: string, message: string): PodDnsResult {
  return { error: { path, message } };
}

/** Options by name, later ones overriding earlier ones in place (the kubelet's `mergeDNSOptions`). */
function mergeOptions(
  base: readonly { name: string; value?: string | undefined }[],
  given: readonly { name: string; value?: string | undefined }[],
): string[] {
  const byName = new Map<string, string | undefined>();
  for (const o of [...base, ...given]) byName.set(o.name, o.value);
  return [...byName].map(([name, value]) =>
    value === undefined || value === "" ? name : `${name}:${value}`,
  );
}

/** Duplicates dropped, cut to the kubelet's limits (3 nameservers; 32 searches, 2048 characters). */
function withinLimits(
  nameservers: readonly string[],
  searches: readonly string[],
  options: readonly string[],
): PodDns {
  const fitted: string[] = [];
  let chars = 0;
  for (const d of new Set(searches)) {
    if (fitted.length === MAX_SEARCHES || chars + d.length + fitted.length > MAX_SEARCH_CHARS)
      break;
    fitted.push(d);
    chars += d.length;
  }
  return {
    nameservers: [...new Set(nameservers)].slice(0, MAX_NAMESERVERS),
    searches: fitted,
    options,
  };
}
