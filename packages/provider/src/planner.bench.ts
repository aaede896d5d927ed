/**
 * Launch decisions per second at 1,000 Pending Pods: the instance-type planner with
 * `instanceTypes.catalogue` over EC2's whole catalogue as moto lists it (every type, with its
 * offerings in three subnets' zones, read through the real gateway), side by side with the
 * ordered `byResources` rules. A decision is what the provider computes per Pod before any call:
 * its candidate types (`instanceTypeCandidates`) and its placements (`placementsFor`). The two are
 * timed in interleaved rounds; the ratio is the median of the per-round ratios. Run: `npm run bench`
 * at the root (or `npx vitest bench --run` here). Printed, never asserted.
 *
 * With NEBULA_BENCH_OUT=<file> set, each figure is appended to that file as a JSON line
 * {package, figure, value, unit, baseline, baselineLabel, ratio, goal}.
 */
import { appendFileSync } from "node:fs";
import { CreateSubnetCommand, CreateVpcCommand } from "@aws-sdk/client-ec2";
import { startMoto } from "@nebula/test-peers";
import { test } from "vitest";
import { placementsFor } from "./capacity.js";
import { parseProviderConfig } from "./config.js";
import { readCatalogue } from "./instance-types.js";
import { instanceTypeCandidates, podFacts } from "./pod.js";
import { Ec2PodProvider } from "./provider.js";
import { testPod } from "./testing/fixtures.js";
import { motoConfig, prepareMoto } from "./testing/moto-env.js";

const PODS = 1000;
const ROUNDS = Number(process.env.NEBULA_BENCH_ROUNDS ?? 15);

const median = (values: readonly number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

test("launch decisions per second at 1,000 Pending Pods", async () => {
  const moto = await startMoto();
  try {
    const network = await prepareMoto(moto);
    const ec2 = moto.ec2();
    const vpc = (await ec2.send(new CreateVpcCommand({ CidrBlock: "10.7.0.0/16" }))).Vpc?.VpcId;
    const subnets: string[] = [];
    for (const [i, zone] of ["us-east-1a", "us-east-1b", "us-east-1e"].entries()) {
      const created = await ec2.send(
        new CreateSubnetCommand({
          VpcId: vpc,
          CidrBlock: `10.7.${i}.0/24`,
          AvailabilityZone: zone,
        }),
      );
      subnets.push(created.Subnet?.SubnetId as string);
    }
    ec2.destroy();
    const base = { ...motoConfig(moto, network, "bench"), subnetIds: subnets };
    const provider = new Ec2PodProvider({ config: base, livePodUids: () => [] });
    const catalogue = (await readCatalogue(provider.gateway, subnets)).types;
    provider.client.destroy();

    const withCatalogue = parseProviderConfig({
      ...base,
      instanceTypes: {
        default: "m7i.large",
        catalogue: { allowed: ["c7i.*", "m7i.*", "r7i.*", "c6i.*", "m6i.*", "r6i.*", "g5.*"] },
      },
    });
    const withRules = parseProviderConfig({
      ...base,
      instanceTypes: {
        default: "m7i.large",
        byResources: [
          { instanceType: "m7i.large", cpu: 2, memoryMiB: 8192 },
          { instanceType: "m7i.xlarge", cpu: 4, memoryMiB: 16384 },
          { instanceType: "m7i.2xlarge", cpu: 8, memoryMiB: 32768 },
          { instanceType: "g5.xlarge", cpu: 4, memoryMiB: 16384, gpus: 1 },
        ],
        fallbacks: { "m7i.large": ["m6i.large"], "m7i.xlarge": ["m6i.xlarge"] },
      },
    });
    // 1,000 Pending Pods of mixed sizes, a GPU one in twenty.
    const facts = Array.from({ length: PODS }, (_, i) =>
      podFacts(
        testPod(`p-${i}`, `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`, {
          resources: {
            requests: { cpu: `${250 * (1 + (i % 8))}m`, memory: `${512 * (1 + (i % 12))}Mi` },
            ...(i % 20 === 0 ? { limits: { "nvidia.com/gpu": "1" } } : {}),
          },
        }),
      ),
    );
    let sink = 0;
    const decide = (config: typeof withRules, types: typeof catalogue) => {
      const start = performance.now();
      for (const f of facts) {
        const candidates = instanceTypeCandidates(f, config, types);
        sink += placementsFor(f, candidates, config, types).length;
      }
      return performance.now() - start;
    };
    const catalogueMs: number[] = [];
    const rulesMs: number[] = [];
    const ratios: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const c = decide(withCatalogue, catalogue);
      const r = decide(withRules, []);
      catalogueMs.push(c);
      rulesMs.push(r);
      ratios.push(c / r);
    }
    const perSecond = (ms: number) => Math.round((PODS / ms) * 1000);
    const catalogueRate = perSecond(median(catalogueMs));
    const rulesRate = perSecond(median(rulesMs));
    console.log(
      `\nplanner, ${PODS} Pending Pods, ${ROUNDS} rounds (placements summed: ${sink}):\n` +
        `  catalogue of ${catalogue.length} types (moto), 3 subnets: ${catalogueRate} decisions/s (median ${median(catalogueMs).toFixed(1)} ms per 1,000)\n` +
        `  byResources rules (4) + fallbacks:            ${rulesRate} decisions/s (median ${median(rulesMs).toFixed(1)} ms per 1,000)\n` +
        `  catalogue / rules time, median of rounds: ${median(ratios).toFixed(1)}×`,
    );
    const out = process.env.NEBULA_BENCH_OUT;
    if (out) {
      appendFileSync(
        out,
        `${JSON.stringify({
          package: "@nebula/provider",
          figure: `planner: launch decisions per second, ${PODS} Pending Pods, catalogue of ${catalogue.length} types × 3 subnets`,
          value: catalogueRate,
          unit: "decisions/s",
          baseline: rulesRate,
          baselineLabel: "byResources rules (4) + fallbacks, same Pods",
          // value / baseline (decisions per second), the median of the rounds' ratios.
          ratio: Math.round(median(ratios.map((r) => 1 / r)) * 100) / 100,
          goal: null,
        })}\n`,
      );
    }
  } finally {
    await moto.stop();
  }
}, 300_000);
