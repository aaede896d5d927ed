import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  CloudWatchLogsClient,
  CreateLogGroupCommand,
  GetLogEventsCommand,
  type OutputLogEvent,
} from "@aws-sdk/client-cloudwatch-logs";
import { EC2Client, RunInstancesCommand } from "@aws-sdk/client-ec2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MOTO_CREDENTIALS, type Moto, NEBULA_INSTANCE_PROFILE, startMoto } from "../moto.js";
import { type InstanceHostGuest, type InstanceHosts, startInstanceHosts } from "./simulator.js";

// One guest plays Docker's awslogs driver through the contract's flags against the real moto;
// what reached CloudWatch Logs is read back with the AWS SDK once the guest has powered off (its
// forwarders have delivered everything by then).
const RUN = randomBytes(4).toString("hex");
const GROUP = `/nebula/awslogs-it/${RUN}`;
const LINES = 16_384;

let moto: Moto;
let hosts: InstanceHosts;
let logs: CloudWatchLogsClient;
let guest: InstanceHostGuest;

const USER_DATA = `#!/bin/bash
set -u
out=/var/lib/nebula/out; mkdir -p "$out"
region=$(curl -sS -H "X-aws-ec2-metadata-token: $(curl -sS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' \\
  "$AWS_EC2_METADATA_SERVICE_ENDPOINT/latest/api/token")" "$AWS_EC2_METADATA_SERVICE_ENDPOINT/latest/meta-data/placement/region")
aws=(--log-driver=awslogs --log-opt "awslogs-region=$region" --log-opt awslogs-group=${GROUP}
     --log-opt awslogs-create-group=false --log-opt "awslogs-endpoint=$AWS_ENDPOINT_URL_LOGS")
# (a) stdout and stderr, interleaved, the last line without a newline. (Two pipes: lines written
# at once to both arrive in the order conmon reads them, as with Docker; hence the pauses.)
id=$(docker create --name lines "\${aws[@]}" --log-opt awslogs-stream=default/web/uid-a/lines/0 -- busybox \\
  sh -c 'echo out-1; sleep 0.1; echo err-1 >&2; sleep 0.1; echo out-2; sleep 0.1; echo err-2 >&2; printf tail')
docker start "$id" >"$out/a.start" 2>&1
docker wait "$id" >"$out/a.exit"
docker logs "$id" >"$out/a.stdout" 2>"$out/a.stderr"
# (b) 1 MiB in one burst: 16,384 numbered lines of 64 bytes.
id=$(docker create --name burst "\${aws[@]}" --log-opt awslogs-stream=default/web/uid-a/burst/0 -- busybox \\
  awk 'BEGIN { for (i = 0; i < ${LINES}; i++) printf "%063d\\n", i }')
docker start "$id" >/dev/null 2>"$out/b.err"
docker wait "$id" >"$out/b.exit"
docker rm "$id" >/dev/null
# (c) an option Docker does not know fails the create.
docker create "\${aws[@]}" --log-opt awslogs-stream=x --log-opt awslogs-bogus=1 -- busybox true >"$out/c.out" 2>"$out/c.err"
echo $? >"$out/c.code"
# (d) a log group that does not exist fails the start, as Docker's driver does.
id=$(docker create --log-driver awslogs --log-opt "awslogs-region=$region" --log-opt awslogs-group=/nebula/missing-${RUN} \\
  --log-opt "awslogs-endpoint=$AWS_ENDPOINT_URL_LOGS" -- busybox echo never)
docker start "$id" >"$out/d.out" 2>"$out/d.err"
echo $? >"$out/d.code"
# (e) two runs of one container continue its stream; the first run's unfinished line stays its own.
id=$(docker create "\${aws[@]}" --log-opt awslogs-stream=default/web/uid-a/again/0 -- busybox sh -c 'echo one; printf two')
docker start "$id" >/dev/null; docker wait "$id" >/dev/null
docker start "$id" >/dev/null; docker wait "$id" >/dev/null
# (f) a container still running at power-off: its lines arrive too.
docker run -d "\${aws[@]}" --log-opt awslogs-stream=default/web/uid-a/running/0 -- busybox \\
  sh -c 'echo before-shutdown; exec sleep 600' >"$out/f.id"
sleep 0.5
touch "$out/done"
shutdown -h now
`;

