# shellcheck shell=bash
# shellcheck disable=SC2034 # sets globals that other fragments read
# shellcheck disable=SC2153 # PROXY_BIN, PROXY_CA, ... come from pod.sh
# Supervisor fragment: the service proxy (the Parameter Store delivery only). This header (up to
# the first blank line) is for shellcheck of this file alone: `npm run embed` drops it and joins
# the fragments in the order of fragments.ts into the installed supervisor.sh.

# ---- service proxy -------------------------------------------------------------------------------

# The real kube-proxy (iptables mode) inside the Pod sandbox's network namespace: the containers
# reach ClusterIP Services (the `kubernetes` Service among them) at their cluster IPs, and its rules
# touch that namespace only, never the host's own tables. pod.sh sets PROXY_SERVER (the API
# server), PROXY_CA (its CA, base64 PEM), PROXY_NODE (the virtual node's Node), PROXY_BIN and
# PROXY_TOKEN (its token's file: one of TOKEN_PATH, renewed with the Pod's tokens; client-go reads
# a kubeconfig's tokenFile again every minute). PROXY_EXE, PROXY_PID, PROXY_NS and PROXY_NEXT are
# this fragment's state. Functions only, each called under `[ -n "${PROXY_SERVER:-}" ]`.

PROXY_DIR=$SECRETS/service-proxy
# How long the containers wait for the proxy's first sync (its rules for every Service).
PROXY_SYNC_SECONDS=30
# Between a proxy that ended and its restart.
PROXY_RESTART_SECONDS=10

# Starts the proxy in the sandbox's namespace and waits up to PROXY_SYNC_SECONDS for its first full
# sync. Returns 1 with SANDBOX_ERR when it cannot start at all (no kube-proxy or nsenter on the
# host, no sandbox process); a proxy that has not synced yet is logged, and the containers start.
proxy_up() {
  local pid old deadline
  PROXY_EXE=$(command -v -- "$PROXY_BIN") || {
    SANDBOX_ERR="the service proxy cannot start: $PROXY_BIN is not on this host (the host AMI needs kube-proxy; deploy/host-image/install.sh installs it)"
    return 1
  }
  command -v nsenter >/dev/null 2>&1 || {
    SANDBOX_ERR="the service proxy cannot start: nsenter (util-linux) is not on this host"
    return 1
  }
  pid=$(docker inspect --format '{{.State.Pid}}' "$SANDBOX_NAME" 2>/dev/null)
  [[ $pid =~ ^[1-9][0-9]*$ ]] || {
    SANDBOX_ERR="the service proxy cannot start: no process holds the Pod sandbox's network namespace"
    return 1
  }
  PROXY_NS=/proc/$pid/ns/net
  # A proxy of an earlier run of the supervisor holds the old sandbox's namespace: it goes.
  old=$(cat "$RUN/service-proxy.pid" 2>/dev/null)
  if [[ $old =~ ^[1-9][0-9]*$ ]] && [ "$(readlink "/proc/$old/exe" 2>/dev/null)" = "$(readlink -f "$PROXY_EXE")" ]; then
    kill -9 "$old" 2>/dev/null
  fi
  mkdir -p "$PROXY_DIR"
  chmod 0700 "$PROXY_DIR"
  printf '%s' "$PROXY_CA" | base64 -d >"$PROXY_DIR/ca.crt"
  printf '%s\n' "apiVersion: v1" "kind: Config" "clusters:" "- name: cluster" "  cluster:" \
    "    server: $PROXY_SERVER" "    certificate-authority: $PROXY_DIR/ca.crt" "users:" \
    "- name: service-proxy" "  user:" "    tokenFile: $PROXY_TOKEN" "contexts:" "- name: service-proxy" \
    "  context:" "    cluster: cluster" "    user: service-proxy" "current-context: service-proxy" \
    >"$PROXY_DIR/kubeconfig"
  proxy_start
  deadline=$(($(now) + PROXY_SYNC_SECONDS))
  until proxy_synced; do
    if ! kill -0 "$PROXY_PID" 2>/dev/null; then
      log "the service proxy ended before its first sync: $(tail -c 400 "$RUN/service-proxy.log" 2>/dev/null)"
      return 0
    fi
    if (($(now) >= deadline)) || ! pause 1; then
      log "the service proxy has not synced within ${PROXY_SYNC_SECONDS}s; the containers start, cluster IPs route once it has: $(tail -c 300 "$RUN/service-proxy.log" 2>/dev/null)"
      return 0
    fi
  done
  log "service proxy (kube-proxy, pid $PROXY_PID) synced: cluster IPs route from the Pod's network"
}

# Runs kube-proxy in PROXY_NS, in the background (nsenter execs it: PROXY_PID is kube-proxy's).
# No metrics or health port (they would take the Pod's ports), no conntrack sysctls (the host's),
# and no NodePorts: they are a node's, and in the Pod's namespace they would take the Pod's own
# ports (--nodeport-addresses names the broadcast and the unspecified address, never an interface's:
# both families, as a family named by none would take every address).
proxy_start() {
  nsenter --net="$PROXY_NS" -- "$PROXY_EXE" --kubeconfig="$PROXY_DIR/kubeconfig" \
    --hostname-override="$PROXY_NODE" --proxy-mode=iptables --metrics-bind-address= \
    --healthz-bind-address= --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 \
    --conntrack-tcp-timeout-close-wait=0 --iptables-localhost-nodeports=false \
    --nodeport-addresses=255.255.255.255/32,::/128 >>"$RUN/service-proxy.log" 2>&1 &
  PROXY_PID=$!
  echo "$PROXY_PID" >"$RUN/service-proxy.pid"
  PROXY_NEXT=
}

# Whether the proxy has written its first full sync into the namespace: kube-proxy writes its
# rules only once it has read the Services and EndpointSlices, all in one iptables-restore, and
# every full sync holds KUBE-POSTROUTING's masquerade rule, whatever the Services.
proxy_synced() {
  nsenter --net="$PROXY_NS" -- iptables -w 5 -t nat -S KUBE-POSTROUTING 2>/dev/null | grep -q -- 'kubernetes service traffic requiring SNAT'
}

# In the main loop: a proxy that ended is logged and started again PROXY_RESTART_SECONDS later.
proxy_tick() {
  [ -n "${PROXY_PID:-}" ] || return 0
  kill -0 "$PROXY_PID" 2>/dev/null && return 0
  if [ -z "$PROXY_NEXT" ]; then
    PROXY_NEXT=$(($(now) + PROXY_RESTART_SECONDS))
    log "the service proxy ended; starting it again in ${PROXY_RESTART_SECONDS}s: $(tail -c 300 "$RUN/service-proxy.log" 2>/dev/null)"
  elif (($(now) >= PROXY_NEXT)); then
    proxy_start
  fi
}

# Stops the proxy (SIGTERM, then SIGKILL after 5 s), before the sandbox goes.
proxy_down() {
  local n
  [ -n "${PROXY_PID:-}" ] || return 0
  kill "$PROXY_PID" 2>/dev/null
  for ((n = 0; n < 50; n++)); do
    kill -0 "$PROXY_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$PROXY_PID" 2>/dev/null
  wait "$PROXY_PID" 2>/dev/null
  PROXY_PID=
  rm -f "$RUN/service-proxy.pid"
}
