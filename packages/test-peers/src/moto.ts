import { existsSync } from "node:fs";
import { join } from "node:path";
import { EC2Client } from "@aws-sdk/client-ec2";
import { z } from "zod";
import { TestPeerError } from "./errors.js";
import { cacheDir } from "./paths.js";
import { freePort } from "./ports.js";
import { type PeerProcess, spawnPeer, waitUntil } from "./process.js";

/**
 * The IAM instance profile {@link startMoto} creates (with a role of the same name), and creates
 * again after every `reset()`: the name the provider's `instanceProfile` setting uses in tests.
 */
export const NEBULA_INSTANCE_PROFILE = "nebula-host";

/** The dummy credentials every moto client uses (moto checks no signature). */
export const MOTO_CREDENTIALS = { accessKeyId: "testing", secretAccessKey: "testing" } as const;

const MotoOptionsSchema = z.strictObject({
  region: z
    .string()
    .regex(/^[a-z]{2}(-[a-z]+)+-\d$/)
    .optional(),
  motoServer: z.string().min(1).optional(),
  instanceProfiles: z.array(z.string().regex(/^[\w+=,.@-]{1,128}$/)).optional(),
  startTimeoutMs: z.number().int().positive().optional(),
});

/** Options of {@link startMoto}. Every field is optional. */
export interface MotoOptions {
  /** The region clients sign for; moto reads it from the signature. Default `us-east-1`. */
  region?: string;
  /**
   * Path of the `moto_server` executable. Default: `NEBULA_MOTO_SERVER`, else
   * `$NEBULA_CACHE_DIR/moto-venv/bin/moto_server` (made by `scripts/bootstrap.sh`).
   */
  motoServer?: string;
  /**
   * IAM instance profiles to create (each with a role of the same name) at start and after every
   * reset. Default `[NEBULA_INSTANCE_PROFILE]`.
   */
  instanceProfiles?: string[];
  /** How long to wait for moto to answer (default 60 s). */
  startTimeoutMs?: number;
}

/** An IAM instance profile created in moto. */
export interface MotoInstanceProfile {
  /** Its name, as given to `IamInstanceProfile.Name`. */
  name: string;
  /** Its ARN, as given to `IamInstanceProfile.Arn`. */
  arn: string;
}

/**
 * What a test needs to reach a running moto: plain data, so a vitest global setup can `provide`
 * it to test workers. Turn it into a client with {@link connectMoto}.
 */
export interface MotoInfo {
  /** The endpoint URL, `http://127.0.0.1:<port>`. */
  endpoint: string;
  /** The region clients use. */
  region: string;
  /** The instance profiles that exist (recreated by every reset). */
  instanceProfiles: MotoInstanceProfile[];
}

/** A handle on a running moto server, from {@link startMoto} or {@link connectMoto}. */
export interface MotoConnection {
  /** The endpoint URL, `http://127.0.0.1:<port>`. */
  readonly endpoint: string;
  /** The region clients use. */
  readonly region: string;
  /** The instance profiles that exist (recreated by `reset()`). */
  readonly instanceProfiles: readonly MotoInstanceProfile[];
  /**
   * Environment variables that point the AWS CLI and SDKs at this moto (`AWS_ENDPOINT_URL_EC2`,
   * `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_DEFAULT_REGION`, dummy credentials).
   */
  readonly env: Readonly<Record<string, string>>;
  /** A new `EC2Client` for this endpoint, region and dummy credentials. */
  ec2(): EC2Client;
  /**
   * Deletes every resource in every moto backend, then recreates the instance profiles. With one
   * moto shared by a whole test run, only call it where no other test file runs at the same time.
   */
  reset(): Promise<void>;
  /** The plain data to hand to another process (see {@link connectMoto}). */
  info(): MotoInfo;
}

/** A moto server this process started, from {@link startMoto}. */
export interface Moto extends MotoConnection {
  /** Stops the server and waits until its process group is gone. */
  stop(): Promise<void>;
}

function motoServerPath(explicit: string | undefined): string {
  if (explicit !== undefined) return explicit;
  const fromEnv = process.env.NEBULA_MOTO_SERVER;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  return join(cacheDir(), "moto-venv", "bin", "moto_server");
}

const ArnInXml = /<Arn>(arn:aws:iam::\d{12}:instance-profile\/[^<]+)<\/Arn>/;

/**
 * Calls moto's IAM query API. moto reads the service and region from the SigV4 credential scope
 * and checks no signature, so a well-formed but unsigned Authorization header is enough; this
 * keeps `@aws-sdk/client-iam` out of the dependencies.
 */
async function iam(endpoint: string, params: Record<string, string>): Promise<string> {
  const body = new URLSearchParams({ ...params, Version: "2010-05-08" });
  const date = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d+/, "");
  const response = await fetch(`${endpoint}/`, {
    method: "POST",
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      "x-amz-date": date,
      authorization: `AWS4-HMAC-SHA256 Credential=${MOTO_CREDENTIALS.accessKeyId}/${date.slice(0, 8)}/us-east-1/iam/aws4_request, SignedHeaders=host;x-amz-date, Signature=0`,
    },
    body,
  });
  const text = await response.text();
  if (!response.ok) {
    throw new TestPeerError(
      "RequestFailed",
      `moto IAM ${params.Action ?? "?"} answered ${response.status}: ${text.slice(0, 500)}`,
    );
  }
  return text;
}

