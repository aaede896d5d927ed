# shellcheck shell=bash
# shellcheck disable=SC2034 # sets globals that other fragments read
# shellcheck disable=SC2154 # S is associative (common.sh); alone, shellcheck reads S[st.$i] as $st
# Supervisor fragment: the container runtime: pulls, the image's command, exit capture, OOM kills,
# the exit watcher. This header (up to the first blank line) is for shellcheck of this file alone:
# `npm run embed` drops it and joins the fragments in the order of fragments.ts into the installed
# supervisor.sh.

# ---- containers --------------------------------------------------------------------------------

cname() { printf 'nebula-%s' "${NAMES[$1]}"; }

set_waiting() {
  S[st.$1]='wait'
  S[wreason.$1]=$2
  S[wmsg.$1]=$3
}

# Doubles the back-off of container $1 (first: BACKOFF_INITIAL) and schedules its next attempt.
back_off() {
  local d=${S[delay.$1]}
  if ((d == 0)); then d=$BACKOFF_INITIAL; else d=$((d * 2)); fi
  ((d <= BACKOFF_MAX)) || d=$BACKOFF_MAX
  S[delay.$1]=$d
  S[next.$1]=$(($(now) + d))
}

# Every docker call that names an image puts `--` before it, so no image is read as an option.
image_present() { docker inspect --type=image --format '{{.Id}}' -- "$1" >/dev/null 2>&1; }

pull() {
  local i=$1 image=${IMAGES[$1]}
  case ${PULL_POLICY[i]} in
    IfNotPresent) image_present "$image" && return 0 ;;
    Never)
      image_present "$image" && return 0
      PULL_ERR="image $image is not present on the host and imagePullPolicy is Never"
      PULL_NEVER=1
      return 1
      ;;
  esac
  run_bg "$RUN/pull-$i.log" docker pull -- "$image" && return 0
  PULL_ERR="failed to pull image $image: $(tail -c 512 "$RUN/pull-$i.log")"
  return 1
}

# A UTF-8 locale for image_list: C.UTF-8, else en_US.UTF-8, else any UTF-8 locale the host has.
utf8_locale() {
  local all
  all=$(locale -a 2>/dev/null)
  UTF8_LOCALE=$(grep -i -m1 -x -E 'c\.utf-?8' <<<"$all" || grep -i -m1 -x -E 'en_us\.utf-?8' <<<"$all" || grep -i -m1 -E '\.utf-?8$' <<<"$all")
  [ -n "$UTF8_LOCALE" ] || log "no UTF-8 locale on this host: non-ASCII characters in an image's ENTRYPOINT or CMD stay escaped"
}

