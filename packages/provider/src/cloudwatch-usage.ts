/**
 * Reads the containers' CPU and memory usage back from CloudWatch metrics, where each Pod's host
 * supervisor publishes them (namespace `Nebula`, dimensions `PodUID` and `Container`, metrics
 * `CPUUsageCoreSeconds` and `MemoryWorkingSetBytes`; see docs/contracts.md). Only
 * `cloudwatch:GetMetricData` is called.
 */
import {
  type CloudWatchClient,
  GetMetricDataCommand,
  type MetricDataQuery,
} from "@aws-sdk/client-cloudwatch";
import { z } from "zod";
import { ProviderError, toProviderError } from "./errors.js";

/** The namespace the host supervisor publishes in, unless configured otherwise. */
const DEFAULT_METRICS_NAMESPACE = "Nebula";
/** The container's cumulative CPU time of its current run, core-seconds (a counter; restarts at 0). */
export const CPU_METRIC = "CPUUsageCoreSeconds";
/** The container's working set (memory without the page cache), bytes. */
export const MEMORY_METRIC = "MemoryWorkingSetBytes";
/** GetMetricData takes at most 500 queries per call; each container needs two. */
const MAX_METRIC_QUERIES = 500;

/** One container's latest usage. */
export interface ContainerUsage {
  /** Cumulative CPU time of the container's current run, core-seconds (the latest sample). */
  cpuCoreSeconds: number;
  /**
   * CPU in use, cores: the rate of `cpuCoreSeconds` between its two latest data points. Undefined
   * with a single data point, or when the counter went down between them (the container restarted).
   */
  cpuCores: number | undefined;
  /** Working set, bytes (the latest sample). */
  memoryWorkingSetBytes: number;
  /** Time of the latest data point: the start of its period, the sample's second with the default period of 1 s. */
  timestamp: Date;
}

/** The containers to read, per Pod. */
export interface PodUsageQuery {
  /** The Pod's UID (the `PodUID` dimension). */
  uid: string;
  /** The names of the Pod's containers (the `Container` dimension). */
  containers: readonly string[];
}

/** Options of {@link CloudWatchUsage}. */
export interface CloudWatchUsageOptions {
  /** A CloudWatch client for the Region the hosts publish in. */
  client: CloudWatchClient;
  /** The metrics' namespace (`metrics.namespace` of the provider's configuration). Default `Nebula`. */
  namespace?: string;
  /** Seconds looked back from `now` for data points. Default 300. */
  window?: number;
  /**
   * The period of the data points, seconds. Default 1: the supervisor publishes high-resolution
   * metrics (`StorageResolution` 1), which CloudWatch keeps per second for three hours, so each
   * data point is one sample at the second it was taken. A longer period gives the latest sample it
   * holds (`Maximum` of the CPU counter, which only grows within a run) stamped with the period's
   * start, up to a period earlier than the sample: a rate computed over such points (metrics-server
   * does) is wrong, so keep 1 unless the hosts publish standard-resolution metrics.
   */
  period?: number;
}

const OptionsSchema = z.strictObject({
  client: z.custom<CloudWatchClient>(
    (value) => typeof value === "object" && value !== null && "send" in value,
    "must be a CloudWatchClient",
  ),
  namespace: z.string().min(1).max(255).default(DEFAULT_METRICS_NAMESPACE),
  window: z.number().int().min(1).max(86_400).default(300),
  period: z
    .number()
    .int()
    .refine(
      (p) => [1, 5, 10, 20, 30].includes(p) || (p >= 60 && p % 60 === 0),
      "must be 1, 5, 10, 20, 30 or a multiple of 60 (CloudWatch's periods)",
    )
    .default(1),
});

const PodsSchema = z.array(
  z.object({
    uid: z.string().min(1).max(1024),
    containers: z.array(z.string().min(1).max(1024)),
  }),
);

/** One series of data points, newest first. */
export interface Series {
  timestamps: Date[];
  values: number[];
}

const MetricDataResultSchema = z.object({
  Id: z.string(),
  Timestamps: z.array(z.date()).optional(),
  Values: z.array(z.number()).optional(),
  StatusCode: z.string().optional(),
});
const GetMetricDataOutputSchema = z.object({
  MetricDataResults: z.array(z.unknown()).optional(),
  NextToken: z.string().min(1).optional(),
});

/**
 * Parses one GetMetricData answer at the boundary: its results by query `Id` (the data points of
 * one `Id` may come over several pages; {@link mergeSeries} joins them) and its `NextToken`.
 * Throws a {@link ProviderError} (`Unknown`) when a result's `Timestamps` and `Values` differ in
 * length (the points cannot be paired) or the answer is not GetMetricData's shape.
 */
