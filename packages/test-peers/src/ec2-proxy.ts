/**
 * An EC2 proxy that puts back, in front of moto, the parts of EC2's behaviour that moto is kinder
 * about: `ClientToken` idempotency, refused stops, eventual consistency of `DescribeInstances`,
 * slow and lost `RunInstances` answers. Each behaviour is off until a test switches it on. A test
 * can also hold every call of one action until it releases them (a caller killed meanwhile: the
 * call never reaches EC2).
 *
 * @packageDocumentation
 */
import { Buffer } from "node:buffer";
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { DescribeSubnetsCommand, EC2Client } from "@aws-sdk/client-ec2";
import { z } from "zod";
import { TestPeerError } from "./errors.js";
import { listInstanceItems, removeInstanceItems } from "./host/overlay.js";
import { MOTO_CREDENTIALS } from "./moto.js";

const BehaviourSchema = z.strictObject({
  clientToken: z.boolean().optional(),
  refuseStops: z.boolean().optional(),
  consistencyWindowMs: z.number().int().nonnegative().optional(),
  terminatedVisibleMs: z.number().int().nonnegative().nullable().optional(),
  runInstancesDelayMs: z.number().int().nonnegative().optional(),
  delayMs: z.number().int().nonnegative().optional(),
  insufficientCapacity: z.boolean().optional(),
  noCapacity: z
    .array(
      z.strictObject({
        instanceType: z.string().min(1).optional(),
        availabilityZone: z.string().min(1).optional(),
        capacityType: z.enum(["spot", "on-demand"]).optional(),
      }),
    )
    .optional(),
  loseRunInstancesResponses: z.number().int().nonnegative().optional(),
  faultRate: z.number().min(0).max(1).optional(),
  faultSeed: z.number().int().optional(),
});

/** The EC2 behaviours {@link startEc2Proxy} plays. Every one is off by default. */
export interface Ec2Behaviour {
  /**
   * `ClientToken` idempotency: a `RunInstances` with a token already used and the same
   * parameters answers the original reservation again (no second instance); with other
   * parameters it fails with `IdempotentParameterMismatch`. moto starts a new instance each time.
   * Only launches made through this proxy are remembered.
   */
  clientToken?: boolean;
  /**
   * `StopInstances` refuses what EC2 refuses: an instance that is `shutting-down` or `terminated`
   * (`IncorrectInstanceState`; moto "stops" it and it comes back as `stopped`), and a Spot
   * instance launched through this proxy from a one-time Spot request, the default, whose
   * interruption behaviour is always terminate (`UnsupportedOperation`, as EC2 answers it).
   */
  refuseStops?: boolean;
  /**
   * For this long after `RunInstances` returned, its instances are missing from
   * `DescribeInstances` listings, and any call naming one by ID (describe, stop, start,
   * terminate, tags, console output, attributes) fails with `InvalidInstanceID.NotFound`.
   * Default 0 (moto: visible at once).
   */
  consistencyWindowMs?: number;
  /**
   * A terminated instance leaves `DescribeInstances` this long after the proxy first saw it
   * terminated (a `TerminateInstances` through it, or a description saying `terminated`); after
   * that, any call naming it by ID fails with `InvalidInstanceID.NotFound`. `null` (default): it
   * stays, as in moto. EC2 keeps them for about an hour.
   */
  terminatedVisibleMs?: number | null;
  /** `RunInstances` creates the instances at once but answers only this much later. Default 0. */
  runInstancesDelayMs?: number;
  /** Every request waits this long before it is handled (a slow EC2). Default 0. */
  delayMs?: number;
  /**
   * While on, every `RunInstances` is refused with `InsufficientInstanceCapacity` (HTTP 500, as
   * EC2 answers it) and starts nothing. Default off.
   */
  insufficientCapacity?: boolean;
  /**
   * Offerings EC2 has no capacity for: a `RunInstances` matching one entry (every field given
   * must match: `instanceType`; `availabilityZone`, of the request's `Placement` or of its
   * subnet, read from `DescribeSubnets` upstream; `capacityType`, `spot` when the request asks
   * for `InstanceMarketOptions.MarketType=spot`, else `on-demand`) is refused with
   * `InsufficientInstanceCapacity` (HTTP 500, as EC2 answers it, naming the type and zone) and
   * starts nothing. Refusals are counted per offering in {@link Ec2ProxyCounts.noCapacity}.
   * Default `[]`.
   */
  noCapacity?: readonly {
    readonly instanceType?: string;
    readonly availabilityZone?: string;
    readonly capacityType?: "spot" | "on-demand";
  }[];
  /**
   * The next this many `RunInstances` calls create their instances, then the connection is cut
   * without an answer (the SDK sees a reset socket and retries). Counts down as it happens.
   */
  loseRunInstancesResponses?: number;
  /**
   * This fraction of requests (0 to 1) fails before reaching moto, as EC2 fails under load:
   * half `RequestLimitExceeded` (HTTP 503, throttling), half `InternalError` (HTTP 500). The
   * SDK retries some; the code under test sees the rest. Default 0.
   */
  faultRate?: number;
  /** Seed of the fault draw, so a failing run can be replayed. Default: a fixed seed (1). */
  faultSeed?: number;
}

