import { describe, expect, it } from "vitest";
import { CHANNEL_PODS, channelPodList, channelSide } from "./channel.js";

describe("the event channel's comparison Pods", () => {
  it("the same Pods on each node, bound by nodeName, exiting 3 s apart", () => {
    const list = channelPodList({
      namespace: "ns",
      nodes: { on: "node-on", off: "node-off" },
      firstExitSeconds: 20,
    }) as { kind: string; items: { metadata: { name: string }; spec: Record<string, unknown> }[] };
    expect(list.kind).toBe("List");
    expect(list.items).toHaveLength(2 * CHANNEL_PODS);
    const on = list.items.filter((p) => channelSide(p.metadata.name) === "on");
    const off = list.items.filter((p) => channelSide(p.metadata.name) === "off");
    expect(on.map((p) => p.spec.nodeName)).toEqual(on.map(() => "node-on"));
    expect(off.map((p) => p.spec.nodeName)).toEqual(off.map(() => "node-off"));
    const commands = (pods: typeof on) =>
      pods.map((p) => (p.spec.containers as { command: string[] }[])[0]?.command.at(-1));
    expect(commands(on)).toEqual(commands(off));
    expect(commands(on).slice(0, 2)).toEqual(["sleep 20; exit 0", "sleep 23; exit 0"]);
  });

  it("tells the sides apart by name; any other Pod is neither", () => {
    expect(channelSide("channel-on-3")).toBe("on");
    expect(channelSide("channel-off-0")).toBe("off");
    expect(channelSide("job-completes")).toBeUndefined();
    expect(channelSide("channel-onward")).toBeUndefined();
  });
});
