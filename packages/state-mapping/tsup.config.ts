import { defineConfig } from "tsup";
import { libraryConfig } from "../../tsup.base.ts";

export default defineConfig({
  ...libraryConfig,
  // The package, and `@nebula/state-mapping/text` (the status-text sanitiser @nebula/rollup uses).
  entry: { index: "src/index.ts", "text/index": "src/text/index.ts" },
});
