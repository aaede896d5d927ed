/**
 * The user-data of a warm-pool host (issue #32): a host that boots once, installs a boot unit of
 * its own, pulls the pool's images and powers itself off. The controller later writes a Pod's
 * usual user-data onto the stopped instance (`ModifyInstanceAttribute`) and starts it; since
 * cloud-init runs user-data on the first boot only, the boot unit reads the instance's current
 * user-data from IMDS on every later boot and runs it, once.
 *
 * @packageDocumentation
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { UserDataError } from "./errors.js";
import { DEFAULT_SANDBOX_IMAGE, MAX_USER_DATA_BYTES } from "./options.js";
import { shQuote } from "./quote.js";

/** The systemd unit a pool host enables: on every boot after the first it runs `pool-boot.sh`. */
export const POOL_BOOT_UNIT = "nebula-pool.service";

const LIB = "/usr/local/lib/nebula";
const STATE = "/var/lib/nebula";
const BOOT_PROGRAM = `${LIB}/pool-boot.sh`;

/** The endpoint overrides the boot unit passes on to the Pod's user-data, when they are set. */
const ENDPOINT_VARIABLES = [
  "AWS_EC2_METADATA_SERVICE_ENDPOINT",
  "AWS_ENDPOINT_URL_EC2",
  "AWS_ENDPOINT_URL_SSM",
  "AWS_ENDPOINT_URL_LOGS",
  "AWS_ENDPOINT_URL_CLOUDWATCH",
  "AWS_ENDPOINT_URL_SQS",
  "AWS_ENDPOINT_URL",
  "AWS_CA_BUNDLE",
] as const;

/** Options of {@link renderPoolUserData}. Every field is optional. */
export interface PoolRenderOptions {
  /**
   * Images to pull while preparing (`docker pull`), e.g. `["busybox:1.36"]`, so that a Pod of
   * the pool does not wait for them. Each is a non-empty reference without whitespace, quotes,
   * backslashes or a leading `-`. Default `[]`.
   */
  readonly images?: readonly string[];
  /**
   * The Pod sandbox image every Pod's host runs (`renderUserData`'s `sandbox.image`), pulled
   * first with the images. Default: `renderUserData`'s default (`registry.k8s.io/pause:3.10`).
   */
  readonly sandboxImage?: string;
  /**
   * The most the preparation's pulls may take in all, in seconds (default 900, at most 86 400);
   * the host powers off anyway after it, with what it pulled by then.
   */
  readonly prepareSeconds?: number;
}

/** What {@link renderPoolUserData} returns. */
export interface PoolRenderResult {
  /** The user-data, base64, ready for `RunInstances`' `UserData`. Never gzipped. */
  readonly userData: string;
  /** The script's size in bytes (before base64): at most EC2's 16 KiB. */
  readonly bytes: number;
  /** The bash script in clear. */
  readonly script: string;
  /**
   * SHA-256 (hex) of `script`, which is also what IMDS serves as the instance's user-data: the
   * host records it, and a later boot that finds it unchanged knows no Pod was assigned.
   */
  readonly sha256: string;
}

