# shellcheck shell=bash
# shellcheck disable=SC2034 # sets globals that other fragments read
# shellcheck disable=SC2154 # S is associative (common.sh); alone, shellcheck reads S[st.$i] as $st
# Supervisor fragment: startup, liveness and readiness probes; postStart and preStop hooks. This
# header (up to the first blank line) is for shellcheck of this file alone: `npm run embed` drops
# it and joins the fragments in the order of fragments.ts into the installed supervisor.sh.

# ---- probes and lifecycle hooks ----------------------------------------------------------------
# Probes run as the kubelet runs them, one background loop per probe and container, stopped with
# the container. They talk to the main loop through files in $RUN: <i>.started (the startup probe
# succeeded, or there is none), <i>.ready (the readiness probe's verdict), <i>.killed (a liveness or
# startup failure stopped the container: the message of its exit).
# Readiness and startup changes alone cause at most one report per PROBE_GAP seconds: 10 at first,
# doubling while they flap (set in the main loop), so a flapping probe stays within EC2's
# CreateTags budget.
PROBE_DIRTY=
LAST_REPORT=0
# postStart is bounded too: a hook still running after HOOK_SECONDS failed.
HOOK_SECONDS=120

# The address a probe or hook without a host reaches the container at.
probe_host() { printf '%s' "${S[ip.$1]:-127.0.0.1}"; }

# The Pod's IP: the sandbox's address on the bridge; nothing under host networking.
sandbox_ip() {
  local ips
  [ "$NET" != host ] || return 0
  ips=$(docker inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "$SANDBOX_NAME" 2>/dev/null)
  ips=${ips%% *}
  [[ $ips =~ ^[0-9A-Fa-f.:]+$ ]] && printf '%s' "$ips"
}