export function parseMetricDataPage(output: unknown): {
  results: Map<string, Series>;
  nextToken: string | undefined;
} {
  const fail = (message: string, cause?: unknown) =>
    new ProviderError("Unknown", `GetMetricData answered ${message}`, { cause });
  const parsed = GetMetricDataOutputSchema.safeParse(output);
  if (!parsed.success) {
    throw fail(`with an unexpected shape: ${z.prettifyError(parsed.error)}`, parsed.error);
  }
  const results = new Map<string, Series>();
  for (const raw of parsed.data.MetricDataResults ?? []) {
    const result = MetricDataResultSchema.safeParse(raw);
    if (!result.success) {
      throw fail(`a result of an unexpected shape: ${z.prettifyError(result.error)}`, result.error);
    }
    const { Id, Timestamps = [], Values = [] } = result.data;
    if (Timestamps.length !== Values.length) {
      throw fail(
        `${Timestamps.length} timestamps and ${Values.length} values for query ${Id}: its data points cannot be paired`,
      );
    }
    const previous = results.get(Id);
    const series = { timestamps: Timestamps, values: Values };
    results.set(Id, previous === undefined ? series : mergeSeries(previous, series));
  }
  return { results, nextToken: parsed.data.NextToken };
}

/** Joins two series of one query (two pages), newest first, one point per timestamp. */
export function mergeSeries(a: Series, b: Series): Series {
  const byTime = new Map<number, number>();
  for (const s of [a, b]) {
    s.timestamps.forEach((t, i) => {
      const value = s.values[i];
      if (value !== undefined && Number.isFinite(value)) byTime.set(t.getTime(), value);
    });
  }
  const times = [...byTime.keys()].sort((x, y) => y - x);
  return {
    timestamps: times.map((t) => new Date(t)),
    values: times.map((t) => byTime.get(t) as number),
  };
}

/**
 * The latest value of a series and its time (undefined for an empty series). Points are ordered
 * here, not trusted to come ordered.
 */
function latest(series: Series | undefined): { value: number; time: Date } | undefined {
  if (series === undefined) return undefined;
  const sorted = mergeSeries(series, { timestamps: [], values: [] });
  const value = sorted.values[0];
  const time = sorted.timestamps[0];
  return value === undefined || time === undefined ? undefined : { value, time };
}

/**
 * The CPU in use, cores, from the counter's two latest points: (newer − older) / seconds between
 * them. Undefined with fewer than two points, when they share a time, or when the counter went down
 * (the container restarted between them, and its counter began again at 0).
 */
export function cpuRate(series: Series): number | undefined {
  const sorted = mergeSeries(series, { timestamps: [], values: [] });
  const [t1, t0] = sorted.timestamps;
  const [v1, v0] = sorted.values;
  if (t1 === undefined || t0 === undefined || v1 === undefined || v0 === undefined)
    return undefined;
  const seconds = (t1.getTime() - t0.getTime()) / 1000;
  if (seconds <= 0 || v1 < v0) return undefined;
  return (v1 - v0) / seconds;
}

/**
 * Reads the latest CPU and memory usage of Pods' containers from CloudWatch (GetMetricData,
 * up to 250 containers per call, every page), for the virtual node's `/stats/summary` and
 * `/metrics/resource`. Needs `cloudwatch:GetMetricData` (see `policies/controller.json`).
 *
 * @example
 * ```ts
 * const usage = new CloudWatchUsage({ client: new CloudWatchClient({}) });
 * const byPod = await usage.podUsage([{ uid: pod.metadata.uid, containers: ["app", "sidecar"] }]);
 * byPod.get(pod.metadata.uid)?.get("app")?.memoryWorkingSetBytes;
 * ```
 */
export class CloudWatchUsage {
  readonly #client: CloudWatchClient;
  readonly #namespace: string;
  readonly #window: number;
  readonly #period: number;

  /** @param options - the client, and the namespace, window and period (defaults: `Nebula`, 300 s, 1 s). */
  constructor(options: CloudWatchUsageOptions) {
    const parsed = OptionsSchema.safeParse(options);
    if (!parsed.success) {
      throw new ProviderError(
        "InvalidConfiguration",
        `CloudWatchUsage options: ${z.prettifyError(parsed.error)}`,
        { cause: parsed.error },
      );
    }
    this.#client = parsed.data.client;
    this.#namespace = parsed.data.namespace;
    this.#window = parsed.data.window;
    this.#period = parsed.data.period;
  }

