import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type ContainerUsageSample,
  forbiddenMessage,
  isGetOnlyRoute,
  isRunningPod,
  isStreamRoute,
  kubeletAuthorization,
  kubeletAuthorizations,
  kubeletRoute,
  LogEncoder,
  logRun,
  logTimestamp,
  parseLogQuery,
  podList,
  podUsageQuery,
  resourceMetrics,
  runningPodList,
  statsSummary,
} from "./kubelet-api.js";

const NOW = new Date("2026-12-01T05:00:00.000Z");

function pod(statuses: V1ContainerStatus[], extra: Partial<V1Pod["spec"]> = {}): V1Pod {
  return {
    metadata: { name: "web", namespace: "shop", uid: "u-1" },
    spec: { containers: statuses.map((s) => ({ name: s.name, image: s.image })), ...extra },
    status: {
      phase: "Running",
      startTime: new Date("2026-12-01T04:00:00Z"),
      containerStatuses: statuses,
    },
  };
}

function status(name: string, fields: Partial<V1ContainerStatus>): V1ContainerStatus {
  return { name, image: "busybox", imageID: "", ready: false, restartCount: 0, ...fields };
}

const running = (startedAt = "2026-12-01T04:10:00Z") => ({
  running: { startedAt: new Date(startedAt) },
});
const terminated = (exitCode: number) => ({
  terminated: { exitCode, containerID: "docker://x" },
});

