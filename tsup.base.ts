import type { Options } from "tsup";

/**
 * The tsup settings every published `@nebula/*` package shares: one ESM entry
 * (`src/index.ts`), type declarations, Node 22 as the floor, dependencies left external.
 */
export const libraryConfig: Options = {
  entry: ["src/index.ts"],
  format: ["esm"],
  dts: true,
  clean: true,
  sourcemap: true,
  target: "node22",
  platform: "node",
  splitting: false,
  treeshake: true,
};

/**
 * The tsup settings the apps share: one self-contained, runnable ESM file per app
 * (every dependency bundled in) with a shebang, so `node dist/main.js` needs no `node_modules`.
 */
export const appConfig: Options = {
  entry: ["src/main.ts"],
  format: ["esm"],
  dts: false,
  clean: true,
  sourcemap: true,
  target: "node22",
  platform: "node",
  splitting: false,
  noExternal: [/.*/],
  banner: {
    // Bundled CommonJS dependencies still call require(); give them one.
    js: "#!/usr/bin/env node\nimport { createRequire as __nebulaCreateRequire } from 'node:module';\nconst require = __nebulaCreateRequire(import.meta.url);",
  },
};
