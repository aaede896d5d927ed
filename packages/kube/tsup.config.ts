import { defineConfig } from "tsup";
import { libraryConfig } from "../../tsup.base.ts";

/** The subpath entries (`@nebula/kube/<name>`), one per folder of the controller toolkit. */
const subpaths = [
  "cache",
  "cli",
  "controller",
  "crd",
  "events",
  "leader",
  "observability",
  "queue",
  "status",
];

export default defineConfig({
  ...libraryConfig,
  entry: {
    index: "src/index.ts",
    ...Object.fromEntries(subpaths.map((name) => [`${name}/index`, `src/${name}/index.ts`])),
  },
  // Shared modules go into chunks, so a class (KubeError, Controller, ...) is one class whichever
  // entry it is imported from.
  splitting: true,
});
