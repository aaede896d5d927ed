/**
 * The virtual node's client certificate for the hosts' agents (`provider.hostAgent`), read at
 * start.
 */
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";

/**
 * The virtual node's client certificate for the hosts' agents (`provider.hostAgent`): the PEM
 * files, and the lowercase hex SHA-256 of each certificate in the certificate file (the first is
 * the one presented; the others are still accepted by hosts launched from now on, for a rotation).
 */
export function readAgentClient(files: {
  readonly clientCertFile: string;
  readonly clientKeyFile: string;
}): {
  readonly cert: string;
  readonly key: string;
  readonly fingerprints: readonly string[];
} {
  const read = (setting: string, path: string): string => {
    try {
      return readFileSync(path, "utf8");
    } catch (error) {
      throw new Error(
        `provider.hostAgent.${setting}: cannot read ${path}: ${(error as Error).message} (mount the Secret with the virtual node's agent client certificate there; docs/operating.md, "kubectl exec")`,
        { cause: error },
      );
    }
  };
  const cert = read("clientCertFile", files.clientCertFile);
  const key = read("clientKeyFile", files.clientKeyFile);
  const blocks = cert.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  const fingerprints = blocks.map((block) => {
    try {
      return new X509Certificate(block).fingerprint256.replaceAll(":", "").toLowerCase();
    } catch (error) {
      throw new Error(
        `provider.hostAgent.clientCertFile: ${files.clientCertFile} holds a certificate that does not parse: ${(error as Error).message}`,
        { cause: error },
      );
    }
  });
  if (fingerprints.length === 0 || fingerprints.length > 4)
    throw new Error(
      `provider.hostAgent.clientCertFile: ${files.clientCertFile} must hold 1 to 4 PEM certificates (the one presented first), not ${fingerprints.length}`,
    );
  return { cert, key, fingerprints };
}
