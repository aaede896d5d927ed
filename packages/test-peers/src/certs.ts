import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { TestPeerError } from "./errors.js";

const run = promisify(execFile);

/** How long throwaway certificates are valid: a week, like envtest's TinyCA. */
const DAYS = "7";

/** A PEM certificate and its PEM private key. */
export interface CertPair {
  /** The certificate, PEM. */
  cert: string;
  /** Its private key (PKCS#8 PEM, ECDSA P-256). */
  key: string;
}

/**
 * Escapes a value for an `openssl -subj` string, where `/`, `+`, `=` and `\` are special: a
 * backslash makes any following character literal, so every non-alphanumeric one gets one.
 */
function subjectValue(value: string): string {
  return value.replace(/[^A-Za-z0-9]/g, (c) => `\\${c}`);
}

function subject(commonName: string, organizations: readonly string[]): string {
  return `${organizations.map((o) => `/O=${subjectValue(o)}`).join("")}/CN=${subjectValue(commonName)}`;
}

async function openssl(args: string[]): Promise<void> {
  try {
    await run("openssl", args);
  } catch (cause) {
    throw new TestPeerError("RequestFailed", `openssl ${args[0] ?? ""} failed`, { cause });
  }
}

/**
 * Makes a self-signed CA (ECDSA P-256) and writes `<name>.crt` / `<name>.key` into `dir`.
 */
export async function makeCa(dir: string, name: string, commonName: string): Promise<CertPair> {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  await openssl([
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-keyout",
    key,
    "-out",
    cert,
    "-days",
    DAYS,
    "-subj",
    subject(commonName, ["nebula-test-peers"]),
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
  ]);
  return { cert: readFileSync(cert, "utf8"), key: readFileSync(key, "utf8") };
}

/** Options of {@link issueCert} and {@link issueCertSync}. */
export interface IssueOptions {
  /** Folder holding `<ca>.crt` and `<ca>.key`. */
  caDir: string;
  /** The CA's file name stem in `caDir`. */
  ca: string;
  /** Subject common name (the Kubernetes user name for a client cert). */
  commonName: string;
  /** Subject organizations (the Kubernetes groups for a client cert). */
  organizations: readonly string[];
  /** `server` (with SANs localhost, 127.0.0.1 and `ips`) or `client`. */
  usage: "server" | "client";
  /** More IP addresses a `server` certificate names (e.g. this machine's, for its containers). */
  ips?: readonly string[];
}

function issueArgs(work: string, options: IssueOptions): { req: string[]; sign: string[] } {
  const key = join(work, "leaf.key");
  const csr = join(work, "leaf.csr");
  const ext = join(work, "leaf.ext");
  writeFileSync(
    ext,
    options.usage === "server"
      ? `basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=${["DNS:localhost", "IP:127.0.0.1", ...(options.ips ?? []).map((ip) => `IP:${ip}`)].join(",")}\n`
      : "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
  );
  return {
    req: [
      "req",
      "-new",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      key,
      "-out",
      csr,
      "-subj",
      subject(options.commonName, options.organizations),
    ],
    sign: [
      "x509",
      "-req",
      "-in",
      csr,
      "-CA",
      join(options.caDir, `${options.ca}.crt`),
      "-CAkey",
      join(options.caDir, `${options.ca}.key`),
      "-set_serial",
      `0x${Date.now().toString(16)}${Math.floor(Math.random() * 0xffff).toString(16)}`,
      "-days",
      DAYS,
      "-extfile",
      ext,
      "-out",
      join(work, "leaf.crt"),
    ],
  };
}

function readLeaf(work: string): CertPair {
  return {
    cert: readFileSync(join(work, "leaf.crt"), "utf8"),
    key: readFileSync(join(work, "leaf.key"), "utf8"),
  };
}

/** Issues a leaf certificate signed by the CA in `caDir` (asynchronous). */
export async function issueCert(options: IssueOptions): Promise<CertPair> {
  const work = mkdtempSync(join(tmpdir(), "nebula-cert-"));
  try {
    const { req, sign } = issueArgs(work, options);
    await openssl(req);
    await openssl(sign);
    return readLeaf(work);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Issues a leaf certificate signed by the CA in `caDir` (synchronous, for `clientFor`). */
export function issueCertSync(options: IssueOptions): CertPair {
  const work = mkdtempSync(join(tmpdir(), "nebula-cert-"));
  try {
    const { req, sign } = issueArgs(work, options);
    for (const args of [req, sign]) {
      try {
        execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });
      } catch (cause) {
        throw new TestPeerError("RequestFailed", `openssl ${args[0] ?? ""} failed`, { cause });
      }
    }
    return readLeaf(work);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Makes an ECDSA P-256 key pair for service-account token signing: `<name>.key`, `<name>.pub`. */
export async function makeSigningKey(dir: string, name: string): Promise<void> {
  const key = join(dir, `${name}.key`);
  await openssl([
    "genpkey",
    "-algorithm",
    "EC",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-out",
    key,
  ]);
  await openssl(["pkey", "-in", key, "-pubout", "-out", join(dir, `${name}.pub`)]);
}
