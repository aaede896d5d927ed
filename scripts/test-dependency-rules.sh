#!/usr/bin/env bash
# Proves the dependency rules in .dependency-cruiser.cjs fire: builds a throwaway workspace with one
# deliberate violation per rule (and one allowed type-only import), runs dependency-cruiser on it
# and checks that it fails naming every rule, and does not flag the allowed import.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$root/.dependency-cruiser.cjs" "$root/tsconfig.base.json" "$work/"
ln -s "$root/node_modules" "$work/node_modules"
mkdir -p "$work/packages/rollup/src" "$work/packages/provider/src" "$work/packages/kube/src" "$work/apps/operator/src"
put() { printf '%s\n' "$2" >"$work/$1"; }
put packages/rollup/src/reads-a-file.ts 'import { readFileSync } from "node:fs"; export const read = () => readFileSync("x");'
put packages/rollup/src/types-only.ts 'import type { V1Pod } from "@kubernetes/client-node"; export type Pod = V1Pod;'
put packages/provider/src/talks-to-kube.ts 'import { KubeConfig } from "@kubernetes/client-node"; export const kc = new KubeConfig();'
put packages/kube/src/talks-to-ec2.ts 'import { EC2Client } from "@aws-sdk/client-ec2"; export const ec2 = new EC2Client({});'
put apps/operator/src/main.ts 'export const main = 1;'
put packages/kube/src/imports-app.ts 'import { main } from "../../../apps/operator/src/main.ts"; export const m = main;'
put packages/kube/src/a.ts 'import { b } from "./b.ts"; export const a = () => b;'
put packages/kube/src/b.ts 'import { a } from "./a.ts"; export const b = () => a;'

set +e
out="$(cd "$work" && "$root/node_modules/.bin/depcruise" packages/*/src apps/*/src --config .dependency-cruiser.cjs --output-type err 2>&1)"
status=$?
set -e
fail=0
[ "$status" -ne 0 ] || {
  echo "test-dependency-rules: dependency-cruiser passed a workspace full of violations" >&2
  fail=1
}
for expect in \
  "pure-package-imports-io: packages/rollup/src/reads-a-file.ts" \
  "client-node-outside-kube: packages/provider/src/talks-to-kube.ts" \
  "aws-sdk-outside-provider: packages/kube/src/talks-to-ec2.ts" \
  "package-imports-app: packages/kube/src/imports-app.ts" \
  "no-circular: packages/kube/src/a.ts"; do
  if ! grep -Fq "$expect" <<<"$out"; then
    echo "test-dependency-rules: expected a violation '$expect'" >&2
    fail=1
  fi
done
if grep -Fq "types-only.ts" <<<"$out"; then
  echo "test-dependency-rules: a type-only import of @kubernetes/client-node was flagged" >&2
  fail=1
fi
if [ "$fail" -ne 0 ]; then
  printf '%s\n' "$out" >&2
  exit 1
fi
echo "test-dependency-rules: each of the 5 rules fails a deliberate violation by name; a type-only import passes" >&2
