import { ApiException, KubeConfig } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { combinePatches, KubernetesAnnotationStore, parseObjectKey } from "./annotation-store.js";
import { KubeError, statusOf } from "./errors.js";

describe("parseObjectKey", () => {
  it("reads namespace/name and name, and nothing else", () => {
    expect(parseObjectKey("default/web-0")).toEqual({ namespace: "default", name: "web-0" });
    expect(parseObjectKey("node-1")).toEqual({ name: "node-1" });
    expect(parseObjectKey("a/b/c")).toBeUndefined();
    expect(parseObjectKey("/web-0")).toBeUndefined();
    expect(parseObjectKey("Default/web-0")).toBeUndefined();
  });

  it("never throws (property)", () => {
    fc.assert(
      fc.property(fc.string(), (key) => {
        const ref = parseObjectKey(key);
        if (ref) expect(`${ref.namespace ? `${ref.namespace}/` : ""}${ref.name}`).toBe(key);
      }),
    );
  });
});

describe("combinePatches", () => {
  it("merges objects, lets the second win, keeps null deletions", () => {
    expect(
      combinePatches(
        { spec: { replicas: 0 }, metadata: { labels: { a: "1" }, annotations: { x: null } } },
        { metadata: { resourceVersion: "42", annotations: { r: "{}" } } },
      ),
    ).toEqual({
      spec: { replicas: 0 },
      metadata: { labels: { a: "1" }, resourceVersion: "42", annotations: { x: null, r: "{}" } },
    });
    expect(combinePatches({ a: { b: 1 } }, { a: null })).toEqual({ a: null });
  });
});

describe("KubernetesAnnotationStore", () => {
  it("refuses invalid options and keys with typed errors", async () => {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "c", server: "https://127.0.0.1:1" }],
      users: [{ name: "u" }],
      contexts: [{ name: "x", cluster: "c", user: "u" }],
      currentContext: "x",
    });
    expect(() => new KubernetesAnnotationStore(kc, { annotation: "not a key!" })).toThrow(
      KubeError,
    );
    const store = new KubernetesAnnotationStore(kc);
    expect(store.annotation).toBe("teardown.nebula.dev/record");
    await expect(store.read("a/b/c")).rejects.toMatchObject({ code: "InvalidKey" });
  });
});

describe("statusOf", () => {
  it("reads the HTTP status of client-node errors only", () => {
    expect(statusOf(new ApiException(409, "Conflict", {}, {}))).toBe(409);
    expect(statusOf(new Error("ECONNREFUSED"))).toBeUndefined();
    expect(statusOf({ code: "ECONNREFUSED" })).toBeUndefined();
  });
});
