/**
 * A self-signed serving certificate for the kubelet API, made at start when the configuration
 * names none: what a kubelet without `--tls-cert-file` does. kube-apiserver does not verify
 * kubelet serving certificates unless it runs with `--kubelet-certificate-authority`; a cluster
 * that does must be given a certificate signed by that CA (`kubeletApi.tlsCertFile`).
 */
// @peculiar/x509 resolves its parts through tsyringe, which needs the Reflect metadata API.
import "reflect-metadata";
import { isIP } from "node:net";
import * as x509 from "@peculiar/x509";

/** A PEM certificate and its PEM (PKCS#8) private key. */
interface ServingCert {
  /** The certificate, PEM. */
  readonly cert: string;
  /** The private key, PEM. */
  readonly key: string;
}

const ALGORITHM = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;

function pem(label: string, der: ArrayBuffer): string {
  const base64 = Buffer.from(der).toString("base64");
  return `-----BEGIN ${label}-----\n${base64.replace(/.{1,64}/g, "$&\n")}-----END ${label}-----\n`;
}

/**
 * Makes an ECDSA P-256 certificate valid for a year, for `<host>@<time>` as the kubelet names
 * its own, with the host names and addresses as subject alternative names.
 */
export async function selfSignedServingCert(
  hosts: readonly string[],
  now: Date = new Date(),
): Promise<ServingCert> {
  const keys = await crypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
  const names = hosts.map((h) =>
    isIP(h) === 0 ? { type: "dns" as const, value: h } : { type: "ip" as const, value: h },
  );
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: Buffer.from(crypto.getRandomValues(new Uint8Array(8)))
      .toString("hex")
      .replace(/^[89a-f]/, "1"),
    name: `CN=${(hosts[0] ?? "nebula-vnode").replace(/[,=+<>#;"\\]/g, "_")}@${Math.floor(now.getTime() / 1000)}`,
    notBefore: new Date(now.getTime() - 60_000),
    notAfter: new Date(now.getTime() + 365 * 24 * 3600 * 1000),
    signingAlgorithm: ALGORITHM,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names),
    ],
  });
  const key = await crypto.subtle.exportKey("pkcs8", keys.privateKey);
  return { cert: cert.toString("pem"), key: pem("PRIVATE KEY", key) };
}
