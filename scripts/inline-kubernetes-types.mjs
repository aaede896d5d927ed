#!/usr/bin/env node
// Copies the `@kubernetes/client-node` declarations a package's public types name (e.g. `V1Pod` and
// everything it references) into its built `dist/index.d.ts`, for packages that use those types but
// not the library at run time. Consumers then get exact types without installing
// `@kubernetes/client-node` (90-odd packages), and never a silent `any` when it is missing. The
// copies are structural (the models are classes without private members): a `V1Pod` from
// `@kubernetes/client-node` is assignable to them and back.
//
// Further packages named as arguments are inlined the same way: `@nebula/provider` names the
// virtual node's contracts (`PodLifecycle`, `PodStatusChange`, ...) with `import type` only, and
// its consumers get them without installing `@nebula/virtual-node`.
//
//   cd packages/<name> && tsup && node ../../scripts/inline-kubernetes-types.mjs [package...]
import { renameSync } from "node:fs";
import { rollup } from "rollup";
import { dts } from "rollup-plugin-dts";

const input = "dist/index.d.ts";
const bundle = await rollup({
  input,
  plugins: [dts({ includeExternal: ["@kubernetes/client-node", ...process.argv.slice(2)] })],
  onwarn(warning, warn) {
    // Node's own modules stay imports (a consumer's @types/node has them); cycles are in the models.
    if (warning.code === "CIRCULAR_DEPENDENCY" || warning.code === "UNRESOLVED_IMPORT") return;
    warn(warning);
  },
});
await bundle.write({ file: "dist/index.inlined.d.ts", format: "es" });
await bundle.close();
renameSync("dist/index.inlined.d.ts", input);
