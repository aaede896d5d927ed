import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  allowedByPatterns,
  type CatalogueRules,
  candidateTypes,
  type InstanceTypeInfo,
  readInstanceTypes,
  withOfferings,
} from "./instance-catalogue.js";
import { EC2_INSTANCE_TYPES as EC2_ENTRIES } from "./testing/fixtures.js";

const catalogue = readInstanceTypes(EC2_ENTRIES).types;
const rules: CatalogueRules = {
  allowed: ["m7i.*", "m7g.*", "g5.*", "t3.micro"],
  architecture: "x86_64",
  reserved: { cpu: 0.1, memoryMiB: 512 },
  maxCandidates: 20,
};
const names = (types: readonly InstanceTypeInfo[]) => types.map((t) => t.name);

describe("readInstanceTypes", () => {
  it("reads EC2's entries into types, sorted by name, GPUs counted", () => {
    const { types, skipped } = readInstanceTypes(EC2_ENTRIES);
    expect(skipped).toEqual([]);
    expect(names(types)).toEqual([
      "g5.xlarge",
      "m7g.large",
      "m7i.large",
      "m7i.metal-24xl",
      "m7i.xlarge",
      "t3.micro",
    ]);
    expect(types[0]).toEqual({
      name: "g5.xlarge",
      vcpus: 4,
      memoryMiB: 16384,
      architectures: ["x86_64"],
      gpus: 1,
      bareMetal: false,
      usageClasses: ["on-demand", "spot"],
    });
  });

  it("skips what it cannot read, naming it, and keeps the first of a name seen twice", () => {
    const { types, skipped } = readInstanceTypes([
      null,
      { InstanceType: "m7i.large", VCpuInfo: { DefaultVCpus: "two" } },
      EC2_ENTRIES[2],
      { ...EC2_ENTRIES[2], VCpuInfo: { DefaultVCpus: 64 } },
    ]);
    expect(names(types)).toEqual(["m7i.large"]);
    expect(types[0]?.vcpus).toBe(2);
    expect(skipped).toHaveLength(2);
    expect(skipped[0]).toMatch(/^entry 0: /);
    expect(skipped[1]).toMatch(/^m7i\.large: VCpuInfo\.DefaultVCpus: /);
  });

  it("answers any input without throwing (property)", () => {
    fc.assert(
      fc.property(fc.array(fc.anything()), (entries) => {
        const read = readInstanceTypes(entries);
        expect(read.types.length + read.skipped.length).toBeLessThanOrEqual(entries.length);
      }),
    );
  });
});

describe("allowedByPatterns", () => {
  it("allows a name, or a family's sizes without its bare metal unless named", () => {
    const type = (name: string, bareMetal = false) => ({ name, bareMetal });
    expect(allowedByPatterns(["m7i.*"], type("m7i.xlarge"))).toBe(true);
    expect(allowedByPatterns(["m7i.*"], type("m7i.metal-24xl", true))).toBe(false);
    expect(allowedByPatterns(["m7i.metal-24xl"], type("m7i.metal-24xl", true))).toBe(true);
    expect(allowedByPatterns(["m7i.*"], type("m7i-flex.large"))).toBe(false);
    expect(allowedByPatterns(["m7.*"], type("m7i.large"))).toBe(false);
    expect(allowedByPatterns([], type("m7i.large"))).toBe(false);
  });
});

