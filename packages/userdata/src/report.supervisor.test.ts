/**
 * The report's tag body in real bash: the installed supervisor sourced without its `main "$@"`,
 * its state set as the main loop would have it. With no container message to share a budget,
 * `report` reuses the whole report it printed on the console as the tag body (saving the budget
 * steps' forks on every exit); these tests hold it to the bytes `tag_body` would have made.
 */
import { spawnSync } from "node:child_process";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { supervisorScript } from "./index.js";

const LIBRARY = supervisorScript().replace(/\nmain "\$@"\n$/, "\n");

interface Container {
  readonly name: string;
  readonly init: boolean;
  readonly restarts: number;
  readonly state: "running" | "exited" | "pending";
  readonly code: number;
  readonly last?: number;
  readonly message?: "current" | "last" | "waiting";
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** Bash that sets the supervisor's state for `containers`, then prints what the test compares. */
function script(containers: readonly Container[], final: boolean): string {
  const lines = [
    `N=${containers.length}`,
    `SEQ=7 FINAL=${final}`,
    "REPORT_TIME=2026-12-04T22:00:00Z SUPERVISOR_AT=2026-12-04T21:59:00.123Z",
  ];
  containers.forEach((c, i) => {
    const msg = Buffer.from(`why ${c.name} ${"x".repeat(40)}`).toString("base64");
    lines.push(
      `NAMES[${i}]=${q(c.name)} INIT[${i}]=${c.init ? 1 : 0} S[restarts.${i}]=${c.restarts}`,
      `S[cid.${i}]=${"ab".repeat(32)} S[imageid.${i}]=sha256:${"cd".repeat(32)}`,
      `S[pullat.${i}]=2026-12-04T21:59:01.000Z S[pulledat.${i}]=2026-12-04T21:59:02.000Z`,
    );
    if (c.state === "running") {
      lines.push(`S[st.${i}]=running S[started.${i}]=2026-12-04T21:59:03.000Z`);
    } else if (c.state === "exited") {
      lines.push(
        `S[st.${i}]=exited S[t.code.${i}]=${c.code} S[t.reason.${i}]=${c.code === 0 ? "Completed" : "Error"}`,
        `S[t.start.${i}]=2026-12-04T21:59:03.000Z S[t.finish.${i}]=2026-12-04T21:59:09.000Z`,
      );
      if (c.message === "current") lines.push(`S[t.msg.${i}]=${msg}`);
    } else {
      lines.push(`S[st.${i}]=pending S[wreason.${i}]=CrashLoopBackOff`);
      if (c.message === "waiting") lines.push(`S[wmsg.${i}]=${msg}`);
    }
    if (c.last !== undefined) {
      lines.push(
        `S[l.code.${i}]=${c.last} S[l.reason.${i}]=Error S[l.finish.${i}]=2026-12-04T21:58:00.000Z`,
      );
      if (c.message === "last") lines.push(`S[l.msg.${i}]=${msg}`);
    }
  });
  return `${LIBRARY}
${lines.join("\n")}
json_report whole "$N"
WHOLE=$(b64url "$J")
tag_body
if no_messages; then echo "no-messages"; else echo "messages"; fi
if ((\${#WHOLE} <= REPORT_CHUNK_SIZE * REPORT_MAX_CHUNKS)); then echo "fits"; else echo "too-big"; fi
if [ "$WHOLE" = "$BODY" ]; then echo "same"; else echo "different"; fi
`;
}

function run(containers: readonly Container[], final = false): string[] {
  const out = spawnSync("bash", ["-c", script(containers, final)], {
    encoding: "utf8",
    timeout: 20_000,
  });
  expect(out.status, out.stderr).toBe(0);
  return out.stdout.trim().split("\n");
}

const container: fc.Arbitrary<Container> = fc.record(
  {
    name: fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/),
    init: fc.boolean(),
    restarts: fc.nat(30),
    state: fc.constantFrom("running", "exited", "pending"),
    code: fc.constantFrom(0, 1, 137, 143),
    last: fc.constantFrom(1, 137),
    message: fc.constantFrom("current", "last", "waiting"),
  },
  { requiredKeys: ["name", "init", "restarts", "state", "code"] },
);

describe("the report's tag body", () => {
  it("is the whole report whenever no container has a message and it fits (what report() reuses)", () => {
    let fitted = 0;
    fc.assert(
      fc.property(
        fc.array(
          container.map(({ message: _, ...c }) => c),
          { minLength: 1, maxLength: 6 },
        ),
        fc.boolean(),
        (containers, final) => {
          const [verdict, size, body] = run(containers, final);
          expect(verdict).toBe("no-messages");
          // Too big for the tags, report() builds the body with tag_body (fewer containers).
          if (size === "fits") {
            fitted++;
            expect(body).toBe("same");
          }
        },
      ),
      { numRuns: 40 },
    );
    // Most reports fit (one or two containers always do): the property was exercised.
    expect(fitted).toBeGreaterThan(10);
  });

  it("is tag_body's own whenever any container has a message in a slot (report() builds it)", () => {
    fc.assert(
      fc.property(fc.array(container, { minLength: 1, maxLength: 6 }), (containers) => {
        const [verdict] = run(containers);
        const anyMessage = containers.some(
          (c) =>
            (c.message === "current" && c.state === "exited") ||
            (c.message === "waiting" && c.state === "pending") ||
            (c.message === "last" && c.last !== undefined),
        );
        expect(verdict).toBe(anyMessage ? "messages" : "no-messages");
      }),
      { numRuns: 40 },
    );
  });
});
