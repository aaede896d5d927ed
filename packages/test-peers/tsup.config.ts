import { defineConfig } from "tsup";
import { libraryConfig } from "../../tsup.base.ts";

export default defineConfig({
  ...libraryConfig,
  entry: ["src/index.ts", "src/vitest.ts", "src/vitest-global-setup.ts", "src/serve.ts"],
  // vitest is the repository's test runner (a root devDependency): never bundle it.
  external: ["vitest", "vitest/node"],
});
