import { defineConfig } from "tsup";
import { libraryConfig } from "../../tsup.base.ts";

export default defineConfig({
  ...libraryConfig,
  // The root entry, `@nebula/virtual-node/kubelet` (the kubelet API) and
  // `@nebula/virtual-node/config` (the configuration schema).
  entry: {
    index: "src/index.ts",
    "kubelet/index": "src/kubelet/index.ts",
    "config/index": "src/config/index.ts",
  },
  // Shared modules go into chunks, so a class (VirtualNodeError, ...) is one class whichever entry
  // it is imported from.
  splitting: true,
});
