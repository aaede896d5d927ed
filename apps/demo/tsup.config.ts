import { defineConfig } from "tsup";
import { appConfig } from "../../tsup.base.ts";

export default defineConfig(appConfig);