/** Options of {@link startEc2Proxy}: where to forward, and the behaviours to start with. */
export interface Ec2ProxyOptions extends Ec2Behaviour {
  /**
   * What to stand in front of: a moto (`startMoto()`, `useTestPeers().moto`) or any EC2
   * endpoint URL, e.g. the instance-host simulator's `ec2Endpoint`.
   */
  upstream: string | { readonly endpoint: string; readonly region?: string };
  /** The region for {@link Ec2ProxyHandle.ec2} and `env`. Default: the upstream's, else `us-east-1`. */
  region?: string;
}

/** What a test can read back from the proxy. */
export interface Ec2ProxyCounts {
  /** `RunInstances` calls that reached moto and created instances. */
  launched: number;
  /** `RunInstances` calls answered from the token record without reaching moto. */
  replayed: number;
  /** `RunInstances` answers cut after the instances were created. */
  lost: number;
  /** Requests refused with an EC2 error code the proxy produced, by code. */
  refused: Record<string, number>;
  /** Every request received (refused, faulted and lost ones included), by EC2 action. */
  calls: Record<string, number>;
  /**
   * `RunInstances` refused by {@link Ec2Behaviour.noCapacity}, by offering:
   * `<instanceType>/<availabilityZone>/<spot|on-demand>`.
   */
  noCapacity: Record<string, number>;
  /** Requests a {@link Ec2ProxyHandle.hold} held, by EC2 action. */
  held: Record<string, number>;
  /** Held requests whose caller went away before the release: never sent upstream, by action. */
  dropped: Record<string, number>;
}

/** Calls of one EC2 action held by the proxy, from {@link Ec2ProxyHandle.hold}. */
export interface Ec2Hold {
  /** The action held (`StartInstances`, ...). */
  readonly action: string;
  /** Held requests whose callers still wait for their answer. */
  waiting(): number;
  /** Resolves once at least `count` (default 1) held requests are waiting at the same time. */
  whenHeld(count?: number): Promise<void>;
  /**
   * Ends the hold: the waiting requests go on (to the rest of the proxy and upstream), later ones
   * are not held. A request whose caller went away while it was held was dropped then: it never
   * reaches EC2, as a call the caller died before sending. Idempotent.
   */
  release(): void;
}

/** A running EC2 proxy, from {@link startEc2Proxy}. */
export interface Ec2ProxyHandle {
  /** `http://127.0.0.1:<port>`: give this to the code under test instead of moto's endpoint. */
  readonly endpoint: string;
  /** The region clients sign for. */
  readonly region: string;
  /** Environment variables for a child process or the AWS CLI (as `moto.env`, pointing here). */
  readonly env: Readonly<Record<string, string>>;
  /** A new `EC2Client` for this proxy (region, dummy credentials). */
  ec2(): EC2Client;
  /** Changes behaviours from now on; fields left out keep their value. */
  configure(behaviour: Ec2Behaviour): void;
  /** The behaviours in force. */
  behaviour(): Required<Ec2Behaviour>;
  /** What the proxy did so far. */
  counts(): Ec2ProxyCounts;
  /**
   * Holds every request of `action` from now on, before anything else the proxy does with it,
   * until the returned hold is released: a test sees a call under way and can kill its caller
   * in between (its request is then dropped, never sent upstream). Holds of one action stack:
   * the oldest unreleased one holds. `close()` drops whatever is still held.
   */
  hold(action: string): Ec2Hold;
  /** Stops listening and drops open connections (a delayed answer is never sent). */
  close(): Promise<void>;
}