# Runs one probe or hook action for container $1 within $2 seconds: $3 kind (exec, http, tcp,
# sleep), then its fields. Prints the output the kubelet would report; the status is the verdict.
probe_action() {
  local i=$1 t=$2 kind=$3 code h=() host rc
  shift 3
  case $kind in
    exec)
      timeout -k 1 "$t" docker exec "${S[cid.$i]}" "$@" 2>&1
      rc=$?
      ((rc != 124 && rc != 137)) || printf 'command timed out after %ss' "$t"
      return "$rc"
      ;;
    http)
      local scheme=$1 port=$3 path=$4
      host=${2:-$(probe_host "$i")}
      shift 4
      while (($# >= 2)); do
        h+=(-H "$1: $2")
        shift 2
      done
      code=$(curl -sS -k -o /dev/null -w '%{http_code}' --max-time "$t" "${h[@]}" "$scheme://$host:$port$path" 2>"$RUN/probe-$i.err")
      [[ $code =~ ^[0-9]{3}$ ]] || code=000
      code=$((10#$code))
      if ((code >= 200 && code < 400)); then return 0; fi
      if ((code > 0)); then printf 'HTTP probe failed with statuscode: %s' "$code"; else printf 'Get "%s": %s' "$scheme://$host:$port$path" "$(head -c 300 "$RUN/probe-$i.err")"; fi
      return 1
      ;;
    tcp)
      host=${1:-$(probe_host "$i")}
      # The connect runs in the child shell, with its arguments.
      # shellcheck disable=SC2016
      timeout -k 1 "$t" bash -c ': >"/dev/tcp/$1/$2"' _ "$host" "$2" 2>/dev/null && return 0
      printf 'dial tcp %s:%s: connection refused or timed out' "$host" "$2"
      return 1
      ;;
    sleep) sleep "$1" ;;
  esac
}

# Runs hook $2 (POST or PRE) of container $1 within $3 seconds; its output in $RUN/hook-<i>.out.
# True when there is no such hook.
run_hook() {
  local i=$1 h=()
  eval "h=(\"\${C${i}_$2[@]}\")"
  ((${#h[@]} > 0)) || return 0
  probe_action "$i" "$3" "${h[@]}" >"$RUN/hook-$i.out" 2>&1
}

# Stops container $1 with grace $2 (seconds): its preStop hook first, inside the grace, then the
# stop signal with what is left of the grace.
stop_one() {
  local i=$1 grace=$2 t0 left
  t0=$(now)
  if ((grace > 0)) && ! run_hook "$i" PRE "$grace"; then log "container ${NAMES[i]}: preStop hook failed: $(head -c 300 "$RUN/hook-$i.out")"; fi
  left=$((grace - ($(now) - t0)))
  ((left > 0)) || left=0
  timeout -k 2 $((left + 10)) docker stop -t "$left" "${S[cid.$i]}" >/dev/null 2>&1
}

# A probe's failure kills container $1: $2 probe (Liveness, Startup), $3 its grace (-1: the
# Pod's), $4 the probe's output. The kubelet's words become the exit's message.
probe_kill() {
  local i=$1 what=$2 grace=$3 lower
  lower=${what,,}
  ((grace >= 0)) || grace=$GRACE_SECONDS
  printf '%s probe failed: %s\nContainer %s failed %s probe, will be restarted' "$what" "$4" "${NAMES[i]}" "$lower" >"$RUN/$i.killed.tmp"
  mv "$RUN/$i.killed.tmp" "$RUN/$i.killed"
  stop_one "$i" "$grace"
}

# One probe loop: container $1, probe $2 (S startup, L liveness, R readiness).
probe_loop() {
  local i=$1 k=$2 p ok=0 bad=0 out t
  eval "p=(\"\${C${i}_PROBE_${k}[@]}\")"
  if [ "$k" != S ]; then
    while [ ! -e "$RUN/$i.started" ]; do sleep 1; done
  fi
  t=$((${S[since.$i]} + p[1] - $(now)))
  ((t <= 0)) || sleep "$t"
  while :; do
    if out=$(probe_action "$i" "${p[3]}" "${p[0]}" "${p[@]:7}"); then
      ok=$((ok + 1))
      bad=0
    else
      bad=$((bad + 1))
      ok=0
    fi
    out=${out:0:1024}
    case $k in
      S)
        if ((ok >= p[4])); then
          : >"$RUN/$i.started"
          return 0
        fi
        ((bad < p[5])) || { probe_kill "$i" Startup "${p[6]}" "$out"; return 0; }
        ;;
      L) ((bad < p[5])) || { probe_kill "$i" Liveness "${p[6]}" "$out"; return 0; } ;;
      R)
        if ((ok >= p[4])); then
          : >"$RUN/$i.ready"
        elif ((bad >= p[5])); then
          rm -f "$RUN/$i.ready"
        fi
        ;;
    esac
    sleep "${p[2]}"
  done
}

# Starts the probe loops of container $1 (just started).
probes_start() {
  local i=$1 k p
  rm -f "$RUN/$i.started" "$RUN/$i.ready" "$RUN/$i.killed"
  S[probes.$i]=
  S[ip.$i]=$(sandbox_ip)
  S[ready.$i]=false
  S[startedp.$i]=false
  eval "p=\${#C${i}_PROBE_S[@]}"
  ((p > 0)) || : >"$RUN/$i.started"
  [ "${PROBED[i]}" = 1 ] || return 0
  for k in S L R; do
    eval "p=\${#C${i}_PROBE_${k}[@]}"
    ((p > 0)) || continue
    probe_loop "$i" "$k" &
    S[probes.$i]+=" $!"
  done
}

# Stops the probe loops of container $1.
probes_stop() {
  local pid
  for pid in ${S[probes.$1]}; do kill_tree "$pid"; done
  S[probes.$1]=
  S[ready.$1]=false
}

# Reads the probes' verdicts into S[ready.<i>] and S[startedp.<i>]; sets PROBE_DIRTY on a change.
probes_read() {
  local i r s p
  for ((i = 0; i < N; i++)); do
    [ "${S[st.$i]}" = running ] || continue
    s=false
    r=false
    [ ! -e "$RUN/$i.started" ] || s=true
    eval "p=\${#C${i}_PROBE_R[@]}"
    if [ "$s" = true ] && { ((p == 0)) || [ -e "$RUN/$i.ready" ]; }; then r=true; fi
    if [ "$r" != "${S[ready.$i]}" ] || [ "$s" != "${S[startedp.$i]}" ]; then
      S[ready.$i]=$r
      S[startedp.$i]=$s
      PROBE_DIRTY=1
    fi
  done
}

# The message of a probe's kill of container $1, if a probe killed it.
probe_verdict() { [ ! -e "$RUN/$1.killed" ] || cat "$RUN/$1.killed"; }

# Runs container $1's postStart hook (just started). On failure the container is killed and its
# exit reason is FailedPostStartHook; returns 1 then.
post_start() {
  local i=$1
  run_hook "$i" POST "$HOOK_SECONDS" && return 0
  log "container ${NAMES[i]}: postStart hook failed"
  printf 'PostStartHookError: %s' "$(head -c 1024 "$RUN/hook-$i.out")" >"$RUN/$i.killed"
  timeout -k 2 $((GRACE_SECONDS + 10)) docker stop -t "$GRACE_SECONDS" "${S[cid.$i]}" >/dev/null 2>&1
  capture "$i" "" FailedPostStartHook "$(cat "$RUN/$i.killed")"
  rm -f "$RUN/$i.killed"
  decide "$i"
  return 1
}
