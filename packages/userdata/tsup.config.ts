import { defineConfig } from "tsup";
import { libraryConfig } from "../../tsup.base.ts";

export default defineConfig({
  ...libraryConfig,
  // The root entry and `@nebula/userdata/pool` (a warm-pool host's user-data).
  entry: { index: "src/index.ts", "pool/index": "src/pool/index.ts" },
  // Shared modules go into chunks, so UserDataError is one class whichever entry throws it.
  splitting: true,
});
