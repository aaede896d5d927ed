# shellcheck shell=bash
# shellcheck disable=SC2034 # sets globals that other fragments read
# shellcheck disable=SC2153 # names from common.sh or pod.sh, not misspellings
# shellcheck disable=SC2154 # S is associative (common.sh); alone, shellcheck reads S[st.$i] as $st
# Supervisor fragment: stopping: the grace, the final report and power-off, the Spot interruption
# notice. This header (up to the first blank line) is for shellcheck of this file alone: `npm run
# embed` drops it and joins the fragments in the order of fragments.ts into the installed
# supervisor.sh.

# Stops every running container with grace $1 (the Pod's, or less when time is short) and
# captures the exits; $2: why (stoppedBecause), when the supervisor stops them for a reason.
stop_all() {
  local grace=$1 i pids=()
  for ((i = 0; i < N; i++)); do
    if [ "${S[st.$i]}" = running ] && in_set "$i" "$3"; then
      probes_stop "$i"
      stop_one "$i" "$grace" &
      pids+=($!)
    fi
  done
  for i in "${pids[@]}"; do
    while kill -0 "$i" 2>/dev/null; do wait "$i"; done
  done
  for ((i = 0; i < N; i++)); do
    in_set "$i" "$3" || continue
    if [ "${S[st.$i]}" = running ]; then
      capture "$i"
      S[st.$i]=exited
      if [ -n "$2" ]; then
        S[because.$i]=$2
        [ "$2" != RestartLimit ] || S[t.reason.$i]=StoppedByRestartLimit
      fi
    fi
    [ -z "${WATCHER[i]}" ] || kill_tree "${WATCHER[i]}"
  done
}

