/**
 * An in-memory {@link Gateway} for the collaborators' unit tests (Karpenter's `cloudprovider/fake`
 * is the model): instances are EC2-shaped objects read through the real `observeInstance`, every
 * call is logged, and any call can be made to fail. What it answers is what EC2 would for the
 * same filters; the moto integration suites check the real {@link AwsGateway} against that.
 */

import type { RunInstancesCommandInput } from "@aws-sdk/client-ec2";
import type { PodParameter } from "@nebula/userdata";
import type { BatchOutcome } from "../batch.js";
import type { Ec2BudgetState } from "../ec2-budget.js";
import { ProviderError } from "../errors.js";
import type { Gateway, GatewayCall, LaunchAnswer } from "../gateway.js";
import { type ReadInstanceTypes, readInstanceTypes } from "../instance-catalogue.js";
import type { ListedParameter } from "../parameters.js";
import { type ObservedInstance, observeInstance, POLLED_STATES, type PollPage } from "../poll.js";
import { CLUSTER_TAG, NODE_TAG, POD_TAG, POD_UID_TAG } from "../tags.js";

/** An instance as the fake keeps it: the fields `observeInstance` reads. */
export interface FakeInstance {
  InstanceId: string;
  State: { Name: string };
  Tags: { Key: string; Value: string }[];
  LaunchTime?: Date;
  ClientToken?: string;
  InstanceType?: string;
  SubnetId?: string;
  Placement?: { AvailabilityZone: string };
  IamInstanceProfile?: { Arn: string };
  /** `spot` for a Spot instance. */
  InstanceLifecycle?: string;
}

/** Names of the fake's calls, as {@link FakeGateway.calls} logs them. */
export type FakeAction = Exclude<keyof Gateway, "onCall" | "budgetState">;

/** A {@link Gateway} in memory. */
export class FakeGateway implements Gateway {
  /** Instances by ID. */
  readonly instances = new Map<string, FakeInstance>();
  /** Parameters by name. */
  readonly parameters = new Map<
    string,
    { value: string; tags: Map<string, string>; lastModified: number }
  >();
  /** Every call, in order, with its first argument. */
  readonly calls: { action: FakeAction; arg: unknown }[] = [];
  readonly #failures = new Map<FakeAction, ProviderError[]>();
  readonly #listeners = new Set<(call: GatewayCall) => void>();
  #next = 0;

  /**
   * @param scope - the cluster and node whose tags scope the node lookups, and the instance
   * profile ARN instances get (the defaults match `testConfig`).
   */
  constructor(
    readonly scope: { cluster: string; node: string; instanceProfileArn?: string } = {
      cluster: "test",
      node: "nebula-node",
      instanceProfileArn: "arn:aws:iam::123456789012:instance-profile/nebula-host",
    },
  ) {}

