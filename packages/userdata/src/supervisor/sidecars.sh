# shellcheck shell=bash
# Supervisor fragment: native sidecars (init containers with restartPolicy Always): start order,
# stopped last. This header (up to the first blank line) is for shellcheck of this file alone:
# `npm run embed` drops it and joins the fragments in the order of fragments.ts into the installed
# supervisor.sh.

# ---- native sidecars ---------------------------------------------------------------------------
# Init containers with restartPolicy Always: started in order with the other init containers, the
# next one waiting until the sidecar has started (its startup probe passed, or it runs); restarted
# whenever they exit; never holding the Pod from completing; stopped after the regular containers.

# True when container $1 belongs to set $2: all (empty), regular (not a sidecar), sidecar.
in_set() {
  case $2 in
    regular) [ "${SIDECAR[$1]}" != 1 ] ;;
    sidecar) [ "${SIDECAR[$1]}" = 1 ] ;;
    *) return 0 ;;
  esac
}

# Moves the init sequence past every sidecar that has started.
sidecars_advance() {
  local i
  [ "$PHASE" = init ] || return 0
  for ((i = 0; i < N; i++)); do
    if [ "${SIDECAR[i]}" = 1 ] && [ "${S[st.$i]}" = running ] && [ "${S[startedp.$i]}" = true ] && [ -z "${S[advanced.$i]}" ]; then
      S[advanced.$i]=1
      next_init "$i"
    fi
  done
}

# stop_all for the regular containers, then for the sidecars with what is left of grace $1.
stop_sidecars_last() {
  local grace=$1 t0 left
  t0=$(now)
  stop_all "$grace" "$2" regular
  left=$((grace - ($(now) - t0)))
  ((left > 0)) || left=0
  stop_all "$left" "$2" sidecar
}
