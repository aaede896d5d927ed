/**
 * The state overlay: how the simulator shows EC2's intermediate states that moto skips.
 *
 * moto flips an instance to `running`, `stopped` or `terminated` the moment it is asked, and its
 * state manager covers no EC2 model, so moto cannot be made to hold `pending`, `stopping` or
 * `shutting-down`. The simulator therefore puts a small EC2 proxy in front of moto
 * ({@link InstanceHosts.ec2Endpoint}) and rewrites the instance items of `DescribeInstances`
 * answers while a guest is really booting or shutting down. This module is the pure part: it
 * finds each instance in the EC2 Query-protocol XML and splices in the state the simulator
 * decided.
 *
 * @packageDocumentation
 */

/** An EC2 instance state as EC2 reports it: code and name. */
export interface Ec2State {
  /** `0` pending, `16` running, `32` shutting-down, `48` terminated, `64` stopping, `80` stopped. */
  readonly code: number;
  /** The state name. */
  readonly name: "pending" | "running" | "shutting-down" | "terminated" | "stopping" | "stopped";
}

/** EC2's state codes by name. */
export const EC2_STATES = {
  pending: { code: 0, name: "pending" },
  running: { code: 16, name: "running" },
  "shutting-down": { code: 32, name: "shutting-down" },
  terminated: { code: 48, name: "terminated" },
  stopping: { code: 64, name: "stopping" },
  stopped: { code: 80, name: "stopped" },
} as const satisfies Record<string, Ec2State>;

/** One instance as found in an EC2 XML answer. */
export interface InstanceItem {
  /** The instance ID. */
  readonly instanceId: string;
  /** The state name the answer holds (moto's truth). */
  readonly stateName: string;
  /** The instance's tags. */
  readonly tags: Readonly<Record<string, string>>;
}

/** What to show for one instance instead of moto's truth. */
export interface StateOverride {
  /** The state to show. */
  readonly state?: Ec2State;
  /** The state reason to show (`stateReason` element). */
  readonly stateReason?: { readonly code: string; readonly message: string };
}

interface Span {
  start: number;
  end: number;
}

interface ItemScan {
  span: Span;
  instanceId: string;
  stateName: string;
  tags: Record<string, string>;
  state?: Span;
  stateReason?: Span;
  tagKey?: string;
  clientToken?: string;
}

interface ReservationScan {
  span: Span;
  items: ItemScan[];
}

const TAG = /<(\/?)([A-Za-z_][\w.:-]*)(?:\s[^<>]*?)?(\/?)>/g;

