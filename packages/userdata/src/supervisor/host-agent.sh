# shellcheck shell=bash
# shellcheck disable=SC2034 # sets globals that other fragments read
# shellcheck disable=SC2153 # AGENT_BIN, AGENT_PORT, ... come from pod.sh
# Supervisor fragment: the host agent (the Parameter Store delivery only). This header (up to the
# first blank line) is for shellcheck of this file alone: `npm run embed` drops it and joins the
# fragments in the order of fragments.ts into the installed supervisor.sh.

# ---- host agent ----------------------------------------------------------------------------------

# The host agent (`nebula-agent`, apps/host-agent) serves `kubectl exec`, `attach` and
# `port-forward` for this host's Pod to the virtual node only: mutual TLS on AGENT_PORT of the
# instance's private address, its own self-signed certificate (made on this host, its key never
# leaves it), whose SHA-256 the reports carry in the `nebula:agent` tag for the virtual node to pin,
# and the virtual node's client certificate(s) pinned by AGENT_CLIENT_FP (pod.sh). AGENT_PID,
# AGENT_FP and AGENT_NEXT are this fragment's state. Functions only, each called under
# `[ -n "${AGENT_PORT:-}" ]`.

AGENT_DIR=$STATE/host-agent
# The tag the reports carry the agent's port and certificate fingerprint in (report.sh, tag_pairs).
AGENT_TAG_KEY=nebula:agent
# Between an agent that ended and its restart.
AGENT_RESTART_SECONDS=10

# Starts the agent and waits up to 10 s for its certificate's fingerprint (AGENT_FP), which the
# next report carries. An agent that cannot start is logged and the Pod runs without exec: it is a
# way in for debugging, never a reason to fail the workload.
host_agent_up() {
  local exe old n
  AGENT_FP=
  exe=$(command -v -- "$AGENT_BIN") || {
    log "the host agent cannot start: $AGENT_BIN is not on this host (deploy/host-image/install.sh --agent installs it); kubectl exec, attach and port-forward are not served for this Pod"
    return 0
  }
  if [ -z "$HOST_IP" ]; then
    log "the host agent cannot start: no private address from IMDS (local-ipv4); kubectl exec is not served for this Pod"
    return 0
  fi
  AGENT_EXE=$exe
  # An agent of an earlier run of the supervisor goes (its sessions named the old containers).
  old=$(cat "$RUN/host-agent.pid" 2>/dev/null)
  if [[ $old =~ ^[1-9][0-9]*$ ]] && [ "$(readlink "/proc/$old/exe" 2>/dev/null)" = "$(readlink -f "$exe")" ]; then
    kill -9 "$old" 2>/dev/null
  fi
  mkdir -p "$AGENT_DIR"
  chmod 0700 "$AGENT_DIR"
  host_agent_start
  for ((n = 0; n < 100; n++)); do
    if [ -s "$AGENT_DIR/fingerprint" ]; then
      AGENT_FP=$(<"$AGENT_DIR/fingerprint")
      [[ $AGENT_FP =~ ^[0-9a-f]{64}$ ]] || AGENT_FP=
      break
    fi
    kill -0 "$AGENT_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$AGENT_FP" ]; then
    log "the host agent did not start: $(tail -c 400 "$RUN/host-agent.log" 2>/dev/null)"
    return 0
  fi
  log "host agent (pid $AGENT_PID) on $HOST_IP:$AGENT_PORT, certificate sha256 $AGENT_FP"
}

# Runs the agent in the background for this Pod's containers (and its sandbox's network, for
# port-forward; the host's own with hostNetwork).
host_agent_start() {
  local args=(--listen "$HOST_IP:$AGENT_PORT" --state-dir "$AGENT_DIR" --name "${INSTANCE_ID:-unknown}"
    --client-fingerprint "$AGENT_CLIENT_FP" --namespace "$POD_NAMESPACE" --pod "$POD_NAME"
    --pod-uid "$POD_UID") i
  [ "$NET" = host ] || args+=(--sandbox "$SANDBOX_NAME")
  for ((i = 0; i < N; i++)); do args+=(--container "${NAMES[i]}=$(cname "$i")"); done
  "$AGENT_EXE" "${args[@]}" >>"$RUN/host-agent.log" 2>&1 &
  AGENT_PID=$!
  echo "$AGENT_PID" >"$RUN/host-agent.pid"
  AGENT_NEXT=
}

# Starts an agent that ended again, AGENT_RESTART_SECONDS later (logged once per end).
host_agent_tick() {
  [ -n "${AGENT_PID:-}" ] || return 0
  kill -0 "$AGENT_PID" 2>/dev/null && return 0
  if [ -z "$AGENT_NEXT" ]; then
    AGENT_NEXT=$(($(now) + AGENT_RESTART_SECONDS))
    log "the host agent ended; starting it again in ${AGENT_RESTART_SECONDS}s: $(tail -c 300 "$RUN/host-agent.log" 2>/dev/null)"
  elif (($(now) >= AGENT_NEXT)); then
    host_agent_start
  fi
}

# Stops the agent (TERM, then KILL after 5 s): its sessions end with the Pod's containers.
host_agent_down() {
  local n
  [ -n "${AGENT_PID:-}" ] || return 0
  kill "$AGENT_PID" 2>/dev/null
  for ((n = 0; n < 50; n++)); do
    kill -0 "$AGENT_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$AGENT_PID" 2>/dev/null
  wait "$AGENT_PID" 2>/dev/null
  AGENT_PID=
  rm -f "$RUN/host-agent.pid"
}