# Reads a list from the image config ($2: Entrypoint or Cmd) into LIST. Go's %q quoting, decoded
# by bash's $'...' with every quote escaped, so nothing from the image is ever executed. %q writes
# characters such as U+00A0 as \u00a0, which $'...' decodes only under a UTF-8 locale.
image_list() {
  local line out
  [ -z "$UTF8_LOCALE" ] || local LC_ALL=$UTF8_LOCALE
  LIST=()
  out=$(docker inspect --type=image --format "{{range .Config.$2}}{{printf \"%q\" .}}{{\"\\n\"}}{{end}}" -- "$1") || return 1
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    line=${line#\"}
    line=${line%\"}
    line=${line//\'/\\\'}
    eval "LIST+=(\$'$line')"
  done <<<"$out"
}

# What capture reads of a container (docker inspect's format): code|oom|running|started|finished|image.
EXIT_FORMAT='{{.State.ExitCode}}|{{.State.OOMKilled}}|{{.State.Running}}|{{.State.StartedAt}}|{{.State.FinishedAt}}|{{.Image}}'

# Reads the exit of container $1 into the t.* fields: from $5 when given (EXIT_FORMAT's line of an
# inspect the caller just made), else from docker inspect. $2 code, $3 reason, $4 message override.
capture() {
  local i=$1 id=${S[cid.$1]} info=${5-} code oom started finished image file msg=
  usage_mark "$i"
  [ -n "$info" ] || info=$(docker inspect --format "$EXIT_FORMAT" "$id" 2>/dev/null)
  IFS='|' read -r code oom _ started finished image <<<"$info"
  set -- "$1" "$2" "$3" "$4"
  if ! [[ $code =~ ^-?[0-9]+$ ]] && [ -z "$3" ]; then
    # The runtime lost the container: the kubelet's shape for a container it cannot find.
    set -- "$1" 137 ContainerStatusUnknown "The container could not be located when the pod was terminated"
  fi
  [[ $code =~ ^-?[0-9]+$ ]] || code=$2
  if [ -n "$2" ] && ((code == 0)); then code=$2; fi
  S[t.code.$i]=$code
  S[t.signal.$i]=
  if [ -n "$3" ]; then
    S[t.reason.$i]=$3
  elif [ "$oom" = true ] || { ((code == 137)) && oom_recorded "$i"; }; then
    S[t.reason.$i]=OOMKilled
  elif ((code == 0)); then
    S[t.reason.$i]=Completed
  else
    S[t.reason.$i]=Error
    ((code <= 128 || code > 192)) || S[t.signal.$i]=$((code - 128))
  fi
  S[t.start.$i]=$(iso_time "$started")
  S[t.finish.$i]=$(iso_time "$finished")
  # Podman records StartedAt when its start call returns, which can be after a short-lived process
  # already exited: a container never finishes before it starts.
  if [ -n "${S[t.finish.$i]}" ] && [[ ${S[t.start.$i]} > ${S[t.finish.$i]} ]]; then S[t.start.$i]=${S[t.finish.$i]}; fi
  [ -z "$image" ] || S[imageid.$i]=$image
  file=$STATE/containers/${NAMES[i]}/termination-log
  # The kubelet keeps the end of the file and of the log (the error is at the end).
  if [ -n "$4" ]; then
    printf '%s' "$4" >"$RUN/msg"
    msg=$(utf8_cut "$RUN/msg" "$MAX_MESSAGE_BYTES" head | base64 -w0)
  elif [ -s "$file" ]; then
    msg=$(utf8_cut "$file" "$MAX_MESSAGE_BYTES" tail | base64 -w0)
  elif ((code != 0)) && [ "${TM_POLICY[i]}" = FallbackToLogsOnError ]; then
    docker logs --tail "$LOG_TAIL_LINES" "$id" >"$RUN/msg" 2>&1
    msg=$(utf8_cut "$RUN/msg" "$LOG_TAIL_BYTES" tail | base64 -w0)
  fi
  S[t.msg.$i]=$msg
}

# The memory cgroup directory of the process $1 (cgroup v2, else the v1 memory hierarchy).
memory_cgroup() {
  local line
  [ -r "/proc/$1/cgroup" ] || return 1
  if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
    line=$(grep -m1 '^0::' "/proc/$1/cgroup") || return 1
    printf '/sys/fs/cgroup%s' "${line#0::}"
  else
    line=$(grep -m1 -E '^[0-9]+:([^:]*,)?memory(,[^:]*)?:' "/proc/$1/cgroup") || return 1
    printf '/sys/fs/cgroup/memory%s' "${line##*:}"
  fi
}

# True when memory cgroup $1 recorded an OOM kill: v2 memory.events oom_kill, v1 memory.oom_control
# oom_kill (or memory.failcnt where the kernel has no such line).
cgroup_oom() {
  local n
  if [ -r "$1/memory.events" ]; then
    n=$(sed -n 's/^oom_kill //p' "$1/memory.events")
    ((${n:-0} > 0))
  elif [ -r "$1/memory.oom_control" ]; then
    n=$(sed -n 's/^oom_kill //p' "$1/memory.oom_control")
    [ -n "$n" ] || n=$(cat "$1/memory.failcnt" 2>/dev/null)
    ((${n:-0} > 0))
  else
    return 1
  fi
}

# True when container $1 was killed by its memory cgroup although the runtime did not flag it:
# the watcher saw the cgroup's OOM record while it ran, or the cgroup still shows it, or the
# kernel log names the container's cgroup (it outlives the cgroup, which the runtime removes).
oom_recorded() {
  local i=$1
  [ ! -e "$RUN/$i.oom" ] || return 0
  [ -z "${S[cg.$i]}" ] || ! cgroup_oom "${S[cg.$i]}" || return 0
  dmesg 2>/dev/null | grep -F 'oom_memcg=' | grep -qF "${S[cid.$i]}"
}

# Waits for container $1 to exit (marker $RUN/<i>.done, then a line on the wake pipe so the main
# loop captures it at once), sampling its memory cgroup's OOM record every half second meanwhile
# (marker $RUN/<i>.oom): the runtime removes the cgroup on exit. A `docker wait` that fails
# (rather than reporting an exit) leaves the marker for the loop's next tick, without a wake.
watch() {
  local i=$1 cg=${S[cg.$1]}
  rm -f "$RUN/$i.done"
  (
    s=
    if [ -n "$cg" ]; then
      while :; do
        if [ ! -e "$RUN/$i.oom" ] && cgroup_oom "$cg"; then : >"$RUN/$i.oom"; fi
        sleep 0.5
      done &
      s=$!
    fi
    docker wait "${S[cid.$i]}" >/dev/null 2>&1
    rc=$?
    [ -z "$s" ] || kill "$s" 2>/dev/null
    if [ -n "$cg" ] && [ ! -e "$RUN/$i.oom" ] && cgroup_oom "$cg"; then : >"$RUN/$i.oom"; fi
    : >"$RUN/$i.done"
    ((rc != 0)) || wake
  ) &
  WATCHER[i]=$!
}