  /** Makes the next `times` calls of `action` throw `error`. */
  fail(action: FakeAction, error: ProviderError, times = 1): void {
    this.#failures.set(action, [
      ...(this.#failures.get(action) ?? []),
      ...Array(times).fill(error),
    ]);
  }

  /** Adds an instance of `podUid` on this node (proven Nebula's unless `tags` override it). */
  addInstance(podUid: string, overrides: Partial<FakeInstance> = {}): FakeInstance {
    const id = overrides.InstanceId ?? `i-${(++this.#next).toString(16).padStart(17, "0")}`;
    const instance: FakeInstance = {
      InstanceId: id,
      State: { Name: "running" },
      Tags: [
        { Key: CLUSTER_TAG, Value: this.scope.cluster },
        { Key: NODE_TAG, Value: this.scope.node },
        { Key: POD_UID_TAG, Value: podUid },
        { Key: POD_TAG, Value: `default/${podUid}` },
      ],
      LaunchTime: new Date(0),
      ClientToken: podUid,
      ...(this.scope.instanceProfileArn
        ? { IamInstanceProfile: { Arn: this.scope.instanceProfileArn } }
        : {}),
      ...overrides,
    };
    this.instances.set(id, instance);
    return instance;
  }

  /** Sets an instance's state. */
  setState(instanceId: string, state: string): void {
    const instance = this.instances.get(instanceId);
    if (instance) instance.State = { Name: state };
  }

  /** The number of calls of `action`. */
  count(action: FakeAction): number {
    return this.calls.filter((c) => c.action === action).length;
  }

  async listNodeInstances(): Promise<PollPage> {
    this.#enter("listNodeInstances", undefined);
    const states = new Set<string>(POLLED_STATES);
    const instances = this.#observed().filter((i) => this.#onNode(i) && states.has(i.state));
    return { instances, calls: 1, unreadable: 0 };
  }

  async describeInstances(ids: readonly string[]): Promise<readonly ObservedInstance[]> {
    this.#enter("describeInstances", ids);
    return this.#observed().filter((i) => this.#onNode(i) && ids.includes(i.instanceId));
  }

  async instancesOfPod(podUid: string): Promise<readonly ObservedInstance[]> {
    this.#enter("instancesOfPod", podUid);
    return this.#observed().filter((i) => this.#onNode(i) && i.podUid === podUid);
  }

  async describeInstance(instanceId: string): Promise<ObservedInstance | undefined> {
    this.#enter("describeInstance", instanceId);
    return this.#observed().find((i) => i.instanceId === instanceId);
  }

  async podsWithLiveInstances(podUids: readonly string[]): Promise<Set<string>> {
    this.#enter("podsWithLiveInstances", podUids);
    const live = new Set(["pending", "running", "stopping", "stopped"]);
    return new Set(
      this.#observed()
        .filter((i) => i.tags.get(CLUSTER_TAG) === this.scope.cluster && live.has(i.state))
        .flatMap((i) => (i.podUid !== undefined && podUids.includes(i.podUid) ? [i.podUid] : [])),
    );
  }

  async runInstances(input: RunInstancesCommandInput): Promise<LaunchAnswer> {
    this.#enter("runInstances", input);
    const tags = input.TagSpecifications?.find((t) => t.ResourceType === "instance")?.Tags ?? [];
    const existing = [...this.instances.values()].find(
      (i) => input.ClientToken !== undefined && i.ClientToken === input.ClientToken,
    );
    if (existing) {
      return {
        instanceId: existing.InstanceId,
        ownerId: "123456789012",
        availabilityZone: this.zones.get(existing.SubnetId ?? "") ?? "us-east-1a",
      };
    }
    const podUid = tags.find((t) => t.Key === POD_UID_TAG)?.Value ?? "";
    const instance = this.addInstance(podUid, {
      State: { Name: "pending" },
      Tags: tags.map((t) => ({ Key: t.Key ?? "", Value: t.Value ?? "" })),
      LaunchTime: new Date(),
      ...(input.ClientToken ? { ClientToken: input.ClientToken } : {}),
      ...(input.InstanceType ? { InstanceType: input.InstanceType } : {}),
      ...(input.SubnetId ? { SubnetId: input.SubnetId } : {}),
    });
    return {
      instanceId: instance.InstanceId,
      ownerId: "123456789012",
      availabilityZone: this.zones.get(input.SubnetId ?? "") ?? "us-east-1a",
    };
  }

  async stopInstance(instanceId: string): Promise<BatchOutcome> {
    this.#enter("stopInstance", instanceId);
    if (!this.instances.has(instanceId)) return "notFound";
    this.setState(instanceId, "stopped");
    return "done";
  }

  async terminateInstance(instanceId: string): Promise<BatchOutcome> {
    this.#enter("terminateInstance", instanceId);
    if (!this.instances.has(instanceId)) return "notFound";
    this.setState(instanceId, "terminated");
    return "done";
  }

  async flush(): Promise<void> {
    this.#enter("flush", undefined);
  }

  /** User-data set by {@link FakeGateway.setUserData}, by instance ID (base64). */
  readonly userData = new Map<string, string>();

  async startInstance(instanceId: string): Promise<void> {
    this.#enter("startInstance", instanceId);
    const instance = this.instances.get(instanceId);
    if (!instance) throw new ProviderError("NotFound", `InvalidInstanceID.NotFound: ${instanceId}`);
    if (instance.State.Name === "stopped") this.setState(instanceId, "pending");
  }

  async setUserData(instanceId: string, userData: string): Promise<void> {
    this.#enter("setUserData", instanceId);
    const instance = this.instances.get(instanceId);
    if (!instance) throw new ProviderError("NotFound", `InvalidInstanceID.NotFound: ${instanceId}`);
    if (instance.State.Name !== "stopped") {
      throw new ProviderError(
        "InvalidRequest",
        `IncorrectInstanceState: the instance '${instanceId}' is not in the 'stopped' state`,
      );
    }
    this.userData.set(instanceId, userData);
  }

  async tagInstance(instanceId: string, tags: Readonly<Record<string, string>>): Promise<void> {
    this.#enter("tagInstance", { instanceId, tags });
    const instance = this.instances.get(instanceId);
    if (!instance) return;
    instance.Tags = [
      ...instance.Tags.filter((t) => !(t.Key in tags)),
      ...Object.entries(tags).map(([Key, Value]) => ({ Key, Value })),
    ];
  }

  async tagInstances(instanceIds: readonly string[], key: string, value: string): Promise<void> {
    this.#enter("tagInstances", { instanceIds, key, value });
    for (const id of instanceIds) {
      const instance = this.instances.get(id);
      if (!instance) continue;
      instance.Tags = [...instance.Tags.filter((t) => t.Key !== key), { Key: key, Value: value }];
    }
  }

  async untagInstances(instanceIds: readonly string[], key: string): Promise<void> {
    this.#enter("untagInstances", { instanceIds, key });
    for (const id of instanceIds) {
      const instance = this.instances.get(id);
      if (instance) instance.Tags = instance.Tags.filter((t) => t.Key !== key);
    }
  }

  async consoleOutput(instanceId: string): Promise<string> {
    this.#enter("consoleOutput", instanceId);
    return "";
  }

  /** EC2-shaped `InstanceTypeInfo` entries {@link FakeGateway.describeInstanceTypes} answers with. */
  instanceTypes: unknown[] = [];

  async describeInstanceTypes(): Promise<ReadInstanceTypes> {
    this.#enter("describeInstanceTypes", undefined);
    return readInstanceTypes(this.instanceTypes);
  }

  /** Subnet → Availability Zone, as {@link FakeGateway.subnetZones} answers (unlisted: none). */
  zones = new Map<string, string>();
  /** Type → Availability Zones, as {@link FakeGateway.instanceTypeOfferings} answers; unset: every type in every zone. */
  offerings: Map<string, Set<string>> | undefined;

  async subnetZones(subnetIds: readonly string[]): Promise<Map<string, string>> {
    this.#enter("subnetZones", subnetIds);
    return new Map([...this.zones].filter(([subnet]) => subnetIds.includes(subnet)));
  }

  /** `type/zone` → Spot price (USD per hour), as {@link FakeGateway.spotPrice} answers (unlisted: none). */
  spotPrices = new Map<string, string>();

  async spotPrice(instanceType: string, availabilityZone: string): Promise<string | undefined> {
    this.#enter("spotPrice", `${instanceType}/${availabilityZone}`);
    return this.spotPrices.get(`${instanceType}/${availabilityZone}`);
  }

  async instanceTypeOfferings(zones: readonly string[]): Promise<Map<string, Set<string>>> {
    this.#enter("instanceTypeOfferings", zones);
    const all =
      this.offerings ??
      new Map(readInstanceTypes(this.instanceTypes).types.map((t) => [t.name, new Set(zones)]));
    return new Map(
      [...all]
        .map(
          ([type, offered]) =>
            [type, new Set([...offered].filter((z) => zones.includes(z)))] as const,
        )
        .filter(([, offered]) => offered.size > 0),
    );
  }

  async writeSharedParameters(parameters: readonly PodParameter[]): Promise<void> {
    this.#enter("writeSharedParameters", parameters);
    for (const p of parameters) {
      if (!this.parameters.has(p.name)) this.#put(p.name, p.value);
    }
  }

  async writePodParameters(podUid: string, parameters: readonly PodParameter[]): Promise<void> {
    this.#enter("writePodParameters", podUid);
    for (const p of parameters) this.#put(p.name, p.value);
  }

  async tagParameters(names: readonly string[], instanceArn: string): Promise<void> {
    this.#enter("tagParameters", { names, instanceArn });
    for (const name of names) {
      const parameter = this.parameters.get(name);
      if (!parameter) throw new ProviderError("NotFound", `parameter ${name} not found`);
      parameter.tags.set("nebula:instance-arn", instanceArn);
    }
  }

  async podParameterNames(podUid: string): Promise<string[]> {
    this.#enter("podParameterNames", podUid);
    return [...this.parameters.keys()].filter((n) => n.includes(`/pods/${podUid}/`));
  }

  async clusterPodParameters(): Promise<ListedParameter[]> {
    this.#enter("clusterPodParameters", undefined);
    const prefix = `/nebula/${this.scope.cluster}/pods/`;
    return [...this.parameters.entries()]
      .filter(([name]) => name.startsWith(prefix))
      .map(([name, p]) => ({
        name,
        podUid: name.slice(prefix.length).split("/")[0] ?? "",
        lastModified: p.lastModified,
      }));
  }

  async deleteParameters(names: readonly string[]): Promise<string[]> {
    this.#enter("deleteParameters", names);
    return names.filter((name) => this.parameters.delete(name));
  }

  async deletePodParameters(podUid: string): Promise<string[]> {
    this.#enter("deletePodParameters", podUid);
    const names = [...this.parameters.keys()].filter((n) => n.includes(`/pods/${podUid}/`));
    for (const name of names) this.parameters.delete(name);
    return names;
  }

  onCall(listener: (call: GatewayCall) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** The fake has no budget: every call goes at once. */
  budgetState(): readonly Ec2BudgetState[] {
    return [];
  }

  #put(name: string, value: string): void {
    this.parameters.set(name, { value, tags: new Map(), lastModified: Date.now() });
  }

  #enter(action: FakeAction, arg: unknown): void {
    this.calls.push({ action, arg });
    const failure = this.#failures.get(action)?.shift();
    const outcome = failure === undefined ? "ok" : (failure.awsCode ?? failure.code);
    for (const listener of this.#listeners) listener({ service: "ec2", action, outcome });
    if (failure) throw failure;
  }

  #observed(): ObservedInstance[] {
    return [...this.instances.values()].flatMap((raw) => observeInstance(raw) ?? []);
  }

  #onNode(instance: ObservedInstance): boolean {
    return (
      instance.tags.get(CLUSTER_TAG) === this.scope.cluster &&
      instance.tags.get(NODE_TAG) === this.scope.node
    );
  }
}
