import { createServer } from "node:net";
import { networkInterfaces } from "node:os";

/**
 * Asks the kernel for a free TCP port on loopback (`127.0.0.1`).
 *
 * Use it to pick a port for a peer process just before starting it. The port is released
 * before this resolves, so another process could take it in between; callers that spawn a
 * server retry on `EADDRINUSE`.
 *
 * @example
 * const port = await freePort();
 */
export function freePort(host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen({ host, port: 0, exclusive: true }, () => {
      const address = server.address();
      if (address === null || typeof address === "string") {
        server.close();
        reject(new Error("freePort: no TCP address"));
        return;
      }
      const { port } = address;
      server.close(() => resolve(port));
    });
  });
}

/**
 * This machine's non-loopback IPv4 addresses, in interface order: where a peer serves so that the
 * instance-host simulator's containers reach it (they cannot reach this machine's loopback).
 *
 * @example
 * const [address] = machineAddresses();
 */
export function machineAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flat()
    .filter((a) => a !== undefined && a.family === "IPv4" && !a.internal)
    .map((a) => (a as { address: string }).address);
}
