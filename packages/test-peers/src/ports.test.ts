import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { freePort } from "./ports.js";

describe("freePort", () => {
  it("returns a port that a server can then bind on loopback", async () => {
    const port = await freePort();
    expect(port).toBeGreaterThan(0);
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen({ host: "127.0.0.1", port }, () => resolve());
    });
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
});
