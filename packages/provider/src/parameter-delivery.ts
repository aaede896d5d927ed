import type { AuxiliaryObject } from "@nebula/teardown";
import { ProviderError, toProviderError } from "./errors.js";
import {
  accountOfArn,
  instanceArn,
  isPodParametersAuxiliary,
  podParametersAuxiliary,
} from "./parameters.js";
import type { PodRecord, ProviderContext } from "./record.js";

/**
 * The Pod's spec through Parameter Store (`podDelivery: "parameters"`): its parameters written
 * before its `RunInstances`, tagged with its instance's ARN after (the host role reads only
 * parameters carrying its own ARN), and released by the Pod's teardown (`releasing`, through
 * {@link ParameterDelivery.auxiliariesOf} and {@link ParameterDelivery.release}). The leak
 * collector deletes what that path missed. With `user-data` delivery every method is a no-op.
 */
export class ParameterDelivery {
  readonly #ctx: ProviderContext;
  /** The supervisor parameters this process has written (or found): each is written once. */
  readonly #sharedWritten = new Set<string>();
  /** Set by the launcher: what to do when a write proves no `RunInstances` was sent. */
  onNotWritten: (record: PodRecord) => void = () => undefined;

  constructor(ctx: ProviderContext) {
    this.#ctx = ctx;
  }

  /** True with `podDelivery: "parameters"`. */
  get enabled(): boolean {
    return this.#ctx.config.podDelivery === "parameters";
  }

  /** The Pod's cloud objects besides its instance: its parameters, or none. */
  auxiliariesOf(podUid: string): readonly AuxiliaryObject[] {
    return this.enabled ? [podParametersAuxiliary(podUid)] : [];
  }

  /**
   * Deletes every parameter the Pod can have (one `DeleteParameters` call; missing names are not an
   * error), so a resumed teardown may repeat it. Refuses an object {@link auxiliariesOf} did not
   * name.
   */
  async release(object: AuxiliaryObject): Promise<void> {
    if (!isPodParametersAuxiliary(object)) {
      throw new ProviderError(
        "InvalidConfiguration",
        `cannot release ${object.apiVersion}/${object.kind} ${object.name}: not one of this provider's objects`,
      );
    }
    const deleted = await this.#ctx.gateway.deletePodParameters(object.name);
    if (deleted.length > 0) {
      this.#ctx.log("info", `deleted ${deleted.length} parameter(s) of pod UID ${object.name}`);
    }
  }

  /**
   * Writes the Pod's parameters before its `RunInstances` (again once they are half the leak
   * grace old, so a launch that keeps waiting is never collected). False when they could not be
   * written: the launch waits for the next poll (no instance without its parameters).
   */
  async write(record: PodRecord): Promise<boolean> {
    const { config, gateway } = this.#ctx;
    const parameters = record.parameters;
    if (!this.enabled || parameters === undefined || parameters.length === 0) return true;
    const now = this.#ctx.now();
    const refreshMs = (config.leakCollection.parameterGraceSeconds * 1000) / 2;
    if (record.parametersWrittenAt !== undefined && now - record.parametersWrittenAt < refreshMs) {
      return true;
    }
    const { facts } = record;
    try {
      const shared = (record.sharedParameters ?? []).filter(
        (p) => !this.#sharedWritten.has(p.name),
      );
      if (shared.length > 0) {
        await gateway.writeSharedParameters(shared);
        for (const p of shared) this.#sharedWritten.add(p.name);
      }
      await gateway.writePodParameters(facts.uid, parameters);
      record.parametersWrittenAt = now;
      return true;
    } catch (error) {
      const wrapped = toProviderError(error, `PutParameter for pod ${facts.key}`);
      const previous = record.launchError?.code;
      record.launchError = new ProviderError(
        wrapped.code,
        `pod ${facts.key}: its parameters could not be written to Parameter Store (${wrapped.awsCode ?? wrapped.code}); not launched, retrying`,
        { cause: wrapped, ...(wrapped.awsCode ? { awsCode: wrapped.awsCode } : {}) },
      );
      // No RunInstances was sent (the parameters are the teardown's).
      this.onNotWritten(record);
      if (previous !== wrapped.code) {
        record.events.push({
          type: "Warning",
          reason: "ParametersNotWritten",
          message: `${record.launchError.message}: ${wrapped.message}`,
        });
      }
      this.#ctx.log("warn", `${record.launchError.message}: ${wrapped.message}`);
      return false;
    }
  }

  /**
   * Tags the Pod's parameters with its instance's ARN (`nebula:instance-arn`): the host role may
   * read only parameters carrying its own ARN, and the supervisor waits for it with a bounded
   * retry. Never throws: a failure is logged and retried by the next poll.
   */
  async tag(record: PodRecord): Promise<void> {
    const { config, gateway } = this.#ctx;
    const instanceId = record.instanceId;
    if (!record.parametersUntagged || instanceId === undefined || record.tagging) return;
    const account =
      record.accountId ??
      accountOfArn(record.observed?.instanceProfileArn) ??
      accountOfArn(config.instanceProfile);
    if (account === undefined) return; // the poll's observation brings the instance profile's ARN
    record.tagging = true;
    const { facts } = record;
    try {
      const arn = instanceArn(config.region, account, instanceId);
      // Names this process wrote, else (written by an earlier process) those that exist.
      const names =
        record.parametersWrittenAt !== undefined && record.parameters !== undefined
          ? record.parameters.map((p) => p.name)
          : await gateway.podParameterNames(facts.uid);
      try {
        await gateway.tagParameters(names, arn);
      } catch (error) {
        const parameters = record.parameters;
        if (toProviderError(error, "tag").code !== "NotFound" || !parameters?.length) throw error;
        // Deleted behind our back (or written by an earlier render): write them again, then tag.
        record.parametersWrittenAt = undefined;
        if (!(await this.write(record))) throw error;
        await gateway.tagParameters(
          parameters.map((p) => p.name),
          arn,
        );
      }
      record.parametersUntagged = false;
    } catch (error) {
      this.#ctx.log(
        "warn",
        `parameters of pod ${facts.key} not yet tagged with instance ${instanceId}: ${String(error)} (will retry)`,
      );
    } finally {
      record.tagging = false;
    }
  }
}
