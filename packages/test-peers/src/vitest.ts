import { inject } from "vitest";
import type { TestProject } from "vitest/node";
import { type ControlPlaneConnection, connectControlPlane } from "./control-plane.js";
import { TestPeerError } from "./errors.js";
import { connectMoto, type MotoConnection } from "./moto.js";
import { startTestPeers, type TestPeersInfo, type TestPeersOptions } from "./peers.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** The shared test peers of this run, provided by `@nebula/test-peers`' global setup. */
    nebulaTestPeers: TestPeersInfo;
  }
}

/**
 * Makes a vitest global setup that starts ONE set of peers for the whole test run, `provide`s
 * its data under the key `nebulaTestPeers`, and stops it when the run ends.
 *
 * Use it when a package needs only some peers: write a two-line setup file and name it in
 * `globalSetup`. For both peers use the ready-made `@nebula/test-peers/vitest-global-setup`.
 *
 * @example
 * ```ts
 * // vitest.peers.ts (next to vitest.integration.config.ts)
 * import { createTestPeersSetup } from "@nebula/test-peers/vitest";
 * export default createTestPeersSetup({ controlPlane: false, moto: true });
 * ```
 */
export function createTestPeersSetup(
  options: TestPeersOptions = {},
): (project: TestProject) => Promise<() => Promise<void>> {
  return async (project) => {
    const peers = await startTestPeers(options);
    project.provide("nebulaTestPeers", peers.info());
    return () => peers.stop();
  };
}

/** The shared peers as seen from a test file, from {@link useTestPeers}. */
export interface SharedTestPeers {
  /** The shared control plane; throws `NotProvided` when the setup did not start one. */
  readonly controlPlane: ControlPlaneConnection;
  /** The shared moto; throws `NotProvided` when the setup did not start one. */
  readonly moto: MotoConnection;
}

/**
 * Connects a test file to the peers the global setup started (see {@link createTestPeersSetup}).
 * Call it at module level or in `beforeAll`; accessing a peer the setup did not start throws a
 * `TestPeerError` with code `NotProvided`.
 *
 * @example
 * ```ts
 * import { useTestPeers } from "@nebula/test-peers/vitest";
 * const { controlPlane, moto } = useTestPeers();
 * const kc = controlPlane.kubeConfig();
 * const ec2 = moto.ec2();
 * ```
 */
export function useTestPeers(): SharedTestPeers {
  const info = inject("nebulaTestPeers") as TestPeersInfo | undefined;
  if (info === undefined) {
    throw new TestPeerError(
      "NotProvided",
      "no shared test peers: add @nebula/test-peers/vitest-global-setup to globalSetup",
    );
  }
  let controlPlane: ControlPlaneConnection | undefined;
  let moto: MotoConnection | undefined;
  return {
    get controlPlane() {
      if (info.controlPlane === undefined) {
        throw new TestPeerError("NotProvided", "the global setup started no control plane");
      }
      controlPlane ??= connectControlPlane(info.controlPlane);
      return controlPlane;
    },
    get moto() {
      if (info.moto === undefined) {
        throw new TestPeerError("NotProvided", "the global setup started no moto");
      }
      moto ??= connectMoto(info.moto);
      return moto;
    },
  };
}
