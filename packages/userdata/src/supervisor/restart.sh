# shellcheck shell=bash
# shellcheck disable=SC2034 # sets globals that other fragments read
# shellcheck disable=SC2154 # S is associative (common.sh); alone, shellcheck reads S[st.$i] as $st
# Supervisor fragment: starting a container (runAsNonRoot, create, start), the init order, the
# restart policy. This header (up to the first blank line) is for shellcheck of this file alone:
# `npm run embed` drops it and joins the fragments in the order of fragments.ts into the installed
# supervisor.sh.

# runAsNonRoot, checked as the kubelet does before it creates container $1: returns 0 (and puts the
# container in CreateContainerConfigError with the kubelet's message) when it would run as root.
nonroot_refused() {
  local i=$1 user msg pod="${POD_NAME}_${POD_NAMESPACE}($POD_UID)"
  case ${NONROOT[i]} in
    root) msg="container's runAsUser breaks non-root policy (pod: \"$pod\", container: ${NAMES[i]})" ;;
    image)
      user=$(docker inspect --type=image --format '{{.Config.User}}' -- "${IMAGES[i]}" 2>/dev/null) || user=
      user=${user%%:*}
      if [ -z "$user" ] || [ "$user" = 0 ] || [[ $user =~ ^0+$ ]]; then
        msg="container has runAsNonRoot and image will run as root (pod: \"$pod\", container: ${NAMES[i]})"
      elif ! [[ $user =~ ^[0-9]+$ ]]; then
        msg="container has runAsNonRoot and image has non-numeric user ($user), cannot verify user is non-root (pod: \"$pod\", container: ${NAMES[i]})"
      fi
      ;;
  esac
  [ -n "$msg" ] || return 1
  log "container ${NAMES[i]}: $msg"
  S[quick.$i]=$((${S[quick.$i]} + 1))
  set_waiting "$i" CreateContainerConfigError "$(b64 "$msg")"
  if ((RESTART_LIMIT >= 0 && ${S[quick.$i]} > RESTART_LIMIT)); then
    S[st.$i]=stuck
    GIVE_UP="container ${NAMES[i]}: $msg"
  else
    back_off "$i"
  fi
  return 0
}