const imageReference = z
  .string()
  .min(1, "must not be empty")
  .max(1024)
  .regex(/^[^\s'"`\\]+$/, "must not contain whitespace, quotes or backslashes")
  .refine((s) => !s.startsWith("-"), "must not start with '-'");

const PoolRenderOptionsSchema = z.strictObject({
  images: z.array(imageReference).readonly().default([]),
  sandboxImage: imageReference.default(DEFAULT_SANDBOX_IMAGE),
  prepareSeconds: z.number().int().positive().max(86_400).default(900),
});

/**
 * The boot program (`/usr/local/lib/nebula/pool-boot.sh`), run by {@link POOL_BOOT_UNIT} on every
 * boot after the first: nothing once a Pod was assigned; else the instance's user-data as IMDS
 * serves it now, run once (marked before it runs), or a power-off when there is none or it is
 * still the pool's own.
 */
const POOL_BOOT_SCRIPT = `#!/bin/bash
# Nebula warm-pool boot program (@nebula/userdata), run by ${POOL_BOOT_UNIT} on every boot: runs,
# once, the user-data the controller wrote while the host was stopped; without one, powers off.
set -euo pipefail
umask 077
S=${STATE}
U=$S/pod-user-data
log() { echo "nebula pool: $*" | tee -a /dev/console >&2 || true; }
# A used host never becomes a pool host again: the Pod's own units took over on its first boot.
[ ! -e "$S/pool-assigned" ] || exit 0
off() {
  log "started without a Pod: powering off ($1)"
  shutdown -h now
  exit 0
}
I=\${AWS_EC2_METADATA_SERVICE_ENDPOINT:-http://169.254.169.254}
I=\${I%/}
code=
fetch() {
  local t
  t=$(curl -sS -f --max-time 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' "$I/latest/api/token") || return 1
  code=$(curl -sS --max-time 20 -o "$U.part" -w '%{http_code}' -H "X-aws-ec2-metadata-token: $t" "$I/latest/user-data") || return 1
  [ "$code" = 200 ] || [ "$code" = 404 ]
}
end=$((SECONDS + 30))
until fetch; do
  ((SECONDS < end)) || off "IMDS did not serve the user-data, last HTTP status \${code:-none}"
  sleep 2
done
if [ "$code" != 200 ] || [ ! -s "$U.part" ]; then off "the instance has no user-data"; fi
own=$(cat "$S/pool-user-data.sha256" 2>/dev/null || true)
if [ "$(sha256sum <"$U.part" | cut -d' ' -f1)" = "$own" ]; then off "its user-data is the pool's own"; fi
# As cloud-init: gzipped user-data is gunzipped.
if [ "$(od -An -N2 -tx1 "$U.part" | tr -d ' ')" = 1f8b ]; then
  gzip -dc <"$U.part" >"$U.new"
  rm -f "$U.part"
else
  mv -f "$U.part" "$U.new"
fi
chmod 0700 "$U.new"
mv -f "$U.new" "$U"
# Marked before it runs: whatever becomes of it, it never runs twice.
touch "$S/pool-assigned"
sync
log "running the assigned Pod's user-data (output: $S/pod-user-data.log)"
exec > >(tee -a "$S/pod-user-data.log" /dev/console) 2>&1
umask 022
cd /
export HOME=\${HOME:-/root}
if [ "$(head -c2 "$U")" = '#!' ]; then exec "$U"; fi
exec bash "$U"
`;

/**
 * Renders the user-data of a warm-pool host. On its first boot the host installs
 * `/usr/local/lib/nebula/pool-boot.sh` and enables {@link POOL_BOOT_UNIT} (it does not start it),
 * records the SHA-256 of its own user-data as IMDS serves it, pulls `images` within
 * `prepareSeconds` (a failed pull is logged and skipped), writes `/var/lib/nebula/pool-prepared`
 * and powers off: EC2 then shows it `stopped` with `Client.InstanceInitiatedShutdown`.
 *
 * To assign it a Pod, write the Pod's usual user-data (from `renderUserData`) onto the
 * stopped instance with `ModifyInstanceAttribute` and start it: the boot unit reads the user-data
 * from IMDS, marks the host assigned (`/var/lib/nebula/pool-assigned`) and runs it once, as
 * cloud-init would (gunzipped when gzipped; `#!` honoured, else bash). Started with its user-data
 * unchanged, or without any, the host powers off again; once assigned, it never runs user-data again.
 *
 * Pure: no clock, environment or file system; the same options give the same bytes.
 *
 * @param options - the images to pull and the time they may take.
 * @returns the user-data (base64, never gzipped, so IMDS serves exactly `script`) with its size,
 *   the script and its SHA-256.
 * @throws {@link UserDataError} `InvalidOptions` (with the option's `path`) for a malformed option,
 *   `TooLarge` when the script exceeds EC2's 16 KiB (too many images).
 * @example
 * ```ts
 * const pool = renderPoolUserData({ images: ["public.ecr.aws/docker/library/busybox:1.36"] });
 * // RunInstances with UserData: pool.userData, InstanceInitiatedShutdownBehavior: "stop"; later:
 * // ModifyInstanceAttribute({ InstanceId, UserData: { Value: Buffer.from(pod.userData, "base64") } }),
 * // then StartInstances.
 * ```
 */
export function renderPoolUserData(options: PoolRenderOptions = {}): PoolRenderResult {
  const parsed = PoolRenderOptionsSchema.safeParse(options);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const path = issue?.path.map(String).join(".") || "options";
    throw new UserDataError(
      "InvalidOptions",
      path,
      `invalid pool options at ${path}: ${issue?.message ?? "invalid"}`,
      parsed.error,
    );
  }
  const { prepareSeconds } = parsed.data;
  // The sandbox image first (every Pod needs it), each image once.
  const images = [...new Set([parsed.data.sandboxImage, ...parsed.data.images])];
  const script = poolScript(images, prepareSeconds);
  const bytes = Buffer.byteLength(script, "utf8");
  if (bytes > MAX_USER_DATA_BYTES) {
    throw new UserDataError(
      "TooLarge",
      "images",
      `the pool user-data is ${bytes} bytes with ${images.length} images, over EC2's limit of ${MAX_USER_DATA_BYTES}`,
    );
  }
  return {
    userData: Buffer.from(script, "utf8").toString("base64"),
    bytes,
    script,
    sha256: createHash("sha256").update(script, "utf8").digest("hex"),
  };
}

function poolScript(images: readonly string[], prepareSeconds: number): string {
  return `#!/bin/bash
# Nebula warm-pool user-data (@nebula/userdata): prepares this host for a Pod (a boot unit, the
# images), then powers it off. Later boots run, once, the user-data the controller writes.
set -euo pipefail
umask 022
L=${LIB}
S=${STATE}
mkdir -p "$L" "$S"
log() { echo "nebula pool: $*" | tee -a /dev/console >&2 || true; }
cat >${BOOT_PROGRAM} <<'NEBULA_POOL'
${POOL_BOOT_SCRIPT}NEBULA_POOL
chmod 0755 ${BOOT_PROGRAM}
{
  printf '%s\\n' '[Unit]' 'Description=Nebula warm pool: runs the assigned Pod user-data once' \\
    'After=network-online.target docker.service' 'Wants=network-online.target docker.service' '' \\
    '[Service]' 'Type=oneshot' 'ExecStart=${BOOT_PROGRAM}' 'RemainAfterExit=yes' 'KillMode=process' \\
    'TimeoutStartSec=0'
  for name in ${ENDPOINT_VARIABLES.join(" ")}; do
    if [ -n "\${!name+set}" ]; then printf 'Environment=%s=%s\\n' "$name" "\${!name}"; fi
  done
  printf '%s\\n' '' '[Install]' 'WantedBy=multi-user.target'
} >/etc/systemd/system/${POOL_BOOT_UNIT}
systemctl daemon-reload
systemctl enable ${POOL_BOOT_UNIT}
# This user-data's own SHA-256, as IMDS serves it: a later boot that finds it unchanged has no Pod.
I=\${AWS_EC2_METADATA_SERVICE_ENDPOINT:-http://169.254.169.254}
I=\${I%/}
own() {
  local t
  t=$(curl -sS -f --max-time 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' "$I/latest/api/token") &&
    curl -sS -f --max-time 20 -H "X-aws-ec2-metadata-token: $t" "$I/latest/user-data" | sha256sum | cut -d' ' -f1
}
end=$((SECONDS + 30))
until h=$(own); do
  if ((SECONDS >= end)); then
    log "IMDS did not serve the user-data: recording the SHA-256 of $0 (the same bytes)"
    h=$(sha256sum <"$0" | cut -d' ' -f1)
    break
  fi
  sleep 2
done
echo "$h" >"$S/pool-user-data.sha256"
IMAGES=(${images.map(shQuote).join(" ")})
end=$((SECONDS + ${prepareSeconds}))
pull() {
  local left try
  for try in 1 2; do
    left=$((end - SECONDS))
    if ((left <= 0)); then
      log "no time left to pull $1 (prepareSeconds ${prepareSeconds})"
      return 1
    fi
    if timeout "$left" docker pull -- "$1" >>"$S/pool-pull.log" 2>&1; then return 0; fi
    log "docker pull $1 failed (try $try of 2; see $S/pool-pull.log)"
    if ((try == 1 && end - SECONDS > 5)); then sleep 5; fi
  done
  return 1
}
pulled=()
for image in "\${IMAGES[@]}"; do
  if pull "$image"; then pulled+=("$image"); fi
done
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  for image in "\${pulled[@]}"; do echo "$image"; done
} >"$S/pool-prepared"
log "prepared, \${#pulled[@]} of \${#IMAGES[@]} images pulled: powering off"
sync
shutdown -h now
`;
}