describe("kubeletRoute", () => {
  it("routes the paths the virtual node serves and decodes the log path's segments", () => {
    expect(kubeletRoute("/healthz")).toEqual({ kind: "healthz" });
    expect(kubeletRoute("/runningpods/")).toEqual({ kind: "runningPods" });
    expect(kubeletRoute("/stats/summary")).toEqual({ kind: "statsSummary" });
    expect(kubeletRoute("/metrics/resource")).toEqual({ kind: "metricsResource" });
    expect(kubeletRoute("/containerLogs/shop/web-1/app%2Dx")).toEqual({
      kind: "containerLogs",
      namespace: "shop",
      pod: "web-1",
      container: "app-x",
    });
    expect(kubeletRoute("/containerLogs/shop")).toEqual({
      kind: "containerLogs",
      namespace: "shop",
      pod: "",
      container: "",
    });
    expect(kubeletRoute("/run/shop/web/app")).toEqual({ kind: "notFound" });
    expect(kubeletRoute("/stats")).toEqual({ kind: "notFound" });
  });

  it("routes /exec, /attach and /portForward in both of the kubelet's path shapes, segments decoded", () => {
    expect(kubeletRoute("/exec/shop/web/app")).toEqual({
      kind: "exec",
      namespace: "shop",
      pod: "web",
      uid: undefined,
      container: "app",
    });
    expect(kubeletRoute("/exec/shop/web/u-1/app%2Dx")).toEqual({
      kind: "exec",
      namespace: "shop",
      pod: "web",
      uid: "u-1",
      container: "app-x",
    });
    expect(kubeletRoute("/attach/shop/web/app/")).toEqual({
      kind: "attach",
      namespace: "shop",
      pod: "web",
      uid: undefined,
      container: "app",
    });
    expect(kubeletRoute("/attach/shop/web/u-1/app")).toMatchObject({ kind: "attach", uid: "u-1" });
    expect(kubeletRoute("/portForward/shop/web")).toEqual({
      kind: "portForward",
      namespace: "shop",
      pod: "web",
      uid: undefined,
    });
    expect(kubeletRoute("/portForward/shop/web/u-1")).toEqual({
      kind: "portForward",
      namespace: "shop",
      pod: "web",
      uid: "u-1",
    });
  });

  it("routes no stream path with another number of segments, or an empty one, as go-restful matches none", () => {
    for (const path of [
      "/exec",
      "/exec/shop",
      "/exec/shop/web",
      "/exec/shop/web/u-1/app/more",
      "/exec/shop//app",
      "/attach/shop/web",
      "/portForward",
      "/portForward/shop",
      "/portForward/shop/web/u-1/more",
      "/portforward/shop/web",
      "/execx/shop/web/app",
    ]) {
      expect(kubeletRoute(path), path).toEqual({ kind: "notFound" });
    }
  });

  it("gives back any stream path's segments as they were before encoding", () => {
    const segment = fc.string({ minLength: 1, maxLength: 12 });
    fc.assert(
      fc.property(
        fc.constantFrom("exec", "attach", "portForward"),
        segment,
        segment,
        fc.option(segment, { nil: undefined }),
        segment,
        (kind, namespace, pod, uid, container) => {
          const parts = [namespace, pod, ...(uid === undefined ? [] : [uid])];
          if (kind !== "portForward") parts.push(container);
          const route = kubeletRoute(`/${kind}/${parts.map(encodeURIComponent).join("/")}`);
          expect(isStreamRoute(route)).toBe(true);
          expect(route).toEqual({
            kind,
            namespace,
            pod,
            uid,
            ...(kind === "portForward" ? {} : { container }),
          });
        },
      ),
    );
  });

  it("is total: any path is a route, never a throw", () => {
    fc.assert(
      fc.property(fc.string(), (path) => {
        expect(kubeletRoute(`/${path}`).kind).toBeTypeOf("string");
      }),
    );
  });

  it("serves /pods, and /runningpods/ with its slash (without: Go's ServeMux 301), as the kubelet registers them", () => {
    expect(kubeletRoute("/pods")).toEqual({ kind: "pods" });
    expect(kubeletRoute("/pods/")).toEqual({ kind: "pods" });
    expect(kubeletRoute("/podsx")).toEqual({ kind: "notFound" });
    expect(kubeletRoute("/runningpods")).toEqual({ kind: "redirect", location: "/runningpods/" });
    expect(kubeletRoute("/runningpods/x")).toEqual({ kind: "notFound" });
    expect(kubeletRoute("/healthz/ping")).toEqual({ kind: "healthz" });
    expect(kubeletRoute("/healthz/syncloop")).toEqual({ kind: "healthz" });
    expect(kubeletRoute("/healthz/nope")).toEqual({ kind: "notFound" });
  });

  it("answers GET only where the kubelet filters to GET; /healthz and /metrics/resource take any method", () => {
    const getOnly = ["/pods", "/runningpods/", "/stats/summary", "/containerLogs/a/b/c"];
    for (const path of getOnly) expect(isGetOnlyRoute(kubeletRoute(path))).toBe(true);
    for (const path of ["/healthz", "/metrics/resource", "/exec/a/b/c", "/runningpods"]) {
      expect(isGetOnlyRoute(kubeletRoute(path))).toBe(false);
    }
  });

  it("takes /exec, /attach and /portForward as streams, nothing else", () => {
    for (const path of ["/exec/a/b/c", "/attach/a/b/u/c", "/portForward/a/b"]) {
      expect(isStreamRoute(kubeletRoute(path))).toBe(true);
    }
    for (const path of ["/containerLogs/a/b/c", "/pods", "/exec/a", "/healthz"]) {
      expect(isStreamRoute(kubeletRoute(path))).toBe(false);
    }
  });
});

describe("kubeletAuthorization", () => {
  it("maps paths to the kubelet's subresources and methods to verbs", () => {
    const cases: Array<[string, string, string, string]> = [
      ["GET", "/stats/summary", "get", "stats"],
      ["GET", "/metrics/resource", "get", "metrics"],
      ["GET", "/metrics", "get", "metrics"],
      ["GET", "/logs/", "get", "log"],
      ["GET", "/healthz", "get", "proxy"],
      ["GET", "/pods", "get", "proxy"],
      ["GET", "/containerLogs/a/b/c", "get", "proxy"],
      ["GET", "/runningpods/", "get", "proxy"],
      ["POST", "/exec/a/b/c", "create", "proxy"],
      ["GET", "/exec/a/b/u/c", "get", "proxy"],
      ["POST", "/attach/a/b/c", "create", "proxy"],
      ["GET", "/portForward/a/b", "get", "proxy"],
      ["POST", "/portForward/a/b/u", "create", "proxy"],
      ["HEAD", "/stats/summary", "", "stats"],
      ["GET", "/statsx", "get", "proxy"],
    ];
    for (const [method, path, verb, subresource] of cases) {
      expect(kubeletAuthorization(method, path, "vn")).toEqual({
        verb,
        resource: "nodes",
        subresource,
        name: "vn",
      });
    }
  });
});

