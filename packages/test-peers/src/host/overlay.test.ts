import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  EC2_STATES,
  listInstanceItems,
  removeInstanceItems,
  rewriteInstanceStates,
  rewriteStatusStates,
} from "./overlay.js";

// Answers captured from moto 5.2.5: three instances in two reservations, the first of the
// second reservation stopped through the API.
const fixture = (name: string) =>
  readFileSync(new URL(`../../fixtures/host/${name}`, import.meta.url), "utf8");
const DESCRIBE = fixture("describe-instances.xml");
const RUN = fixture("run-instances.xml");
// moto 5.2.5's DescribeInstanceStatus (IncludeAllInstances): running, stopped, terminated.
const STATUS = fixture("describe-instance-status.xml");

describe("listInstanceItems", () => {
  it("finds every instance with its state and unescaped tags", () => {
    const items = listInstanceItems(DESCRIBE);
    expect(items.map((i) => i.stateName)).toEqual(["running", "stopped", "running"]);
    expect(items[1]?.tags).toEqual({ "nebula:cluster": "c<1>", "nebula:pod-uid": "u2" });
    expect(items.every((i) => /^i-[0-9a-f]+$/.test(i.instanceId))).toBe(true);
  });

  it("reads RunInstances answers too, and nothing from garbage", () => {
    expect(listInstanceItems(RUN)).toHaveLength(2);
    expect(listInstanceItems("<a><b></a>")).toEqual([]);
  });
});

describe("rewriteInstanceStates", () => {
  it("shows the decided state and reason and leaves every other byte alone", () => {
    const stopped = listInstanceItems(DESCRIBE)[1]?.instanceId;
    const out = rewriteInstanceStates(DESCRIBE, (item) =>
      item.instanceId === stopped
        ? {
            state: EC2_STATES.stopping,
            stateReason: {
              code: "Client.InstanceInitiatedShutdown",
              message: "Client.InstanceInitiatedShutdown: Instance initiated shutdown",
            },
          }
        : undefined,
    );
    expect(listInstanceItems(out).map((i) => i.stateName)).toEqual([
      "running",
      "stopping",
      "running",
    ]);
    expect(out).toContain("<code>Client.InstanceInitiatedShutdown</code>");
    expect(out).not.toContain("Client.UserInitiatedShutdown");
    expect(out.length - DESCRIBE.length).toBeLessThan(200);
  });

  it("applies a state filter after the overlay and drops emptied reservations", () => {
    const [first] = listInstanceItems(DESCRIBE);
    const out = rewriteInstanceStates(
      DESCRIBE,
      (item) => (item.instanceId === first?.instanceId ? { state: EC2_STATES.pending } : undefined),
      new Set(["pending"]),
    );
    expect(listInstanceItems(out).map((i) => i.instanceId)).toEqual([first?.instanceId]);
    expect(out.match(/<reservationId>/g)).toHaveLength(1);
    const none = rewriteInstanceStates(DESCRIBE, () => undefined, new Set(["stopping"]));
    expect(listInstanceItems(none)).toEqual([]);
    expect(none).toContain("<reservationSet></reservationSet>");
  });

  it("is the identity when nothing is overridden, and keeps any shown state it was told", () => {
    const names = Object.keys(EC2_STATES) as (keyof typeof EC2_STATES)[];
    fc.assert(
      fc.property(
        fc.array(fc.option(fc.constantFrom(...names)), { minLength: 3, maxLength: 3 }),
        (choice) => {
          const ids = listInstanceItems(DESCRIBE).map((i) => i.instanceId);
          const decide = (item: { instanceId: string }) => {
            const name = choice[ids.indexOf(item.instanceId)];
            return name === null || name === undefined ? undefined : { state: EC2_STATES[name] };
          };
          const out = rewriteInstanceStates(DESCRIBE, decide);
          const shown = listInstanceItems(out).map((i) => i.stateName);
          const original = listInstanceItems(DESCRIBE).map((i) => i.stateName);
          expect(shown).toEqual(choice.map((c, n) => c ?? original[n]));
          if (choice.every((c) => c === null)) expect(out).toBe(DESCRIBE);
        },
      ),
    );
  });
});

describe("removeInstanceItems", () => {
  it("drops the chosen instances and reservations left empty, keeps the rest", () => {
    const ids = listInstanceItems(DESCRIBE).map((i) => i.instanceId);
    fc.assert(
      fc.property(fc.subarray(ids), (gone) => {
        const out = removeInstanceItems(DESCRIBE, (i) => gone.includes(i.instanceId));
        expect(listInstanceItems(out).map((i) => i.instanceId)).toEqual(
          ids.filter((id) => !gone.includes(id)),
        );
        const reservations = out.match(/<reservationId>/g)?.length ?? 0;
        expect(reservations).toBeLessThanOrEqual(2);
        if (gone.length === ids.length) expect(reservations).toBe(0);
      }),
    );
    expect(removeInstanceItems("<a><b></a>", () => true)).toBe("<a><b></a>");
  });
});

describe("rewriteStatusStates", () => {
  const statesOf = (xml: string) =>
    [...xml.matchAll(/<instanceState><code>(\d+)<\/code><name>([a-z-]+)<\/name>/g)].map(
      (m) => `${m[1]} ${m[2]}`,
    );
  const idsOf = (xml: string) =>
    [...xml.matchAll(/<instanceId>(i-[0-9a-f]+)<\/instanceId>/g)].map((m) => m[1]);

  it("shows the decided state of each instance and leaves every other byte alone", () => {
    const [, stopped] = idsOf(STATUS);
    const asked: string[] = [];
    const out = rewriteStatusStates(STATUS, (id, state) => {
      asked.push(`${id} ${state}`);
      return id === stopped ? EC2_STATES.stopping : undefined;
    });
    expect(asked.map((a) => a.split(" ")[1])).toEqual(["running", "stopped", "terminated"]);
    expect(statesOf(out)).toEqual(["16 running", "64 stopping", "48 terminated"]);
    expect(
      out.replace("<code>64</code><name>stopping</name>", "<code>80</code><name>stopped</name>"),
    ).toBe(STATUS);
  });

  it("leaves an answer alone when nothing is decided, and garbage as it is", () => {
    expect(rewriteStatusStates(STATUS, () => undefined)).toBe(STATUS);
    expect(rewriteStatusStates("<a><b></a>", () => EC2_STATES.pending)).toBe("<a><b></a>");
  });

  it("never loses or adds an instance, whatever is decided", () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom(...Object.values(EC2_STATES), undefined), {
          minLength: 3,
          maxLength: 3,
        }),
        (shown) => {
          let k = 0;
          const out = rewriteStatusStates(STATUS, () => shown[k++]);
          expect(idsOf(out)).toEqual(idsOf(STATUS));
          expect(statesOf(out)).toEqual(
            statesOf(STATUS).map((s, i) => {
              const d = shown[i];
              return d === undefined ? s : `${d.code} ${d.name}`;
            }),
          );
        },
      ),
    );
  });
});
