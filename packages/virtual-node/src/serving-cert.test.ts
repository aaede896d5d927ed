import { X509Certificate } from "node:crypto";
import { createServer } from "node:https";
import { connect } from "node:tls";
import { describe, expect, it } from "vitest";
import { selfSignedServingCert } from "./serving-cert.js";

describe("selfSignedServingCert", () => {
  it("makes a server certificate for the names and addresses given, that Node's TLS serves", async () => {
    const { cert, key } = await selfSignedServingCert(["vn-1", "10.0.0.7", "127.0.0.1"]);
    const parsed = new X509Certificate(cert);
    expect(parsed.subjectAltName).toBe("DNS:vn-1, IP Address:10.0.0.7, IP Address:127.0.0.1");
    expect(parsed.subject).toMatch(/^CN=vn-1@\d+$/);
    expect(parsed.checkPrivateKey((await import("node:crypto")).createPrivateKey(key))).toBe(true);
    expect(parsed.ca).toBe(false);
    const server = createServer({ cert, key }, (_req, res) => res.end("ok"));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    // Verified against itself as the only trusted CA, for the IP it names.
    const peer = await new Promise<string>((resolve, reject) => {
      const socket = connect({ host: "127.0.0.1", port, ca: cert, servername: undefined }, () => {
        resolve(String(socket.getPeerCertificate().subject.CN));
        socket.end();
      });
      socket.on("error", reject);
    });
    server.close();
    expect(peer).toMatch(/^vn-1@/);
  });
});