describe("kubeletAuthorizations", () => {
  it("authorizes every stream path as nodes/proxy alone, the verb from the method, as the kubelet does", () => {
    const verbs: Record<string, string> = { GET: "get", POST: "create", PUT: "update" };
    fc.assert(
      fc.property(
        fc.constantFrom("GET", "POST", "PUT", "OPTIONS"),
        fc.constantFrom("exec", "attach", "portForward"),
        fc.array(fc.stringMatching(/^[a-z0-9-]{1,10}$/), { minLength: 2, maxLength: 4 }),
        (method, kind, segments) => {
          expect(kubeletAuthorizations(method, `/${kind}/${segments.join("/")}`, "vn")).toEqual([
            { verb: verbs[method] ?? "", resource: "nodes", subresource: "proxy", name: "vn" },
          ]);
        },
      ),
    );
  });

  it("tries the fine-grained subresource first, then proxy, as the kubelet's GetRequestAttributes does", () => {
    const subresources = (path: string) =>
      kubeletAuthorizations("GET", path, "vn").map((a) => a.subresource);
    expect(subresources("/pods")).toEqual(["pods", "proxy"]);
    expect(subresources("/pods/")).toEqual(["pods", "proxy"]);
    expect(subresources("/runningpods/")).toEqual(["pods", "proxy"]);
    expect(subresources("/runningpods")).toEqual(["pods", "proxy"]);
    expect(subresources("/healthz")).toEqual(["healthz", "proxy"]);
    expect(subresources("/healthz/ping")).toEqual(["healthz", "proxy"]);
    expect(subresources("/configz")).toEqual(["configz", "proxy"]);
    expect(subresources("/stats/summary")).toEqual(["stats"]);
    expect(subresources("/metrics/resource")).toEqual(["metrics"]);
    expect(subresources("/containerLogs/a/b/c")).toEqual(["proxy"]);
    expect(subresources("/podsx")).toEqual(["proxy"]);
    expect(subresources("/exec/a/b/c")).toEqual(["proxy"]);
    expect(subresources("/attach/a/b/u/c")).toEqual(["proxy"]);
    expect(subresources("/portForward/a/b")).toEqual(["proxy"]);
    expect(kubeletAuthorizations("GET", "/pods", "vn")[0]).toEqual({
      verb: "get",
      resource: "nodes",
      subresource: "pods",
      name: "vn",
    });
  });

  it("refuses in the kubelet's words, with every subresource it tried", () => {
    expect(forbiddenMessage("tenant", kubeletAuthorizations("GET", "/pods", "vn"))).toBe(
      "Forbidden (user=tenant, verb=get, resource=nodes, subresource(s)=[pods proxy])\n",
    );
  });
});

describe("parseLogQuery", () => {
  const parse = (q: string) => parseLogQuery(new URLSearchParams(q), NOW);

  it("reads every PodLogOptions field the kubelet reads", () => {
    expect(
      parse("follow=true&previous=1&timestamps=true&tailLines=5&limitBytes=10&sinceSeconds=60"),
    ).toEqual({
      ok: true,
      options: {
        follow: true,
        previous: true,
        timestamps: true,
        tailLines: 5,
        limitBytes: 10,
        since: new Date("2026-12-01T04:59:00.000Z"),
      },
    });
    expect(parse("sinceTime=2026-12-01T04:00:00Z")).toEqual({
      ok: true,
      options: {
        follow: false,
        previous: false,
        timestamps: false,
        since: new Date("2026-12-01T04:00:00Z"),
      },
    });
  });

  it("takes the old `tail` name, `all` meaning no limit", () => {
    expect(parse("tail=3")).toMatchObject({ ok: true, options: { tailLines: 3 } });
    expect(parse("tail=all&tailLines=3")).toEqual({
      ok: true,
      options: { follow: false, previous: false, timestamps: false },
    });
  });

  it("answers undecodable queries 400 and invalid ones 422, in the kubelet's words", () => {
    for (const q of ["tailLines=x", "follow=maybe", "sinceTime=yesterday", "limitBytes=1.5"]) {
      expect(parse(q)).toEqual({
        ok: false,
        status: 400,
        message: '{"message": "Unable to decode query."}',
      });
    }
    for (const q of [
      "tailLines=-1",
      "limitBytes=0",
      "sinceSeconds=0",
      "sinceSeconds=5&sinceTime=2026-12-01T04:00:00Z",
    ]) {
      expect(parse(q)).toEqual({
        ok: false,
        status: 422,
        message: '{"message": "Invalid request."}',
      });
    }
  });

  it("refuses a split stream, which the virtual node does not keep", () => {
    expect(parse("stream=Stderr")).toMatchObject({ ok: false, status: 400 });
    expect(parse("stream=All")).toMatchObject({ ok: true });
  });

  it("is total: any query is an answer, never a throw", () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.string(), fc.string()), { maxLength: 8 }), (pairs) => {
        const result = parseLogQuery(new URLSearchParams(pairs), NOW);
        expect(typeof result.ok).toBe("boolean");
      }),
    );
  });
});

