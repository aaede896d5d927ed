import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** What a guest's instance-metadata service answers. */
export interface ImdsIdentity {
  /** The instance ID (`/latest/meta-data/instance-id`). */
  readonly instanceId: string;
  /** The region (`/latest/meta-data/placement/region`). */
  readonly region: string;
  /** The availability zone (`/latest/meta-data/placement/availability-zone`). */
  readonly availabilityZone: string;
  /** The role name under `iam/security-credentials/`; `undefined` when the instance has no profile (404, as on EC2). */
  readonly roleName: string | undefined;
  /** The instance profile ARN (`iam/info`). */
  readonly instanceProfileArn: string | undefined;
  /** The image ID (`ami-id`). */
  readonly imageId: string;
  /** The instance type (`instance-type`). */
  readonly instanceType: string;
  /** The private IPv4 address (`local-ipv4`). */
  readonly privateIp: string;
  /** The account ID (identity document). */
  readonly accountId: string;
  /** `true` when `HttpTokens=required` (IMDSv2 only): GETs without a token get 401. */
  readonly tokensRequired: boolean;
  /**
   * The purchasing option (`instance-life-cycle`): `spot` for a Spot Instance, `on-demand`
   * otherwise (EC2 also says `scheduled` for a Scheduled Instance). Default `on-demand`.
   */
  readonly lifeCycle?: "spot" | "on-demand" | "scheduled" | undefined;
  /**
   * The instance's tags as they are now, when `InstanceMetadataTags=enabled` (served under
   * `tags/instance`, as EC2 does); `undefined`: tags are not in the metadata (404).
   */
  readonly tags?: (() => Promise<ReadonlyMap<string, string>>) | undefined;
  /**
   * The instance's user-data as it is now (`/latest/user-data`: the bytes given to `RunInstances`
   * or, while stopped, `ModifyInstanceAttribute`, base64-decoded and otherwise untouched, so a
   * gzipped user-data is served gzipped), read at each request as EC2 serves it; `undefined` from
   * the function, or no function: the instance has no user-data (404, as on EC2).
   */
  readonly userData?: (() => Promise<Buffer | undefined>) | undefined;
}

/**
 * The metadata items EC2 adds to a running instance's IMDS when something happens to it (404
 * until then): a Spot interruption notice (`spot/instance-action`, `{"action": …, "time": …}`,
 * and, for a termination, the older `spot/termination-time`) and a rebalance recommendation
 * (`events/recommendations/rebalance`, `{"noticeTime": …}`).
 */
type ImdsNoticePath =
  | "spot/instance-action"
  | "spot/termination-time"
  | "events/recommendations/rebalance";

/** A running instance-metadata server for one guest. */
export interface ImdsServer {
  /** `http://127.0.0.1:<port>/`, the value of `AWS_EC2_METADATA_SERVICE_ENDPOINT` in the guest. */
  readonly endpoint: string;
  /** Requests served, for debugging (`METHOD path status`). */
  readonly requests: readonly string[];
  /**
   * From now on serves `body` at `/latest/meta-data/<path>` (token-checked like every item) and
   * lists its directories (`spot/`, `events/`, `events/recommendations/`) as EC2 does; `undefined`
   * takes it away again (404).
   *
   * @example
   * ```ts
   * imds.setNotice("spot/instance-action", JSON.stringify({ action: "terminate", time: "2017-09-18T08:22:00Z" }));
   * ```
   */
  setNotice(path: ImdsNoticePath, body: string | undefined): void;
  /** Stops listening. */
  close(): Promise<void>;
}

const MAX_TTL_SECONDS = 21_600;

