import { Buffer } from "node:buffer";
import { gzipSync } from "node:zlib";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeUserData } from "./userdata.js";

describe("decodeUserData", () => {
  it("returns a plain script as is", () => {
    const decoded = decodeUserData(Buffer.from("#!/bin/bash\necho hi\n").toString("base64"));
    expect(decoded).toMatchObject({ ok: true, gzipped: false });
    expect(decoded.ok && decoded.script.toString()).toBe("#!/bin/bash\necho hi\n");
  });

  it("gunzips a gzip-compressed script", () => {
    const decoded = decodeUserData(gzipSync("#!/bin/bash\nexit 0\n").toString("base64"));
    expect(decoded.ok && decoded.gzipped).toBe(true);
    expect(decoded.ok && decoded.script.toString()).toBe("#!/bin/bash\nexit 0\n");
  });

  it("reports invalid base64 and corrupt gzip as UserDataUnreadable", () => {
    const notBase64 = decodeUserData("not base64!");
    expect(notBase64.ok ? "ok" : notBase64.error.code).toBe("UserDataUnreadable");
    const corrupt = decodeUserData(Buffer.from([0x1f, 0x8b, 1, 2, 3]).toString("base64"));
    expect(corrupt.ok ? "ok" : corrupt.error.code).toBe("UserDataUnreadable");
  });

  it("round-trips any bytes, plain or gzipped, and never throws on any string", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 512 }), fc.boolean(), (bytes, gzip) => {
        const payload = Buffer.from(bytes);
        const wire = gzip ? gzipSync(payload) : payload;
        const decoded = decodeUserData(wire.toString("base64"));
        expect(decoded.ok).toBe(true);
        if (decoded.ok && (gzip || payload[0] !== 0x1f || payload[1] !== 0x8b)) {
          expect(decoded.script.equals(payload)).toBe(true);
        }
      }),
    );
    fc.assert(
      fc.property(fc.string(), (text) => {
        const decoded = decodeUserData(text);
        expect(typeof decoded.ok).toBe("boolean");
      }),
    );
  });
});
