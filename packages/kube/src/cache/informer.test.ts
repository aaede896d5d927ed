import type { V1Pod } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { normalizeObject, objectKey, restartDelay } from "./informer.js";

describe("objectKey", () => {
  it("is namespace/name, or name for cluster-scoped objects", () => {
    expect(objectKey({ metadata: { namespace: "default", name: "web-0" } })).toBe("default/web-0");
    expect(objectKey({ metadata: { name: "vnode-1" } })).toBe("vnode-1");
  });
});

describe("normalizeObject", () => {
  const fromList: V1Pod = {
    metadata: { name: "p", creationTimestamp: new Date("2026-11-30T14:00:00Z") },
    status: { startTime: new Date("2026-11-30T14:00:05Z") },
  };
  const fromWatch = JSON.parse(
    '{"metadata":{"name":"p","creationTimestamp":"2026-11-30T14:00:00Z"},"status":{"startTime":"2026-11-30T14:00:05Z"}}',
  ) as V1Pod;

  it("with a model name, list items and watch events both carry Dates", () => {
    for (const pod of [fromList, fromWatch]) {
      const normal = normalizeObject(pod, "V1Pod");
      expect(normal.metadata?.creationTimestamp).toEqual(new Date("2026-11-30T14:00:00Z"));
      expect(normal.status?.startTime).toEqual(new Date("2026-11-30T14:00:05Z"));
    }
  });

  it("without one, both carry RFC 3339 strings, and the input is not modified", () => {
    for (const pod of [fromList, fromWatch]) {
      const normal = normalizeObject(pod);
      expect(typeof normal.metadata?.creationTimestamp).toBe("string");
      expect(Date.parse(String(normal.metadata?.creationTimestamp))).toBe(
        Date.parse("2026-11-30T14:00:00Z"),
      );
    }
    expect(fromList.metadata?.creationTimestamp).toBeInstanceOf(Date);
  });
});

describe("restartDelay", () => {
  it("is 1 s → 30 s by default, jittered between half and all of the ceiling", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 100 }), (attempt) => {
        const ceiling = Math.min(30_000, 1000 * 2 ** attempt);
        const delay = restartDelay(attempt, undefined);
        expect(delay).toBeGreaterThanOrEqual(ceiling / 2);
        expect(delay).toBeLessThanOrEqual(ceiling);
      }),
    );
  });

  it("honours the configured bounds", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10_000 }),
        fc.integer({ min: 10_000, max: 100_000 }),
        fc.integer({ min: 0, max: 60 }),
        (initialMs, maxMs, attempt) => {
          const delay = restartDelay(attempt, { initialMs, maxMs });
          expect(delay).toBeLessThanOrEqual(maxMs);
          expect(delay).toBeGreaterThanOrEqual(
            Math.floor(Math.min(maxMs, initialMs * 2 ** attempt) / 2),
          );
        },
      ),
    );
  });
});
