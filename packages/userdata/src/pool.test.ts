import { createHash } from "node:crypto";
import { statSync } from "node:fs";
import { gzipSync } from "node:zlib";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { MAX_USER_DATA_BYTES, UserDataError } from "./index.js";
import { POOL_BOOT_UNIT, renderPoolUserData } from "./pool/index.js";
import { PoolTestHost } from "./testing/pool-host.js";

const hosts: PoolTestHost[] = [];
afterEach(async () => {
  // Nothing of a host may outlive its test: a process left over is a failure, not a clean-up.
  const left = await Promise.all(hosts.splice(0).map((h) => h.close()));
  expect(left).toEqual(left.map(() => 0));
});

function host(): PoolTestHost {
  const h = new PoolTestHost();
  hosts.push(h);
  return h;
}

/** Renders a Pod's user-data the way the controller would hand it to ModifyInstanceAttribute. */
const podUserData = (script: string, gzip = false): Buffer =>
  gzip ? gzipSync(Buffer.from(script)) : Buffer.from(script);

describe("renderPoolUserData", () => {
  it("is plain bash under EC2's limit, base64 of the script, with the script's SHA-256, deterministic", () => {
    const result = renderPoolUserData({ images: ["busybox:1.36"] });
    expect(result.script.startsWith("#!/bin/bash\n")).toBe(true);
    expect(result.script).toContain("set -euo pipefail");
    expect(Buffer.from(result.userData, "base64").toString("utf8")).toBe(result.script);
    expect(result.bytes).toBe(Buffer.byteLength(result.script));
    expect(result.bytes).toBeLessThan(MAX_USER_DATA_BYTES);
    expect(result.sha256).toBe(createHash("sha256").update(result.script).digest("hex"));
    expect(renderPoolUserData({ images: ["busybox:1.36"] })).toEqual(result);
    expect(renderPoolUserData()).toEqual(renderPoolUserData({ images: [], prepareSeconds: 900 }));
    // The sandbox image is renderUserData's default unless named, and pulled first.
    expect(renderPoolUserData().script).toContain("IMAGES=('registry.k8s.io/pause:3.10')");
    expect(
      renderPoolUserData({ sandboxImage: "x/pause:1", images: ["x/pause:1"] }).script,
    ).toContain("IMAGES=('x/pause:1')");
    expect(POOL_BOOT_UNIT).toBe("nebula-pool.service");
    expect(result.script).toContain(`systemctl enable ${POOL_BOOT_UNIT}\n`);
    expect(result.script).not.toMatch(/enable --now/);
  });

  it("refuses malformed options with a typed InvalidOptions error naming the option", () => {
    const refused = (options: unknown) => {
      try {
        renderPoolUserData(options as never);
      } catch (error) {
        expect(error).toBeInstanceOf(UserDataError);
        return { code: (error as UserDataError).code, path: (error as UserDataError).path };
      }
      throw new Error(`accepted ${JSON.stringify(options)}`);
    };
    for (const image of ["", "a b", "a\nb", "it's", 'say"', "back`tick", "a\\b", "--all", "\t"])
      expect(refused({ images: ["busybox", image] })).toEqual({
        code: "InvalidOptions",
        path: "images.1",
      });
    for (const prepareSeconds of [0, -1, 1.5, 86_401, Number.NaN])
      expect(refused({ prepareSeconds })).toEqual({
        code: "InvalidOptions",
        path: "prepareSeconds",
      });
    expect(refused({ image: ["busybox"] })).toMatchObject({ code: "InvalidOptions" });
    expect(refused({ images: "busybox" })).toEqual({ code: "InvalidOptions", path: "images" });
  });

  it("refuses a list of images that does not fit 16 KiB (TooLarge), and accepts any reference without blanks or quotes", () => {
    const many = Array.from(
      { length: 400 },
      (_, i) => `registry.example.com/team/image-${i}:v1.2.3`,
    );
    expect(() => renderPoolUserData({ images: many })).toThrow(
      expect.objectContaining({ code: "TooLarge", path: "images" }),
    );
    fc.assert(
      fc.property(
        fc.array(fc.stringMatching(/^[a-z0-9][a-zA-Z0-9._/:@$();&|<>*?~#!{}[\]-]{0,60}$/), {
          maxLength: 5,
        }),
        (images) => {
          const { script } = renderPoolUserData({ images });
          for (const image of images) expect(script).toContain(`'${image}'`);
        },
      ),
    );
  });
});

describe("the pool host's first boot (real bash, curl, sha256sum, timeout; stand-in docker, systemctl, shutdown)", () => {
  it("installs the boot program and its unit (enabled, not started), records its own SHA-256, pulls, marks itself prepared and powers off", async () => {
    const h = host();
    const pool = renderPoolUserData({
      images: ["busybox:1.36", "missing/image:1", "ghcr.io/x/y@sha256:ab"],
      sandboxImage: "registry.example/pause:1",
    });
    const code = await h.firstBoot(pool.userData, {
      AWS_ENDPOINT_URL_EC2: "http://127.0.0.1:5000",
      AWS_CA_BUNDLE: "/etc/ssl/moto ca.pem",
    });
    expect(code, h.file("user-data.log")).toBe(0);
    expect(h.file("lib/pool-boot.sh")).toMatch(/^#!\/bin\/bash\n/);
    const unit = h.file(`units/${POOL_BOOT_UNIT}`);
    const endpoint = await h.imdsEndpoint();
    expect(unit).toBe(
      [
        "[Unit]",
        "Description=Nebula warm pool: runs the assigned Pod user-data once",
        "After=network-online.target docker.service",
        "Wants=network-online.target docker.service",
        "",
        "[Service]",
        "Type=oneshot",
        "ExecStart=/usr/local/lib/nebula/pool-boot.sh",
        "RemainAfterExit=yes",
        "KillMode=process",
        "TimeoutStartSec=0",
        `Environment=AWS_EC2_METADATA_SERVICE_ENDPOINT=${endpoint}`,
        "Environment=AWS_ENDPOINT_URL_EC2=http://127.0.0.1:5000",
        "Environment=AWS_CA_BUNDLE=/etc/ssl/moto ca.pem",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
      ].join("\n"),
    );
    // The SHA-256 of the user-data as IMDS serves it, read with an IMDSv2 token.
    expect(h.state("pool-user-data.sha256")).toBe(`${pool.sha256}\n`);
    expect(h.imdsRequests).toContain("PUT /latest/api/token 200");
    expect(h.imdsRequests).toContain("GET /latest/user-data 200");
    // Every image is pulled; the one that fails is tried twice, logged, and skipped.
    const calls = h.calls();
    expect(calls).toEqual([
      "systemctl daemon-reload",
      `systemctl enable ${POOL_BOOT_UNIT}`,
      // The Pod sandbox image first: every Pod's host needs it.
      "docker pull -- registry.example/pause:1",
      "docker pull -- busybox:1.36",
      "docker pull -- missing/image:1",
      "docker pull -- missing/image:1",
      "docker pull -- ghcr.io/x/y@sha256:ab",
      "shutdown -h now",
    ]);
    expect(h.file("console")).toContain(
      "nebula pool: docker pull missing/image:1 failed (try 2 of 2; see /var/lib/nebula/pool-pull.log)",
    );
    expect(h.state("pool-pull.log")).toContain("manifest for missing/image:1 not found");
    const prepared = (h.state("pool-prepared") ?? "").split("\n");
    expect(prepared[0]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    expect(prepared.slice(1)).toEqual([
      "registry.example/pause:1",
      "busybox:1.36",
      "ghcr.io/x/y@sha256:ab",
      "",
    ]);
    expect(h.file("console")).toContain(
      "nebula pool: prepared, 3 of 4 images pulled: powering off",
    );
    // Nothing of the later boots happened.
    expect(h.state("pool-assigned")).toBeUndefined();
  });

  it("bounds the pulls by prepareSeconds: a pull that hangs is killed, the rest is skipped, the host powers off", async () => {
    const h = host();
    const pool = renderPoolUserData({
      images: ["hang/forever:1", "busybox:1.36"],
      // Named among the images too: pulled once, first.
      sandboxImage: "hang/forever:1",
      prepareSeconds: 1,
    });
    expect(await h.firstBoot(pool.userData)).toBe(0);
    expect(h.calls().filter((c) => c.startsWith("docker"))).toEqual([
      "docker pull -- hang/forever:1",
    ]);
    expect(h.file("console")).toContain(
      "nebula pool: no time left to pull busybox:1.36 (prepareSeconds 1)",
    );
    expect((h.state("pool-prepared") ?? "").split("\n").slice(1)).toEqual([""]);
    expect(h.poweredOff()).toBe(true);
  });

  it("when IMDS does not serve its user-data for 30 s, records the SHA-256 of the script cloud-init ran (the same bytes)", async () => {
    const h = host();
    const pool = renderPoolUserData();
    expect(await h.firstBoot(pool.userData, {}, { imdsServesUserData: false })).toBe(0);
    expect(h.imdsRequests).toContain("GET /latest/user-data 404");
    expect(h.file("console")).toContain("nebula pool: IMDS did not serve the user-data");
    expect(h.state("pool-user-data.sha256")).toBe(`${pool.sha256}\n`);
    expect(h.poweredOff()).toBe(true);
  });
});

describe("the boot program on a later boot (real bash, curl, gzip, sha256sum; the unit's environment)", () => {
  /** A prepared pool host. */
  async function prepared(): Promise<PoolTestHost> {
    const h = host();
    const pool = renderPoolUserData();
    expect(await h.firstBoot(pool.userData, { AWS_ENDPOINT_URL_EC2: "http://ec2.test" })).toBe(0);
    expect(h.poweredOff()).toBe(true);
    return h;
  }
  const shutdowns = (h: PoolTestHost) => h.calls().filter((c) => c.startsWith("shutdown")).length;

  it("started with its user-data unchanged: powers off again, runs nothing, stays a pool host", async () => {
    const h = await prepared();
    expect(await h.bootAgain()).toBe(0);
    expect(shutdowns(h)).toBe(2);
    expect(h.file("console")).toMatch(
      /nebula pool: started without a Pod: powering off \(its user-data is the pool's own\)/,
    );
    expect(h.state("pool-assigned")).toBeUndefined();
    expect(h.state("pod-user-data")).toBeUndefined();
    // And again: still a pool host.
    expect(await h.bootAgain()).toBe(0);
    expect(shutdowns(h)).toBe(3);
  });

  it("started without user-data (IMDS 404): powers off, runs nothing", async () => {
    const h = await prepared();
    h.userData = undefined;
    expect(await h.bootAgain()).toBe(0);
    expect(shutdowns(h)).toBe(2);
    expect(h.file("console")).toContain(
      "nebula pool: started without a Pod: powering off (the instance has no user-data)",
    );
    expect(h.imdsRequests).toContain("GET /latest/user-data 404");
    expect(h.state("pool-assigned")).toBeUndefined();
  });

  it("runs a Pod's user-data once: marked assigned before it runs, 0700, with the unit's endpoints, logged; a later boot runs nothing and reads nothing", async () => {
    const h = await prepared();
    h.userData = podUserData(
      [
        "# no shebang: run with bash, as cloud-init does",
        // biome-ignore lint/suspicious/noTemplateCurlyInString: shell, on purpose
        'echo "bash=${BASH_VERSION:+yes} assigned=$([ -e /var/lib/nebula/pool-assigned ] && echo yes) ec2=$AWS_ENDPOINT_URL_EC2 home=$HOME cwd=$PWD umask=$(umask)"',
        "echo ran >>/var/lib/nebula/pod-ran",
        "echo to-stderr >&2",
        "",
      ].join("\n"),
    );
    // IMDS not up for the first requests: retried.
    h.imdsFailures = 1;
    expect(await h.bootAgain(), h.file("unit.log")).toBe(0);
    expect(h.state("pod-ran")).toBe("ran\n");
    expect(h.state("pool-assigned")).toBe("");
    expect(h.state("pod-user-data")).toBe(h.userData.toString());
    const log = h.state("pod-user-data.log") ?? "";
    expect(log).toContain(
      "bash=yes assigned=yes ec2=http://ec2.test home=/root cwd=/ umask=0022\n",
    );
    expect(log).toContain("to-stderr\n");
    expect(h.file("console")).toContain("nebula pool: running the assigned Pod's user-data");
    expect(h.file("console")).toContain("bash=yes assigned=yes");
    expect(shutdowns(h)).toBe(1);
    expect(statSync(`${h.dir}/state/pod-user-data`).mode & 0o777).toBe(0o700);

    // The next boot: the Pod's own units took over; nothing runs, IMDS is not even asked.
    h.imdsRequests.length = 0;
    expect(await h.bootAgain()).toBe(0);
    expect(h.state("pod-ran")).toBe("ran\n");
    expect(h.imdsRequests).toEqual([]);
    expect(shutdowns(h)).toBe(1);
  });

  it("gunzips a gzipped user-data and honours its #! (as cloud-init does)", async () => {
    const h = await prepared();
    h.userData = podUserData(
      // biome-ignore lint/suspicious/noTemplateCurlyInString: shell, on purpose
      '#!/bin/sh\necho "interpreter=${BASH_VERSION:-sh} self=$0" >/var/lib/nebula/pod-ran\n',
      true,
    );
    expect(await h.bootAgain(), h.file("unit.log")).toBe(0);
    expect(h.state("pod-ran")).toBe("interpreter=sh self=/var/lib/nebula/pod-user-data\n");
    expect(h.state("pod-user-data")).toMatch(/^#!\/bin\/sh\n/);
  });

  it("a Pod's user-data that fails still counts as run: the host is never a pool host again", async () => {
    const h = await prepared();
    h.userData = podUserData("#!/bin/bash\necho tried >>/var/lib/nebula/pod-ran\nexit 3\n");
    expect(await h.bootAgain()).toBe(3);
    expect(await h.bootAgain()).toBe(0);
    expect(h.state("pod-ran")).toBe("tried\n");
    expect(h.state("pool-assigned")).toBe("");
  });
});
