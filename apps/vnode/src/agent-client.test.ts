import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readAgentClient } from "./agent-client.js";

const dir = mkdtempSync(join(tmpdir(), "nebula-agent-client-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A self-signed certificate made by openssl, and the SHA-256 openssl gives for it. */
function cert(name: string): { file: string; key: string; sha256: string } {
  const file = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:P-256",
      "-nodes",
      "-keyout",
      key,
      "-out",
      file,
      "-subj",
      `/CN=${name}`,
      "-days",
      "1",
    ],
    { stdio: "ignore" },
  );
  const out = execFileSync("openssl", ["x509", "-in", file, "-noout", "-fingerprint", "-sha256"], {
    encoding: "utf8",
  });
  return { file, key, sha256: (out.split("=")[1] ?? "").trim().replaceAll(":", "").toLowerCase() };
}

describe("readAgentClient: the virtual node's certificate for the hosts' agents", () => {
  const current = cert("current");
  const previous = cert("previous");

  it("reads the certificate and key, and the SHA-256 of each certificate in the file, first first", () => {
    const bundle = join(dir, "bundle.crt");
    writeFileSync(bundle, readFileSync(current.file, "utf8") + readFileSync(previous.file, "utf8"));
    const got = readAgentClient({ clientCertFile: bundle, clientKeyFile: current.key });
    expect(got.fingerprints).toEqual([current.sha256, previous.sha256]);
    expect(got.key).toBe(readFileSync(current.key, "utf8"));
    expect(got.cert).toContain("-----BEGIN CERTIFICATE-----");
  });

  it("names the setting and what to do when a file cannot be read", () => {
    expect(() =>
      readAgentClient({ clientCertFile: join(dir, "missing.crt"), clientKeyFile: current.key }),
    ).toThrow(/provider\.hostAgent\.clientCertFile: cannot read .*missing\.crt.*mount the Secret/);
    expect(() =>
      readAgentClient({ clientCertFile: current.file, clientKeyFile: join(dir, "missing.key") }),
    ).toThrow(/provider\.hostAgent\.clientKeyFile: cannot read/);
  });

  it("refuses a file without a certificate, or with one that does not parse", () => {
    const none = join(dir, "none.crt");
    writeFileSync(none, "not a certificate\n");
    expect(() => readAgentClient({ clientCertFile: none, clientKeyFile: current.key })).toThrow(
      /must hold 1 to 4 PEM certificates .*not 0/,
    );
    const broken = join(dir, "broken.crt");
    writeFileSync(broken, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
    expect(() => readAgentClient({ clientCertFile: broken, clientKeyFile: current.key })).toThrow(
      /holds a certificate that does not parse/,
    );
  });
});
