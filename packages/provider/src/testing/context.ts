/**
 * A small {@link ProviderContext} for the collaborators' unit tests: the configuration of
 * `testConfig` (parsed), a {@link FakeGateway}, a `MemoryPodLedger`, a fake clock and a captured
 * log. Build one collaborator over it, drive it, then read the fake's call log and the ledger.
 */
import type { V1Pod } from "@kubernetes/client-node";
import { type ExitReport, encodeReportTags } from "@nebula/state-mapping";
import { MemoryPodLedger } from "@nebula/teardown";
import { NO_BACKOFF } from "../capacity.js";
import { type ProviderConfigInput, parseProviderConfig } from "../config.js";
import { HealthTracker } from "../health.js";
import { catalogueFor } from "../instance-types.js";
import { podFacts } from "../pod.js";
import { type ObservedInstance, observeInstance } from "../poll.js";
import type { PodRecord, ProviderContext } from "../record.js";
import { FakeGateway, type FakeInstance } from "./fake-gateway.js";
import { testConfig } from "./fixtures.js";

/** The fake clock's start: a fixed instant, so that every run computes the same times. */
export const T0 = Date.parse("2026-03-01T12:00:00Z");

/** A settable clock, ms since the epoch. */
interface FakeClock {
  /** The current time. */
  now: number;
  /** Moves the clock forward by `ms`. */
  advance(ms: number): void;
}

/** Everything a collaborator test needs, built by {@link testContext}. */
export interface TestContext {
  readonly ctx: ProviderContext;
  readonly gateway: FakeGateway;
  readonly ledger: MemoryPodLedger;
  readonly clock: FakeClock;
  /** Every line the collaborators logged. */
  readonly logs: { level: string; message: string }[];
}

/**
 * A context over `testConfig(overrides)`: a fresh {@link FakeGateway} (cluster `test`, node
 * `nebula-node`, profile `nebula-host`), a fresh `MemoryPodLedger` and a clock at {@link T0}.
 */
export function testContext(overrides: Partial<ProviderConfigInput> = {}): TestContext {
  const config = parseProviderConfig(testConfig(overrides));
  const gateway = new FakeGateway();
  const ledger = new MemoryPodLedger();
  const clock: FakeClock = {
    now: T0,
    advance(ms) {
      this.now += ms;
    },
  };
  const logs: { level: string; message: string }[] = [];
  const ctx: ProviderContext = {
    config,
    gateway,
    instanceTypes: catalogueFor(
      config,
      gateway,
      () => clock.now,
      (level, message) => void logs.push({ level, message }),
    ),
    ledger,
    records: new Map(),
    health: new HealthTracker(config),
    now: () => clock.now,
    log: (level, message) => void logs.push({ level, message }),
    ownership: {
      clusterName: config.clusterName,
      nodeName: config.nodeName,
      instanceProfile: config.instanceProfile,
      clientToken: config.ownership.clientToken,
    },
    listing: undefined,
    listingReadAt: undefined,
  };
  return { ctx, gateway, ledger, clock, logs };
}

/**
 * A record of `pod` as the admitter leaves a Pod to launch (mode `launch`, nothing launched),
 * registered in `ctx.records`, with `overrides` applied.
 */
export function testRecord(
  ctx: ProviderContext,
  pod: V1Pod,
  overrides: Partial<PodRecord> = {},
): PodRecord {
  const facts = podFacts(pod);
  const record: PodRecord = {
    pod: structuredClone(pod),
    facts,
    mode: "launch",
    instanceType: "m7i.large",
    userData: "#!/bin/bash\ntrue\n",
    launchRequested: false,
    unknownOutcome: false,
    backoff: NO_BACKOFF,
    launching: false,
    parametersUntagged: false,
    ledgerDirty: false,
    seen: false,
    missing: false,
    events: [],
    deleted: false,
    ...overrides,
  };
  ctx.records.set(facts.uid, record);
  return record;
}

/**
 * Adds an instance of `podUid` that proves it is Nebula's under the default ownership rules
 * (tags, instance profile, and the `ClientToken` of the Pod UID, which `FakeGateway.addInstance`
 * does not set by itself).
 */
export function addOwnedInstance(
  gateway: FakeGateway,
  podUid: string,
  overrides: Partial<FakeInstance> = {},
): FakeInstance {
  return gateway.addInstance(podUid, { ClientToken: podUid, ...overrides });
}

/** The instance as the gateway would return it (the real `observeInstance`). */
export function observed(instance: FakeInstance): ObservedInstance {
  const out = observeInstance(instance);
  if (out === undefined) throw new Error(`unreadable fake instance ${instance.InstanceId}`);
  return out;
}

/** Writes `report` to the fake instance's tags in place of any earlier one, as the host's CreateTags does. */
export function tagReport(instance: FakeInstance, report: ExitReport): void {
  instance.Tags = [
    ...instance.Tags.filter((t) => !t.Key.startsWith("nebula:report")),
    ...Object.entries(encodeReportTags(report)).map(([Key, Value]) => ({ Key, Value })),
  ];
}
