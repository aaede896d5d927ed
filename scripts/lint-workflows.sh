#!/usr/bin/env bash
# Audits the GitHub Actions workflows (.github/workflows/) with zizmor (from PyPI): actions pinned
# by commit, no template injection, no persisted credentials or excessive permissions where they
# are not needed. Offline: the audits that call GitHub's API are skipped. A finding fails the lint;
# one accepted on purpose carries a `# zizmor: ignore[<audit>]` comment with its reason beside it.
#
# zizmor lives in a cached virtual environment made by `bash scripts/bootstrap.sh zizmor`.
set -euo pipefail
cd "$(dirname "$0")/.."
zizmor="${NEBULA_CACHE_DIR:-$HOME/.cache/nebula}/zizmor-venv/bin/zizmor"
if [ ! -x "$zizmor" ]; then
  echo "lint-workflows: zizmor is not installed; run: bash scripts/bootstrap.sh zizmor" >&2
  exit 1
fi
if ! out="$("$zizmor" --offline --no-progress --format plain .github/workflows/ 2>&1)"; then
  printf '%s\n' "$out" >&2
  echo "lint-workflows: zizmor found the problems above in .github/workflows/ (https://docs.zizmor.sh/audits/)" >&2
  exit 1
fi
echo "lint-workflows: zizmor finds nothing in .github/workflows/ ($(printf '%s\n' "$out" | tail -1))" >&2
