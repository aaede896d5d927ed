#!/usr/bin/env bash
# Proves that a run left nothing behind: no simulator container (podman, label nebula-sim.run), no
# conmon, no network namespace in /run/netns, no runc state of a container podman forgot, and no
# process started from this checkout or the cache (the control plane, moto) outlives it. `.ci/run` takes a snapshot before
# the tests and checks after them; what was there before (another checkout's run, the machine's
# own) is not counted.
#
#   bash scripts/leftovers.sh snapshot <file>   # what exists now
#   bash scripts/leftovers.sh check <file>      # exit 1, listing them, if anything new survives
#
# The check waits up to NEBULA_LEFTOVER_GRACE_SECONDS (default 20) for processes that are already
# on their way out (a watchdog's kill, a container's stop) before it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
cache="${NEBULA_CACHE_DIR:-$HOME/.cache/nebula}"

# One line per item: "container <id>", "conmon <pid> <command>", "netns <name>",
# "runc <id> <cidfile>", "process <pid> <command>".
items() {
  local ids
  if command -v podman >/dev/null 2>&1; then
    if ids="$(podman ps -aq --no-trunc --filter label=nebula-sim.run 2>&1)"; then
      # shellcheck disable=SC2086 # one ID per word
      [ -z "$ids" ] || printf 'container %s\n' $ids
    else
      echo "leftovers: podman ps failed (the conmon and process lists still count): $ids" >&2
    fi
  fi
  # A Pod sandbox's network namespace, mounted under /run/netns by podman, outlives its container
  # when the clean-up misses it.
  local ns
  for ns in /run/netns/*; do
    [ -e "$ns" ] && echo "netns ${ns#/run/netns/}"
  done
  # runc's state of a container that no podman root knows any more: what a podman killed half-way
  # leaves (see packages/test-peers/src/host/engine.ts). Only those made with a --cidfile (every
  # container of the simulator and of the test hosts) are looked at.
  local st id cid
  for st in /run/runc/*/state.json; do
    [ -e "$st" ] || continue
    cid="$(grep -oE 'io.podman.annotations.cid-file=[^"]*' "$st" 2>/dev/null | head -n 1)" || cid=
    [ -n "$cid" ] || continue
    id="${st%/state.json}"
    id="${id##*/}"
    if command -v podman >/dev/null 2>&1 && podman container exists "$id" 2>/dev/null; then continue; fi
    echo "runc $id ${cid#io.podman.annotations.cid-file=}"
  done
  local pid comm
  for comm in /proc/[0-9]*/comm; do
    [ "$(cat "$comm" 2>/dev/null)" = conmon ] || continue
    pid="${comm#/proc/}"
    pid="${pid%/comm}"
    # Its command line names the container (-c, -n) and the podman root it belongs to (-b).
    echo "conmon $pid $({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | cut -c1-300)"
  done
  # Processes whose command line names this checkout (the apps, vitest) or the cache (the control
  # plane's binaries, moto), except this script and its parents.
  local self=$$ ancestors=" " p=$$
  while [ "$p" -gt 1 ] 2>/dev/null; do
    ancestors+="$p "
    # The parent is the 2nd field after the command name's closing ")" (a name may hold spaces).
    local stat
    stat="$(cat "/proc/$p/stat" 2>/dev/null || echo "x) S 1")"
    stat="${stat##*) }"
    p="$(printf '%s' "$stat" | awk '{print $2}')"
  done
  for dir in /proc/[0-9]*; do
    pid="${dir#/proc/}"
    [ "$pid" = "$self" ] && continue
    case "$ancestors" in *" $pid "*) continue ;; esac
    local cmd
    cmd="$({ tr '\0' ' ' <"$dir/cmdline"; } 2>/dev/null || true)"
    [ -n "$cmd" ] || continue
    case "$cmd" in
    *"$root/scripts/leftovers.sh "*) ;; # this check's own subshells, when it was called by full path
    *"$root/"* | *"$root "* | *"$cache/"*) echo "process $pid ${cmd:0:200}" ;;
    esac
  done
}

new_items() {
  local before="$1"
  items | while IFS= read -r line; do
    # Compare by kind and id only (a process's command may read differently).
    key="$(printf '%s' "$line" | awk '{print $1, $2}')"
    grep -Fxq -- "$key" "$before" || printf '%s\n' "$line"
  done
}

case "${1:-}" in
snapshot)
  [ -n "${2:-}" ] || { echo "usage: bash scripts/leftovers.sh snapshot <file>" >&2; exit 2; }
  items | awk '{print $1, $2}' >"$2"
  ;;
check)
  [ -n "${2:-}" ] || { echo "usage: bash scripts/leftovers.sh check <file>" >&2; exit 2; }
  [ -f "$2" ] || { echo "leftovers: no snapshot at $2 (take one with: snapshot $2)" >&2; exit 2; }
  deadline=$((SECONDS + ${NEBULA_LEFTOVER_GRACE_SECONDS:-20}))
  while :; do
    left="$(new_items "$2")"
    [ -n "$left" ] || break
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 1
  done
  if [ -n "$left" ]; then
    echo "leftovers: the run left these behind (they were not there before it):" >&2
    printf '%s\n' "$left" | sed 's/^/  /' >&2
    echo "  remove them (podman rm -f <id>; kill <pid>; ip netns delete <name>; runc delete --force <id>) and find the test whose clean-up missed them" >&2
    exit 1
  fi
  echo "leftovers: nothing of the run survives it (no new simulator container, conmon, network namespace, forgotten runc state or process of $root)" >&2
  ;;
*)
  echo "usage: bash scripts/leftovers.sh snapshot|check <file>" >&2
  exit 2
  ;;
esac