beforeAll(async () => {
  moto = await startMoto();
  hosts = await startInstanceHosts({
    ec2Endpoint: moto.endpoint,
    region: moto.region,
    bootDelayMs: 200,
    cluster: `awslogs-${RUN}`,
  });
  logs = new CloudWatchLogsClient({
    endpoint: moto.endpoint,
    region: moto.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
  await logs.send(new CreateLogGroupCommand({ logGroupName: GROUP }));
  const ec2 = new EC2Client({
    endpoint: hosts.ec2Endpoint,
    region: moto.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
  const launched = await ec2.send(
    new RunInstancesCommand({
      ImageId: "ami-12345678",
      MinCount: 1,
      MaxCount: 1,
      UserData: Buffer.from(USER_DATA).toString("base64"),
      IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
      MetadataOptions: { HttpTokens: "required" },
      TagSpecifications: [
        {
          ResourceType: "instance",
          Tags: [
            { Key: "nebula:cluster", Value: `awslogs-${RUN}` },
            { Key: "nebula:pod-uid", Value: "uid-a" },
          ],
        },
      ],
    }),
  );
  ec2.destroy();
  const id = launched.Instances?.[0]?.InstanceId ?? "";
  guest = await hosts.waitForPhase(id, "off", 100_000);
}, 150_000);

afterAll(async () => {
  logs?.destroy();
  await hosts?.close();
  await moto?.stop();
});

const out = (name: string): string =>
  readFileSync(join(guest.dir, "root/var/lib/nebula/out", name), "utf8");

async function events(stream: string): Promise<OutputLogEvent[]> {
  const all: OutputLogEvent[] = [];
  let token: string | undefined;
  for (;;) {
    const page = await logs.send(
      new GetLogEventsCommand({
        logGroupName: GROUP,
        logStreamName: stream,
        startFromHead: true,
        ...(token === undefined ? {} : { nextToken: token }),
      }),
    );
    all.push(...(page.events ?? []));
    if (page.nextForwardToken === undefined || page.nextForwardToken === token) return all;
    if ((page.events ?? []).length === 0) return all;
    token = page.nextForwardToken;
  }
}

describe("the awslogs driver of the guest's docker", () => {
  it("sends a container's stdout and stderr lines to its stream, in order; docker logs still shows them", async () => {
    expect(out("done")).toBe("");
    expect(out("a.exit").trim()).toBe("0");
    const sent = await events("default/web/uid-a/lines/0");
    expect(sent.map((e) => e.message)).toEqual(["out-1", "err-1", "out-2", "err-2", "tail"]);
    const times = sent.map((e) => e.timestamp ?? 0);
    expect(times).toEqual([...times].sort((x, y) => x - y));
    expect(out("a.stdout")).toBe("out-1\nout-2\ntail");
    expect(out("a.stderr")).toBe("err-1\nerr-2\n");
  });

  it("delivers 1 MiB written in one burst complete and in order", async () => {
    expect(out("b.exit").trim()).toBe("0");
    expect(out("b.err")).toBe("");
    const sent = await events("default/web/uid-a/burst/0");
    expect(sent.length).toBe(LINES);
    const expected = Array.from({ length: LINES }, (_, i) => String(i).padStart(63, "0"));
    expect(sent.map((e) => e.message)).toEqual(expected);
  });

  it("fails a create with an unknown log option as Docker does", () => {
    expect(out("c.code").trim()).toBe("125");
    expect(out("c.out")).toBe("");
    expect(out("c.err")).toBe(
      "docker: Error response from daemon: unknown log opt 'awslogs-bogus' for awslogs log driver.\nSee 'docker create --help'.\n",
    );
  });

  it("fails the start when the log group does not exist, as Docker's driver does", () => {
    expect(out("d.code").trim()).toBe("1");
    expect(out("d.err")).toMatch(
      /^Error response from daemon: failed to create task for container: failed to initialize logging driver: failed to create Cloudwatch log stream: ResourceNotFoundException: /,
    );
  });

  it("continues a container's stream on its next run, the first run's unfinished line on its own", async () => {
    const sent = await events("default/web/uid-a/again/0");
    expect(sent.map((e) => e.message)).toEqual(["one", "two", "one", "two"]);
  });

  it("delivers a running container's lines when the guest powers off", async () => {
    const sent = await events("default/web/uid-a/running/0");
    expect(sent.map((e) => e.message)).toEqual(["before-shutdown"]);
  });
});
