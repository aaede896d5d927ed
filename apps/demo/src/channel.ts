/**
 * The event channel's comparison (issue #30): the same Pods on two virtual nodes in one run, one
 * with the channel (hosts ring an SQS queue after every report, EC2's state events fill it) and
 * one that only polls. Each container exits at a known time; the demo measures exit → status on
 * both. Pure.
 */

/** Pods per node. */
export const CHANNEL_PODS = 5;

/** Which side of the comparison a Pod is on. */
export type ChannelSide = "on" | "off";

/** The name prefix of each side's Pods (`channel-on-0`, …). */
const PREFIX: Record<ChannelSide, string> = { on: "channel-on-", off: "channel-off-" };

/** The side of a comparison Pod, from its name; `undefined` for any other Pod. */
export function channelSide(podName: string): ChannelSide | undefined {
  if (podName.startsWith(PREFIX.on)) return "on";
  if (podName.startsWith(PREFIX.off)) return "off";
  return undefined;
}

/**
 * The comparison's Pods as one `kubectl apply` document (a `v1` `List`): {@link CHANNEL_PODS} on
 * each node, bound to it by `spec.nodeName`, container `i` exiting 0 after `firstExitSeconds + 3·i`
 * seconds (the two sides' Pods alike), `restartPolicy: Never`.
 */
export function channelPodList(options: {
  readonly namespace: string;
  readonly nodes: Readonly<Record<ChannelSide, string>>;
  readonly firstExitSeconds: number;
}): Record<string, unknown> {
  const items = (["on", "off"] as const).flatMap((side) =>
    Array.from({ length: CHANNEL_PODS }, (_, i) => ({
      apiVersion: "v1",
      kind: "Pod",
      metadata: {
        name: `${PREFIX[side]}${i}`,
        namespace: options.namespace,
        labels: { app: "event-channel", "nebula.dev/demo-channel": side },
      },
      spec: {
        nodeName: options.nodes[side],
        restartPolicy: "Never",
        terminationGracePeriodSeconds: 5,
        tolerations: [{ key: "virtual-kubelet.io/provider", operator: "Exists" }],
        containers: [
          {
            name: "app",
            image: "busybox",
            command: ["sh", "-c", `sleep ${options.firstExitSeconds + 3 * i}; exit 0`],
          },
        ],
      },
    })),
  );
  return { apiVersion: "v1", kind: "List", items };
}