async function createInstanceProfile(endpoint: string, name: string): Promise<MotoInstanceProfile> {
  const assumeRole = JSON.stringify({
    Version: "2012-10-17",
    Statement: [
      { Effect: "Allow", Principal: { Service: "ec2.amazonaws.com" }, Action: "sts:AssumeRole" },
    ],
  });
  await iam(endpoint, {
    Action: "CreateRole",
    RoleName: name,
    AssumeRolePolicyDocument: assumeRole,
  });
  const created = await iam(endpoint, {
    Action: "CreateInstanceProfile",
    InstanceProfileName: name,
  });
  await iam(endpoint, {
    Action: "AddRoleToInstanceProfile",
    InstanceProfileName: name,
    RoleName: name,
  });
  const arn = ArnInXml.exec(created)?.[1];
  if (arn === undefined) {
    throw new TestPeerError(
      "RequestFailed",
      `moto IAM CreateInstanceProfile: no ARN in ${created}`,
    );
  }
  return { name, arn };
}

/**
 * Starts `moto_server` on a free loopback port, waits until it answers, and creates the IAM
 * instance profile(s) the provider names (default {@link NEBULA_INSTANCE_PROFILE}).
 *
 * Use it in a vitest global setup (see `startTestPeers`) or directly in a test file's
 * `beforeAll`. Drive it only through `@aws-sdk/client-ec2` (`moto.ec2()`); call `reset()` between
 * tests that must not see each other's instances. moto flips instance states instantly
 * (`running` straight after RunInstances, `stopped` straight after StopInstances).
 *
 * @example
 * ```ts
 * const moto = await startMoto();
 * const ec2 = moto.ec2();
 * await ec2.send(new RunInstancesCommand({ ImageId: "ami-12345678", MinCount: 1, MaxCount: 1 }));
 * await moto.stop();
 * ```
 */
export async function startMoto(options: MotoOptions = {}): Promise<Moto> {
  const parsed = MotoOptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new TestPeerError("InvalidOptions", `startMoto: ${z.prettifyError(parsed.error)}`, {
      cause: parsed.error,
    });
  }
  const region = parsed.data.region ?? "us-east-1";
  const profileNames = parsed.data.instanceProfiles ?? [NEBULA_INSTANCE_PROFILE];
  const command = motoServerPath(parsed.data.motoServer);
  if (!existsSync(command)) {
    throw new TestPeerError(
      "BinaryMissing",
      `moto_server not found at ${command}: run \`bash scripts/bootstrap.sh moto\``,
    );
  }

  let peer: PeerProcess | undefined;
  let endpoint = "";
  for (let attempt = 1; peer === undefined; attempt++) {
    const port = await freePort();
    endpoint = `http://127.0.0.1:${port}`;
    const candidate = spawnPeer({
      name: "moto_server",
      command,
      args: ["-H", "127.0.0.1", "-p", String(port)],
      env: { ...process.env, PYTHONUNBUFFERED: "1", MOTO_PORT: String(port) },
    });
    try {
      await waitUntil(async () => (await fetch(`${endpoint}/moto-api/data.json`)).ok, {
        what: `moto on ${endpoint}`,
        timeoutMs: parsed.data.startTimeoutMs ?? 60_000,
        process: candidate,
      });
      peer = candidate;
    } catch (error) {
      await candidate.stop();
      // Another process may have taken the port between freePort() and bind: try a new one.
      if (attempt >= 3 || !candidate.outputTail().includes("Address already in use")) throw error;
    }
  }
  const running = peer;

  let connection: MotoConnection;
  try {
    const profiles: MotoInstanceProfile[] = [];
    for (const name of profileNames) profiles.push(await createInstanceProfile(endpoint, name));
    connection = connectMoto({ endpoint, region, instanceProfiles: profiles });
  } catch (error) {
    await running.stop();
    throw error;
  }
  return Object.assign(connection, { stop: () => running.stop() });
}

const MotoInfoSchema = z.object({
  endpoint: z.url(),
  region: z.string().min(1),
  instanceProfiles: z.array(z.object({ name: z.string().min(1), arn: z.string().min(1) })),
});

/**
 * Connects to a moto server started elsewhere (typically by the vitest global setup, which
 * `provide`s its {@link MotoInfo}). The connection can reset moto but not stop it.
 *
 * @example
 * ```ts
 * import { inject } from "vitest";
 * const moto = connectMoto(inject("nebulaTestPeers").moto);
 * const ec2 = moto.ec2();
 * ```
 */
export function connectMoto(info: MotoInfo): MotoConnection {
  const parsed = MotoInfoSchema.safeParse(info);
  if (!parsed.success) {
    throw new TestPeerError("InvalidOptions", `connectMoto: ${z.prettifyError(parsed.error)}`, {
      cause: parsed.error,
    });
  }
  const { endpoint, region } = parsed.data;
  let profiles: MotoInstanceProfile[] = parsed.data.instanceProfiles;
  const env = {
    AWS_ENDPOINT_URL_EC2: endpoint,
    AWS_ENDPOINT_URL: endpoint,
    AWS_REGION: region,
    AWS_DEFAULT_REGION: region,
    AWS_ACCESS_KEY_ID: MOTO_CREDENTIALS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: MOTO_CREDENTIALS.secretAccessKey,
  };
  return {
    endpoint,
    region,
    get instanceProfiles() {
      return profiles;
    },
    env,
    ec2: () => new EC2Client({ endpoint, region, credentials: { ...MOTO_CREDENTIALS } }),
    async reset() {
      const response = await fetch(`${endpoint}/moto-api/reset`, { method: "POST" });
      if (!response.ok) {
        throw new TestPeerError("RequestFailed", `moto reset answered ${response.status}`);
      }
      const next: MotoInstanceProfile[] = [];
      for (const { name } of profiles) next.push(await createInstanceProfile(endpoint, name));
      profiles = next;
    },
    info: () => ({ endpoint, region, instanceProfiles: profiles.map((p) => ({ ...p })) }),
  };
}
