# shellcheck shell=bash
# Supervisor fragment: the Pod's data: pod.sh from the SSM parameters or next to the supervisor,
# and its files. This header (up to the first blank line) is for shellcheck of this file alone:
# `npm run embed` drops it and joins the fragments in the order of fragments.ts into the installed
# supervisor.sh.

# ---- the Pod's data ----------------------------------------------------------------------------

ssm_endpoint() {
  local ep=${AWS_ENDPOINT_URL_SSM:-${AWS_ENDPOINT_URL:-https://ssm.$REGION.amazonaws.com}}
  printf '%s' "${ep%/}"
}

# Reads pod.sh from the Pod's SSM parameters (GetParameters with decryption) into POD_DATA. Retried
# with back-off up to PARAMETER_WAIT_SECONDS: the controller tags the parameters with this
# instance's ARN just after the launch, and the instance role is refused until then.
fetch_pod() {
  local deadline delay=1 names='' n body status
  deadline=$(($(now) + PARAMETER_WAIT_SECONDS))
  for n in "${POD_PARAMETERS[@]}"; do names+="${names:+,}\"$n\""; done
  body="{\"Names\":[$names],\"WithDecryption\":true}"
  while :; do
    if [ -n "$INSTANCE_ID" ] || identify 1; then
      status=$(sigv4_post ssm "$(ssm_endpoint)" application/x-amz-json-1.1 AmazonSSM.GetParameters "$body" \
        "$SECRETS/parameters.json" "$RUN/parameters.err") || status=000
      if [ "$status" = 200 ] && pod_from_parameters "$SECRETS/parameters.json"; then
        rm -f "$SECRETS/parameters.json"
        return 0
      fi
      [ "$status" = 200 ] || { printf 'HTTP %s: ' "$status"; head -c 300 "$SECRETS/parameters.json" 2>/dev/null; } >>"$RUN/parameters.err"
      rm -f "$SECRETS/parameters.json"
    else
      echo "no instance identity from IMDS" >"$RUN/parameters.err"
    fi
    (($(now) + delay < deadline)) || return 1
    pause "$delay" || return 1
    ((delay >= 10)) || delay=$((delay * 2))
  done
}

# Joins the values of a GetParameters answer ($1) in POD_PARAMETERS order, gunzips them into
# POD_DATA and checks the SHA-256 the user-data names. Values are base64: no JSON escapes but '\/'.
pod_from_parameters() {
  local text obj n payload=''
  local -a parts
  local -A got
  text=$(<"$1")
  text=${text//\\\//\/}
  IFS='}' read -ra parts <<<"$text"
  for obj in "${parts[@]}"; do
    [[ $obj =~ \"Name\"[[:space:]]*:[[:space:]]*\"([^\"]+)\" ]] || continue
    n=${BASH_REMATCH[1]}
    [[ $obj =~ \"Value\"[[:space:]]*:[[:space:]]*\"([A-Za-z0-9+/=]*)\" ]] || continue
    got[$n]=${BASH_REMATCH[1]}
  done
  for n in "${POD_PARAMETERS[@]}"; do
    if [ -z "${got[$n]+set}" ]; then
      echo "parameter $n is missing from the answer" >>"$RUN/parameters.err"
      return 1
    fi
    payload+=${got[$n]}
  done
  printf '%s' "$payload" | base64 -d 2>/dev/null | gzip -dc >"$POD_DATA.part" 2>/dev/null || {
    echo "the parameters do not decode (base64 of gzip)" >>"$RUN/parameters.err"
    return 1
  }
  if [ "$(sha256sum <"$POD_DATA.part" | cut -d' ' -f1)" != "$POD_SHA256" ]; then
    echo "the parameters' content does not match the SHA-256 in user-data (a stale or foreign parameter)" >>"$RUN/parameters.err"
    return 1
  fi
  mv -f "$POD_DATA.part" "$POD_DATA"
}

# Loads pod.sh (fetching it first with the Parameter Store delivery; a host that cannot read it
# says why on the console and powers off), then writes the files the Pod needs before any
# container starts: host directories, ConfigMap and Secret volume files, the registry login.
load_pod() {
  local i
  if [ -n "${POD_PARAMETERS+set}" ]; then
    mkdir -p "$SECRETS"
    chmod 0700 "$SECRETS"
    if [ ! -s "$POD_DATA" ]; then
      identify 30 || log "no instance identity from IMDS yet"
      log "reading the pod's spec from ${#POD_PARAMETERS[@]} SSM parameter(s) under ${POD_PARAMETERS[0]%/*}/"
      if ! fetch_pod; then
        log "cannot read the pod's SSM parameters under ${POD_PARAMETERS[0]%/*}/ within ${PARAMETER_WAIT_SECONDS}s: $(tail -c 300 "$RUN/parameters.err" 2>/dev/null); powering off" |
          tee "$CONSOLE" 2>/dev/null
        [ -n "$TERM_REQUESTED" ] || shutdown -h now
        exit 1
      fi
    fi
  fi
  # shellcheck source=/dev/null
  . "$POD_DATA"
  for i in "${HOST_DIRS[@]}"; do mkdir -p "$i"; done
  for i in "${!FILE_PATH[@]}"; do
    mkdir -p "${FILE_PATH[i]%/*}"
    printf '%s' "${FILE_DATA[i]}" | base64 -d >"${FILE_PATH[i]}"
    chmod "${FILE_MODE[i]}" "${FILE_PATH[i]}"
  done
  unset FILE_DATA
  if [ -n "${DOCKER_AUTH:-}" ]; then
    mkdir -p "$SECRETS/docker"
    (umask 077 && printf '%s' "$DOCKER_AUTH" | base64 -d >"$SECRETS/docker/config.json")
    export DOCKER_CONFIG=$SECRETS/docker
    unset DOCKER_AUTH
  fi
}