function unescapeXml(text: string): string {
  return text
    .replace(/&lt;/g, "<")
    .replace(/&gt;/g, ">")
    .replace(/&quot;/g, '"')
    .replace(/&apos;/g, "'")
    .replace(/&#(\d+);/g, (_, code: string) => String.fromCodePoint(Number(code)))
    .replace(/&amp;/g, "&");
}

function escapeXml(text: string): string {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
}

/** Scans instance items (`instancesSet/item`) and their reservations. Never throws. */
function scan(xml: string): { reservations: ReservationScan[]; loose: ItemScan[] } {
  const stack: { name: string; start: number; contentStart: number }[] = [];
  const reservations: ReservationScan[] = [];
  const loose: ItemScan[] = [];
  let reservation: ReservationScan | undefined;
  let reservationDepth = -1;
  let item: ItemScan | undefined;
  let itemDepth = -1;
  TAG.lastIndex = 0;
  for (let match = TAG.exec(xml); match !== null; match = TAG.exec(xml)) {
    const [whole, closing, name = "", selfClosing] = match;
    const start = match.index;
    const end = start + whole.length;
    if (selfClosing === "/") {
      if (item !== undefined && stack.length === itemDepth + 1) {
        if (name === "stateReason") item.stateReason = { start, end };
        if (name === "instanceState") item.state = { start, end };
      }
      continue;
    }
    if (closing !== "/") {
      const parent = stack.at(-1)?.name;
      stack.push({ name, start, contentStart: end });
      if (name === "item" && parent === "reservationSet") {
        reservation = { span: { start, end: -1 }, items: [] };
        reservationDepth = stack.length - 1;
      } else if (name === "item" && parent === "instancesSet") {
        item = { span: { start, end: -1 }, instanceId: "", stateName: "", tags: {} };
        itemDepth = stack.length - 1;
      }
      continue;
    }
    const open = stack.pop();
    if (open === undefined || open.name !== name) return { reservations: [], loose: [] };
    const depth = stack.length;
    const text = () => unescapeXml(xml.slice(open.contentStart, start));
    if (item !== undefined) {
      if (depth === itemDepth) {
        item.span.end = end;
        if (reservation !== undefined) reservation.items.push(item);
        else loose.push(item);
        item = undefined;
      } else if (depth === itemDepth + 1) {
        if (name === "instanceId") item.instanceId = text();
        if (name === "clientToken") item.clientToken = text();
        if (name === "instanceState") item.state = { start: open.start, end };
        if (name === "stateReason") item.stateReason = { start: open.start, end };
      } else if (depth === itemDepth + 2 && stack[itemDepth + 1]?.name === "instanceState") {
        if (name === "name") item.stateName = text();
      } else if (
        depth === itemDepth + 3 &&
        stack[itemDepth + 1]?.name === "tagSet" &&
        stack[itemDepth + 2]?.name === "item"
      ) {
        if (name === "key") item.tagKey = text();
        if (name === "value" && item.tagKey !== undefined) item.tags[item.tagKey] = text();
      }
    } else if (reservation !== undefined && depth === reservationDepth) {
      reservation.span.end = end;
      reservations.push(reservation);
      reservation = undefined;
    }
  }
  return { reservations, loose };
}

/**
 * Lists the instances in an EC2 Query-protocol answer (`DescribeInstances`, `RunInstances`,
 * ...): ID, state name and tags. Unparseable XML gives an empty list.
 *
 * @example
 * ```ts
 * listInstanceItems(xml).map((i) => i.instanceId);
 * ```
 */
export function listInstanceItems(xml: string): InstanceItem[] {
  const { reservations, loose } = scan(xml);
  return [...reservations.flatMap((r) => r.items), ...loose].map((item) => ({
    instanceId: item.instanceId,
    stateName: item.stateName,
    tags: item.tags,
  }));
}

function renderState(state: Ec2State): string {
  return `<instanceState><code>${state.code}</code><name>${state.name}</name></instanceState>`;
}

function renderReason(reason: { code: string; message: string }): string {
  return `<stateReason><code>${escapeXml(reason.code)}</code><message>${escapeXml(reason.message)}</message></stateReason>`;
}

/**
 * Rewrites the instance items of an EC2 XML answer: for each instance, `decide` returns what to
 * show instead of moto's truth (or `undefined` to leave it). When `keepStates` is given (the
 * `instance-state-name` filter the proxy took off the request before moto saw it), instances
 * whose shown state is not in it are dropped, and so are reservations left empty.
 * Unparseable XML is returned unchanged.
 *
 * @param xml - the answer from moto.
 * @param decide - the overlay decision per instance.
 * @param keepStates - the state names the caller filtered on, if any.
 * @example
 * ```ts
 * const shown = rewriteInstanceStates(xml, (i) => (i.instanceId === id ? { state: EC2_STATES.stopping } : undefined));
 * ```
 */
export function rewriteInstanceStates(
  xml: string,
  decide: (item: InstanceItem) => StateOverride | undefined,
  keepStates?: ReadonlySet<string>,
): string {
  const { reservations, loose } = scan(xml);
  const edits: { start: number; end: number; text: string }[] = [];
  const editItem = (item: ItemScan): boolean => {
    const override = decide({
      instanceId: item.instanceId,
      stateName: item.stateName,
      tags: item.tags,
    });
    const shown = override?.state?.name ?? item.stateName;
    if (keepStates !== undefined && !keepStates.has(shown)) {
      edits.push({ start: item.span.start, end: item.span.end, text: "" });
      return false;
    }
    if (override?.state !== undefined && item.state !== undefined) {
      edits.push({ ...item.state, text: renderState(override.state) });
    }
    if (override?.stateReason !== undefined) {
      const text = renderReason(override.stateReason);
      if (item.stateReason !== undefined) edits.push({ ...item.stateReason, text });
      else {
        const at = xml.lastIndexOf("</item>", item.span.end);
        edits.push({ start: at, end: at, text });
      }
    }
    return true;
  };
  for (const reservation of reservations) {
    const before = edits.length;
    const kept = reservation.items.map(editItem).filter(Boolean).length;
    if (kept === 0 && reservation.items.length > 0) {
      edits.length = before;
      edits.push({ start: reservation.span.start, end: reservation.span.end, text: "" });
    }
  }
  for (const item of loose) editItem(item);
  edits.sort((a, b) => b.start - a.start);
  let out = xml;
  for (const edit of edits) out = out.slice(0, edit.start) + edit.text + out.slice(edit.end);
  return out;
}

/**
 * What EC2 answers a `RunInstances` repeated with a `ClientToken` it has already launched for: the
 * same reservation. Found in a `DescribeInstances` answer (moto keeps each instance's token but
 * launches again for a repeated one) and returned as a `RunInstancesResponse`; `undefined` when
 * no instance was launched with `token` (or the XML cannot be read).
 *
 * @example
 * ```ts
 * const replay = runInstancesReplay(describeXml, "pod-uid-0"); // <RunInstancesResponse>… or undefined
 * ```
 */
export function runInstancesReplay(describeXml: string, token: string): string | undefined {
  if (token === "") return undefined;
  const { reservations } = scan(describeXml);
  const reservation = reservations.find((r) => r.items.some((i) => i.clientToken === token));
  if (reservation === undefined) return undefined;
  const open = describeXml.indexOf(">", reservation.span.start) + 1;
  const inner = describeXml.slice(open, reservation.span.end - "</item>".length);
  return `<?xml version="1.0" encoding="UTF-8"?>\n<RunInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>nebula-sim-replay</requestId>${inner}</RunInstancesResponse>`;
}

/**
 * Removes instance items from an EC2 XML answer: every instance for which `drop` returns true
 * goes, and so does a reservation left without instances. Unparseable XML is returned unchanged.
 *
 * @param xml - the answer from moto.
 * @param drop - whether to leave this instance out.
 * @example
 * ```ts
 * const listed = removeInstanceItems(xml, (i) => hidden.has(i.instanceId));
 * ```
 */
export function removeInstanceItems(xml: string, drop: (item: InstanceItem) => boolean): string {
  const { reservations, loose } = scan(xml);
  const edits: Span[] = [];
  const dropped = (item: ItemScan): boolean =>
    drop({ instanceId: item.instanceId, stateName: item.stateName, tags: item.tags });
  for (const reservation of reservations) {
    const gone = reservation.items.filter(dropped);
    if (gone.length > 0 && gone.length === reservation.items.length) edits.push(reservation.span);
    else edits.push(...gone.map((item) => item.span));
  }
  edits.push(...loose.filter(dropped).map((item) => item.span));
  edits.sort((a, b) => b.start - a.start);
  let out = xml;
  for (const edit of edits) out = out.slice(0, edit.start) + out.slice(edit.end);
  return out;
}

/**
 * Rewrites the states of a `DescribeInstanceStatus` answer (`instanceStatusSet/item`): for each
 * instance, `decide` returns the state to show instead of moto's (or `undefined` to leave it).
 * The answer has no tags and no state reason, only the state. Unparseable XML is returned
 * unchanged.
 *
 * @param xml - the answer from moto.
 * @param decide - the overlay decision per instance: its ID and moto's state name.
 * @example
 * ```ts
 * const shown = rewriteStatusStates(xml, (id) => (id === stopping ? EC2_STATES.stopping : undefined));
 * ```
 */
export function rewriteStatusStates(
  xml: string,
  decide: (instanceId: string, stateName: string) => Ec2State | undefined,
): string {
  const stack: { name: string; start: number; contentStart: number }[] = [];
  const edits: { start: number; end: number; text: string }[] = [];
  let item: { depth: number; instanceId: string; stateName: string; state?: Span } | undefined;
  TAG.lastIndex = 0;
  for (let match = TAG.exec(xml); match !== null; match = TAG.exec(xml)) {
    const [whole, closing, name = "", selfClosing] = match;
    const start = match.index;
    const end = start + whole.length;
    if (selfClosing === "/") continue;
    if (closing !== "/") {
      const parent = stack.at(-1)?.name;
      stack.push({ name, start, contentStart: end });
      if (name === "item" && parent === "instanceStatusSet") {
        item = { depth: stack.length - 1, instanceId: "", stateName: "" };
      }
      continue;
    }
    const open = stack.pop();
    if (open === undefined || open.name !== name) return xml;
    if (item === undefined) continue;
    const depth = stack.length;
    if (depth === item.depth) {
      const shown = decide(item.instanceId, item.stateName);
      if (shown !== undefined && item.state !== undefined) {
        edits.push({ ...item.state, text: renderState(shown) });
      }
      item = undefined;
    } else if (depth === item.depth + 1) {
      if (name === "instanceId") item.instanceId = unescapeXml(xml.slice(open.contentStart, start));
      if (name === "instanceState") item.state = { start: open.start, end };
    } else if (depth === item.depth + 2 && stack[item.depth + 1]?.name === "instanceState") {
      if (name === "name") item.stateName = unescapeXml(xml.slice(open.contentStart, start));
    }
  }
  edits.sort((a, b) => b.start - a.start);
  let out = xml;
  for (const edit of edits) out = out.slice(0, edit.start) + edit.text + out.slice(edit.end);
  return out;
}
