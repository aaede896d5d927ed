#!/usr/bin/env bash
# Every published package ships the repository's LICENSE: npm packs a package's own LICENSE file
# whatever its `files` say, so each published package keeps an identical copy of the root one.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for manifest in packages/*/package.json; do
  dir="$(dirname "$manifest")"
  if [ "$(node -p "require('./$manifest').private === true")" = "true" ]; then
    continue
  fi
  if ! cmp -s LICENSE "$dir/LICENSE"; then
    echo "check-licenses: $dir/LICENSE is missing or differs from ./LICENSE; run: cp LICENSE $dir/LICENSE" >&2
    status=1
  fi
done
exit "$status"
