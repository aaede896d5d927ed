import {
  type ControlPlane,
  type ControlPlaneInfo,
  type ControlPlaneOptions,
  startControlPlane,
} from "./control-plane.js";
import { type Ec2Events, type Ec2EventsOptions, startEc2Events } from "./ec2-events.js";
import { TestPeerError } from "./errors.js";
import { type Moto, type MotoInfo, type MotoOptions, startMoto } from "./moto.js";

/** Options of {@link startTestPeers}: which peers to start, each with its own options. */
export interface TestPeersOptions {
  /** Start the kube-apiserver + etcd pair: `true` (default), `false`, or its options. */
  controlPlane?: boolean | ControlPlaneOptions;
  /** Start moto: `true` (default), `false`, or its options. */
  moto?: boolean | MotoOptions;
  /**
   * Play EC2's own events on moto (see `startEc2Events`: every instance's state changes go to
   * moto's EventBridge, whose rules deliver them): `false` (default), `true`, or its options.
   * Needs moto. A test creates the rule to its queue with `createEc2EventRule`.
   */
  ec2Events?: boolean | Omit<Ec2EventsOptions, "moto">;
}

/** The plain data of a running set, as a vitest global setup `provide`s it (key `nebulaTestPeers`). */
export interface TestPeersInfo {
  /** Present when the control plane was started. */
  controlPlane?: ControlPlaneInfo;
  /** Present when moto was started. */
  moto?: MotoInfo;
  /** `true` when EC2's events are played on that moto (`ec2Events`). */
  ec2Events?: boolean;
}

/** A running set of peers, from {@link startTestPeers}. */
export interface TestPeers {
  /** The control plane, when started. */
  readonly controlPlane: ControlPlane | undefined;
  /** moto, when started. */
  readonly moto: Moto | undefined;
  /** The emitter of EC2's events, when started (`ec2Events`). */
  readonly ec2Events: Ec2Events | undefined;
  /** The plain data to hand to test workers or child processes. */
  info(): TestPeersInfo;
  /** Stops every peer of the set (in parallel) and waits until they are gone. */
  stop(): Promise<void>;
}

const optionsOf = <T extends object>(value: boolean | T | undefined): T | undefined =>
  value === false ? undefined : value === true || value === undefined ? ({} as T) : value;

/**
 * Starts the control plane and moto side by side (each on free loopback ports) and, when asked,
 * the emitter of EC2's events on that moto, and returns them as one set. If one fails to start,
 * the others are stopped before the error is thrown.
 *
 * Use it in a vitest global setup (the package's `vitest-global-setup` entry does exactly this)
 * or in the demo.
 *
 * @example
 * ```ts
 * const peers = await startTestPeers({ moto: true, controlPlane: true });
 * console.log(peers.info().moto?.endpoint);
 * await peers.stop();
 * ```
 */
export async function startTestPeers(options: TestPeersOptions = {}): Promise<TestPeers> {
  const cpOptions = optionsOf(options.controlPlane);
  const motoOptions = optionsOf(options.moto);
  const eventsOptions = options.ec2Events === true ? {} : options.ec2Events || undefined;
  if (eventsOptions !== undefined && motoOptions === undefined) {
    throw new TestPeerError("InvalidOptions", "startTestPeers: ec2Events needs moto");
  }
  const [cp, moto] = await Promise.allSettled([
    cpOptions === undefined ? Promise.resolve(undefined) : startControlPlane(cpOptions),
    motoOptions === undefined ? Promise.resolve(undefined) : startMoto(motoOptions),
  ]);
  if (cp.status === "rejected" || moto.status === "rejected") {
    await Promise.all([
      cp.status === "fulfilled" ? cp.value?.stop() : undefined,
      moto.status === "fulfilled" ? moto.value?.stop() : undefined,
    ]);
    throw cp.status === "rejected" ? cp.reason : (moto as PromiseRejectedResult).reason;
  }
  const controlPlane = cp.value;
  const motoPeer = moto.value;
  let ec2Events: Ec2Events | undefined;
  if (eventsOptions !== undefined && motoPeer !== undefined) {
    try {
      ec2Events = await startEc2Events({ ...eventsOptions, moto: motoPeer });
    } catch (error) {
      await Promise.all([controlPlane?.stop(), motoPeer.stop()]);
      throw error;
    }
  }
  return {
    controlPlane,
    moto: motoPeer,
    ec2Events,
    info: () => ({
      ...(controlPlane === undefined ? {} : { controlPlane: controlPlane.info() }),
      ...(motoPeer === undefined ? {} : { moto: motoPeer.info() }),
      ...(ec2Events === undefined ? {} : { ec2Events: true }),
    }),
    async stop() {
      await ec2Events?.stop();
      await Promise.all([controlPlane?.stop(), motoPeer?.stop()]);
    },
  };
}
