# shellcheck shell=bash
# shellcheck disable=SC2034 # sets globals that other fragments read
# shellcheck disable=SC2153,SC2154 # names from common.sh, pod.ref or pod.sh, not misspellings
# Supervisor fragment, the Parameter Store delivery only: pod.sh from the Pod's SSM parameters, and
# the Pod's service-account tokens from its token parameter. Functions only: the user-data
# delivery installs the supervisor without this fragment (its bytes count against EC2's 16 KiB
# there), so every call into it is guarded by what only this delivery sets (POD_PARAMETERS from
# pod.ref, TOKEN_POLL from pod.sh). This header (up to the first blank line) is for shellcheck of
# this file alone: `npm run embed` drops it and joins the fragments in the order of fragments.ts.

# ---- the Parameter Store delivery --------------------------------------------------------------

ssm_endpoint() {
  local ep=${AWS_ENDPOINT_URL_SSM:-${AWS_ENDPOINT_URL:-https://ssm.$REGION.amazonaws.com}}
  printf '%s' "${ep%/}"
}

# Runs "$@" until it succeeds, with back-off (1, 2, 4, 8, 10, 10 ... s) up to
# PARAMETER_WAIT_SECONDS: the controller tags the parameters with this instance's ARN just after
# the launch, and the instance role is refused until then. Returns 1 when the time is up or a stop
# was requested.
parameter_retry() {
  local deadline delay=1
  deadline=$(($(now) + PARAMETER_WAIT_SECONDS))
  until "$@"; do
    (($(now) + delay < deadline)) || return 1
    pause "$delay" || return 1
    ((delay >= 10)) || delay=$((delay * 2))
  done
}

# Says why the Pod cannot start ($1) on the console and powers off (the controller reads why).
unreadable() {
  log "$1; powering off" | tee "$CONSOLE" 2>/dev/null
  [ -n "$TERM_REQUESTED" ] || shutdown -h now
  exit 1
}

# Reads pod.sh into POD_DATA from the Pod's SSM parameters (GetParameters with decryption), once;
# the reason of a failure goes to $RUN/parameters.err.
fetch_pod() {
  local names='' n status
  if [ -z "$INSTANCE_ID" ] && ! identify 1; then
    echo "no instance identity from IMDS" >"$RUN/parameters.err"
    return 1
  fi
  for n in "${POD_PARAMETERS[@]}"; do names+="${names:+,}\"$n\""; done
  status=$(sigv4_post ssm "$(ssm_endpoint)" application/x-amz-json-1.1 AmazonSSM.GetParameters \
    "{\"Names\":[$names],\"WithDecryption\":true}" "$SECRETS/parameters.json" "$RUN/parameters.err") || status=000
  if [ "$status" = 200 ] && pod_from_parameters "$SECRETS/parameters.json"; then
    rm -f "$SECRETS/parameters.json"
    return 0
  fi
  [ "$status" = 200 ] || { printf 'HTTP %s: ' "$status"; head -c 300 "$SECRETS/parameters.json" 2>/dev/null; } >>"$RUN/parameters.err"
  rm -f "$SECRETS/parameters.json"
  return 1
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

# pod.sh from the Pod's parameters into memory-backed /run (unless already there); a host that
# cannot read them says why on the console and powers off.
pod_fetch() {
  mkdir -p "$SECRETS"
  chmod 0700 "$SECRETS"
  [ ! -s "$POD_DATA" ] || return 0
  identify 30 || log "no instance identity from IMDS yet"
  log "reading the pod's spec from ${#POD_PARAMETERS[@]} SSM parameter(s) under ${POD_PARAMETERS[0]%/*}/"
  parameter_retry fetch_pod ||
    unreadable "cannot read the pod's SSM parameters under ${POD_PARAMETERS[0]%/*}/ within ${PARAMETER_WAIT_SECONDS}s: $(tail -c 300 "$RUN/parameters.err" 2>/dev/null)"
}

# ---- service-account tokens --------------------------------------------------------------------

# pod.sh names them: TOKEN_PATH[i] (the host file of a serviceAccountToken projection), its
# TOKEN_KEY[i] in the token parameter and TOKEN_MODE[i]; TOKEN_PARAMETER, whose value is
# `<key>:<token>` pairs separated by single spaces (the controller writes it and overwrites it when
# it renews a token), read every TOKEN_POLL seconds. TOKEN_GOT (key → token, as last read),
# TOKEN_HAVE[i] (the token in TOKEN_PATH[i]), TOKEN_NEXT and TOKEN_FAILING are this fragment's
# state. A token is never logged.

# Fills TOKEN_GOT (key → token) from a GetParameters answer $1, all or nothing: every entry must be
# `<key>:<compact JWS>` and every TOKEN_KEY present, else returns 1 with the reason in
# $RUN/tokens.err (which never holds a token).
tokens_parse() {
  local e k re='^([0-9]{1,3}|p):[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*$'
  local -a entries
  declare -gA TOKEN_GOT=()
  if ! [[ $1 =~ \"Value\"[[:space:]]*:[[:space:]]*\"([^\"]*)\" ]]; then
    echo "no value in the answer (the parameter is missing or not readable yet)" >"$RUN/tokens.err"
    return 1
  fi
  e=${BASH_REMATCH[1]}
  # Single spaces between entries: an empty entry (two spaces, a space at either end) is no pair.
  [[ $e != *"  "* && $e != " "* && $e != *" " ]] || e=' '
  IFS=' ' read -ra entries <<<"$e"
  ((${#entries[@]} > 0)) || entries=('')
  for e in "${entries[@]}"; do
    if ! [[ $e =~ $re ]]; then
      TOKEN_GOT=()
      echo "the value is not <key>:<token> pairs separated by spaces (ignored)" >"$RUN/tokens.err"
      return 1
    fi
    TOKEN_GOT[${e%%:*}]=${e#*:}
  done
  for k in "${TOKEN_KEY[@]}"; do
    if [ -z "${TOKEN_GOT[$k]+set}" ]; then
      TOKEN_GOT=()
      echo "the value has no token $k (ignored)" >"$RUN/tokens.err"
      return 1
    fi
  done
}

# One GetParameters of TOKEN_PARAMETER (run in the background by tokens_tick): the answer into
# $SECRETS/tokens.json, the HTTP status into $RUN/tokens.status.
tokens_get() {
  sigv4_post ssm "$(ssm_endpoint)" application/x-amz-json-1.1 AmazonSSM.GetParameters \
    "{\"Names\":[\"$TOKEN_PARAMETER\"],\"WithDecryption\":true}" "$SECRETS/tokens.json" "$RUN/tokens.err" >"$RUN/tokens.status"
}

# Reads the token parameter once (within 5 s; a SIGTERM ends the call) into TOKEN_GOT.
tokens_read() {
  local status text why
  if [ -z "$INSTANCE_ID" ] && ! identify 1; then
    echo "no instance identity from IMDS" >"$RUN/tokens.err"
    return 1
  fi
  : >"$RUN/tokens.status"
  : >"$RUN/tokens.err"
  # The credentials in this shell, so the call in the background uses the cached ones.
  aws_credentials || {
    echo "no instance role credentials from IMDS" >"$RUN/tokens.err"
    return 1
  }
  ATTEMPT_END=$(($(now) + 5))
  interruptible tokens_get
  ATTEMPT_END=
  status=$(<"$RUN/tokens.status")
  text=
  [ ! -f "$SECRETS/tokens.json" ] || text=$(<"$SECRETS/tokens.json")
  rm -f "$SECRETS/tokens.json"
  if [ "$status" != 200 ]; then
    # Only an error answer's type and message are said, never a body whole: no token is logged.
    why="HTTP ${status:-000}"
    [[ $text =~ \"__type\"[[:space:]]*:[[:space:]]*\"([A-Za-z0-9_.#:]*)\" ]] && why+=" ${BASH_REMATCH[1]##*#}"
    [[ $text =~ \"[Mm]essage\"[[:space:]]*:[[:space:]]*\"([^\"]{0,200})\" ]] && why+=": ${BASH_REMATCH[1]}"
    printf '%s %s\n' "$why" "$(tail -c 200 "$RUN/tokens.err" 2>/dev/null)" >"$RUN/tokens.err"
    return 1
  fi
  tokens_parse "$text"
}

# Writes each TOKEN_PATH[i] whose token changed: a temporary file in the same directory (mode
# TOKEN_MODE[i]) moved over it, so a container that bind-mounts the directory sees the whole new
# token at once, without a restart.
tokens_write() {
  local i f t
  for i in "${!TOKEN_PATH[@]}"; do
    f=${TOKEN_PATH[i]}
    t=${TOKEN_GOT[${TOKEN_KEY[i]}]}
    [ "${TOKEN_HAVE[i]:-}" != "$t" ] || continue
    mkdir -p "${f%/*}"
    umask 077
    if printf '%s' "$t" >"${f%/*}/.nebula-token.$i" && chmod "${TOKEN_MODE[i]}" "${f%/*}/.nebula-token.$i" &&
      mv -f "${f%/*}/.nebula-token.$i" "$f"; then
      TOKEN_HAVE[i]=$t
    else
      log "cannot write the service-account token file $f"
    fi
    umask 022
  done
}

# At boot, before any container starts: the tokens, retried as pod.sh is; a host that cannot read
# them says why on the console and powers off.
tokens_boot() {
  TOKEN_HAVE=()
  TOKEN_FAILING=
  log "reading ${#TOKEN_PATH[@]} service-account token file(s) from $TOKEN_PARAMETER (every ${TOKEN_POLL}s)"
  parameter_retry tokens_read ||
    unreadable "cannot read the pod's service-account tokens from $TOKEN_PARAMETER within ${PARAMETER_WAIT_SECONDS}s: $(tail -c 300 "$RUN/tokens.err" 2>/dev/null)"
  tokens_write
  TOKEN_NEXT=$(($(now) + TOKEN_POLL))
}

# From the main loop: every TOKEN_POLL seconds one read, no waiting; new tokens are written, a
# failure keeps the files as they are and is logged once per streak of failures.
tokens_tick() {
  (($(now) >= TOKEN_NEXT)) || return 0
  TOKEN_NEXT=$(($(now) + TOKEN_POLL))
  if tokens_read; then
    [ -z "$TOKEN_FAILING" ] || log "service-account tokens read again from $TOKEN_PARAMETER"
    TOKEN_FAILING=
    tokens_write
  elif [ -z "$TOKEN_FAILING" ]; then
    TOKEN_FAILING=1
    log "cannot read the service-account tokens from $TOKEN_PARAMETER; the files keep the current ones: $(tail -c 300 "$RUN/tokens.err" 2>/dev/null)"
  fi
}
