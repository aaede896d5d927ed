# shellcheck shell=bash
# shellcheck disable=SC2034 # sets globals that other fragments read
# shellcheck disable=SC2154 # S is associative (common.sh); alone, shellcheck reads S[st.$i] as $st
# Supervisor fragment: the main loop. This header (up to the first blank line) is for shellcheck
# of this file alone: `npm run embed` drops it and joins the fragments in the order of
# fragments.ts into the installed supervisor.sh.

pod_done() {
  local i
  [ -z "$GIVE_UP" ] && [ -z "$POD_FAILED" ] || return 0
  [ "$PHASE" = app ] || return 1
  for ((i = 0; i < N; i++)); do
    [ "${INIT[i]}" = 1 ] || [ "${S[st.$i]}" = exited ] || [ "${S[st.$i]}" = stuck ] || return 1
  done
}

main() {
  local i changed t info
  mkdir -p "$RUN" "$STATE/containers"
  if [ -e "$STATE/final" ]; then
    log "the final report was already written; nothing to run"
    exit 0
  fi
  # The stop time is recorded first, in the trap itself.
  trap '[ -n "$TERM_REQUESTED" ] || printf -v TERM_AT "%(%s)T" -1; TERM_REQUESTED=1' TERM INT
  wake_open
  SUPERVISOR_AT=$(iso_now)
  load_pod
  log "supervising pod $POD_NAMESPACE/$POD_NAME ($N containers)"
  [ -n "$INSTANCE_ID" ] || identify 30 || log "no instance identity from IMDS; reporting on the console only"
  log "reports: CreateTags through curl + SigV4, the aws CLI when that fails"
  utf8_locale
  usage_start
  for ((i = 0; i < N; i++)); do
    S[restarts.$i]=0
    S[quick.$i]=0
    S[delay.$i]=0
    S[pulls.$i]=0
    set_waiting "$i" PodInitializing ""
    S[st.$i]=pending
  done
  next_init -1
  if ! sandbox_up; then
    log "$SANDBOX_ERR"
    GIVE_UP=$SANDBOX_ERR
    for ((i = 0; i < N; i++)); do S[wmsg.$i]=$(b64 "$SANDBOX_ERR"); done
  fi
  # The host agent (host-agent.sh, only with the Parameter Store delivery): its certificate's
  # fingerprint goes out with the first report.
  [ -n "$GIVE_UP" ] || [ -z "${AGENT_PORT:-}" ] || host_agent_up
  report
  while :; do
    [ -z "$TERM_REQUESTED" ] || finish
    changed=
    for ((i = 0; i < N; i++)); do
      if [ "${S[st.$i]}" = running ] && [ -e "$RUN/$i.done" ]; then
        # One inspect: whether it still runs (a watcher's wait that failed), and its exit.
        info=$(docker inspect --format "$EXIT_FORMAT" "${S[cid.$i]}" 2>/dev/null)
        IFS='|' read -r _ _ t _ <<<"$info"
        if [ "$t" = true ]; then
          watch "$i"
          continue
        fi
        probes_stop "$i"
        capture "$i" "" "" "$(probe_verdict "$i")" "$info"
        decide "$i"
        changed=1
      fi
    done
    # An exit is told before the restart it leads to: a restart (create, start, maybe a pull)
    # takes seconds, which the exit's report would otherwise wait for. Not when nothing restarts
    # now (the report at the end of this turn, or the final one, tells it at once).
    if [ -n "$changed" ] && [ -z "$GIVE_UP$POD_FAILED" ]; then
      printf -v t '%(%s)T' -1
      for ((i = 0; i < N; i++)); do
        if [ "${S[st.$i]}" = wait ] && ((t >= ${S[next.$i]:-0})); then
          report
          break
        fi
      done
    fi
    for ((i = 0; i < N; i++)); do
      if [ "${S[st.$i]}" = wait ] && (($(now) >= ${S[next.$i]:-0})) && [ -z "$GIVE_UP" ] && [ -z "$POD_FAILED" ]; then
        attempt "$i"
        changed=1
      fi
    done
    [ -z "$TERM_REQUESTED" ] || finish
    ! pod_done || finish
    ! spot_check || finish
    if [ -n "$REBALANCE_NEW" ]; then
      REBALANCE_NEW=
      changed=1
    fi
    probes_read
    sidecars_advance
    # A report for probe verdicts alone backs off while they flap (10, 20, 40 ... 320 s apart),
    # so a flapping Pod costs the account's CreateTags budget little; 10 s again after a quiet
    # 10 minutes (and at first, while PROBE_GAP is unset). Any other change reports at once,
    # carrying the verdicts along.
    (($(now) < LAST_REPORT + 600 && PROBE_GAP)) || PROBE_GAP=10
    [ -z "$changed" ] && [ -n "$PROBE_DIRTY" ] && (($(now) >= LAST_REPORT + PROBE_GAP)) &&
      changed=1 && ((PROBE_GAP *= PROBE_GAP < 320 ? 2 : 1))
    # Service-account tokens (parameters.sh, only with the Parameter Store delivery).
    [ -z "${TOKEN_POLL:-}" ] || tokens_tick
    # The service proxy (proxy.sh): started again when it ended.
    [ -z "${PROXY_SERVER:-}" ] || proxy_tick
    # The host agent (host-agent.sh): started again when it ended.
    [ -z "${AGENT_PORT:-}" ] || host_agent_tick
    if [ -n "$changed" ]; then report; else nap 1; fi
  done
}

main "$@"
