import { Buffer } from "node:buffer";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import {
  type Ec2State,
  type InstanceItem,
  listInstanceItems,
  rewriteInstanceStates,
  rewriteStatusStates,
  runInstancesReplay,
  type StateOverride,
} from "./overlay.js";

/** What the EC2 proxy asks of the simulator. */
export interface ProxyHooks {
  /** For each instance in a `DescribeInstances` (or `RunInstances`) answer: what to show instead of moto's state. */
  observe(item: InstanceItem, sentAt: number): StateOverride | undefined;
  /**
   * For each instance in a `DescribeInstanceStatus` answer (no tags there): the state to show
   * instead of moto's, for an instance the simulator already plays; `undefined` to leave it.
   */
  observeState(instanceId: string, stateName: string, sentAt: number): Ec2State | undefined;
  /** After moto accepted a state change (`StopInstances`, `TerminateInstances`, `StartInstances`). */
  stateChanged(
    action: "StopInstances" | "TerminateInstances" | "StartInstances",
    instanceIds: string[],
  ): void;
  /**
   * Before a `ModifyInstanceAttribute` of an instance's user-data: EC2's refusal message when the
   * instance is not stopped (the request then fails with `IncorrectInstanceState`, as on EC2, and
   * never reaches moto, which would accept it), or `undefined` to let it through.
   */
  userDataChange(instanceId: string): string | undefined;
  /** The guest's serial console for `GetConsoleOutput`, or `undefined` to let moto answer. */
  consoleOutput(instanceId: string): Buffer | undefined;
}

/** A running EC2 proxy. */
export interface OverlayProxy {
  /** `http://127.0.0.1:<port>`. */
  readonly endpoint: string;
  /** Stops listening and drops open connections. */
  close(): Promise<void>;
}

const HOP_HEADERS = new Set([
  "host",
  "connection",
  "content-length",
  "transfer-encoding",
  "expect",
  "keep-alive",
]);
/** EC2 returns the most recent 64 KB of console output. */
const CONSOLE_LIMIT = 64 * 1024;

/**
 * Takes the `instance-state-name` filters off a DescribeInstances request (so moto, whose states
 * differ from what the overlay shows, does not apply them); returns the other parameters, with the
 * remaining filters renumbered from 1, and the state names asked for (`undefined`: no such filter).
 *
 * @example
 * ```ts
 * takeStateFilter(new URLSearchParams("Filter.1.Name=instance-state-name&Filter.1.Value.1=pending")).states; // Set {"pending"}
 * ```
 */
export function takeStateFilter(params: URLSearchParams): {
  params: URLSearchParams;
  states: Set<string> | undefined;
} {
  const filters = new Map<string, { name: string; values: string[] }>();
  const rest = new URLSearchParams();
  for (const [key, value] of params) {
    const match = /^Filter\.(\d+)\.(Name|Value\.\d+)$/.exec(key);
    if (match?.[1] === undefined) {
      rest.append(key, value);
      continue;
    }
    const filter = filters.get(match[1]) ?? { name: "", values: [] };
    if (match[2] === "Name") filter.name = value;
    else filter.values.push(value);
    filters.set(match[1], filter);
  }
  let states: Set<string> | undefined;
  let n = 0;
  for (const [, filter] of [...filters].sort(([a], [b]) => Number(a) - Number(b))) {
    if (filter.name === "instance-state-name") {
      states = new Set([...(states ?? []), ...filter.values]);
      continue;
    }
    n++;
    rest.append(`Filter.${n}.Name`, filter.name);
    for (const [i, value] of filter.values.entries())
      rest.append(`Filter.${n}.Value.${i + 1}`, value);
  }
  return { params: rest, states };
}

function instanceIds(params: URLSearchParams): string[] {
  return [...params].filter(([key]) => /^InstanceId\.\d+$/.test(key)).map(([, value]) => value);
}

/**
 * A `ModifyInstanceAttribute` body as moto needs it to store what EC2 stores. The SDK sends the
 * user-data as a blob (`UserData.Value`, base64 of the bytes, which EC2 decodes once and keeps);
 * moto 5 decodes the blob and then wants base64 text again ("Invalid BASE64 encoding of user
 * data" otherwise), so the value is encoded once more for it: moto then keeps and describes
 * exactly the base64 the SDK sent, as EC2 does. Other bodies are returned as they are.
 *
 * @example
 * ```ts
 * motoUserData(new URLSearchParams("Action=ModifyInstanceAttribute&UserData.Value=aGk%3D"), body);
 * // body with UserData.Value=YUdrPQ== (base64 of "aGk=")
 * ```
 */
