// @nebula/kube/cli: the apps' command line (flags from zod, environment fallbacks, --help).
export {
  type Cli,
  type CliSpec,
  COMMON_FLAGS,
  type CommonFlags,
  defineCli,
  type FlagDefinitions,
  type RunCliOptions,
  runCli,
} from "../flags.js";
