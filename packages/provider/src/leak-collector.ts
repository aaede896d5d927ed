import type { LeakCollected } from "@nebula/virtual-node";
import { ProviderError } from "./errors.js";
import {
  type LeakPlan,
  type ParameterLeakPlan,
  planLeakCollection,
  planParameterLeaks,
} from "./leaks.js";
import { notifyAll } from "./listeners.js";
import type { ListedParameter } from "./parameters.js";
import { disprove, isCompleteRecord, type ProviderContext } from "./record.js";
import { ORPHANED_TAG, POOL_TAG } from "./tags.js";

/**
 * Pod parameters the leak collector deleted: parameters of a Pod that is neither live nor being
 * torn down, older than the grace.
 */
export interface CollectedParameterLeak {
  /** The Pod UID in their names. */
  readonly podUid: string;
  /** The parameter names deleted. */
  readonly names: readonly string[];
  /** A sentence for an Event or a log line. */
  readonly message: string;
}

/** What one leak-collection pass decided: the instance plan, and the Pod parameters deleted. */
export interface LeakCollection extends LeakPlan {
  /** Pod parameters deleted (`podDelivery: "parameters"`; empty otherwise). */
  readonly parameters: ParameterLeakPlan;
}

const NO_PARAMETER_LEAKS: ParameterLeakPlan = { delete: [], podUids: [] };

/**
 * The safety net under every other path (two-phase, over the pure `planLeakCollection` and
 * `planParameterLeaks`): instances of this node that prove Nebula launched them and whose Pod is
 * not live are marked, then terminated on a later pass if still orphaned; Pod parameters no live
 * Pod, unfinished teardown or live instance accounts for are deleted after their grace; ledger
 * entries of Pods that are gone and whose teardown completed (or that never launched) are removed.
 */
export class LeakCollector {
  readonly #ctx: ProviderContext;
  readonly #livePodUids: () => Promise<Iterable<string>> | Iterable<string>;
  /** The collector's own orphan marks: instance ID → when it marked it. */
  readonly #marks = new Map<string, number>();
  readonly #leakListeners = new Set<(leak: LeakCollected) => void>();
  readonly #parameterListeners = new Set<(leak: CollectedParameterLeak) => void>();

  constructor(
    ctx: ProviderContext,
    livePodUids: () => Promise<Iterable<string>> | Iterable<string>,
  ) {
    this.#ctx = ctx;
    this.#livePodUids = livePodUids;
  }

  /** Subscribes to terminated leaks; returns the unsubscribe. */
  onLeak(listener: (leak: LeakCollected) => void): () => void {
    this.#leakListeners.add(listener);
    return () => this.#leakListeners.delete(listener);
  }

  /** Subscribes to deleted Pod parameters; returns the unsubscribe. */
  onParameterLeak(listener: (leak: CollectedParameterLeak) => void): () => void {
    this.#parameterListeners.add(listener);
    return () => this.#parameterListeners.delete(listener);
  }