function motoUserData(params: URLSearchParams, body: Buffer): Buffer {
  const value = params.get("UserData.Value");
  if (params.get("Action") !== "ModifyInstanceAttribute" || value === null || value === "")
    return body;
  const rewritten = new URLSearchParams(params);
  rewritten.set("UserData.Value", Buffer.from(value, "utf8").toString("base64"));
  return Buffer.from(rewritten.toString());
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

/**
 * Starts the EC2 proxy in front of moto that shows what moto cannot: `pending` while a guest
 * boots, `stopping` / `shutting-down` while it shuts down, `Client.InstanceInitiatedShutdown`
 * when it powered itself off, the guest's real serial console in `GetConsoleOutput`, and EC2's
 * refusal to change the user-data of an instance that is not stopped. Every other request goes to
 * moto untouched.
 *
 * @param upstream - moto's endpoint.
 * @param hooks - the simulator's side.
 */
export async function startOverlayProxy(
  upstream: string,
  hooks: ProxyHooks,
): Promise<OverlayProxy> {
  const forward = async (
    req: IncomingMessage,
    body: Buffer,
  ): Promise<{ status: number; type: string; text: string }> => {
    const headers: Record<string, string> = {};
    for (const [key, value] of Object.entries(req.headers)) {
      if (!HOP_HEADERS.has(key) && typeof value === "string") headers[key] = value;
    }
    const response = await fetch(`${upstream}${req.url ?? "/"}`, {
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
  // EC2's ClientToken idempotency, which moto lacks (it keeps the token, but launches again): a
  // RunInstances with a token seen before is answered with the instance launched with it, if
  // any; also when the first answer was lost on the way (an error after moto launched, a socket
  // closed), which is when an SDK retries. Requests with one token are taken one at a time.
  const tokensSeen = new Set<string>();
  const tokenQueues = new Map<string, Promise<void>>();
  const runInstances = async (
    req: IncomingMessage,
    body: Buffer,
    token: string,
    sentAt: number,
  ): Promise<{ status: number; type: string; text: string }> => {
    const previous = tokenQueues.get(token) ?? Promise.resolve();
    let done = () => {};
    const mine = new Promise<void>((resolve) => {
      done = resolve;
    });
    const queued = previous.then(() => mine);
    tokenQueues.set(token, queued);
    await previous;
    try {
      if (tokensSeen.has(token)) {
        const listed = await forward(
          req,
          Buffer.from("Action=DescribeInstances&Version=2016-11-15"),
        );
        const replay = listed.status === 200 ? runInstancesReplay(listed.text, token) : undefined;
        if (replay !== undefined) {
          return {
            status: 200,
            type: "text/xml",
            text: rewriteInstanceStates(replay, (item) => hooks.observe(item, sentAt)),
          };
        }
      }
      tokensSeen.add(token);
      return await forward(req, body);
    } finally {
      done();
      if (tokenQueues.get(token) === queued) tokenQueues.delete(token);
    }
  };
  const reply = (res: ServerResponse, status: number, type: string, text: string) => {
    res.writeHead(status, { "content-type": type, "content-length": Buffer.byteLength(text) });
    res.end(text);
  };
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const sentAt = Date.now();
    const body = await readBody(req);
    const isForm = (req.headers["content-type"] ?? "").includes("x-www-form-urlencoded");
    const params = isForm ? new URLSearchParams(body.toString("utf8")) : new URLSearchParams();
    const action = params.get("Action");
    if (action === "DescribeInstances") {
      const { params: rest, states } = takeStateFilter(params);
      const answer = await forward(req, Buffer.from(rest.toString()));
      if (answer.status !== 200) return reply(res, answer.status, answer.type, answer.text);
      return reply(
        res,
        200,
        answer.type,
        rewriteInstanceStates(answer.text, (item) => hooks.observe(item, sentAt), states),
      );
    }
    if (action === "DescribeInstanceStatus") {
      const answer = await forward(req, body);
      if (answer.status !== 200) return reply(res, answer.status, answer.type, answer.text);
      return reply(
        res,
        200,
        answer.type,
        rewriteStatusStates(answer.text, (id, state) => hooks.observeState(id, state, sentAt)),
      );
    }
    if (action === "GetConsoleOutput") {
      const id = params.get("InstanceId") ?? "";
      const output = hooks.consoleOutput(id);
      if (output !== undefined) {
        const tail = output.subarray(Math.max(0, output.length - CONSOLE_LIMIT));
        const xml = `<?xml version="1.0" encoding="UTF-8"?>\n<GetConsoleOutputResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>nebula-sim</requestId><instanceId>${id}</instanceId><timestamp>${new Date().toISOString()}</timestamp><output>${tail.toString("base64")}</output></GetConsoleOutputResponse>`;
        return reply(res, 200, "text/xml", xml);
      }
    }
    if (
      action === "ModifyInstanceAttribute" &&
      (params.has("UserData.Value") || params.get("Attribute") === "userData")
    ) {
      const refusal = hooks.userDataChange(params.get("InstanceId") ?? "");
      if (refusal !== undefined) {
        return reply(
          res,
          400,
          "text/xml",
          `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>IncorrectInstanceState</Code><Message>${refusal.replace(/[<&>]/g, " ")}</Message></Error></Errors><RequestID>nebula-sim</RequestID></Response>`,
        );
      }
    }
    const token = action === "RunInstances" ? (params.get("ClientToken") ?? "") : "";
    const answer =
      token === ""
        ? await forward(
            req,
            action === "ModifyInstanceAttribute" ? motoUserData(params, body) : body,
          )
        : await runInstances(req, body, token, sentAt);
    if (answer.status === 200) {
      if (
        action === "StopInstances" ||
        action === "TerminateInstances" ||
        action === "StartInstances"
      ) {
        hooks.stateChanged(action, instanceIds(params));
      } else if (action === "RunInstances") {
        for (const item of listInstanceItems(answer.text)) hooks.observe(item, sentAt);
      }
    }
    reply(res, answer.status, answer.type, answer.text);
  };
  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) {
        reply(
          res,
          502,
          "text/xml",
          `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>InternalError</Code><Message>instance-host simulator proxy: ${String(error).replace(/[<&>]/g, " ")}</Message></Error></Errors><RequestID>nebula-sim</RequestID></Response>`,
        );
      } else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ host: "127.0.0.1", port: 0 }, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
