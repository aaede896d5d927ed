import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeRecord, encodeRecord, RECORD_VERSION, type TeardownRecord } from "./record.js";

const record: TeardownRecord = {
  v: 1,
  def: "nebula.dev/pod",
  cause: "DeletionRequested",
  uid: "0b6f0c1e-1d2b-4a57-9f63-1a2b3c4d5e6f",
  startedAt: 1_700_000_000_000,
  phase: "stopping",
  idx: 0,
  since: 1_700_000_000_000,
  attempt: 1,
  issuedAt: 1_700_000_000_250,
  deadline: 1_700_000_060_250,
  params: { namespace: "default", name: "web-0", instanceId: "i-0123456789abcdef0" },
};

describe("record encoding", () => {
  it("is compact JSON that round-trips", () => {
    const text = encodeRecord(record);
    expect(text).not.toMatch(/\s/);
    expect(decodeRecord(text)).toEqual({ ok: true, record });
  });

  it("stays far below the Kubernetes annotation limit for a typical Pod teardown", () => {
    expect(encodeRecord(record).length).toBeLessThan(512);
  });

  it("rejects a record of a future format version with a reason", () => {
    const result = decodeRecord(JSON.stringify({ ...record, v: 2 }));
    expect(result).toEqual({
      ok: false,
      reason: `the stored record has format version 2; this reader knows ${RECORD_VERSION}`,
    });
  });

  it("rejects unknown fields, malformed JSON and non-strings with reasons", () => {
    const extra = decodeRecord(JSON.stringify({ ...record, surprise: true }));
    expect(extra.ok).toBe(false);
    expect(decodeRecord("{not json")).toEqual({
      ok: false,
      reason: "the stored record is not valid JSON",
    });
    expect(decodeRecord(undefined)).toEqual({
      ok: false,
      reason: "the stored record is a undefined, not a string",
    });
  });

  it("never throws, whatever it is handed (property)", () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.json(), fc.anything()), (input) => {
        const result = decodeRecord(input);
        expect(typeof result.ok).toBe("boolean");
      }),
    );
  });
});