  /** One pass over the latest poll's listing (which must exist). */
  async collect(): Promise<LeakCollection> {
    const ctx = this.#ctx;
    const { config, gateway } = ctx;
    const instances = ctx.listing;
    if (instances === undefined) {
      throw new ProviderError("Unavailable", "leak collection skipped: EC2 could not be listed");
    }
    // Listed before the live Pods and the ledger are read, as the instances are.
    const parameters =
      config.podDelivery === "parameters" ? await this.#listParameters() : undefined;
    // Live Pods are read after the listing, so a Pod created in between counts as live.
    const live = new Set(await this.#livePodUids());
    for (const uid of ctx.records.keys()) live.add(uid);
    const now = ctx.now();
    const plan = planLeakCollection({
      // A warm-pool host no Pod took is the pool's to keep or collect (`WarmPool`), not a leak.
      instances: instances.filter((i) => i.podUid !== undefined || !i.tags.has(POOL_TAG)),
      livePodUids: live,
      now,
      graceMs: config.leakCollection.graceSeconds * 1000,
      confirmAfterMs: Math.min(60, config.leakCollection.intervalSeconds / 2) * 1000,
      marks: this.#marks,
      disprove: (instance) => disprove(ctx, instance, undefined),
    });
    for (const id of plan.mark) this.#marks.set(id, now);
    for (const id of plan.unmark) this.#marks.delete(id);
    for (const id of plan.terminate) this.#marks.delete(id);
    if (plan.mark.length > 0) {
      await gateway
        .tagInstances(plan.mark, ORPHANED_TAG, new Date(now).toISOString())
        .catch((error) => ctx.log("warn", String(error)));
    }
    if (plan.unmark.length > 0) {
      await gateway
        .untagInstances(plan.unmark, ORPHANED_TAG)
        .catch((error) => ctx.log("warn", String(error)));
    }
    const byId = new Map(instances.map((i) => [i.instanceId, i]));
    await Promise.all(
      plan.terminate.map(async (id) => {
        await gateway.terminateInstance(id);
        const podUid = byId.get(id)?.podUid;
        const leak: LeakCollected = {
          instanceId: id,
          podUid,
          message: `instance ${id} of pod UID ${podUid ?? "(none)"} was running with no live Pod; the leak collector terminated it`,
        };
        notifyAll(this.#leakListeners, (listener) => listener(leak));
      }),
    );
    for (const { instanceId, why } of plan.unproven) {
      ctx.log("warn", `leak collection leaves ${instanceId} alone: ${why}`);
    }
    if (plan.mark.length + plan.terminate.length > 0) {
      ctx.log(
        "info",
        `leak collection: marked ${plan.mark.length}, terminated ${plan.terminate.length}, unmarked ${plan.unmark.length}`,
      );
    }
    const parameterPlan =
      parameters === undefined
        ? NO_PARAMETER_LEAKS
        : await this.#collectParameters(parameters, live);
    await this.#sweepLedger(live);
    return { ...plan, parameters: parameterPlan };
  }

  async #listParameters(): Promise<ListedParameter[] | undefined> {
    try {
      return await this.#ctx.gateway.clusterPodParameters();
    } catch (error) {
      this.#ctx.log("warn", `leak collection skips Pod parameters: ${String(error)}`);
      return undefined;
    }
  }

  /** Deletes the Pod parameters no live Pod, unfinished teardown or live instance accounts for. */
  async #collectParameters(
    parameters: readonly ListedParameter[],
    live: ReadonlySet<string>,
  ): Promise<ParameterLeakPlan> {
    const ctx = this.#ctx;
    let unfinished: Set<string>;
    try {
      const entries = await ctx.ledger.list();
      unfinished = new Set(
        entries.filter((e) => !isCompleteRecord(e.record)).map((e) => e.launch.podUid),
      );
    } catch (error) {
      ctx.log("warn", `leak collection skips Pod parameters (ledger): ${String(error)}`);
      return NO_PARAMETER_LEAKS;
    }
    const planned = planParameterLeaks({
      parameters,
      livePodUids: live,
      unfinished,
      now: ctx.now(),
      graceMs: ctx.config.leakCollection.parameterGraceSeconds * 1000,
    });
    if (planned.podUids.length === 0) return planned;
    // The path is the cluster's, not this node's: a Pod of another virtual node of the cluster is
    // not live here. Its instance is: leave the parameters of any Pod UID with a live instance.
    let running: Set<string>;
    try {
      running = await ctx.gateway.podsWithLiveInstances(planned.podUids);
    } catch (error) {
      ctx.log("warn", `leak collection skips Pod parameters: ${String(error)}`);
      return NO_PARAMETER_LEAKS;
    }
    const podUids = planned.podUids.filter((uid) => !running.has(uid));
    const byPod = new Map<string, string[]>();
    for (const p of parameters) {
      if (podUids.includes(p.podUid) && planned.delete.includes(p.name)) {
        byPod.set(p.podUid, [...(byPod.get(p.podUid) ?? []), p.name]);
      }
    }
    const deleted: string[] = [];
    const collected: string[] = [];
    for (const [podUid, names] of byPod) {
      try {
        await ctx.gateway.deleteParameters(names);
      } catch (error) {
        ctx.log("warn", `leaked parameters of pod UID ${podUid} not deleted: ${String(error)}`);
        continue;
      }
      deleted.push(...names);
      collected.push(podUid);
      const leak: CollectedParameterLeak = {
        podUid,
        names,
        message: `${names.length} Parameter Store parameter(s) of pod UID ${podUid} had no live Pod and no teardown; the leak collector deleted them`,
      };
      notifyAll(this.#parameterListeners, (listener) => listener(leak));
    }
    if (collected.length > 0) {
      ctx.log(
        "info",
        `leak collection: deleted ${deleted.length} parameter(s) of ${collected.length} pod(s)`,
      );
    }
    return { delete: deleted, podUids: collected };
  }

  /**
   * Removes the ledger entries of Pods that are gone (not live, not known) and either never
   * launched or whose teardown completed; only the entry as listed (one written since is kept).
   * A gone Pod whose teardown is unfinished is the virtual node's ledger sweep's to resume.
   */
  async #sweepLedger(live: ReadonlySet<string>): Promise<void> {
    const ctx = this.#ctx;
    try {
      for (const entry of await ctx.ledger.list()) {
        const uid = entry.launch.podUid;
        if (live.has(uid) || ctx.records.has(uid)) continue;
        const launched =
          entry.launch.requestedAt !== undefined || entry.launch.instanceId !== undefined;
        if (!launched || isCompleteRecord(entry.record)) {
          await ctx.ledger.remove(uid, { ifVersion: entry.version });
        }
      }
    } catch (error) {
      ctx.log("warn", `ledger sweep failed: ${String(error)}`);
    }
  }
}
