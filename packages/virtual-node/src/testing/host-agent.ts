/**
 * Test helper: a stand-in for a Pod's host agent, on a real TLS socket. It trusts a client only by
 * its certificate's pinned fingerprint (as the agent does), answers an upgrade request `101
 * Switching Protocols`, then echoes every byte it gets. It records what it was sent, and the
 * sockets it holds, so a test can see that nothing was sent or that everything was closed.
 *
 * @packageDocumentation
 */
import { createHash, X509Certificate } from "node:crypto";
import { once } from "node:events";
import type { AddressInfo } from "node:net";
import { createServer, type TLSSocket } from "node:tls";
import { selfSignedServingCert } from "../serving-cert.js";

/**
 * A self-signed certificate (PEM) with its key (the kubelet API's own kind, for `name` and
 * 127.0.0.1), and its SHA-256 as the agent and the relay pin it. Either side pins it by its
 * fingerprint alone, so it serves as a client certificate too.
 */
export async function selfSigned(
  name: string,
): Promise<{ cert: string; key: string; fingerprint: string }> {
  const { cert, key } = await selfSignedServingCert([name, "127.0.0.1"]);
  const fingerprint = createHash("sha256").update(new X509Certificate(cert).raw).digest("hex");
  return { cert, key, fingerprint };
}

/** A running stand-in agent. */
export interface FakeHostAgent {
  /** Its port on 127.0.0.1. */
  readonly port: number;
  /** SHA-256 of its certificate, lowercase hex. */
  readonly fingerprint: string;
  /** Every byte each accepted connection sent it (request head included), in order. */
  readonly received: Buffer[];
  /** Request heads it was sent (the text before the blank line), one per connection. */
  readonly heads: string[];
  /** TLS connections it accepted that are still open. */
  readonly open: Set<TLSSocket>;
  /** Connections it refused (a client certificate that is not the pinned one). */
  readonly refused: number;
  /** Stops it, closing every connection. */
  close(): Promise<void>;
}

/**
 * Starts a stand-in agent on 127.0.0.1 that accepts only a client certificate whose SHA-256 is
 * `clientFingerprint`; `answer` overrides the `101` (e.g. to hang up at once: `"close"`).
 */
export async function startFakeHostAgent(
  clientFingerprint: string,
  answer: "101" | "close" = "101",
): Promise<FakeHostAgent> {
  const own = await selfSigned("fake-host-agent");
  const received: Buffer[] = [];
  const heads: string[] = [];
  const open = new Set<TLSSocket>();
  const state = { refused: 0 };
  const server = createServer(
    { cert: own.cert, key: own.key, requestCert: true, rejectUnauthorized: false },
    (socket) => {
      const peer = socket.getPeerCertificate();
      const seen =
        peer.raw === undefined ? "" : createHash("sha256").update(peer.raw).digest("hex");
      if (seen !== clientFingerprint || answer === "close") {
        state.refused += 1;
        socket.destroy();
        return;
      }
      open.add(socket);
      socket.on("close", () => open.delete(socket));
      socket.on("error", () => socket.destroy());
      let pending = Buffer.alloc(0);
      let upgraded = false;
      socket.on("data", (chunk: Buffer) => {
        received.push(chunk);
        if (upgraded) {
          socket.write(chunk);
          return;
        }
        pending = Buffer.concat([pending, chunk]);
        const end = pending.indexOf("\r\n\r\n");
        if (end < 0) return;
        heads.push(pending.subarray(0, end).toString("latin1"));
        upgraded = true;
        socket.write(
          "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n",
        );
        const rest = pending.subarray(end + 4);
        if (rest.length > 0) socket.write(rest);
      });
    },
  );
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return {
    port: (server.address() as AddressInfo).port,
    fingerprint: own.fingerprint,
    received,
    heads,
    open,
    get refused() {
      return state.refused;
    },
    close: async () => {
      for (const socket of open) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