/** The request parameters that decide whether two `RunInstances` calls are "the same". */
export function runInstancesFingerprint(params: URLSearchParams): string {
  return [...params]
    .filter(([key]) => key !== "Action" && key !== "Version" && key !== "ClientToken")
    .map(([key, value]) => `${key}=${value}`)
    .sort()
    .join("&");
}

/** The `InstanceId.N` values of an EC2 Query request, in order. */
export function requestInstanceIds(params: URLSearchParams): string[] {
  return [...params]
    .filter(([key]) => /^InstanceId\.\d+$/.test(key))
    .sort(([a], [b]) => Number(a.slice(11)) - Number(b.slice(11)))
    .map(([, value]) => value);
}

const escapeXml = (text: string): string =>
  text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

/** An EC2 Query-protocol error body, as EC2 sends it with HTTP 400. */
export function ec2ErrorXml(
  code: string,
  message: string,
  requestId: string = randomUUID(),
): string {
  return `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>${escapeXml(code)}</Code><Message>${escapeXml(message)}</Message></Error></Errors><RequestID>${requestId}</RequestID></Response>`;
}

/** EC2's message for IDs it does not know (one, or several joined by ", "). */
export function notFoundMessage(ids: readonly string[]): string {
  return ids.length === 1
    ? `The instance ID '${ids[0]}' does not exist`
    : `The instance IDs '${ids.join(", ")}' do not exist`;
}

/**
 * Actions on instances named by ID that EC2 answers with `InvalidInstanceID.NotFound` while it
 * does not know the instance yet (or any more); `DescribeInstances` is handled on its own.
 */
const ID_ACTIONS = new Set([
  "StopInstances",
  "StartInstances",
  "TerminateInstances",
  "RebootInstances",
  "GetConsoleOutput",
  "DescribeInstanceStatus",
  "DescribeInstanceAttribute",
  "ModifyInstanceAttribute",
  "ModifyInstanceMetadataOptions",
  "CreateTags",
  "DeleteTags",
]);

/**
 * The instance IDs an EC2 Query request names: `InstanceId.N`, `InstanceId`, and the `i-` IDs
 * among `ResourceId.N` (`CreateTags`, `DeleteTags`).
 */
export function referencedInstanceIds(params: URLSearchParams): string[] {
  const single = params.get("InstanceId");
  const resources = [...params]
    .filter(([key, value]) => /^ResourceId\.\d+$/.test(key) && value.startsWith("i-"))
    .map(([, value]) => value);
  return [...requestInstanceIds(params), ...(single === null ? [] : [single]), ...resources];
}

const HOP_HEADERS = new Set([
  "host",
  "connection",
  "content-length",
  "transfer-encoding",
  "expect",
  "keep-alive",
]);

interface Answer {
  status: number;
  type: string;
  text: string;
}

interface TokenRecord {
  fingerprint: string;
  /** Settles with the original answer once it is known; rejects if the call failed. */
  answer: Promise<Answer>;
}

interface Tracked {
  launchedAt?: number;
  terminatedAt?: number;
  /** Launched through this proxy from a one-time Spot request. */
  oneTimeSpot?: boolean;
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** One hold's requests: each resolves `true` on release, `false` once its caller is gone. */
class HoldState {
  readonly waiting = new Map<ServerResponse, (go: boolean) => void>();
  readonly #counts: Ec2ProxyCounts;
  readonly #watchers = new Set<{ count: number; resolve: () => void }>();
  #released = false;

  constructor(
    readonly action: string,
    counts: Ec2ProxyCounts,
  ) {
    this.#counts = counts;
  }

