import { defineConfig } from "tsup";
import { libraryConfig } from "../../tsup.base.ts";

export default defineConfig({
  ...libraryConfig,
  // The root entry, `@nebula/virtual-node/kubelet` (the kubelet API),
  // `@nebula/virtual-node/config` (the configuration schema) and `@nebula/virtual-node/host` (what a
  // Pod's host needs from the API server).
  entry: {
    index: "src/index.ts",
    "kubelet/index": "src/kubelet/index.ts",
    "config/index": "src/config/index.ts",
    "host/index": "src/host/index.ts",
  },
  // Shared modules go into chunks, so a class (VirtualNodeError, ...) is one class whichever entry
  // it is imported from.
  splitting: true,
});
