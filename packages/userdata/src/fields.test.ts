/**
 * docs/pod-fields.md against the code: every field of the API's Pod, security contexts, containers
 * and volume kinds has a row, and each row's verdict is what rendering a Pod with the field's
 * sample value (fields.samples.ts) does.
 */
import { readFileSync } from "node:fs";
import {
  V1Container,
  type V1Pod,
  V1PodSecurityContext,
  V1PodSpec,
  V1SecurityContext,
  V1Volume,
} from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import {
  CONTAINER_SAMPLES,
  CONTAINER_SECURITY_SAMPLES,
  POD_SAMPLE_COMPANIONS,
  POD_SAMPLES,
  POD_SECURITY_SAMPLES,
  SAMPLE_SOURCES,
  VOLUME_SAMPLES,
} from "./fields.samples.js";
import { renderUserData } from "./index.js";

const PAGE = new URL("../../../docs/pod-fields.md", import.meta.url);

type Verdict =
  | { kind: "host" | "scheduler" | "vnode" | "ignored" }
  | { kind: "refused"; code: string };

interface Section {
  /** The heading of the page's section, as it starts. */
  heading: string;
  /** The fields the API defines there. */
  fields: string[];
  samples: Record<string, unknown>;
  /** The plain Pod with `value` set at the field. */
  apply(pod: V1Pod, field: string, value: unknown): void;
}

const names = (type: { getAttributeTypeMap(): { name: string }[] }) =>
  type.getAttributeTypeMap().map((a) => a.name);

const first = (pod: V1Pod) =>
  (pod.spec as V1PodSpec).containers[0] as unknown as Record<string, unknown>;
const SECTIONS: Section[] = [
  {
    heading: "## Pod (",
    fields: names(V1PodSpec),
    samples: POD_SAMPLES,
    apply: (pod, field, value) => {
      (pod.spec as unknown as Record<string, unknown>)[field] = value;
    },
  },
  {
    heading: "## Pod security context",
    fields: names(V1PodSecurityContext),
    samples: POD_SECURITY_SAMPLES,
    apply: (pod, field, value) => {
      (pod.spec as V1PodSpec).securityContext = { [field]: value };
    },
  },
  {
    heading: "## Container (",
    fields: names(V1Container),
    samples: CONTAINER_SAMPLES,
    apply: (pod, field, value) => {
      // A mount needs its volume: the same emptyDir in the plain Pod would change nothing it mounts.
      if (field === "volumeMounts")
        (pod.spec as V1PodSpec).volumes = [{ name: "scratch", emptyDir: {} }];
      first(pod)[field] = value;
    },
  },
  {
    heading: "## Container security context",
    fields: names(V1SecurityContext),
    samples: CONTAINER_SECURITY_SAMPLES,
    apply: (pod, field, value) => {
      first(pod).securityContext = { [field]: value };
    },
  },
  {
    heading: "## Volume kinds",
    fields: names(V1Volume).filter((name) => name !== "name"),
    samples: VOLUME_SAMPLES,
    apply: (pod, field, value) => {
      (pod.spec as V1PodSpec).volumes = [{ name: "scratch", [field]: value } as V1Volume];
      first(pod).volumeMounts = [{ name: "scratch", mountPath: "/scratch" }];
    },
  },
];

function plainPod(): V1Pod {
  return {
    metadata: { name: "web", namespace: "team-a", uid: "uid-1" },
    spec: { restartPolicy: "Never", containers: [{ name: "app", image: "busybox:1" }] },
  };
}