describe("logRun", () => {
  it("reads the running run, its restart count naming it", () => {
    const p = pod([status("app", { restartCount: 2, state: running(), lastState: terminated(1) })]);
    expect(logRun(p, "app", false)).toEqual({
      ok: true,
      running: true,
      ref: { namespace: "shop", pod: "web", podUid: "u-1", container: "app", restart: 2 },
    });
    expect(logRun(p, "app", true)).toMatchObject({ ok: true, running: false, ref: { restart: 1 } });
  });

  it("reads the last terminated run while the next one waits in back-off", () => {
    const p = pod([
      status("app", {
        restartCount: 3,
        state: { waiting: { reason: "CrashLoopBackOff" } },
        lastState: terminated(2),
      }),
    ]);
    expect(logRun(p, "app", false)).toMatchObject({
      ok: true,
      running: false,
      ref: { restart: 2 },
    });
    expect(logRun(p, "app", true)).toMatchObject({ ok: true, ref: { restart: 2 } });
  });

  it("reads a terminated container's last run after the instance is gone", () => {
    const p = pod([status("app", { restartCount: 0, state: terminated(0) })]);
    expect(logRun(p, "app", false)).toMatchObject({
      ok: true,
      running: false,
      ref: { restart: 0 },
    });
  });

  it("refuses in the kubelet's words", () => {
    const never = pod([status("app", { state: { waiting: { reason: "ContainerCreating" } } })]);
    expect(logRun(never, "app", false)).toEqual({
      ok: false,
      status: 400,
      message: 'container "app" in pod "web" is waiting to start: ContainerCreating',
    });
    expect(logRun(never, "app", true)).toEqual({
      ok: false,
      status: 400,
      message: 'previous terminated container "app" in pod "web" not found',
    });
    const pulling = pod([status("app", { state: { waiting: { reason: "ImagePullBackOff" } } })]);
    expect(logRun(pulling, "app", false)).toMatchObject({
      message: 'container "app" in pod "web" is waiting to start: trying and failing to pull image',
    });
    expect(logRun(pod([]), "app", false)).toMatchObject({
      message: 'container "app" in pod "web" is not available',
    });
  });
});

describe("LogEncoder", () => {
  const line = (message: string) => ({ timestamp: new Date("2026-12-01T05:00:00.123Z"), message });

  it("writes lines as the kubelet does, with fixed-width nanosecond timestamps", () => {
    expect(logTimestamp(new Date("2026-12-01T05:00:00.120Z"))).toBe(
      "2026-12-01T05:00:00.120000000Z",
    );
    const plain = new LogEncoder({ timestamps: false });
    expect(plain.encode(line("a")).toString()).toBe("a\n");
    const stamped = new LogEncoder({ timestamps: true });
    expect(stamped.encode(line("a")).toString()).toBe("2026-12-01T05:00:00.123000000Z a\n");
  });

  it("gives out exactly limitBytes bytes of the unlimited output, cutting mid-line", () => {
    fc.assert(
      fc.property(
        fc.array(fc.string({ unit: "grapheme", maxLength: 20 }), { maxLength: 30 }),
        fc.integer({ min: 1, max: 400 }),
        fc.boolean(),
        (messages, limitBytes, timestamps) => {
          const full = Buffer.concat(
            messages.map((m) => new LogEncoder({ timestamps }).encode(line(m))),
          );
          const limited = new LogEncoder({ timestamps, limitBytes });
          const out = Buffer.concat(messages.map((m) => limited.encode(line(m))));
          expect(out.equals(full.subarray(0, limitBytes))).toBe(true);
          expect(limited.done).toBe(full.length >= limitBytes);
        },
      ),
    );
  });
});

