/**
 * Mapping cost for one poll of 10,000 instances (10 `DescribeInstances` pages of 1,000), next to
 * the floor: merely reading the same pages. Run: `npm run bench` in this package.
 *
 * Mix per poll: 70 % running and reporting, 10 % crash-looping, 10 % booting (no report yet),
 * 5 % stopped with a final report, 5 % stopped without one. Each instance's previous state (from
 * the poll before) is passed in, as the provider does.
 */
import { expect, test } from "vitest";
import {
  type InstanceState,
  parseDescribeInstancesPage,
  toInstanceReason,
  toInstanceState,
  toPodStatus,
} from "./index.js";
import { crashLooping, ec2, exited, NOW, pod, report, running } from "./test-fixtures.js";

const INSTANCES = 10_000;
const PAGE_SIZE = 1_000;

function instance(i: number): Record<string, unknown> {
  const id = { InstanceId: `i-${i.toString(16).padStart(17, "0")}` };
  const slot = i % 20;
  if (slot < 14)
    return {
      ...ec2("running", { report: report(3, false, [running(), running("sidecar")]) }),
      ...id,
    };
  if (slot < 16)
    return {
      ...ec2("running", { report: report(9, false, [crashLooping(4), running("sidecar")]) }),
      ...id,
    };
  if (slot < 18) return { ...ec2("running"), ...id };
  if (slot < 19) {
    return {
      ...ec2("stopped", {
        code: "Client.InstanceInitiatedShutdown",
        report: report(12, true, [exited(0), exited(0, "sidecar")]),
      }),
      ...id,
    };
  }
  return { ...ec2("stopped", { code: "Server.SpotInstanceTermination" }), ...id };
}

const pages = Array.from({ length: INSTANCES / PAGE_SIZE }, (_, p) => ({
  Reservations: Array.from({ length: PAGE_SIZE }, (_, i) => ({
    ReservationId: `r-${p}-${i}`,
    Instances: [instance(p * PAGE_SIZE + i)],
  })),
  NextToken: p < INSTANCES / PAGE_SIZE - 1 ? `token-${p + 1}` : undefined,
}));

const thePod = pod("Always", [{ name: "app" }, { name: "sidecar" }]);

// The previous poll's states, keyed by instance ID, as the provider keeps them.
const previous = new Map<string, InstanceState>();
for (const page of pages) {
  for (const reservation of page.Reservations) {
    for (const raw of reservation.Instances) {
      previous.set(String(raw.InstanceId), toInstanceState(raw, { now: NOW }));
    }
  }
}

let sink = 0;

const FLOOR = "floor: read the DescribeInstances pages (zod)" as const;
const MAP = "map: read + toInstanceState + toPodStatus" as const;
const MAP_REVERSE = "map + reverse: ... + toInstanceReason" as const;
const FIRST = "first poll (no previous state): read + map" as const;

function floor(): void {
  for (const page of pages) sink += parseDescribeInstancesPage(page).instances.length;
}

function map(reverse: boolean, withPrevious = true): void {
  for (const page of pages) {
    for (const reservation of page.Reservations) {
      for (const raw of reservation.Instances) {
        const state = toInstanceState(raw, {
          now: NOW,
          previous: withPrevious ? previous.get(String(raw.InstanceId)) : undefined,
        });
        const status = toPodStatus(thePod, state, { now: NOW });
        sink += reverse
          ? toInstanceReason({ spec: thePod.spec, status }).ready
            ? 1
            : 0
          : (status.containerStatuses?.length ?? 0);
      }
    }
  }
}

const ROUNDS = 15;

const median = (values: number[]): number => {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
};

test(`one poll of ${INSTANCES} instances`, { timeout: 900_000 }, async ({ bench }) => {
  // Vitest's own table (each benchmark run on its own, one after the other).
  const results = await bench.compare(
    bench(FLOOR, floor),
    bench(MAP, () => map(false)),
    bench(MAP_REVERSE, () => map(true)),
    bench(FIRST, () => map(false, false)),
    { time: 2_000, iterations: 5 },
  );

  // Side by side: each round times one poll of each, back to back, so that a change in machine
  // load hits all three alike; the ratios are per round, then the median is taken.
  const rounds: { floor: number; map: number; reverse: number; first: number }[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = performance.now();
    floor();
    const t1 = performance.now();
    map(false);
    const t2 = performance.now();
    map(true);
    const t3 = performance.now();
    map(false, false);
    const t4 = performance.now();
    rounds.push({ floor: t1 - t0, map: t2 - t1, reverse: t3 - t2, first: t4 - t3 });
  }
  const us = (ms: number) => ((ms * 1000) / INSTANCES).toFixed(2).padStart(8);
  const floorMs = median(rounds.map((x) => x.floor));
  const mapMs = median(rounds.map((x) => x.map));
  const reverseMs = median(rounds.map((x) => x.reverse));
  const mapRatio = median(rounds.map((x) => x.map / x.floor));
  const reverseRatio = median(rounds.map((x) => x.reverse / x.floor));
  const firstMs = median(rounds.map((x) => x.first));
  const firstRatio = median(rounds.map((x) => x.first / x.floor));
  const tinybench = (name: typeof FLOOR | typeof MAP | typeof MAP_REVERSE | typeof FIRST) =>
    us(results.get(name).latency.mean);
  console.log(
    [
      "",
      `Per instance, one poll of ${INSTANCES} instances (median of ${ROUNDS} interleaved rounds; vitest bench mean in brackets):`,
      `${FLOOR.padEnd(48)} ${us(floorMs)} µs  [${tinybench(FLOOR)} µs]    1.0× floor`,
      `${MAP.padEnd(48)} ${us(mapMs)} µs  [${tinybench(MAP)} µs]  ${mapRatio.toFixed(1).padStart(5)}× floor`,
      `${MAP_REVERSE.padEnd(48)} ${us(reverseMs)} µs  [${tinybench(MAP_REVERSE)} µs]  ${reverseRatio.toFixed(1).padStart(5)}× floor`,
      `${FIRST.padEnd(48)} ${us(firstMs)} µs  [${tinybench(FIRST)} µs]  ${firstRatio.toFixed(1).padStart(5)}× floor`,
    ].join("\n"),
  );
  expect(sink).toBeGreaterThan(0);
});