# The grace of a stop the controller asked for: the deletion's (`kubectl delete --grace-period`),
# which it tags on the instance as nebula:stop-grace-seconds before StopInstances, read from the
# instance's metadata tags; never more than the Pod's own (systemd's TimeoutStopSec is built on
# it). No tag, no metadata tags, or a value that is not a number: the Pod's.
stop_grace() {
  local t
  TOKEN=$(imds_token) && t=$(imds_get tags/instance/nebula:stop-grace-seconds 2>/dev/null) && [[ $t =~ ^[0-9]{1,9}$ ]] && ((10#$t < GRACE_SECONDS)) && echo $((10#$t)) || echo "$GRACE_SECONDS"
}

# systemd kills the unit TimeoutStopSec (grace + 30 s) after its SIGTERM: the final report's tag
# attempts all end by STOP_MARGIN seconds before that, and the containers' grace leaves
# STOP_REPORT_SECONDS for the report.
STOP_MARGIN=5
STOP_REPORT_SECONDS=20
finish() {
  local deadline=0 grace=$GRACE_SECONDS left why=
  stop_writer
  usage_stop
  if [ -n "$SPOT_ACTION" ]; then
    # The two-minute warning bounds everything: the containers' grace, then the report.
    STOP_REQUESTED=1
    why=SpotInterruption
    deadline=$(date -d "$SPOT_TIME" +%s 2>/dev/null) || deadline=$((SPOT_AT + 120))
    left=$((deadline - $(now) - SPOT_REPORT_SECONDS))
    ((left >= grace)) || grace=$((left > 0 ? left : 0))
    STOP_ISO=$(date -u -d "@$SPOT_AT" +%Y-%m-%dT%H:%M:%S.000Z)
    log "Spot interruption notice ($SPOT_ACTION at ${SPOT_TIME:-unknown}): stopping containers (grace ${grace}s)"
    # Said at once, before the containers stop: the controller marks the Pod (DisruptionTarget)
    # from this report while the grace runs, not after it.
    report
  elif [ -n "$TERM_REQUESTED" ]; then
    STOP_REQUESTED=1
    why=StopRequested
    grace=$(stop_grace)
    deadline=$((TERM_AT + GRACE_SECONDS + 30 - STOP_MARGIN))
    left=$((deadline - $(now) - STOP_REPORT_SECONDS))
    ((left >= grace)) || grace=$((left > 0 ? left : 0))
    STOP_ISO=$(date -u -d "@$TERM_AT" +%Y-%m-%dT%H:%M:%S.000Z)
    log "stop requested: stopping containers (grace ${grace}s)"
  elif [ -n "$LIMIT_HIT" ]; then
    why=RestartLimit
  fi
  stop_sidecars_last "$grace" "$why"
  # No session outlives the containers (host-agent.sh).
  [ -z "${AGENT_PORT:-}" ] || host_agent_down
  FINAL=true
  report "$deadline"
  : >"$STATE/final"
  # The sandbox goes after the report: nothing in the report depends on it, and removing it (a
  # docker rm, about 0.2 s) would delay every Pod's final status by that much.
  sandbox_down
  usage_flush "$deadline"
  if [ -n "$SPOT_ACTION" ]; then
    log "final report written after the Spot interruption notice: leaving the instance to EC2"
  elif [ -z "$TERM_REQUESTED" ]; then
    log "pod finished${GIVE_UP:+ ($GIVE_UP)}: powering off"
    shutdown -h now
  fi
  exit 0
}

# Reads the Spot interruption notice from IMDS (404 until there is one). Sets SPOT_ACTION,
# SPOT_TIME and SPOT_AT (when it was seen: the stop time, recorded first). On the way, reads the
# rebalance recommendation (404 until there is one): REBALANCE_TIME is set and REBALANCE_NEW
# says it is new (the loop reports it; nothing else changes: EC2 does not act on it).
# Neither is read on a host that is not Spot, where EC2 never serves them: the first poll reads
# IMDS instance-life-cycle (EC2 says spot, on-demand, or scheduled for a Scheduled Instance) into
# LIFE_CYCLE, once, and on-demand or scheduled ends every poll there. Unreadable (404, a timeout,
# an empty answer): LIFE_CYCLE=- and the Spot paths are read as on a Spot host (the safe side),
# the life cycle asked again at every poll until it answers. Each outcome is logged once.
spot_check() {
  local body t
  printf -v t '%(%s)T' -1
  ((t >= SPOT_NEXT)) || return 1
  SPOT_NEXT=$((t + SPOT_POLL_SECONDS))
  [ -n "$INSTANCE_ID" ] || return 1
  if [ "${LIFE_CYCLE:--}" = - ]; then
    if interruptible imds_to "$RUN/spot" instance-life-cycle && [ -s "$RUN/spot" ]; then
      LIFE_CYCLE=$(<"$RUN/spot")
      log "IMDS instance-life-cycle: $LIFE_CYCLE"
    elif [ -z "$LIFE_CYCLE" ]; then
      LIFE_CYCLE=-
      log "IMDS instance-life-cycle: unreadable"
    fi
  fi
  case $LIFE_CYCLE in on-demand | scheduled) return 1 ;; esac
  if [ -z "$REBALANCE_TIME" ] && interruptible imds_to "$RUN/spot" events/recommendations/rebalance; then
    body=$(<"$RUN/spot")
    if [[ $body =~ \"noticeTime\"[[:space:]]*:[[:space:]]*\"([0-9]{4}-[0-9][0-9]-[0-9][0-9]T[0-9:.]+Z)\" ]]; then
      REBALANCE_TIME=${BASH_REMATCH[1]}
      REBALANCE_NEW=1
      log "EC2 recommends rebalancing this Spot instance (notice at $REBALANCE_TIME): reported, nothing stopped"
    fi
  fi
  interruptible imds_to "$RUN/spot" spot/instance-action || return 1
  body=$(<"$RUN/spot")
  [[ $body =~ \"action\"[[:space:]]*:[[:space:]]*\"([a-z]+)\" ]] || return 1
  SPOT_AT=$t
  SPOT_ACTION=${BASH_REMATCH[1]}
  if [[ $body =~ \"time\"[[:space:]]*:[[:space:]]*\"([0-9]{4}-[0-9][0-9]-[0-9][0-9]T[0-9:.]+Z)\" ]]; then SPOT_TIME=${BASH_REMATCH[1]}; fi
  return 0
}

# IMDS path $2 into file $1, with a fresh token when the current one is refused.
imds_to() {
  curl -sS -f --max-time 2 -H "X-aws-ec2-metadata-token: $TOKEN" "$IMDS/latest/meta-data/$2" >"$1" 2>/dev/null && return 0
  TOKEN=$(imds_token) || return 1
  curl -sS -f --max-time 2 -H "X-aws-ec2-metadata-token: $TOKEN" "$IMDS/latest/meta-data/$2" >"$1" 2>/dev/null
}
