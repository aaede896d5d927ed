#!/usr/bin/env bash
# Fails when a published package (a non-private package under packages/) changed since the base
# branch without a changeset that names it. Tests, benchmarks, test configs and CHANGELOG.md do not
# reach users and need none. A deliberate "no release" is an empty changeset (`npx changeset --empty`)
# whose text names each package it speaks for (e.g. "@nebula/kube: a comment only"): an empty one
# that names none exempts none.
#
#   bash scripts/check-changeset.sh              # against origin/main (or main when there is no remote)
#   bash scripts/check-changeset.sh origin/dev   # against another base
#
# Compares the merge base with the base branch to the working tree, so it works before committing too.
set -euo pipefail
cd "$(dirname "$0")/.."

base="${1:-${CHANGESET_BASE:-}}"
if [ -z "$base" ]; then
  if git rev-parse --verify --quiet origin/main >/dev/null; then base=origin/main; else base=main; fi
fi
merge_base="$(git merge-base "$base" HEAD)" || {
  echo "check-changeset: no merge base with $base (fetch it first: git fetch origin main)" >&2
  exit 2
}

# Changed, added and untracked files since the merge base.
changed="$(
  {
    git diff --name-only "$merge_base" --
    git ls-files --others --exclude-standard
  } | sort -u
)"

# Package names the changesets added since the merge base release, and the text of the empty ones.
named=""
empty_text=""
while IFS= read -r file; do
  case "$file" in
  .changeset/README.md | .changeset/config.json) continue ;;
  .changeset/*.md) ;;
  *) continue ;;
  esac
  [ -f "$file" ] || continue
  front="$(awk 'NR == 1 && $0 == "---" { inside = 1; next } inside && $0 == "---" { exit } inside { print }' "$file")"
  if [ -z "$(printf '%s' "$front" | tr -d '[:space:]')" ]; then
    empty_text+="$(awk 'NR == 1 && $0 == "---" { inside = 1; next } inside && $0 == "---" { inside = 0; body = 1; next } body { print }' "$file")"$'\n'
  fi
  named+="$(printf '%s\n' "$front" | sed -n "s/^[[:space:]]*[\"']\{0,1\}\([^\"':]*\)[\"']\{0,1\}[[:space:]]*:.*/\1/p")"$'\n'
done <<<"$changed"

status=0
for manifest in packages/*/package.json; do
  dir="$(dirname "$manifest")"
  if [ "$(node -p "require('./$manifest').private === true")" = "true" ]; then
    continue
  fi
  name="$(node -p "require('./$manifest').name")"
  shipped="$(printf '%s\n' "$changed" | grep "^$dir/" |
    grep -Ev '\.(test|integration\.test|bench)\.ts$|/vitest\.[^/]*$|/tsconfig[^/]*\.json$|/CHANGELOG\.md$|^[^/]+/[^/]+/bench/' || true)"
  [ -n "$shipped" ] || continue
  if printf '%s\n' "$named" | grep -Fxq "$name"; then
    continue
  fi
  if printf '%s\n' "$empty_text" | grep -Eq "(^|[^A-Za-z0-9@/_.-])${name//./\\.}([^A-Za-z0-9/_-]|\$)"; then
    echo "check-changeset: $name changed; an empty changeset names it: no release is needed" >&2
    continue
  fi
  echo "check-changeset: $name changed since $base but no changeset names it:" >&2
  printf '%s\n' "$shipped" | sed 's/^/  /' >&2
  echo "  add one with: npx changeset (or npx changeset --empty, its text naming $name, when users see no change)" >&2
  status=1
done
[ "$status" -ne 0 ] || echo "check-changeset: every changed published package has a changeset (base $base)" >&2
exit "$status"