describe("usage views", () => {
  const sample = (
    cpuCoreSeconds: number,
    cpuCores: number | undefined,
    memory: number,
  ): ContainerUsageSample => ({
    cpuCoreSeconds,
    cpuCores,
    memoryWorkingSetBytes: memory,
    timestamp: new Date("2026-12-01T04:59:30Z"),
  });
  const three = pod([
    status("a", { state: running() }),
    status("b", { state: running() }),
    status("c", { state: running() }),
  ]);
  const done = {
    ...pod([status("x", { state: terminated(0) })]),
    metadata: { name: "done", namespace: "shop", uid: "u-2" },
  };
  const usage = new Map([
    [
      "u-1",
      new Map([
        ["a", sample(1.5, 0.25, 100)],
        ["b", sample(2, 0.5, 200)],
        ["c", sample(0.5, undefined, 300)],
      ]),
    ],
  ]);
  const view = {
    nodeName: "vn",
    startTime: new Date("2026-12-01T03:00:00Z"),
    pods: [three, done],
    usage,
  };

  it("asks for the running containers of active Pods only", () => {
    expect(podUsageQuery([three, done])).toEqual([{ uid: "u-1", containers: ["a", "b", "c"] }]);
  });

  it("/stats/summary lists every running container, and sums Pod and Node", () => {
    const summary = statsSummary(view) as {
      node: {
        cpu: { usageCoreNanoSeconds: number; usageNanoCores?: number };
        memory: { workingSetBytes: number };
      };
      pods: Array<{
        podRef: { uid: string };
        containers: Array<{ name: string; cpu: { usageNanoCores?: number } }>;
      }>;
    };
    expect(summary.pods.map((p) => p.podRef.uid)).toEqual(["u-1"]);
    expect(summary.pods[0]?.containers.map((c) => c.name)).toEqual(["a", "b", "c"]);
    expect(summary.pods[0]?.containers[0]?.cpu.usageNanoCores).toBe(250_000_000);
    expect(summary.node.cpu.usageCoreNanoSeconds).toBe(4_000_000_000);
    // One container without a rate: the sum has none either, rather than a wrong one.
    expect(summary.node.cpu.usageNanoCores).toBeUndefined();
    expect(summary.node.memory.workingSetBytes).toBe(600);
  });

  it("/metrics/resource has the kubelet's series, label order and families", () => {
    const text = resourceMetrics(view);
    const ts = new Date("2026-12-01T04:59:30Z").getTime();
    expect(text).toContain(
      `container_cpu_usage_seconds_total{container="a",namespace="shop",pod="web"} 1.5 ${ts}\n`,
    );
    expect(text).toContain(
      `container_memory_working_set_bytes{container="c",namespace="shop",pod="web"} 300 ${ts}\n`,
    );
    expect(text).toContain(`pod_cpu_usage_seconds_total{namespace="shop",pod="web"} 4 ${ts}\n`);
    expect(text).toContain(`pod_memory_working_set_bytes{namespace="shop",pod="web"} 600 ${ts}\n`);
    expect(text).toContain(`node_memory_working_set_bytes 600 ${ts}\n`);
    expect(text).toContain("resource_scrape_error 0\n");
    const families = [...text.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]);
    expect(families).toEqual([...families].sort());
    expect(text).not.toContain('pod="done"');
  });

  it("reports an idle container's CPU as 1 ns, never 0, so metrics-server keeps its Pod", () => {
    const idle = new Map([
      [
        "u-1",
        new Map([
          ["a", sample(0, 0, 100)],
          ["b", sample(0, 0, 200)],
          ["c", sample(0, 0, 300)],
        ]),
      ],
    ]);
    const text = resourceMetrics({ ...view, usage: idle });
    const ts = new Date("2026-12-01T04:59:30Z").getTime();
    expect(text).toContain(
      `container_cpu_usage_seconds_total{container="a",namespace="shop",pod="web"} 1e-9 ${ts}\n`,
    );
    expect(text).toContain(`node_cpu_usage_seconds_total 1e-9 ${ts}\n`);
    expect(text).not.toMatch(/_cpu_usage_seconds_total(\{[^}]*\})? 0 /);
  });

  it("serves the Node's own counter when given, never less than the sum of its runs", () => {
    const ts = new Date("2026-12-01T04:59:30Z").getTime();
    expect(resourceMetrics({ ...view, nodeCpuCoreSeconds: 10 })).toContain(
      `node_cpu_usage_seconds_total 10 ${ts}\n`,
    );
    expect(resourceMetrics({ ...view, nodeCpuCoreSeconds: 1 })).toContain(
      `node_cpu_usage_seconds_total 4 ${ts}\n`,
    );
    const summary = statsSummary({ ...view, nodeCpuCoreSeconds: 10 }) as {
      node: { cpu: { usageCoreNanoSeconds: number } };
    };
    expect(summary.node.cpu.usageCoreNanoSeconds).toBe(10e9);
  });

  it("leaves out the families it has no samples for", () => {
    const text = resourceMetrics({ ...view, usage: new Map() }, true);
    expect(text).toBe(
      "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n" +
        "# TYPE resource_scrape_error gauge\nresource_scrape_error 1\n",
    );
  });

  it("/runningpods/ is a PodList of Pods with a running container, each as the runtime's ToAPIPod builds it", () => {
    expect(runningPodList([three, done])).toEqual({
      kind: "PodList",
      apiVersion: "v1",
      metadata: {},
      items: [
        {
          metadata: { name: "web", namespace: "shop", uid: "u-1" },
          spec: {
            containers: ["a", "b", "c"].map((name) => ({ name, image: "busybox", resources: {} })),
          },
          status: {},
        },
      ],
    });
    // Go writes an empty list's nil items as null.
    expect(runningPodList([done])).toEqual({
      kind: "PodList",
      apiVersion: "v1",
      metadata: {},
      items: null,
    });
  });

  it("/runningpods/ leaves out a terminal Pod, and a deleting one whose instance no longer runs", () => {
    const failedButStale = { ...three, status: { ...three.status, phase: "Failed" } };
    expect(isRunningPod(failedButStale)).toBe(false);
    expect(isRunningPod({ ...three, status: { ...three.status, phase: "Succeeded" } })).toBe(false);
    const deleting: V1Pod = {
      ...three,
      metadata: { ...three.metadata, deletionTimestamp: new Date("2026-12-01T05:00:00Z") },
    };
    // Being deleted: running while its instance is listed running, not once the teardown stopped
    // it or it is listed no more.
    expect(isRunningPod(deleting, () => "running")).toBe(true);
    expect(isRunningPod(deleting, () => "stopping")).toBe(false);
    expect(isRunningPod(deleting, () => undefined)).toBe(false);
    // Without instance knowledge, by its status alone; a Pod not being deleted by its status.
    expect(isRunningPod(deleting)).toBe(true);
    expect(isRunningPod(three, () => undefined)).toBe(true);
    expect(isRunningPod({ ...three, metadata: { name: "x" } })).toBe(false);
    expect(
      (runningPodList([three, failedButStale, deleting], () => "stopped") as { items: unknown[] })
        .items,
    ).toHaveLength(1);
  });

  it("/pods is the kubelet's PodList of every Pod given, terminal ones included, whole, without each item's kind", () => {
    const items = [
      { kind: "Pod", apiVersion: "v1", metadata: { name: "a" }, status: { phase: "Running" } },
      { metadata: { name: "b" }, spec: { nodeName: "vn" }, status: { phase: "Succeeded" } },
    ];
    expect(podList(items)).toEqual({
      kind: "PodList",
      apiVersion: "v1",
      metadata: {},
      items: [
        { metadata: { name: "a" }, status: { phase: "Running" } },
        { metadata: { name: "b" }, spec: { nodeName: "vn" }, status: { phase: "Succeeded" } },
      ],
    });
    expect(podList([])).toEqual({ kind: "PodList", apiVersion: "v1", metadata: {}, items: null });
  });
});