  /**
   * The latest usage of every listed container with data in the window before `now`: Pod UID →
   * container name → {@link ContainerUsage}. A container without both metrics in the window is
   * absent from its Pod's map (and a Pod without any, from the result). Throws a
   * {@link ProviderError} (the SDK error as `cause`) when CloudWatch fails.
   */
  async podUsage(
    pods: ReadonlyArray<PodUsageQuery>,
    now: Date = new Date(),
  ): Promise<Map<string, Map<string, ContainerUsage>>> {
    const parsedPods = PodsSchema.safeParse(pods);
    if (!parsedPods.success) {
      throw new ProviderError(
        "InvalidRequest",
        `CloudWatchUsage.podUsage pods: ${z.prettifyError(parsedPods.error)}`,
        { cause: parsedPods.error },
      );
    }
    const targets: { uid: string; container: string }[] = [];
    const seen = new Set<string>();
    for (const pod of parsedPods.data) {
      for (const container of pod.containers) {
        const key = JSON.stringify([pod.uid, container]);
        if (seen.has(key)) continue;
        seen.add(key);
        targets.push({ uid: pod.uid, container });
      }
    }
    const periodMs = this.#period * 1000;
    const end = new Date((Math.floor(now.getTime() / periodMs) + 1) * periodMs);
    const start = new Date(Math.floor((now.getTime() - this.#window * 1000) / periodMs) * periodMs);

    const usage = new Map<string, Map<string, ContainerUsage>>();
    const perCall = Math.floor(MAX_METRIC_QUERIES / 2);
    for (let offset = 0; offset < targets.length; offset += perCall) {
      const batch = targets.slice(offset, offset + perCall);
      const results = await this.#query(batch, start, end);
      batch.forEach((target, i) => {
        const cpu = results.get(`c${i}`);
        const cpuLatest = latest(cpu);
        const memory = latest(results.get(`m${i}`));
        if (cpu === undefined || cpuLatest === undefined || memory === undefined) return;
        let pod = usage.get(target.uid);
        if (pod === undefined) {
          pod = new Map();
          usage.set(target.uid, pod);
        }
        pod.set(target.container, {
          cpuCoreSeconds: cpuLatest.value,
          cpuCores: cpuRate(cpu),
          memoryWorkingSetBytes: memory.value,
          timestamp:
            cpuLatest.time.getTime() >= memory.time.getTime() ? cpuLatest.time : memory.time,
        });
      });
    }
    return usage;
  }

  /** One GetMetricData request (every page) for up to 250 containers; results by query Id. */
  async #query(
    batch: ReadonlyArray<{ uid: string; container: string }>,
    start: Date,
    end: Date,
  ): Promise<Map<string, Series>> {
    const query = (
      id: string,
      metric: string,
      uid: string,
      container: string,
    ): MetricDataQuery => ({
      Id: id,
      ReturnData: true,
      MetricStat: {
        Metric: {
          Namespace: this.#namespace,
          MetricName: metric,
          Dimensions: [
            { Name: "PodUID", Value: uid },
            { Name: "Container", Value: container },
          ],
        },
        Period: this.#period,
        Stat: "Maximum",
      },
    });
    const queries = batch.flatMap((t, i) => [
      query(`c${i}`, CPU_METRIC, t.uid, t.container),
      query(`m${i}`, MEMORY_METRIC, t.uid, t.container),
    ]);
    const all = new Map<string, Series>();
    let token: string | undefined;
    const tokens = new Set<string>();
    do {
      let output: unknown;
      try {
        output = await this.#client.send(
          new GetMetricDataCommand({
            MetricDataQueries: queries,
            StartTime: start,
            EndTime: end,
            ScanBy: "TimestampDescending",
            ...(token === undefined ? {} : { NextToken: token }),
          }),
        );
      } catch (error) {
        throw toProviderError(
          error,
          `GetMetricData of ${batch.length} containers in namespace ${this.#namespace}`,
        );
      }
      const page = parseMetricDataPage(output);
      for (const [id, series] of page.results) {
        const previous = all.get(id);
        all.set(id, previous === undefined ? series : mergeSeries(previous, series));
      }
      token = page.nextToken;
      // A token seen before would loop for ever: stop (every point it would give is already in).
      if (token !== undefined && tokens.has(token)) break;
      if (token !== undefined) tokens.add(token);
    } while (token !== undefined);
    return all;
  }
}
