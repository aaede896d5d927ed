import { readFileSync } from "node:fs";
import { parseCommandLine, usage } from "./cli.js";

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
    version: string;
  };
  return pkg.version;
}

const result = parseCommandLine(process.argv.slice(2));
if (!result.ok) {
  process.stderr.write(`nebula-operator: ${result.message}\n\n${usage}`);
  process.exit(2);
}
if (result.flags.help) {
  process.stdout.write(usage);
} else if (result.flags.version) {
  process.stdout.write(`${version()}\n`);
} else {
  process.stderr.write(
    "nebula-operator: the roll-up controller is not part of this build yet; only --help and --version work.\n",
  );
  process.exit(1);
}
