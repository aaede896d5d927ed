import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { KubeError } from "../errors.js";
import { createLogger } from "./logger.js";
import { ControllerMetrics, createRegistry } from "./metrics.js";
import { parseBindAddress, startProbeServer } from "./server.js";

describe("parseBindAddress", () => {
  it("reads host:port, :port, [v6]:port and 0", () => {
    expect(parseBindAddress(":8080")).toEqual({ host: "0.0.0.0", port: 8080 });
    expect(parseBindAddress("127.0.0.1:0")).toEqual({ host: "127.0.0.1", port: 0 });
    expect(parseBindAddress("[::1]:9090")).toEqual({ host: "::1", port: 9090 });
    expect(parseBindAddress("0")).toBeUndefined();
    for (const bad of ["", "8080", "host", "a:b", "1.2.3.4:70000", ":"]) {
      expect(parseBindAddress(bad)).toBeNull();
    }
  });
});

describe("startProbeServer", () => {
  it("serves /healthz, /readyz and /metrics and 404s the rest", async () => {
    const registry = createRegistry();
    const metrics = new ControllerMetrics(registry);
    metrics.reconciles.inc({ controller: "pods", result: "success" });
    let ready: true | string = "pods informer not synced";
    const server = await startProbeServer({
      address: { host: "127.0.0.1", port: 0 },
      registry,
      healthy: () => true,
      ready: () => ready,
    });
    try {
      const get = async (path: string) => {
        const response = await fetch(`${server.url}${path}`, { signal: AbortSignal.timeout(5000) });
        return { status: response.status, body: await response.text() };
      };
      expect(await get("/healthz")).toEqual({ status: 200, body: "ok\n" });
      expect(await get("/readyz")).toEqual({ status: 503, body: "pods informer not synced\n" });
      ready = true;
      expect(await get("/readyz")).toEqual({ status: 200, body: "ok\n" });
      const scraped = await get("/metrics");
      expect(scraped.status).toBe(200);
      expect(scraped.body).toContain(
        'nebula_controller_reconcile_total{controller="pods",result="success"} 1',
      );
      expect(scraped.body).toContain("process_cpu_user_seconds_total");
      expect((await get("/nope")).status).toBe(404);
    } finally {
      await server.close();
    }
    await expect(
      fetch(`${server.url}/healthz`, { signal: AbortSignal.timeout(5000) }),
    ).rejects.toThrow();
  });

  it("rejects with ListenFailed when the port is taken", async () => {
    const first = await startProbeServer({
      address: { host: "127.0.0.1", port: 0 },
      healthy: () => true,
    });
    try {
      const port = Number(first.address.split(":").at(-1));
      const second = startProbeServer({
        address: { host: "127.0.0.1", port },
        healthy: () => true,
      });
      await expect(second).rejects.toBeInstanceOf(KubeError);
      await expect(second).rejects.toMatchObject({ code: "ListenFailed" });
    } finally {
      await first.close();
    }
  });
});

describe("createLogger", () => {
  it("writes one JSON object per line with a level label, honouring the level", () => {
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk, _encoding, callback) {
        lines.push(String(chunk));
        callback();
      },
    });
    const log = createLogger({ level: "warn", name: "demo", destination });
    log.info("hidden");
    log.warn({ key: "default/web-0" }, "shown");
    expect(lines).toHaveLength(1);
    const line = JSON.parse(lines[0] ?? "{}") as Record<string, unknown>;
    expect(line).toMatchObject({ level: "warn", name: "demo", key: "default/web-0", msg: "shown" });
    expect(typeof line.time).toBe("string");
  });
});
