#!/usr/bin/env bash
# Lints the IAM policy documents with parliament (an IAM policy linter, from PyPI): the identity
# and service control policies the packages ship (packages/*/policies/*.json) and the deployment's
# (deploy/**/iam*.json, deploy/**/iam/*.json). Trust policies (*trust*.json) are skipped: they
# have a Principal and no Resource, which parliament, written for identity policies, reports as
# malformed. Accepted findings, each with its reason, are in scripts/iam-lint-accepted.json (matched
# by issue, file and detail; parliament's own ignore_locations setting does not work in 1.6.4).
#
# parliament lives in a cached virtual environment made by `bash scripts/bootstrap.sh parliament`.
set -euo pipefail
cd "$(dirname "$0")/.."
parliament="${NEBULA_CACHE_DIR:-$HOME/.cache/nebula}/parliament-venv/bin/parliament"
if [ ! -x "$parliament" ]; then
  echo "lint-iam: parliament is not installed; run: bash scripts/bootstrap.sh parliament" >&2
  exit 1
fi
shopt -s nullglob globstar
files=()
for file in packages/*/policies/*.json deploy/**/iam*.json deploy/**/iam/*.json; do
  case "$file" in
  *trust*.json) continue ;;
  esac
  files+=("$file")
done
if [ "${#files[@]}" -eq 0 ]; then
  echo "lint-iam: no policy documents found" >&2
  exit 1
fi
# The documents are templates: `${Region}`, `${AccountId}` and other capitalised placeholders are
# filled in at deployment (IAM's own policy variables, `${aws:...}`, `${ec2:...}`, are lower case and
# stay). Lint them rendered with example values, under the same relative paths.
rendered="$(mktemp -d)"
trap 'rm -rf "$rendered"' EXIT
for file in "${files[@]}"; do
  mkdir -p "$rendered/$(dirname "$file")"
  # shellcheck disable=SC2016 # literal ${...} placeholders
  sed -e 's/\${Region}/us-east-1/g' -e 's/\${AccountId}/123456789012/g' -e 's/\${MetadataHopLimit}/1/g' \
    -e 's/\${\([A-Z][A-Za-z0-9]*\)}/example-\1/g' "$file" >"$rendered/$file"
done
# parliament reads a policy from stdin when stdin is not a terminal; give it the files by name.
# It exits 1 when it has findings: the accepted ones are filtered out below. LOW findings (such as
# StringEquals on an ARN-typed key, which works) are not failures.
findings="$(cd "$rendered" && "$parliament" --json --minimum_severity MEDIUM --files "$(IFS=,; echo "${files[*]}")" </dev/null)" || [ "$?" -eq 1 ]
if ! printf '%s\n' "$findings" | "$(dirname "$parliament")/python" scripts/lint-iam-filter.py; then
  echo "lint-iam: parliament found problems in the policies above" >&2
  exit 1
fi
echo "lint-iam: ${#files[@]} policy documents pass parliament: ${files[*]}" >&2