# Pulls, creates and starts container $1.
attempt() {
  local i=$1 name flags cmd args hostip workload argv id v err pid
  name=$(cname "$i")
  if [ "${S[pulled.$i]}" != 1 ]; then
    PULL_NEVER=
    [ -n "${S[pullat.$i]}" ] || S[pullat.$i]=$(iso_now)
    if ! pull "$i"; then
      [ -z "$TERM_REQUESTED" ] || return 0
      if [ -n "$PULL_NEVER" ]; then
        # Nothing will ever bring the image: the kubelet's reason, and no retries.
        set_waiting "$i" ErrImageNeverPull "$(b64 "$PULL_ERR")"
        S[st.$i]=stuck
        GIVE_UP="container ${NAMES[i]}: $PULL_ERR"
        return 0
      fi
      S[pulls.$i]=$((${S[pulls.$i]} + 1))
      if ((${S[pulls.$i]} == 1)); then set_waiting "$i" ErrImagePull "$(b64 "$PULL_ERR")"; else set_waiting "$i" ImagePullBackOff "$(b64 "$PULL_ERR")"; fi
      log "container ${NAMES[i]}: pull ${S[pulls.$i]}/$PULL_ATTEMPTS failed: $PULL_ERR"
      if ((${S[pulls.$i]} >= PULL_ATTEMPTS)); then
        S[wreason.$i]=ImagePullBackOff
        S[st.$i]=stuck
        GIVE_UP="container ${NAMES[i]}: image ${IMAGES[i]} could not be pulled after ${S[pulls.$i]} attempts"
      else
        back_off "$i"
      fi
      return 0
    fi
    S[pulled.$i]=1
    S[pulledat.$i]=$(iso_now)
    S[delay.$i]=0
  fi
  ! nonroot_refused "$i" || return 0
  eval "flags=(\"\${C${i}_FLAGS[@]}\"); cmd=(\"\${C${i}_CMD[@]}\"); args=(\"\${C${i}_ARGS[@]}\"); hostip=(\"\${C${i}_HOSTIP[@]}\")"
  for v in "${hostip[@]}"; do flags+=("--env=$v=$HOST_IP"); done
  mkdir -p "$STATE/containers/${NAMES[i]}"
  : >"$STATE/containers/${NAMES[i]}/termination-log"
  chmod 0666 "$STATE/containers/${NAMES[i]}/termination-log"
  flags+=("--name=$name" "--network=$NET" "--mount=type=bind,source=$STATE/containers/${NAMES[i]}/termination-log,target=${TM_PATH[i]}")
  # With hostNetwork there is no sandbox: each container takes the Pod's hostAliases.
  [ "$NET" != host ] || flags+=("${HOST_ALIASES[@]/#/--add-host=}")
  log_flags "$i"
  if [ "${SHIM[i]}" = 1 ]; then
    if [ "${HAS_CMD[i]}" = 1 ]; then
      workload=("${cmd[@]}" "${args[@]}")
    else
      image_list "${IMAGES[i]}" Entrypoint
      workload=("${LIST[@]}")
      if [ "${HAS_ARGS[i]}" = 1 ]; then workload+=("${args[@]}"); else
        image_list "${IMAGES[i]}" Cmd
        workload+=("${LIST[@]}")
      fi
    fi
    flags+=(--entrypoint=/bin/sh "--mount=type=bind,source=$LIB/shim-$i.sh,target=/.nebula/shim,readonly")
    argv=(/.nebula/shim "${workload[@]}")
  elif [ "${HAS_CMD[i]}" = 1 ]; then
    flags+=("--entrypoint=${cmd[0]}")
    argv=("${cmd[@]:1}" "${args[@]}")
  else
    argv=("${args[@]}")
  fi
  docker rm -f "$name" >/dev/null 2>&1
  if ! id=$(docker create "${flags[@]}" -- "${IMAGES[i]}" "${argv[@]}" 2>"$RUN/create-$i.err"); then
    err=$(tail -c 1024 "$RUN/create-$i.err")
    log "container ${NAMES[i]}: create failed: $err"
    S[quick.$i]=$((${S[quick.$i]} + 1))
    set_waiting "$i" CreateContainerError "$(b64 "$err")"
    if ((RESTART_LIMIT >= 0 && ${S[quick.$i]} > RESTART_LIMIT)); then
      S[st.$i]=stuck
      GIVE_UP="container ${NAMES[i]} could not be created"
    else
      back_off "$i"
    fi
    return 0
  fi
  id=${id##*$'\n'}
  S[cid.$i]=$id
  S[since.$i]=$(now)
  if ! docker start "$id" >/dev/null 2>"$RUN/start-$i.err"; then
    err=$(tail -c 1024 "$RUN/start-$i.err")
    log "container ${NAMES[i]}: start failed: $err"
    capture "$i" 128 ContainerCannotRun "$err"
    decide "$i"
    return 0
  fi
  S[st.$i]=running
  usage_mark "$i" "$id"
  IFS='|' read -r v pid <<<"$(docker inspect --format '{{.State.StartedAt}}|{{.State.Pid}}' "$id" 2>/dev/null)"
  S[started.$i]=$(iso_time "$v")
  [ -n "${S[firstat.$i]}" ] || S[firstat.$i]=${S[started.$i]:-$(iso_now)}
  S[cg.$i]=
  rm -f "$RUN/$i.oom"
  if [[ $pid =~ ^[1-9][0-9]*$ ]]; then S[cg.$i]=$(memory_cgroup "$pid"); fi
  log "container ${NAMES[i]}: started ($id)"
  post_start "$i" || return 0
  watch "$i"
  probes_start "$i"
}

next_init() {
  local i
  for ((i = $1 + 1; i < N; i++)); do
    if [ "${INIT[i]}" = 1 ]; then
      set_waiting "$i" ContainerCreating ""
      S[next.$i]=0
      return 0
    fi
  done
  PHASE=app
  for ((i = 0; i < N; i++)); do
    if [ "${INIT[i]}" = 0 ]; then
      set_waiting "$i" ContainerCreating ""
      S[next.$i]=0
    fi
  done
}

# After an exit has been captured into t.*: terminal, or a restart after back-off.
decide() {
  local i=$1 ran
  ran=$(($(now) - ${S[since.$i]:-0}))
  if ((ran >= BACKOFF_RESET)); then
    S[delay.$i]=0
    S[quick.$i]=0
  fi
  S[st.$i]=exited
  log "container ${NAMES[i]}: exited code=${S[t.code.$i]} reason=${S[t.reason.$i]} after ${ran}s"
  if [ "${SIDECAR[i]}" = 1 ]; then
    # A native sidecar is restarted whatever its exit and the Pod's restartPolicy.
    :
  elif [ "${INIT[i]}" = 1 ]; then
    if [ "${S[t.reason.$i]}" = Completed ]; then
      next_init "$i"
      return 0
    fi
    if [ "$RESTART_POLICY" = Never ]; then
      POD_FAILED=1
      return 0
    fi
  else
    [ "$RESTART_POLICY" != Never ] || return 0
    [ "$RESTART_POLICY" != OnFailure ] || [ "${S[t.reason.$i]}" != Completed ] || return 0
  fi
  [ -z "$TERM_REQUESTED" ] || return 0
  if ((RESTART_LIMIT >= 0 && ${S[quick.$i]} >= RESTART_LIMIT)); then
    GIVE_UP="container ${NAMES[i]} reached the restart limit ($RESTART_LIMIT)"
    S[limit.$i]=1
    LIMIT_HIT=$i
    log "$GIVE_UP"
    return 0
  fi
  local k
  for k in code reason signal start finish msg; do S[l.$k.$i]=${S[t.$k.$i]}; done
  S[restarts.$i]=$((${S[restarts.$i]} + 1))
  S[quick.$i]=$((${S[quick.$i]} + 1))
  # The kubelet restarts a first crash at once; the back-off starts with the second.
  if ((${S[quick.$i]} == 1)); then
    set_waiting "$i" ContainerCreating ""
    S[next.$i]=0
    return 0
  fi
  back_off "$i"
  # The kubelet's words: a Go duration, and the Pod as name_namespace(uid).
  set_waiting "$i" CrashLoopBackOff "$(b64 "back-off $(go_duration "${S[delay.$i]}") restarting failed container=${NAMES[i]} pod=${POD_NAME}_${POD_NAMESPACE}($POD_UID)")"
}