/** The page's rows under each section heading: field → verdict (throws on a row it cannot read). */
function rows(markdown: string): Map<string, Map<string, Verdict>> {
  const out = new Map<string, Map<string, Verdict>>();
  let section: Map<string, Verdict> | undefined;
  for (const line of markdown.split("\n")) {
    const heading = SECTIONS.find((s) => line.startsWith(s.heading));
    if (heading) {
      section = new Map();
      out.set(heading.heading, section);
      continue;
    }
    if (line.startsWith("#")) section = undefined;
    const cells = /^\|\s*`([A-Za-z]+)`\s*\|([^|]*)\|/.exec(line);
    if (!section || !cells) continue;
    const [, field = "", text = ""] = cells;
    const said = text.trim();
    const refused = /^refused `([A-Za-z]+)`$/.exec(said);
    let verdict: Verdict;
    if (refused) verdict = { kind: "refused", code: refused[1] as string };
    else if (said === "host" || said === "scheduler" || said === "vnode" || said === "ignored")
      verdict = { kind: said };
    else throw new Error(`docs/pod-fields.md: the row of ${field} says "${said}"`);
    expect(section.has(field), `two rows for ${field}`).toBe(false);
    section.set(field, verdict);
  }
  return out;
}

/** What the host is told, or the refusal. */
function render(pod: V1Pod): { plan: string } | { code: string; said: string } {
  // With a cluster DNS, as the rows of the DNS fields describe it (without one they change nothing).
  const result = renderUserData(
    pod,
    { delivery: "parameters", dns: { clusterDNS: ["10.96.0.10"] } },
    SAMPLE_SOURCES,
  );
  if (!result.ok)
    return { code: result.error.code, said: `${result.error.path} ${result.error.message}` };
  return { plan: JSON.stringify([result.value.script, result.value.parameters]) };
}

const page = rows(readFileSync(PAGE, "utf8"));
const plain = render(plainPod());

describe("docs/pod-fields.md", () => {
  it("renders the plain Pod the rows start from", () => {
    expect(plain).toHaveProperty("plan");
  });

  it("accepts the values a refused row's note names as accepted", () => {
    const accepted: [string, Record<string, unknown>][] = [
      ["os linux", { os: { name: "linux" } }],
      ["runtimeClassName empty", { runtimeClassName: "" }],
      ["hostUsers true", { hostUsers: true }],
      [
        "supplementalGroupsPolicy Merge",
        { securityContext: { supplementalGroupsPolicy: "Merge" } },
      ],
      [
        "seccomp RuntimeDefault",
        { securityContext: { seccompProfile: { type: "RuntimeDefault" } } },
      ],
    ];
    for (const [name, spec] of accepted) {
      const pod = plainPod();
      Object.assign(pod.spec as V1PodSpec, spec);
      expect(render(pod), name).toEqual(plain);
    }
  });

  describe.each(SECTIONS.map((s) => [s.heading, s] as const))("%s…", (_, section) => {
    const documented = page.get(section.heading) ?? new Map<string, Verdict>();

    it("has one row per field the API defines there, and no other", () => {
      expect([...documented.keys()].sort()).toEqual([...section.fields].sort());
    });

    it("has a sample value for every row", () => {
      expect(Object.keys(section.samples).sort()).toEqual([...documented.keys()].sort());
    });

    it.each([...documented].map(([field, verdict]) => [field, verdict] as const))(
      "%s: rendering it does what its row says",
      (field, verdict) => {
        const pod = plainPod();
        const companion =
          section.samples === POD_SAMPLES ? POD_SAMPLE_COMPANIONS[field] : undefined;
        const base = plainPod();
        Object.assign(pod.spec as V1PodSpec, companion);
        Object.assign(base.spec as V1PodSpec, companion);
        const baseline = companion === undefined ? plain : render(base);
        section.apply(pod, field, section.samples[field]);
        const got = render(pod);
        if (verdict.kind === "refused") {
          expect(got).toMatchObject({ code: verdict.code });
          expect("said" in got && got.said).toContain(field);
        } else if (verdict.kind === "host") {
          expect(got).toHaveProperty("plan");
          expect(got).not.toEqual(baseline);
        } else {
          // scheduler, vnode, ignored: the host is told exactly what it is told without the field.
          expect(got).toEqual(baseline);
        }
      },
    );
  });
});
