import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import {
  type AppImage,
  buildAppImage,
  containerLimits,
  PODMAN_FLAGS as podman,
} from "@nebula/test-peers";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const appDir = fileURLToPath(new URL("..", import.meta.url));

describe("the container image (apps/vnode/Dockerfile)", () => {
  let built: AppImage | undefined;
  afterAll(async () => {
    await built?.remove();
  });

  it("builds offline on a base assembled here and runs --help as a non-root user", async () => {
    built = await buildAppImage(appDir, "nebula-vnode");
    const { image } = built;
    const help = await run("podman", [
      ...podman,
      "run",
      "--rm",
      "--network=none",
      ...(await containerLimits()),
      image,
      "--help",
    ]);
    expect(help.stdout).toMatch(/^Usage: nebula-vnode/);
    expect(help.stdout).toContain("--node-name");
    const user = await run("podman", [
      ...podman,
      "image",
      "inspect",
      "--format",
      "{{.Config.User}}",
      image,
    ]);
    expect(user.stdout.trim()).toBe("65532:65532");
  });
});
