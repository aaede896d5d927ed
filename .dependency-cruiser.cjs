// The dependency rules of the monorepo, checked by dependency-cruiser in `npm run lint`
// (`npm run lint:deps`). Each rule's name is printed with every violation.
//
// Test code (tests, benchmarks, test fixtures, `testing/` helpers) is exempt from the run-time rules:
// it runs the real peers. Type-only imports (`import type`) are allowed where a rule says "at run
// time": they leave no trace in the built JavaScript.

/** Test code: exempt from the run-time import rules. */
const testCode =
  "(\\.(test|integration\\.test|bench)\\.ts$)|(/testing/)|(/test-fixtures\\.ts$)|(/testkit\\.ts$)|(/vitest[^/]*\\.ts$)";

/** Modules that do I/O (network, files, processes, other clouds or clusters), as resolved paths. */
const ioModules = [
  "(^|/)node_modules/@kubernetes/client-node/",
  "(^|/)node_modules/@aws-sdk/",
  "(^|/)node_modules/@smithy/",
  "(^|/)node_modules/undici/",
  "(^|/)node_modules/ws/",
  "^(node:)?(fs|fs/promises|net|http|https|http2|child_process|dgram|dns|dns/promises|tls|cluster|worker_threads|readline|inspector)$",
  // Workspace packages that do I/O.
  "^packages/(kube|provider|virtual-node|test-peers)/",
  "^apps/",
];

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "pure-package-imports-io",
      comment:
        "Pure packages (userdata, state-mapping, rollup, teardown, api) import no I/O library at run time: they read no clock, touch no network or file, and never throw on data handed to them. Type-only imports are fine.",
      severity: "error",
      from: {
        path: "^packages/(userdata|state-mapping|rollup|teardown|api)/src/",
        pathNot: testCode,
      },
      to: {
        path: ioModules,
        dependencyTypesNot: ["type-only"],
      },
    },
    {
      name: "aws-sdk-outside-provider",
      comment:
        "Only @nebula/provider imports AWS SDK clients. Exempt: test-peers, which runs moto for the tests, and apps/demo, the local harness that creates the demo's moto world and reads it back for its table (neither is deployed).",
      severity: "error",
      from: {
        pathNot: ["^packages/(provider|test-peers)/", "^apps/demo/", testCode],
      },
      to: {
        path: "(^|/)node_modules/@aws-sdk/",
        dependencyTypesNot: ["type-only"],
      },
    },
    {
      name: "client-node-outside-kube",
      comment:
        "Only @nebula/kube, @nebula/virtual-node and the apps import @kubernetes/client-node at run time (test-peers drives the real API server for the tests and is exempt). Elsewhere import its types only, with `import type`.",
      severity: "error",
      from: {
        pathNot: ["^packages/(kube|virtual-node|test-peers)/", "^apps/", testCode],
      },
      to: {
        path: "(^|/)node_modules/@kubernetes/client-node/",
        dependencyTypesNot: ["type-only"],
      },
    },
    {
      name: "provider-imports-virtual-node",
      comment:
        "@nebula/provider satisfies the virtual node's contracts (PodLifecycle, InstanceReclaimer, ...) structurally: it names them with `import type` only, and its build inlines them, so its install stays lean (no @nebula/kube, no @kubernetes/client-node at run time). Its tests run the real PodTeardown and are exempt.",
      severity: "error",
      from: { path: "^packages/provider/src/", pathNot: testCode },
      to: {
        path: ["^packages/virtual-node/", "(^|/)node_modules/@nebula/virtual-node/"],
        dependencyTypesNot: ["type-only"],
      },
    },
    {
      name: "package-imports-app",
      comment: "Packages never import an app: apps depend on packages, not the other way round.",
      severity: "error",
      from: { path: "^packages/" },
      to: { path: "^apps/" },
    },
    {
      name: "no-circular",
      comment: "No import cycles: they make load order, tree-shaking and reasoning fragile.",
      severity: "error",
      from: {},
      to: { circular: true },
    },
  ],
  options: {
    // Workspace packages resolve (through their node_modules links) to their built dist/: recorded
    // as dependencies, not cruised. Run over the sources: packages/*/src apps/*/src.
    doNotFollow: { path: ["node_modules", "(^|/)dist/"] },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.base.json" },
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["types", "import", "default", "node"],
      extensions: [".ts", ".mts", ".js", ".mjs", ".json"],
    },
    // Show the resolved path of a workspace package rather than its symlink in node_modules.
    preserveSymlinks: false,
    combinedDependencies: false,
    moduleSystems: ["es6", "cjs"],
  },
};