describe("candidateTypes", () => {
  it("gives the smallest allowed type of the image's architecture that covers the requests first", () => {
    expect(names(candidateTypes({ cpu: 0.5, memoryMiB: 256, gpus: 0 }, catalogue, rules))).toEqual([
      "t3.micro",
      "m7i.large",
      "m7i.xlarge",
    ]);
    // 7.5 GiB fits an 8 GiB host that keeps 512 MiB for itself; a MiB more does not.
    expect(names(candidateTypes({ cpu: 1, memoryMiB: 7680, gpus: 0 }, catalogue, rules))).toEqual([
      "m7i.large",
      "m7i.xlarge",
    ]);
    expect(names(candidateTypes({ cpu: 1, memoryMiB: 7681, gpus: 0 }, catalogue, rules))).toEqual([
      "m7i.xlarge",
    ]);
  });

  it("gives a GPU Pod GPU types only, and a Pod without GPUs none", () => {
    expect(names(candidateTypes({ cpu: 1, memoryMiB: 1024, gpus: 1 }, catalogue, rules))).toEqual([
      "g5.xlarge",
    ]);
    expect(
      names(candidateTypes({ cpu: 3, memoryMiB: 1024, gpus: 0 }, catalogue, rules)),
    ).not.toContain("g5.xlarge");
  });

  it("follows the image's architecture", () => {
    expect(
      names(
        candidateTypes({ cpu: 1, memoryMiB: 1024, gpus: 0 }, catalogue, {
          ...rules,
          architecture: "arm64",
        }),
      ),
    ).toEqual(["m7g.large"]);
  });

  it("answers an empty list when nothing fits, and at most maxCandidates", () => {
    expect(candidateTypes({ cpu: 200, memoryMiB: 0, gpus: 0 }, catalogue, rules)).toEqual([]);
    expect(candidateTypes({ cpu: Number.NaN, memoryMiB: 0, gpus: 0 }, catalogue, rules)).toEqual(
      [],
    );
    expect(
      names(
        candidateTypes({ cpu: 0, memoryMiB: 0, gpus: 0 }, catalogue, {
          ...rules,
          maxCandidates: 1,
        }),
      ),
    ).toEqual(["t3.micro"]);
  });

  const arbType = fc.record({
    name: fc
      .tuple(
        fc.constantFrom("m7i", "c7i", "r7i", "g5", "m7g"),
        fc.constantFrom("large", "xlarge", "2xlarge", "metal"),
      )
      .map(([f, s]) => `${f}.${s}`),
    vcpus: fc.integer({ min: 1, max: 192 }),
    memoryMiB: fc.integer({ min: 512, max: 1_048_576 }),
    architectures: fc.constantFrom(["x86_64"], ["arm64"], ["x86_64", "arm64"]),
    gpus: fc.integer({ min: 0, max: 8 }),
    bareMetal: fc.boolean(),
    usageClasses: fc.constant(["on-demand", "spot"]),
  });
  const arbNeed = fc.record({
    cpu: fc.double({ min: 0, max: 256, noNaN: true }),
    memoryMiB: fc.double({ min: 0, max: 2_000_000, noNaN: true }),
    gpus: fc.integer({ min: 0, max: 8 }),
  });
  const arbRules = fc.record({
    allowed: fc.subarray(["m7i.*", "c7i.*", "r7i.*", "g5.*", "m7g.*", "m7i.metal", "c7i.large"]),
    architecture: fc.constantFrom("x86_64", "arm64"),
    reserved: fc.record({
      cpu: fc.double({ min: 0, max: 2, noNaN: true }),
      memoryMiB: fc.integer({ min: 0, max: 2048 }),
    }),
    maxCandidates: fc.integer({ min: 1, max: 60 }),
  });

  it("gives only allowed types that fit, smallest first, and leaves out no fitting type it had room for (property)", () => {
    fc.assert(
      fc.property(fc.array(arbType, { maxLength: 40 }), arbNeed, arbRules, (types, need, r) => {
        const got = candidateTypes(need, types, r);
        const fits = (t: InstanceTypeInfo) =>
          allowedByPatterns(r.allowed, t) &&
          t.architectures.includes(r.architecture) &&
          t.vcpus - r.reserved.cpu >= need.cpu &&
          t.memoryMiB - r.reserved.memoryMiB >= need.memoryMiB &&
          t.gpus >= need.gpus &&
          need.gpus > 0 === t.gpus > 0;
        expect(got.length).toBeLessThanOrEqual(r.maxCandidates);
        for (const t of got) expect(fits(t)).toBe(true);
        for (let i = 1; i < got.length; i++) {
          const a = got[i - 1] as InstanceTypeInfo;
          const b = got[i] as InstanceTypeInfo;
          const ordered =
            a.gpus < b.gpus ||
            (a.gpus === b.gpus &&
              (a.vcpus < b.vcpus || (a.vcpus === b.vcpus && a.memoryMiB <= b.memoryMiB)));
          expect(ordered).toBe(true);
        }
        const fitting = types.filter(fits).length;
        expect(got.length).toBe(Math.min(fitting, r.maxCandidates));
      }),
    );
  });

  it("a Pod that needs more never gets a type a Pod that needs less could not have (property)", () => {
    fc.assert(
      fc.property(
        fc.array(arbType, { maxLength: 40 }),
        arbNeed,
        arbNeed,
        arbRules,
        (types, a, b, r) => {
          const small = {
            cpu: Math.min(a.cpu, b.cpu),
            memoryMiB: Math.min(a.memoryMiB, b.memoryMiB),
            gpus: a.gpus,
          };
          const large = {
            cpu: Math.max(a.cpu, b.cpu),
            memoryMiB: Math.max(a.memoryMiB, b.memoryMiB),
            gpus: a.gpus,
          };
          const all = { ...r, maxCandidates: 60 };
          const forSmall = new Set(names(candidateTypes(small, types, all)));
          for (const name of names(candidateTypes(large, types, all)))
            expect(forSmall.has(name)).toBe(true);
        },
      ),
    );
  });
});

describe("withOfferings", () => {
  it("gives each type the subnets whose zone offers it, in the subnets' order; none is an empty list", () => {
    const zones = new Map([
      ["subnet-e", "us-east-1e"],
      ["subnet-a", "us-east-1a"],
    ]);
    const offerings = new Map([
      ["m7i.large", new Set(["us-east-1a", "us-east-1b"])],
      ["t3.micro", new Set(["us-east-1a", "us-east-1e"])],
    ]);
    const typed = withOfferings(catalogue, zones, offerings);
    const subnets = Object.fromEntries(typed.map((t) => [t.name, t.subnets]));
    expect(subnets).toMatchObject({
      "m7i.large": ["subnet-a"],
      "t3.micro": ["subnet-e", "subnet-a"],
      "m7i.xlarge": [],
    });
    // A type offered in no configured subnet is no candidate.
    expect(names(candidateTypes({ cpu: 0.5, memoryMiB: 256, gpus: 0 }, typed, rules))).toEqual([
      "t3.micro",
      "m7i.large",
    ]);
  });
});
