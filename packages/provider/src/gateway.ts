/**
 * The provider's one door to AWS: every EC2 and SSM call the provider makes goes through a
 * {@link Gateway}, which classifies errors at the call site ({@link ProviderError}) and counts
 * calls. Collaborators depend on the interface; {@link AwsGateway} is the SDK implementation and a
 * fake (`src/testing/fake-gateway.ts`) stands in for it in unit tests, as Karpenter's
 * `cloudprovider/fake` does.
 */
import { Buffer } from "node:buffer";
import {
  type _InstanceType,
  CreateTagsCommand,
  DeleteTagsCommand,
  DescribeInstancesCommand,
  DescribeInstanceTypeOfferingsCommand,
  DescribeInstanceTypesCommand,
  DescribeSpotPriceHistoryCommand,
  DescribeSubnetsCommand,
  type EC2Client,
  GetConsoleOutputCommand,
  ModifyInstanceAttributeCommand,
  RunInstancesCommand,
  type RunInstancesCommandInput,
  StartInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { GetProductsCommand, type PricingClient } from "@aws-sdk/client-pricing";
import type { SSMClient } from "@aws-sdk/client-ssm";
import type { PodParameter } from "@nebula/userdata";
import { type BatchOutcome, chunk, InstanceBatcher } from "./batch.js";
import type { ProviderConfig } from "./config.js";
import { Ec2Budget, type Ec2BudgetState } from "./ec2-budget.js";
import { classifyAwsError, toProviderError } from "./errors.js";
import { type ReadInstanceTypes, readInstanceTypes } from "./instance-catalogue.js";
import { onDemandHourlyPrice, onDemandPriceFilters } from "./on-demand-price.js";
import {
  defaultParameterKeyId,
  deleteParameters,
  deletePodParameters,
  type ListedParameter,
  listClusterPodParameters,
  listPodParameterNames,
  tagParametersWithInstance,
  writePodParameters,
  writeSharedParameters,
} from "./parameters.js";
import {
  describeNodeInstances,
  type ObservedInstance,
  observeInstance,
  type PollPage,
} from "./poll.js";
import { latestSpotPrice } from "./spot-price.js";
import { CLUSTER_TAG, POD_TAG, POD_UID_TAG } from "./tags.js";

/** Every EC2 state, terminated included: what a lookup by ID or by Pod UID asks for. */
const ALL_STATES = [
  "pending",
  "running",
  "stopping",
  "stopped",
  "shutting-down",
  "terminated",
] as const;

/** What `RunInstances` answered: the instance, its account and its Availability Zone. */
export interface LaunchAnswer {
  /** The instance ID; `undefined` when EC2's answer named none (an unknown outcome). */
  readonly instanceId: string | undefined;
  /** The account that owns it. */
  readonly ownerId: string | undefined;
  /** Its Availability Zone (`Placement.AvailabilityZone`), when EC2 said. */
  readonly availabilityZone?: string | undefined;
}

/** One AWS call the gateway made, for a metric. */
export interface GatewayCall {
  /** `ec2` or `ssm`. */
  readonly service: "ec2" | "ssm";
  /** The API action, e.g. `DescribeInstances`. */
  readonly action: string;
  /** `ok`, or the SDK error's name (`RequestLimitExceeded`, ...). */
  readonly outcome: string;
}

/**
 * Every EC2 and SSM call of the provider. Each method throws a classified {@link ProviderError};
 * instance lookups are scoped to this cluster and node (tags), except where said.
 */
export interface Gateway {
  /** This node's instances in the polled (live) states: one paginated, tag-filtered sequence. */
  listNodeInstances(): Promise<PollPage>;
  /** This node's instances among `ids`, in every state (one filtered sequence per 200 IDs). */
  describeInstances(ids: readonly string[]): Promise<readonly ObservedInstance[]>;
  /** This node's instances tagged with Pod UID `podUid`, in every state. */
  instancesOfPod(podUid: string): Promise<readonly ObservedInstance[]>;
  /** One instance by ID, unfiltered, or `undefined` when EC2 does not know it. */
  describeInstance(instanceId: string): Promise<ObservedInstance | undefined>;
  /** The Pod UIDs among `podUids` with a live instance anywhere in this cluster. */
  podsWithLiveInstances(podUids: readonly string[]): Promise<Set<string>>;
  /** `RunInstances`: the instance ID, the account that owns it and its zone, as EC2 answered. */
  runInstances(input: RunInstancesCommandInput): Promise<LaunchAnswer>;
  /** `StopInstances`, batched with other stops; `notFound` when EC2 does not know the ID. */
  stopInstance(instanceId: string): Promise<BatchOutcome>;
  /** `TerminateInstances`, batched with other terminates; `notFound` when EC2 does not know the ID. */
  terminateInstance(instanceId: string): Promise<BatchOutcome>;
  /** Sends the queued stops and terminates now. */
  flush(): Promise<void>;
  /** `StartInstances` of one stopped instance (a warm-pool host taken by a Pod). */
  startInstance(instanceId: string): Promise<void>;
  /**
   * `ModifyInstanceAttribute` of the instance's user-data (base64, as `RunInstances` takes it):
   * EC2 allows it only while the instance is stopped.
   */
  setUserData(instanceId: string, userData: string): Promise<void>;
  /** `CreateTags` of several tags on one instance, in one call. */
  tagInstance(instanceId: string, tags: Readonly<Record<string, string>>): Promise<void>;
  /** `CreateTags` of one tag on instances (batched by the configured batch size). */
  tagInstances(instanceIds: readonly string[], key: string, value: string): Promise<void>;
  /** `DeleteTags` of one tag key on instances. */
  untagInstances(instanceIds: readonly string[], key: string): Promise<void>;
  /** `GetConsoleOutput`, decoded. */
  consoleOutput(instanceId: string): Promise<string>;
  /** EC2's instance types, every page of `DescribeInstanceTypes`, read by `readInstanceTypes`. */
  describeInstanceTypes(): Promise<ReadInstanceTypes>;
  /** The Availability Zone of each subnet EC2 lists of `subnetIds` (`DescribeSubnets`). */
  subnetZones(subnetIds: readonly string[]): Promise<Map<string, string>>;
  /** The Availability Zones among `zones` that offer each type (`DescribeInstanceTypeOfferings`). */
  instanceTypeOfferings(zones: readonly string[]): Promise<Map<string, Set<string>>>;
  /**
   * The current Spot price of a Linux instance type in an Availability Zone, in USD per hour as
   * EC2 writes it (`"0.031200"`), from `DescribeSpotPriceHistory`; `undefined` when EC2 lists none.
   */
  spotPrice(instanceType: string, availabilityZone: string): Promise<string | undefined>;
  /**
   * The On-Demand price of a Linux, shared-tenancy instance type in the provider's Region, in USD
   * per hour as the AWS Price List writes it (`"0.0960000000"`), from the Price List Query API
   * (`GetProducts`); `undefined` when it lists none (or no Price List client is configured).
   * Optional: a gateway without it shows no On-Demand price.
   */
  onDemandPrice?(instanceType: string): Promise<string | undefined>;
  /** Writes the supervisor's shared parameters (create-only). */
  writeSharedParameters(parameters: readonly PodParameter[]): Promise<void>;
  /** Writes a Pod's parameters (overwrite). */
  writePodParameters(podUid: string, parameters: readonly PodParameter[]): Promise<void>;
  /** Tags parameters with the ARN of the instance allowed to read them. */
  tagParameters(names: readonly string[], instanceArn: string): Promise<void>;
  /** The names of the parameters that exist for a Pod. */
  podParameterNames(podUid: string): Promise<string[]>;
  /** Every Pod parameter of this cluster. */
  clusterPodParameters(): Promise<ListedParameter[]>;
  /** Deletes parameters by name (missing ones are not an error); returns the names deleted. */
  deleteParameters(names: readonly string[]): Promise<string[]>;
  /** Deletes every parameter a Pod can have; returns the names deleted. */
  deletePodParameters(podUid: string): Promise<string[]>;
  /** Subscribes to every call made; returns the unsubscribe. */
  onCall(listener: (call: GatewayCall) => void): () => void;
  /** This node's EC2 budget as it stands: each API called so far, its rate and waiting calls. */
  budgetState(): readonly Ec2BudgetState[];
}

/** The {@link Gateway} over the AWS SDK (adaptive retry as configured on the clients). */
export class AwsGateway implements Gateway {
  readonly #ec2: EC2Client;
  readonly #ssm: SSMClient;
  readonly #pricing: PricingClient | undefined;
  readonly #config: ProviderConfig;
  readonly #stop: InstanceBatcher;
  readonly #terminate: InstanceBatcher;
  readonly #listeners = new Set<(call: GatewayCall) => void>();
  readonly #budget: Ec2Budget;

  /**
   * @param clients - the EC2 and SSM clients, and the Price List client when On-Demand prices are
   * read (see `createAwsClients`).
   * @param config - the provider's configuration (cluster, node, page and batch sizes, KMS key).
   */
  constructor(
    clients: { ec2: EC2Client; ssm: SSMClient; pricing?: PricingClient | undefined },
    config: ProviderConfig,
  ) {
    this.#ec2 = clients.ec2;
    this.#ssm = clients.ssm;
    this.#pricing = clients.pricing;
    this.#config = config;
    this.#budget = new Ec2Budget(config.ec2Budget);
    this.#countCalls();
    this.#paceEc2();
    const batch = { batchSize: config.batchSize, windowMs: config.batchWindowMs };
    this.#stop = new InstanceBatcher(
      (ids) => this.#ec2.send(new StopInstancesCommand({ InstanceIds: ids })),
      "StopInstances",
      batch,
    );
    this.#terminate = new InstanceBatcher(
      (ids) => this.#ec2.send(new TerminateInstancesCommand({ InstanceIds: ids })),
      "TerminateInstances",
      batch,
    );
  }

  listNodeInstances(): Promise<PollPage> {
    return describeNodeInstances(this.#ec2, this.#scope());
  }

  async describeInstances(ids: readonly string[]): Promise<readonly ObservedInstance[]> {
    const out: ObservedInstance[] = [];
    for (const values of chunk(ids, 200)) {
      const page = await describeNodeInstances(this.#ec2, {
        ...this.#scope(),
        filters: [{ Name: "instance-id", Values: values }],
        states: ALL_STATES,
      });
      out.push(...page.instances);
    }
    return out;
  }

  async instancesOfPod(podUid: string): Promise<readonly ObservedInstance[]> {
    const page = await describeNodeInstances(this.#ec2, {
      ...this.#scope(),
      filters: [{ Name: `tag:${POD_UID_TAG}`, Values: [podUid] }],
      states: ALL_STATES,
    });
    return page.instances;
  }

  async describeInstance(instanceId: string): Promise<ObservedInstance | undefined> {
    try {
      const page = await this.#ec2.send(
        new DescribeInstancesCommand({ InstanceIds: [instanceId] }),
      );
      for (const reservation of page.Reservations ?? []) {
        for (const raw of reservation.Instances ?? []) {
          const observed = observeInstance(raw);
          if (observed?.instanceId === instanceId) return observed;
        }
      }
      return undefined;
    } catch (error) {
      const wrapped = toProviderError(error, `DescribeInstances ${instanceId}`);
      if (wrapped.code === "NotFound") return undefined;
      throw wrapped;
    }
  }

  async podsWithLiveInstances(podUids: readonly string[]): Promise<Set<string>> {
    const found = new Set<string>();
    for (const values of chunk(podUids, 200)) {
      let token: string | undefined;
      const seen = new Set<string>();
      do {
        const page = await this.#call("DescribeInstances (instances of Pod UIDs)", () =>
          this.#ec2.send(
            new DescribeInstancesCommand({
              Filters: [
                { Name: `tag:${CLUSTER_TAG}`, Values: [this.#config.clusterName] },
                { Name: `tag:${POD_UID_TAG}`, Values: values },
                {
                  Name: "instance-state-name",
                  Values: ["pending", "running", "stopping", "stopped"],
                },
              ],
              MaxResults: 1000,
              ...(token === undefined ? {} : { NextToken: token }),
            }),
          ),
        );
        for (const reservation of page.Reservations ?? []) {
          for (const raw of reservation.Instances ?? []) {
            const uid = observeInstance(raw)?.podUid;
            if (uid !== undefined) found.add(uid);
          }
        }
        token = page.NextToken || undefined;
        if (token !== undefined && seen.has(token)) break;
        if (token !== undefined) seen.add(token);
      } while (token !== undefined);
    }
    return found;
  }

  async runInstances(input: RunInstancesCommandInput): Promise<LaunchAnswer> {
    const pod = input.TagSpecifications?.[0]?.Tags?.find((t) => t.Key === POD_TAG)?.Value;
    const output = await this.#call(`RunInstances for pod ${pod ?? "(unknown)"}`, () =>
      this.#ec2.send(new RunInstancesCommand(input)),
    );
    const instance = output.Instances?.[0];
    return {
      instanceId: instance?.InstanceId,
      ownerId: output.OwnerId,
      availabilityZone: instance?.Placement?.AvailabilityZone,
    };
  }

  async spotPrice(instanceType: string, availabilityZone: string): Promise<string | undefined> {
    const page = await this.#call(`DescribeSpotPriceHistory ${instanceType}`, () =>
      this.#ec2.send(
        new DescribeSpotPriceHistoryCommand({
          InstanceTypes: [instanceType as _InstanceType],
          ProductDescriptions: ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
          AvailabilityZone: availabilityZone,
          // From now: EC2 answers the price in force now in each zone.
          StartTime: new Date(),
          MaxResults: 100,
        }),
      ),
    );
    return latestSpotPrice(page.SpotPriceHistory ?? [], instanceType, availabilityZone);
  }

  async onDemandPrice(instanceType: string): Promise<string | undefined> {
    const pricing = this.#pricing;
    if (pricing === undefined) return undefined;
    const output = await this.#call(`GetProducts (On-Demand price of ${instanceType})`, () =>
      pricing.send(
        new GetProductsCommand({
          ServiceCode: "AmazonEC2",
          FormatVersion: "aws_v1",
          Filters: onDemandPriceFilters(instanceType, this.#config.region),
          // One product matches these filters; a few more would be ambiguous anyway.
          MaxResults: 10,
        }),
      ),
    );
    return onDemandHourlyPrice(output.PriceList ?? [], instanceType);
  }

  stopInstance(instanceId: string): Promise<BatchOutcome> {
    return this.#stop.add(instanceId);
  }

  terminateInstance(instanceId: string): Promise<BatchOutcome> {
    return this.#terminate.add(instanceId);
  }

  async flush(): Promise<void> {
    await Promise.all([this.#stop.flush(), this.#terminate.flush()]);
  }

  async startInstance(instanceId: string): Promise<void> {
    await this.#call(`StartInstances ${instanceId}`, () =>
      this.#ec2.send(new StartInstancesCommand({ InstanceIds: [instanceId] })),
    );
  }

  async setUserData(instanceId: string, userData: string): Promise<void> {
    await this.#call(`ModifyInstanceAttribute ${instanceId} (user-data)`, () =>
      this.#ec2.send(
        new ModifyInstanceAttributeCommand({
          InstanceId: instanceId,
          // The SDK base64-encodes a blob: hand it the bytes.
          UserData: { Value: Buffer.from(userData, "base64") },
        }),
      ),
    );
  }

  async tagInstance(instanceId: string, tags: Readonly<Record<string, string>>): Promise<void> {
    await this.#call(`CreateTags ${Object.keys(tags).join(",")}`, () =>
      this.#ec2.send(
        new CreateTagsCommand({
          Resources: [instanceId],
          Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })),
        }),
      ),
    );
  }

  async tagInstances(instanceIds: readonly string[], key: string, value: string): Promise<void> {
    for (const ids of chunk(instanceIds, this.#config.batchSize)) {
      await this.#call(`CreateTags ${key}`, () =>
        this.#ec2.send(
          new CreateTagsCommand({ Resources: ids, Tags: [{ Key: key, Value: value }] }),
        ),
      );
    }
  }

  async untagInstances(instanceIds: readonly string[], key: string): Promise<void> {
    for (const ids of chunk(instanceIds, this.#config.batchSize)) {
      await this.#call(`DeleteTags ${key}`, () =>
        this.#ec2.send(new DeleteTagsCommand({ Resources: ids, Tags: [{ Key: key }] })),
      );
    }
  }

  async consoleOutput(instanceId: string): Promise<string> {
    const output = await this.#call(`GetConsoleOutput ${instanceId}`, () =>
      this.#ec2.send(new GetConsoleOutputCommand({ InstanceId: instanceId })),
    );
    return Buffer.from(output.Output ?? "", "base64").toString("utf8");
  }

  async describeInstanceTypes(): Promise<ReadInstanceTypes> {
    const entries: unknown[] = [];
    const seen = new Set<string>();
    let token: string | undefined;
    do {
      const page = await this.#call("DescribeInstanceTypes", () =>
        this.#ec2.send(
          new DescribeInstanceTypesCommand({
            MaxResults: 100,
            ...(token === undefined ? {} : { NextToken: token }),
          }),
        ),
      );
      entries.push(...(page.InstanceTypes ?? []));
      token = page.NextToken || undefined;
      if (token !== undefined && seen.has(token)) break;
      if (token !== undefined) seen.add(token);
    } while (token !== undefined);
    return readInstanceTypes(entries);
  }

  async subnetZones(subnetIds: readonly string[]): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    if (subnetIds.length === 0) return out;
    const page = await this.#call("DescribeSubnets", () =>
      this.#ec2.send(new DescribeSubnetsCommand({ SubnetIds: [...subnetIds] })),
    );
    for (const subnet of page.Subnets ?? []) {
      if (subnet.SubnetId && subnet.AvailabilityZone) {
        out.set(subnet.SubnetId, subnet.AvailabilityZone);
      }
    }
    return out;
  }

  async instanceTypeOfferings(zones: readonly string[]): Promise<Map<string, Set<string>>> {
    const out = new Map<string, Set<string>>();
    if (zones.length === 0) return out;
    const seen = new Set<string>();
    let token: string | undefined;
    do {
      const page = await this.#call("DescribeInstanceTypeOfferings", () =>
        this.#ec2.send(
          new DescribeInstanceTypeOfferingsCommand({
            LocationType: "availability-zone",
            Filters: [{ Name: "location", Values: [...zones] }],
            MaxResults: 1000,
            ...(token === undefined ? {} : { NextToken: token }),
          }),
        ),
      );
      for (const offering of page.InstanceTypeOfferings ?? []) {
        const { InstanceType: type, Location: zone } = offering;
        if (type === undefined || zone === undefined) continue;
        const set = out.get(type) ?? new Set<string>();
        set.add(zone);
        out.set(type, set);
      }
      token = page.NextToken || undefined;
      if (token !== undefined && seen.has(token)) break;
      if (token !== undefined) seen.add(token);
    } while (token !== undefined);
    return out;
  }

  writeSharedParameters(parameters: readonly PodParameter[]): Promise<void> {
    return writeSharedParameters(this.#ssm, { cluster: this.#config.clusterName, parameters });
  }

  writePodParameters(podUid: string, parameters: readonly PodParameter[]): Promise<void> {
    return writePodParameters(this.#ssm, {
      cluster: this.#config.clusterName,
      podUid,
      parameters,
      keyId: this.#config.parameterKeyId ?? defaultParameterKeyId(this.#config.clusterName),
    });
  }

  tagParameters(names: readonly string[], instanceArn: string): Promise<void> {
    return tagParametersWithInstance(this.#ssm, names, instanceArn);
  }

  podParameterNames(podUid: string): Promise<string[]> {
    return listPodParameterNames(this.#ssm, this.#config.clusterName, podUid);
  }

  clusterPodParameters(): Promise<ListedParameter[]> {
    return listClusterPodParameters(this.#ssm, this.#config.clusterName);
  }

  deleteParameters(names: readonly string[]): Promise<string[]> {
    return deleteParameters(this.#ssm, names);
  }

  deletePodParameters(podUid: string): Promise<string[]> {
    return deletePodParameters(this.#ssm, this.#config.clusterName, podUid);
  }

  onCall(listener: (call: GatewayCall) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  budgetState(): readonly Ec2BudgetState[] {
    return this.#budget.state();
  }

  #scope() {
    return {
      clusterName: this.#config.clusterName,
      nodeName: this.#config.nodeName,
      pageSize: this.#config.pageSize,
    };
  }

  async #call<T>(action: string, send: () => Promise<T>): Promise<T> {
    try {
      return await send();
    } catch (error) {
      throw toProviderError(error, action);
    }
  }

  /**
   * Every EC2 call waits for its API's token in this node's budget first (one per call; the SDK's
   * adaptive retry paces its own retries), and its answer tells the budget whether EC2 throttled.
   */
  #paceEc2(): void {
    this.#ec2.middlewareStack.add(
      (next, context) => {
        const action = String(context.commandName ?? "unknown").replace(/Command$/, "");
        return async (args) => {
          await this.#budget.take(action);
          try {
            const result = await next(args);
            this.#budget.result(action, false);
            return result;
          } catch (error) {
            this.#budget.result(action, classifyAwsError(error) === "Throttled");
            throw error;
          }
        };
      },
      // Outside the call counter: a call the budget refuses never reached EC2.
      { step: "initialize", name: "nebulaEc2Budget", priority: "high" },
    );
  }

  /** Counts every request a client sends (one per call, after the SDK's retries). */
  #countCalls(): void {
    const at = { step: "initialize", name: "nebulaGatewayCalls" } as const;
    this.#ec2.middlewareStack.add((next, context) => this.#counted("ec2", context, next), at);
    this.#ssm.middlewareStack.add((next, context) => this.#counted("ssm", context, next), at);
  }

  #counted<A, R>(
    service: "ec2" | "ssm",
    context: { readonly commandName?: string },
    next: (args: A) => Promise<R>,
  ): (args: A) => Promise<R> {
    const action = String(context.commandName ?? "unknown").replace(/Command$/, "");
    return async (args) => {
      try {
        const result = await next(args);
        this.#emit({ service, action, outcome: "ok" });
        return result;
      } catch (error) {
        this.#emit({ service, action, outcome: (error as { name?: string }).name ?? "Error" });
        throw error;
      }
    };
  }

  #emit(call: GatewayCall): void {
    for (const listener of this.#listeners) {
      try {
        listener(call);
      } catch {
        // A listener's failure is its own.
      }
    }
  }
}