  /** Holds the request answered by `res` until the release (`true`) or its caller leaves (`false`). */
  hold(res: ServerResponse): Promise<boolean> {
    if (this.#released) return Promise.resolve(true);
    const { action } = this;
    this.#counts.held[action] = (this.#counts.held[action] ?? 0) + 1;
    return new Promise<boolean>((resolve) => {
      const gone = () => {
        if (!this.waiting.delete(res)) return;
        this.#counts.dropped[action] = (this.#counts.dropped[action] ?? 0) + 1;
        resolve(false);
      };
      res.once("close", gone);
      this.waiting.set(res, (go) => {
        res.off("close", gone);
        resolve(go);
      });
      for (const watcher of this.#watchers) {
        if (this.waiting.size >= watcher.count) {
          this.#watchers.delete(watcher);
          watcher.resolve();
        }
      }
    });
  }

  whenHeld(count: number): Promise<void> {
    if (this.waiting.size >= count) return Promise.resolve();
    return new Promise((resolve) => this.#watchers.add({ count, resolve }));
  }

  release(): void {
    this.#released = true;
    const waiting = [...this.waiting.values()];
    this.waiting.clear();
    for (const go of waiting) go(true);
  }
}

/**
 * Starts an EC2 proxy on a free loopback port in front of moto (or any EC2 endpoint) that plays
 * EC2's less forgiving behaviours, each switched on per test: `ClientToken` idempotency, refused
 * stops, eventual consistency, slow and lost `RunInstances` answers. Anything it does not play is
 * forwarded untouched. Pure Node: no process, nothing left after `close()`.
 *
 * @example
 * ```ts
 * const moto = await startMoto();
 * const proxy = await startEc2Proxy({ upstream: moto, clientToken: true, consistencyWindowMs: 2_000 });
 * const ec2 = proxy.ec2(); // or: new Ec2PodProvider({ endpoint: proxy.endpoint, ... })
 * proxy.configure({ loseRunInstancesResponses: 1 }); // the next launch happens, its answer is lost
 * await proxy.close();
 * ```
 */
export async function startEc2Proxy(options: Ec2ProxyOptions): Promise<Ec2ProxyHandle> {
  const { upstream, region: regionOption, ...initial } = options;
  const upstreamEndpoint = typeof upstream === "string" ? upstream : upstream?.endpoint;
  const parsedUrl = z.url().safeParse(upstreamEndpoint);
  if (!parsedUrl.success) {
    throw new TestPeerError("InvalidOptions", "startEc2Proxy: upstream must be a URL or a moto", {
      cause: parsedUrl.error,
    });
  }
  const base = parsedUrl.data.replace(/\/+$/, "");
  const region =
    regionOption ?? (typeof upstream === "string" ? undefined : upstream.region) ?? "us-east-1";
  const current: Required<Ec2Behaviour> = {
    clientToken: false,
    refuseStops: false,
    consistencyWindowMs: 0,
    terminatedVisibleMs: null,
    runInstancesDelayMs: 0,
    delayMs: 0,
    insufficientCapacity: false,
    noCapacity: [],
    loseRunInstancesResponses: 0,
    faultRate: 0,
    faultSeed: 1,
  };
  const configure = (behaviour: Ec2Behaviour): void => {
    const parsed = BehaviourSchema.safeParse(behaviour);
    if (!parsed.success) {
      throw new TestPeerError("InvalidOptions", `startEc2Proxy: ${z.prettifyError(parsed.error)}`, {
        cause: parsed.error,
      });
    }
    for (const [key, value] of Object.entries(parsed.data)) {
      if (value !== undefined) Object.assign(current, { [key]: value });
    }
  };
  configure(initial);
  // mulberry32 over the seed: the same seed faults the same requests in the same order.
  let faultState = current.faultSeed >>> 0;
  let seededWith = current.faultSeed;
  const draw = (): number => {
    if (seededWith !== current.faultSeed) {
      seededWith = current.faultSeed;
      faultState = current.faultSeed >>> 0;
    }
    faultState = (faultState + 0x6d2b79f5) >>> 0;
    let t = faultState;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };

  const tokens = new Map<string, TokenRecord>();
  const tracked = new Map<string, Tracked>();
  const counts: Ec2ProxyCounts = {
    launched: 0,
    replayed: 0,
    lost: 0,
    refused: {},
    calls: {},
    noCapacity: {},
    held: {},
    dropped: {},
  };
  const holds: HoldState[] = [];
  const hold = (action: string): Ec2Hold => {
    const state = new HoldState(action, counts);
    holds.push(state);
    return {
      action,
      waiting: () => state.waiting.size,
      whenHeld: (count = 1) => state.whenHeld(count),
      release: () => {
        const at = holds.indexOf(state);
        if (at !== -1) holds.splice(at, 1);
        state.release();
      },
    };
  };
  const track = (id: string): Tracked => {
    let entry = tracked.get(id);
    if (entry === undefined) {
      entry = {};
      tracked.set(id, entry);
    }
    return entry;
  };
  /** Whether EC2 would not (yet, or any more) show this instance. */
  const hidden = (id: string, now: number): boolean => {
    const entry = tracked.get(id);
    if (entry === undefined) return false;
    if (entry.launchedAt !== undefined && now - entry.launchedAt < current.consistencyWindowMs) {
      return true;
    }
    return (
      current.terminatedVisibleMs !== null &&
      entry.terminatedAt !== undefined &&
      now - entry.terminatedAt >= current.terminatedVisibleMs
    );
  };

  const forward = async (req: IncomingMessage, body: Buffer): Promise<Answer> => {
    const headers: Record<string, string> = {};
    for (const [key, value] of Object.entries(req.headers)) {
      if (!HOP_HEADERS.has(key) && typeof value === "string") headers[key] = value;
    }
    const response = await fetch(`${base}${req.url ?? "/"}`, {
      method: req.method ?? "POST",
      headers,
      ...(req.method === "GET" || req.method === "HEAD" ? {} : { body }),
    });
    return {
      status: response.status,
      type: response.headers.get("content-type") ?? "text/xml",
      text: await response.text(),
    };
  };
  const refuse = (code: string, message: string, status = 400): Answer => {
    counts.refused[code] = (counts.refused[code] ?? 0) + 1;
    return { status, type: "text/xml", text: ec2ErrorXml(code, message) };
  };
  const noteTerminated = (xml: string, now: number): void => {
    for (const item of listInstanceItems(xml)) {
      if (
        item.stateName === "terminated" &&
        tracked.get(item.instanceId)?.terminatedAt === undefined
      ) {
        track(item.instanceId).terminatedAt = now;
      }
    }
  };

  const runInstances = async (
    req: IncomingMessage,
    body: Buffer,
    params: URLSearchParams,
  ): Promise<Answer | "lost"> => {
    const token = params.get("ClientToken") ?? "";
    const fingerprint = runInstancesFingerprint(params);
    if (current.clientToken && token !== "") {
      const previous = tokens.get(token);
      if (previous !== undefined) {
        const original = await previous.answer.catch(() => undefined);
        if (original !== undefined) {
          if (previous.fingerprint !== fingerprint) {
            return refuse(
              "IdempotentParameterMismatch",
              `Arguments on this idempotent request are inconsistent with arguments used in previous request(s).`,
            );
          }
          counts.replayed++;
          return original;
        }
      }
    }
    let settle: (answer: Answer | undefined) => void = () => {};
    if (current.clientToken && token !== "") {
      const answer = new Promise<Answer | undefined>((resolve) => {
        settle = resolve;
      }).then((a) => (a === undefined ? Promise.reject(new Error("launch failed")) : a));
      answer.catch(() => undefined);
      tokens.set(token, { fingerprint, answer });
    }
    let answer: Answer;
    try {
      answer = await forward(req, body);
    } catch (error) {
      tokens.delete(token);
      settle(undefined);
      throw error;
    }
    if (answer.status !== 200) {
      // EC2 keeps no token for a launch that failed: a retry with it is a new launch.
      tokens.delete(token);
      settle(undefined);
      return answer;
    }
    settle(answer);
    counts.launched++;
    const now = Date.now();
    const oneTimeSpot =
      params.get("InstanceMarketOptions.MarketType") === "spot" &&
      (params.get("InstanceMarketOptions.SpotOptions.SpotInstanceType") ?? "one-time") ===
        "one-time";
    for (const item of listInstanceItems(answer.text)) {
      const entry = track(item.instanceId);
      entry.launchedAt = now;
      entry.oneTimeSpot = oneTimeSpot;
    }
    if (current.runInstancesDelayMs > 0) await sleep(current.runInstancesDelayMs);
    if (current.loseRunInstancesResponses > 0) {
      current.loseRunInstancesResponses--;
      counts.lost++;
      return "lost";
    }
    return answer;
  };

  const stopInstances = async (
    req: IncomingMessage,
    body: Buffer,
    params: URLSearchParams,
  ): Promise<Answer> => {
    const ids = requestInstanceIds(params);
    if (current.refuseStops && ids.length > 0) {
      const query = new URLSearchParams({
        Action: "DescribeInstances",
        Version: params.get("Version") ?? "2016-11-15",
      });
      for (const [i, id] of ids.entries()) query.append(`InstanceId.${i + 1}`, id);
      const described = await forward(req, Buffer.from(query.toString()));
      if (described.status === 200) {
        const states = new Map(
          listInstanceItems(described.text).map((i) => [i.instanceId, i.stateName]),
        );
        for (const id of ids) {
          const state = states.get(id);
          if (state === "shutting-down" || state === "terminated") {
            return refuse(
              "IncorrectInstanceState",
              `This instance '${id}' is not in a state from which it can be stopped.`,
            );
          }
          if (tracked.get(id)?.oneTimeSpot === true) {
            return refuse(
              "UnsupportedOperation",
              `You can't stop the Spot Instance '${id}' because it is associated with a one-time Spot Instance request. You can only stop Spot Instances associated with persistent Spot Instance requests.`,
            );
          }
        }
      }
    }
    return forward(req, body);
  };

  /** The zone of each subnet, read upstream once per subnet (subnets do not move). */
  const subnetZones = new Map<string, string>();
  const zoneOfSubnet = async (subnetId: string): Promise<string | undefined> => {
    const known = subnetZones.get(subnetId);
    if (known !== undefined) return known;
    const client = new EC2Client({
      endpoint: base,
      region,
      credentials: { ...MOTO_CREDENTIALS },
      maxAttempts: 3,
    });
    try {
      const out = await client.send(new DescribeSubnetsCommand({ SubnetIds: [subnetId] }));
      const zone = out.Subnets?.[0]?.AvailabilityZone;
      if (zone !== undefined) subnetZones.set(subnetId, zone);
      return zone;
    } catch {
      return undefined;
    } finally {
      client.destroy();
    }
  };
  /** What a `RunInstances` asks for: type, zone (Placement, else its subnet's) and capacity type. */
  const offeringOf = async (params: URLSearchParams) => {
    const subnet = params.get("SubnetId") ?? params.get("NetworkInterface.1.SubnetId");
    const zone =
      params.get("Placement.AvailabilityZone") ??
      (subnet === null ? undefined : await zoneOfSubnet(subnet)) ??
      "unknown";
    return {
      instanceType: params.get("InstanceType") ?? "m1.small",
      zone,
      capacityType:
        params.get("InstanceMarketOptions.MarketType") === "spot"
          ? ("spot" as const)
          : ("on-demand" as const),
    };
  };

  const describeInstances = async (
    req: IncomingMessage,
    body: Buffer,
    params: URLSearchParams,
  ): Promise<Answer> => {
    const answer = await forward(req, body);
    if (answer.status !== 200) return answer;
    const now = Date.now();
    noteTerminated(answer.text, now);
    const missing = requestInstanceIds(params).filter((id) => hidden(id, now));
    if (missing.length > 0) return refuse("InvalidInstanceID.NotFound", notFoundMessage(missing));
    return { ...answer, text: removeInstanceItems(answer.text, (i) => hidden(i.instanceId, now)) };
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const body = await readBody(req);
    const isForm = (req.headers["content-type"] ?? "").includes("x-www-form-urlencoded");
    const params = isForm ? new URLSearchParams(body.toString("utf8")) : new URLSearchParams();
    const action = params.get("Action");
    counts.calls[action ?? "(none)"] = (counts.calls[action ?? "(none)"] ?? 0) + 1;
    const holding = holds.find((h) => h.action === action);
    // Its caller went away while held: nothing is sent, nothing answered.
    if (holding !== undefined && !(await holding.hold(res))) return;
    if (current.delayMs > 0) await sleep(current.delayMs);
    let answer: Answer | "lost";
    const missing = ID_ACTIONS.has(action ?? "")
      ? referencedInstanceIds(params).filter((id) => hidden(id, Date.now()))
      : [];
    if (current.faultRate > 0 && draw() < current.faultRate) {
      answer =
        draw() < 0.5
          ? refuse("RequestLimitExceeded", "Request limit exceeded.", 503)
          : refuse("InternalError", "An internal error has occurred.", 500);
    } else if (missing.length > 0)
      answer = refuse("InvalidInstanceID.NotFound", notFoundMessage(missing));
    else if (action === "RunInstances" && current.insufficientCapacity) {
      answer = refuse(
        "InsufficientInstanceCapacity",
        "We currently do not have sufficient capacity in the Availability Zone you requested.",
        500,
      );
    } else if (action === "RunInstances" && current.noCapacity.length > 0) {
      const offering = await offeringOf(params);
      const dead = current.noCapacity.some(
        (o) =>
          (o.instanceType === undefined || o.instanceType === offering.instanceType) &&
          (o.availabilityZone === undefined || o.availabilityZone === offering.zone) &&
          (o.capacityType === undefined || o.capacityType === offering.capacityType),
      );
      if (dead) {
        const key = `${offering.instanceType}/${offering.zone}/${offering.capacityType}`;
        counts.noCapacity[key] = (counts.noCapacity[key] ?? 0) + 1;
        answer = refuse(
          "InsufficientInstanceCapacity",
          `We currently do not have sufficient ${offering.instanceType} capacity in the Availability Zone you requested (${offering.zone}).${offering.capacityType === "spot" ? " (Spot)" : ""}`,
          500,
        );
      } else answer = await runInstances(req, body, params);
    } else if (action === "RunInstances") answer = await runInstances(req, body, params);
    else if (action === "StopInstances") answer = await stopInstances(req, body, params);
    else if (action === "DescribeInstances") answer = await describeInstances(req, body, params);
    else {
      answer = await forward(req, body);
      if (action === "TerminateInstances" && answer.status === 200) {
        const now = Date.now();
        for (const id of requestInstanceIds(params)) {
          const entry = track(id);
          entry.terminatedAt ??= now;
        }
      }
    }
    if (answer === "lost") {
      res.destroy();
      return;
    }
    res.writeHead(answer.status, {
      "content-type": answer.type,
      "content-length": Buffer.byteLength(answer.text),
    });
    res.end(answer.text);
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      const text = ec2ErrorXml("InternalError", `nebula EC2 proxy: ${String(error)}`);
      res.writeHead(500, { "content-type": "text/xml", "content-length": Buffer.byteLength(text) });
      res.end(text);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ host: "127.0.0.1", port: 0 }, () => resolve());
  });
  // A test runner must not be kept alive by a proxy someone forgot to close.
  server.unref();
  const { port } = server.address() as AddressInfo;
  const endpoint = `http://127.0.0.1:${port}`;
  return {
    endpoint,
    region,
    env: {
      AWS_ENDPOINT_URL_EC2: endpoint,
      AWS_ENDPOINT_URL: endpoint,
      AWS_REGION: region,
      AWS_DEFAULT_REGION: region,
      AWS_ACCESS_KEY_ID: MOTO_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: MOTO_CREDENTIALS.secretAccessKey,
    },
    ec2: () => new EC2Client({ endpoint, region, credentials: { ...MOTO_CREDENTIALS } }),
    configure,
    behaviour: () => ({ ...current }),
    counts: () => ({
      ...counts,
      refused: { ...counts.refused },
      calls: { ...counts.calls },
      noCapacity: { ...counts.noCapacity },
      held: { ...counts.held },
      dropped: { ...counts.dropped },
    }),
    hold,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
