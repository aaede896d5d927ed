import { X509Certificate } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { issueCert, issueCertSync, makeCa } from "./certs.js";

describe("throwaway certificates", () => {
  let dir: string;
  let ca: X509Certificate;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "nebula-certs-test-"));
    ca = new X509Certificate((await makeCa(dir, "ca", "test CA")).cert);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("makes a CA that is its own issuer", () => {
    expect(ca.ca).toBe(true);
    expect(ca.checkIssued(ca)).toBe(true);
  });

  it("issues a serving certificate for localhost and 127.0.0.1", async () => {
    const pair = await issueCert({
      caDir: dir,
      ca: "ca",
      commonName: "localhost",
      organizations: [],
      usage: "server",
    });
    const cert = new X509Certificate(pair.cert);
    expect(cert.checkIssued(ca)).toBe(true);
    expect(cert.verify(ca.publicKey)).toBe(true);
    expect(cert.checkHost("localhost")).toBe("localhost");
    expect(cert.checkIP("127.0.0.1")).toBe("127.0.0.1");
    expect(cert.keyUsage).toContain("1.3.6.1.5.5.7.3.1");
  });

  // 25 runs of two openssl processes each: allow for a loaded machine.
  it("puts the user in CN and each group in its own O, whatever characters they hold", {
    timeout: 60_000,
  }, () => {
    const name = fc
      .string({ minLength: 1, maxLength: 24, unit: "grapheme-ascii" })
      .filter((s) => s.trim() === s && s.length > 0);
    fc.assert(
      fc.property(name, fc.array(name, { maxLength: 3 }), (user, groups) => {
        const pair = issueCertSync({
          caDir: dir,
          ca: "ca",
          commonName: user,
          organizations: groups,
          usage: "client",
        });
        const cert = new X509Certificate(pair.cert);
        expect(cert.checkIssued(ca)).toBe(true);
        expect(cert.keyUsage).toContain("1.3.6.1.5.5.7.3.2");
        const subject = cert.toLegacyObject().subject as unknown as Record<
          string,
          string | string[]
        >;
        expect(subject.CN).toBe(user);
        const o = subject.O;
        expect(o === undefined ? [] : Array.isArray(o) ? o : [o]).toEqual(groups);
      }),
      { numRuns: 25 },
    );
  });
});
