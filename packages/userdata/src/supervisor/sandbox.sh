# shellcheck shell=bash
# shellcheck disable=SC2034 # sets globals that other fragments read
# Supervisor fragment: the Pod sandbox (the network namespace the containers share) and the IMDS
# block. This header (up to the first blank line) is for shellcheck of this file alone: `npm run
# embed` drops it and joins the fragments in the order of fragments.ts into the installed
# supervisor.sh.

# ---- Pod sandbox and isolation ------------------------------------------------------------------

# The network every container joins: the Pod sandbox's namespace, or the host's (HOST_NETWORK=1).
NET=host
SANDBOX_NAME=nebula-sandbox
IMDS_V4=169.254.169.254/32
IMDS_V6=fd00:ec2::254/128

# Drops every packet that arrives at the host for IMDS, from whatever interface (a container's
# bridge or veth): the raw table's PREROUTING sees forwarded and locally delivered packets alike and
# no container runtime rewrites it, while the supervisor's own requests (OUTPUT) and IMDS's answers
# (from IMDS, not to it) never pass this rule. A container cannot undo it: CAP_NET_ADMIN in its
# own network namespace does not reach the host's tables.
imds_block() {
  iptables -w 5 -t raw -C PREROUTING -d "$IMDS_V4" -j DROP 2>/dev/null ||
    iptables -w 5 -t raw -I PREROUTING 1 -d "$IMDS_V4" -j DROP || return 1
  if command -v ip6tables >/dev/null 2>&1; then
    ip6tables -w 5 -t raw -C PREROUTING -d "$IMDS_V6" -j DROP 2>/dev/null ||
      ip6tables -w 5 -t raw -I PREROUTING 1 -d "$IMDS_V6" -j DROP ||
      log "ip6tables could not block $IMDS_V6 (IPv6 IMDS is off unless the instance enables it)"
  fi
}

# Starts the Pod sandbox: a container on the bridge network that holds the Pod's network namespace
# (every container joins it, so they share localhost as in a Pod) and publishes the Pod's ports.
# Sets NET; returns 1 with SANDBOX_ERR when the Pod cannot get a namespace of its own. The Pod's
# hostAliases (and its fully qualified name, with a subdomain) go into its /etc/hosts, which the
# containers that join it share.
sandbox_up() {
  local n id
  [ "$HOST_NETWORK" != 1 ] || { log "hostNetwork: containers share the host's network (opted in)"; return 0; }
  if ! imds_block 2>"$RUN/imds-block.err"; then
    SANDBOX_ERR="cannot block IMDS for the Pod's network: $(tail -c 512 "$RUN/imds-block.err")"
    return 1
  fi
  for ((n = 1; ; n++)); do
    image_present "$SANDBOX_IMAGE" && break
    run_bg "$RUN/pull-sandbox.log" docker pull -- "$SANDBOX_IMAGE" && break
    if ((n >= PULL_ATTEMPTS)) || ! pause "$BACKOFF_INITIAL"; then
      SANDBOX_ERR="failed to pull the Pod sandbox image $SANDBOX_IMAGE: $(tail -c 512 "$RUN/pull-sandbox.log")"
      return 1
    fi
  done
  # Containers of an earlier run joined the old sandbox: they go first (podman insists).
  for ((n = 0; n < N; n++)); do docker rm -f "$(cname "$n")" >/dev/null 2>&1; done
  docker rm -f "$SANDBOX_NAME" >/dev/null 2>&1
  local flags=("--name=$SANDBOX_NAME" --network=bridge "${SANDBOX_FLAGS[@]}" "${HOST_ALIASES[@]/#/--add-host=}")
  # A Pod with a subdomain finds its own fully qualified name at its IP, the instance's address.
  [ -z "$POD_FQDN" ] || [ -z "$HOST_IP" ] || flags+=("--add-host=$POD_FQDN:$HOST_IP")
  ((${#SANDBOX_CMD[@]} == 0)) || flags+=("--entrypoint=${SANDBOX_CMD[0]}")
  if ! id=$(docker create "${flags[@]}" -- "$SANDBOX_IMAGE" "${SANDBOX_CMD[@]:1}" 2>"$RUN/sandbox.err") ||
    ! docker start "${id##*$'\n'}" >/dev/null 2>>"$RUN/sandbox.err"; then
    SANDBOX_ERR="failed to create the Pod sandbox: $(tail -c 512 "$RUN/sandbox.err")"
    return 1
  fi
  NET=container:${id##*$'\n'}
  log "pod sandbox started (${id##*$'\n'}); IMDS blocked for the Pod's network"
  # The service proxy (proxy.sh, only with the Parameter Store delivery) in the sandbox's network.
  [ -z "${PROXY_SERVER:-}" ] || proxy_up
}

# Removes the Pod sandbox after every container has stopped (podman refuses to remove a container
# others joined, even exited ones, which are kept for inspection: then it is only stopped).
sandbox_down() {
  [ "$NET" != host ] || return 0
  [ -z "${PROXY_SERVER:-}" ] || proxy_down
  timeout -k 2 15 docker rm -f "$SANDBOX_NAME" >/dev/null 2>&1 || timeout -k 2 15 docker stop -t 0 "$SANDBOX_NAME" >/dev/null 2>&1
}