function send(res: ServerResponse, status: number, body: string, type = "text/plain"): void {
  res.writeHead(status, { "content-type": type, "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/**
 * Starts an IMDSv2-compatible HTTP server on a free loopback port for one guest: `PUT
 * /latest/api/token` (TTL header required, 1–21600 s; `X-Forwarded-For` refused as EC2 does),
 * then token-checked GETs of the metadata the guest contract names (instance ID, region, role
 * credentials) plus a few common extras (`placement/availability-zone`, `ami-id`,
 * `instance-type`, `instance-life-cycle`, `local-ipv4`, `iam/info`,
 * `/latest/dynamic/instance-identity/document`), the user-data (`/latest/user-data`, read live),
 * and the notices set with {@link ImdsServer.setNotice} (Spot interruption, rebalance).
 * The role credentials are dummies (moto checks no signature), renewed with a 6-hour expiry.
 *
 * @param identity - what to answer.
 * @param now - the clock (injected for tests).
 * @example
 * ```ts
 * const imds = await startImdsServer({ instanceId: "i-1", region: "us-east-1", ... });
 * process.env.AWS_EC2_METADATA_SERVICE_ENDPOINT = imds.endpoint;
 * ```
 */
export async function startImdsServer(
  identity: ImdsIdentity,
  now: () => number = Date.now,
): Promise<ImdsServer> {
  const tokens = new Map<string, number>();
  const requests: string[] = [];
  const notices = new Map<string, string>();
  /** The entries of a metadata directory (`""` is the root) that come from notices. */
  const noticeEntries = (dir: string): string[] => {
    const entries = new Set<string>();
    for (const path of notices.keys()) {
      if (!path.startsWith(dir)) continue;
      const rest = path.slice(dir.length);
      const slash = rest.indexOf("/");
      entries.add(slash === -1 ? rest : rest.slice(0, slash + 1));
    }
    return [...entries].sort();
  };
  const credentials = () => {
    const issued = now();
    return {
      Code: "Success",
      LastUpdated: new Date(issued).toISOString().replace(/\.\d+Z$/, "Z"),
      Type: "AWS-HMAC",
      AccessKeyId: `ASIA${identity.instanceId
        .replace(/[^a-z0-9]/gi, "")
        .toUpperCase()
        .slice(0, 16)
        .padEnd(16, "X")}`,
      SecretAccessKey: randomBytes(30).toString("base64"),
      Token: randomBytes(48).toString("base64"),
      Expiration: new Date(issued + 6 * 3600_000).toISOString().replace(/\.\d+Z$/, "Z"),
    };
  };
  const metadata = (path: string): string | undefined => {
    const role = identity.roleName;
    const notice = notices.get(path);
    if (notice !== undefined) return notice;
    if (path !== "" && path.endsWith("/")) {
      const entries = noticeEntries(path);
      if (entries.length > 0) return entries.join("\n");
    }
    switch (path) {
      case "":
        return [
          "ami-id",
          "hostname",
          "iam/",
          "instance-id",
          "instance-life-cycle",
          "instance-type",
          "local-hostname",
          "local-ipv4",
          "placement/",
          ...noticeEntries(""),
        ]
          .sort()
          .join("\n");
      case "instance-id":
        return identity.instanceId;
      case "instance-life-cycle":
        return identity.lifeCycle ?? "on-demand";
      case "ami-id":
        return identity.imageId;
      case "instance-type":
        return identity.instanceType;
      case "local-ipv4":
        return identity.privateIp;
      case "hostname":
      case "local-hostname":
        return `ip-${identity.privateIp.replace(/\./g, "-")}.ec2.internal`;
      case "placement/":
        return "availability-zone\nregion";
      case "placement/region":
        return identity.region;
      case "placement/availability-zone":
        return identity.availabilityZone;
      case "iam/":
        return role === undefined ? undefined : "info\nsecurity-credentials/";
      case "iam/info":
        return role === undefined
          ? undefined
          : JSON.stringify({
              Code: "Success",
              LastUpdated: new Date(now()).toISOString().replace(/\.\d+Z$/, "Z"),
              InstanceProfileArn: identity.instanceProfileArn,
              InstanceProfileId: "AIPA000000000000000000",
            });
      case "iam/security-credentials/":
      case "iam/security-credentials":
        return role;
      default:
        if (role !== undefined && path === `iam/security-credentials/${role}`) {
          return JSON.stringify(credentials(), null, 2);
        }
        return undefined;
    }
  };
  /** Answers one request; `true` once answered. */
  const handle = (req: IncomingMessage, res: ServerResponse): true => {
    // Doubled slashes are folded: the guest's endpoint ends with "/" (botocore before 1.29 only
    // appends "latest/..."), and curl users append "/latest/...".
    const path = ((req.url ?? "/").split("?")[0] ?? "/").replace(/\/{2,}/g, "/");
    const log = (status: number) => requests.push(`${req.method} ${path} ${status}`);
    const respond = (status: number, text: string, type = "text/plain"): true => {
      log(status);
      send(res, status, text, type);
      return true;
    };
    if (path === "/latest/api/token") {
      if (req.method !== "PUT") return respond(405, "Method Not Allowed");
      if (req.headers["x-forwarded-for"] !== undefined) return respond(403, "Forbidden");
      const ttl = Number(req.headers["x-aws-ec2-metadata-token-ttl-seconds"]);
      if (!Number.isInteger(ttl) || ttl < 1 || ttl > MAX_TTL_SECONDS) {
        return respond(400, "Bad Request");
      }
      const token = randomBytes(32).toString("base64url");
      const issued = now();
      for (const [old, expires] of tokens) if (expires < issued) tokens.delete(old);
      tokens.set(token, issued + ttl * 1000);
      log(200);
      res.writeHead(200, {
        "content-type": "text/plain",
        "x-aws-ec2-metadata-token-ttl-seconds": String(ttl),
      });
      res.end(token);
      return true;
    }
    if (req.method !== "GET" && req.method !== "HEAD") return respond(405, "Method Not Allowed");
    const token = req.headers["x-aws-ec2-metadata-token"];
    if (typeof token === "string") {
      const expires = tokens.get(token);
      if (expires === undefined || expires < now()) return respond(401, "Unauthorized");
    } else if (identity.tokensRequired) {
      return respond(401, "Unauthorized");
    }
    const tagPath = /^\/latest\/meta-data\/tags\/instance(?:\/(.*))?$/.exec(path);
    if (tagPath !== null && identity.tags !== undefined) {
      const key = tagPath[1] ?? "";
      identity
        .tags()
        .then((tags) => {
          if (key === "") respond(200, [...tags.keys()].join("\n"));
          else if (tags.has(key)) respond(200, tags.get(key) ?? "");
          else respond(404, "Not Found");
        })
        .catch(() => respond(500, "Internal Server Error"));
      return true;
    }
    if (path === "/latest/user-data") {
      if (identity.userData === undefined) return respond(404, "Not Found");
      identity
        .userData()
        .then((bytes) => {
          if (bytes === undefined || bytes.length === 0) return respond(404, "Not Found");
          log(200);
          res.writeHead(200, {
            "content-type": "application/octet-stream",
            "content-length": bytes.length,
          });
          res.end(bytes);
          return true;
        })
        .catch(() => respond(500, "Internal Server Error"));
      return true;
    }
    let body: string | undefined;
    let type = "text/plain";
    if (path.startsWith("/latest/meta-data/"))
      body = metadata(path.slice("/latest/meta-data/".length));
    else if (path === "/latest/dynamic/instance-identity/document") {
      type = "application/json";
      body = JSON.stringify(
        {
          accountId: identity.accountId,
          architecture: "x86_64",
          availabilityZone: identity.availabilityZone,
          imageId: identity.imageId,
          instanceId: identity.instanceId,
          instanceType: identity.instanceType,
          privateIp: identity.privateIp,
          region: identity.region,
          version: "2017-09-30",
        },
        null,
        2,
      );
    }
    if (body === undefined) return respond(404, "Not Found");
    return respond(200, body, type);
  };
  const server: Server = createServer(handle);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ host: "127.0.0.1", port: 0 }, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}/`,
    requests,
    setNotice(path, body) {
      if (body === undefined) notices.delete(path);
      else notices.set(path, body);
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
