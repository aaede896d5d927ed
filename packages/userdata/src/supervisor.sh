#!/bin/bash
# Nebula host supervisor, installed by user-data from @nebula/userdata (do not edit on the host).
# Runs the Pod's containers with the Docker CLI, captures every exit from `docker inspect`, applies
# the Pod's restartPolicy with the kubelet's back-off, writes the exit report (instance tags and the
# serial console) after every change of state, and powers the instance off when the Pod is done.
# Pod data comes from pod.sh (written next to this file); nothing from the Pod is ever evaluated.
# shellcheck disable=SC2153,SC2154 # N, NAMES, C<i>_* and the other Pod data come from pod.sh
set -o pipefail
export LC_ALL=C
umask 022

LIB=/usr/local/lib/nebula
STATE=/var/lib/nebula
RUN=$STATE/run
CONSOLE=/dev/console

# Exit-report format v@@REPORT_VERSION@@: constants from @nebula/state-mapping, filled in at render time.
REPORT_VERSION=@@REPORT_VERSION@@
REPORT_TAG_KEY='@@REPORT_TAG_KEY@@'
REPORT_CHUNK_TAG_PREFIX='@@REPORT_CHUNK_TAG_PREFIX@@'
REPORT_CHUNK_SIZE=@@REPORT_CHUNK_SIZE@@
REPORT_MAX_CHUNKS=@@REPORT_MAX_CHUNKS@@
REPORT_TAG_MESSAGE_BUDGET=@@REPORT_TAG_MESSAGE_BUDGET@@
MAX_MESSAGE_BYTES=@@MAX_TERMINATION_MESSAGE_BYTES@@
CONSOLE_MARKER='@@CONSOLE_REPORT_MARKER@@'
LOG_TAIL_BYTES=2048
LOG_TAIL_LINES=80

# Pod data: N, NAMES, INIT, IMAGES, PULL_POLICY, TM_PATH, TM_POLICY, HAS_CMD, HAS_ARGS, SHIM,
# C<i>_FLAGS, C<i>_CMD, C<i>_ARGS, C<i>_HOSTIP, POD_NAME, POD_NAMESPACE, POD_UID, RESTART_POLICY, GRACE_SECONDS,
# RESTART_LIMIT, BACKOFF_INITIAL, BACKOFF_MAX, BACKOFF_RESET, PULL_ATTEMPTS, REPORT_ATTEMPTS, REPORT_BASE_MS.
# shellcheck source=/dev/null
. "$LIB/pod.sh"

IMDS=${AWS_EC2_METADATA_SERVICE_ENDPOINT:-http://169.254.169.254}
IMDS=${IMDS%/}
TERM_REQUESTED=
TERM_AT=
STOP_REQUESTED=
ATTEMPT_END=
UTF8_LOCALE=
FINAL=false
GIVE_UP=
POD_FAILED=
PHASE=init
SEQ=0
INSTANCE_ID=
REGION=
HOST_IP=
TOKEN=
AWS_CLI=
declare -A S
declare -a WATCHER

log() { printf 'nebula-supervisor: %s\n' "$*"; }
# Seconds as Go prints a time.Duration: 40s, 1m20s, 5m0s, 1h0m0s.
go_duration() {
  local s=$1
  if ((s < 60)); then printf '%ds' "$s"; elif ((s < 3600)); then printf '%dm%ds' $((s / 60)) $((s % 60)); else printf '%dh%dm%ds' $((s / 3600)) $((s % 3600 / 60)) $((s % 60)); fi
}
now() { date +%s; }
# Seconds for one network call: $1, cut to what is left of the current CreateTags attempt (min 1).
call_time() {
  local t=$1 left
  if [ -n "$ATTEMPT_END" ]; then
    printf -v left '%(%s)T' -1
    left=$((ATTEMPT_END - left))
    ((left >= t)) || t=$left
    ((t >= 1)) || t=1
  fi
  printf '%s' "$t"
}
b64() { printf '%s' "$1" | base64 -w0; }
b64url() { printf '%s' "$1" | base64 -w0 | tr '+/' '-_' | tr -d '='; }

# Sleeps $1 seconds; returns 1 at once when a stop was requested (SIGTERM).
pause() {
  [ -z "$TERM_REQUESTED" ] || return 1
  sleep "$1" &
  wait "$!" 2>/dev/null
  kill "$!" 2>/dev/null
  [ -z "$TERM_REQUESTED" ]
}

# Runs a command in the background so SIGTERM is handled while it runs; output to $1.
run_bg() {
  local out=$1 pid rc
  shift
  "$@" >"$out" 2>&1 &
  pid=$!
  wait "$pid"
  rc=$?
  if [ -n "$TERM_REQUESTED" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 1
  fi
  return "$rc"
}

# Docker and podman time stamps to RFC 3339 UTC; nothing for an unset time.
iso_time() {
  local t=$1
  case $t in '' | 0001-01-01*) return 0 ;; esac
  t=${t% [A-Z]*}
  date -u -d "$t" +%Y-%m-%dT%H:%M:%S.%3NZ 2>/dev/null || true
}

imds_token() {
  curl -sS -f --max-time "$(call_time 5)" -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 21600' "$IMDS/latest/api/token"
}
imds_get() {
  curl -sS -f --max-time "$(call_time 5)" -H "X-aws-ec2-metadata-token: $TOKEN" "$IMDS/latest/meta-data/$1"
}

# Instance identity from IMDSv2: INSTANCE_ID, REGION, HOST_IP. $1 = attempts.
identify() {
  local n
  for ((n = 0; n < $1; n++)); do
    if TOKEN=$(imds_token) && INSTANCE_ID=$(imds_get instance-id) && REGION=$(imds_get placement/region); then
      HOST_IP=$(imds_get local-ipv4) || HOST_IP=
      return 0
    fi
    INSTANCE_ID=
    pause 1 || return 1
  done
  return 1
}

# ---- exit report -------------------------------------------------------------------------------

# Appends ,"<key>":"<b64>" to J, cut to $3 bytes (-1: whole); sets TRUNC when it cuts.
json_msg() {
  local key=$1 value=$2 max=$3 bytes pad=0
  [ -n "$value" ] || return 0
  if ((max >= 0)); then
    case $value in *==) pad=2 ;; *=) pad=1 ;; esac
    bytes=$((${#value} * 3 / 4 - pad))
    if ((bytes > max)); then
      TRUNC=1
      ((max > 0)) || return 0
      value=$(printf '%s' "$value" | base64 -d | head -c "$max" | base64 -w0)
    fi
  fi
  J+=",\"$key\":\"$value\""
}

# Appends a termination object's fields (without braces) for prefix $1 (t: current, l: last).
json_termination() {
  local p=$1 i=$2 max=$3
  J+="\"exitCode\":${S[$p.code.$i]},\"reason\":\"${S[$p.reason.$i]}\""
  [ -z "${S[$p.signal.$i]}" ] || J+=",\"signal\":${S[$p.signal.$i]}"
  [ -z "${S[$p.start.$i]}" ] || J+=",\"startedAt\":\"${S[$p.start.$i]}\""
  [ -z "${S[$p.finish.$i]}" ] || J+=",\"finishedAt\":\"${S[$p.finish.$i]}\""
  json_msg messageB64 "${S[$p.msg.$i]}" "$max"
}

json_container() {
  local i=$1 max=$2 with_last=$3 init=false
  TRUNC=
  [ "${INIT[i]}" = 1 ] && init=true
  J+="{\"name\":\"${NAMES[i]}\",\"init\":$init,\"restarts\":${S[restarts.$i]}"
  case ${S[st.$i]} in
    running)
      J+=",\"state\":\"running\""
      [ -z "${S[started.$i]}" ] || J+=",\"startedAt\":\"${S[started.$i]}\""
      ;;
    exited)
      J+=",\"state\":\"terminated\","
      json_termination t "$i" "$max"
      ;;
    *)
      J+=",\"state\":\"waiting\",\"reason\":\"${S[wreason.$i]}\""
      json_msg messageB64 "${S[wmsg.$i]}" "$max"
      ;;
  esac
  [ -z "${S[cid.$i]}" ] || J+=",\"containerID\":\"docker://${S[cid.$i]}\""
  [ -z "${S[imageid.$i]}" ] || J+=",\"imageID\":\"${S[imageid.$i]}\""
  if [ "$with_last" = 1 ] && [ -n "${S[l.code.$i]}" ]; then
    J+=",\"last\":{"
    json_termination l "$i" "$max"
    J+="}"
  fi
  [ -z "$TRUNC" ] || J+=",\"truncated\":true"
  J+="}"
}

# Builds the report JSON into J: $1 message bytes per message (-1 whole), $2 include last, $3 containers.
json_report() {
  local max=$1 with_last=$2 count=$3 i
  J="{\"v\":$REPORT_VERSION,\"seq\":$SEQ,\"time\":\"$REPORT_TIME\",\"final\":$FINAL"
  # A stop this supervisor did not start (Spot interruption, a stop by the user or the controller).
  [ -z "$STOP_REQUESTED" ] || J+=",\"stopRequested\":true"
  J+=",\"containers\":["
  for ((i = 0; i < count; i++)); do
    ((i == 0)) || J+=","
    json_container "$i" "$max" "$with_last"
  done
  J+="]"
  ((count == N)) || J+=",\"containersOmitted\":$((N - count))"
  J+="}"
}

# The tag channel's body: the truncation rules of the format, so the report always fits the budget.
tag_body() {
  local limit=$((REPORT_CHUNK_SIZE * REPORT_MAX_CHUNKS)) per=$((REPORT_TAG_MESSAGE_BUDGET / (N > 0 ? N : 1))) count
  json_report "$per" 1 "$N"
  BODY=$(b64url "$J")
  ((${#BODY} <= limit)) && return 0
  json_report 0 1 "$N"
  BODY=$(b64url "$J")
  ((${#BODY} <= limit)) && return 0
  for ((count = N; count >= 0; count--)); do
    json_report 0 0 "$count"
    BODY=$(b64url "$J")
    ((${#BODY} <= limit)) && return 0
  done
}

urlencode() {
  local s=$1 out='' c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case $c in
      [A-Za-z0-9._~-]) out+=$c ;;
      *) out+=$(printf '%%%02X' "'$c") ;;
    esac
  done
  printf '%s' "$out"
}

hmac_hex() { printf '%s' "$2" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$1" | awk '{print $NF}'; }
sha256_hex() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

ec2_endpoint() {
  local ep=${AWS_ENDPOINT_URL_EC2:-${AWS_ENDPOINT_URL:-https://ec2.$REGION.amazonaws.com}}
  printf '%s' "${ep%/}"
}

# One CreateTags call with the tags in KEYS/VALUES: through the aws CLI when it runs here, and
# through curl + SigV4 when it does not or when the CLI call fails (a broken CLI must not cost reports).
# Each way is one attempt of at most ATTEMPT_SECONDS; $1: no attempt starts unless that much is left
# before this epoch second (0: no deadline).
create_tags() {
  local deadline=$1 rc=1
  if [ -n "$AWS_CLI" ] && attempt_start "$deadline"; then
    create_tags_cli && rc=0
  fi
  if ((rc != 0)) && { [ "$FINAL" = true ] || [ -z "$TERM_REQUESTED" ]; } && attempt_start "$deadline"; then
    create_tags_sigv4 && rc=0
  fi
  ATTEMPT_END=
  return "$rc"
}

ATTEMPT_SECONDS=15
# Starts an attempt (sets ATTEMPT_END) unless it could end after the deadline $1 (0: none).
attempt_start() {
  local t
  printf -v t '%(%s)T' -1
  if (($1 > 0 && t + ATTEMPT_SECONDS >= $1)); then
    ATTEMPT_END=
    return 1
  fi
  ATTEMPT_END=$((t + ATTEMPT_SECONDS))
}

create_tags_cli() {
  local j tags=''
  for j in "${!KEYS[@]}"; do tags+="${tags:+,}{\"Key\":\"${KEYS[j]}\",\"Value\":\"${VALUES[j]}\"}"; done
  local args=(ec2 create-tags --region "$REGION" --resources "$INSTANCE_ID" --tags "[$tags]")
  [ -z "${AWS_ENDPOINT_URL_EC2:-${AWS_ENDPOINT_URL:-}}" ] || args=(--endpoint-url "$(ec2_endpoint)" "${args[@]}")
  # botocore joins its IMDS endpoint and path without a separator: give it the trailing slash.
  # The CLI's own timeouts (default 60 s each) bound the call, and timeout(1) the whole attempt.
  args=(--cli-connect-timeout 5 --cli-read-timeout 10 "${args[@]}")
  AWS_EC2_METADATA_SERVICE_ENDPOINT="$IMDS/" AWS_MAX_ATTEMPTS=1 timeout -k 1 "$(call_time "$ATTEMPT_SECONDS")" aws "${args[@]}" >/dev/null 2>"$RUN/create-tags-cli.err"
}

# CreateTags over the EC2 Query API, signed with SigV4 (openssl) and the role's IMDS credentials.
create_tags_sigv4() {
  local j
  local creds role key secret token body endpoint host path amz day scope canonical signed sts k sig status
  TOKEN=$(imds_token) || return 1
  role=$(imds_get iam/security-credentials/) || return 1
  role=${role%%$'\n'*}
  creds=$(imds_get "iam/security-credentials/$role") || return 1
  [[ $creds =~ \"AccessKeyId\"[[:space:]]*:[[:space:]]*\"([^\"]+)\" ]] && key=${BASH_REMATCH[1]}
  [[ $creds =~ \"SecretAccessKey\"[[:space:]]*:[[:space:]]*\"([^\"]+)\" ]] && secret=${BASH_REMATCH[1]}
  [[ $creds =~ \"Token\"[[:space:]]*:[[:space:]]*\"([^\"]+)\" ]] && token=${BASH_REMATCH[1]}
  [ -n "$key" ] && [ -n "$secret" ] || return 1
  body="Action=CreateTags&Version=2016-11-15&ResourceId.1=$(urlencode "$INSTANCE_ID")"
  for j in "${!KEYS[@]}"; do
    body+="&Tag.$((j + 1)).Key=$(urlencode "${KEYS[j]}")&Tag.$((j + 1)).Value=$(urlencode "${VALUES[j]}")"
  done
  endpoint=$(ec2_endpoint)
  host=${endpoint#*://}
  path=/
  case $host in */*) path=/${host#*/} ;; esac
  host=${host%%/*}
  amz=$(date -u +%Y%m%dT%H%M%SZ)
  day=${amz:0:8}
  scope="$day/$REGION/ec2/aws4_request"
  canonical="POST"$'\n'"$path"$'\n\n'"content-type:application/x-www-form-urlencoded; charset=utf-8"$'\n'"host:$host"$'\n'"x-amz-date:$amz"$'\n'
  signed="content-type;host;x-amz-date"
  if [ -n "$token" ]; then
    canonical+="x-amz-security-token:$token"$'\n'
    signed+=";x-amz-security-token"
  fi
  canonical+=$'\n'"$signed"$'\n'"$(sha256_hex "$body")"
  sts="AWS4-HMAC-SHA256"$'\n'"$amz"$'\n'"$scope"$'\n'"$(sha256_hex "$canonical")"
  k=$(printf '%s' "$day" | openssl dgst -sha256 -mac HMAC -macopt "key:AWS4$secret" | awk '{print $NF}')
  k=$(hmac_hex "$k" "$REGION")
  k=$(hmac_hex "$k" ec2)
  k=$(hmac_hex "$k" aws4_request)
  sig=$(hmac_hex "$k" "$sts")
  local curl_args=(-sS --max-time "$(call_time 10)" -o "$RUN/create-tags.out" -w '%{http_code}' -X POST
    -H "Content-Type: application/x-www-form-urlencoded; charset=utf-8"
    -H "X-Amz-Date: $amz"
    -H "Authorization: AWS4-HMAC-SHA256 Credential=$key/$scope, SignedHeaders=$signed, Signature=$sig"
    --data-binary @-)
  [ -z "$token" ] || curl_args+=(-H "X-Amz-Security-Token: $token")
  [ -z "${AWS_CA_BUNDLE:-}" ] || curl_args+=(--cacert "$AWS_CA_BUNDLE")
  status=$(printf '%s' "$body" | curl "${curl_args[@]}" "$endpoint/" 2>"$RUN/create-tags.err")
  [ "$status" = 200 ] && return 0
  { printf 'HTTP %s: ' "$status"; head -c 300 "$RUN/create-tags.out"; } >>"$RUN/create-tags.err" 2>/dev/null
  return 1
}

# Writes the tag channel with jittered exponential back-off. $1: give up at this epoch second (0: none).
write_tags() {
  local deadline=$1 k j attempt delay
  [ -n "$INSTANCE_ID" ] || identify 1 || return 1
  k=$(((${#BODY} + REPORT_CHUNK_SIZE - 1) / REPORT_CHUNK_SIZE))
  KEYS=("$REPORT_TAG_KEY")
  VALUES=("v$REPORT_VERSION seq=$SEQ chunks=$k sha256=$(sha256_hex "$BODY" | cut -c1-16)")
  for ((j = 1; j <= k; j++)); do
    KEYS+=("$REPORT_CHUNK_TAG_PREFIX$j")
    VALUES+=("${BODY:(j - 1) * REPORT_CHUNK_SIZE:REPORT_CHUNK_SIZE}")
  done
  for ((attempt = 0; attempt < REPORT_ATTEMPTS; attempt++)); do
    create_tags "$deadline" && return 0
    if ((deadline > 0 && $(now) + ATTEMPT_SECONDS >= deadline)); then
      echo "no time left for another attempt before the stop deadline" >>"$RUN/create-tags.err"
      break
    fi
    [ "$FINAL" = true ] || [ -z "$TERM_REQUESTED" ] || return 1
    delay=$((REPORT_BASE_MS << attempt))
    ((delay <= 20000)) || delay=20000
    delay=$((delay / 2 + RANDOM % (delay / 2 + 1)))
    if ((deadline > 0 && $(now) + delay / 1000 + 1 >= deadline)); then break; fi
    sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))"
  done
  log "report seq=$SEQ: CreateTags failed: $(tail -c 300 "$RUN/create-tags.err" 2>/dev/null)${AWS_CLI:+ (aws CLI: $(tail -c 300 "$RUN/create-tags-cli.err" 2>/dev/null))}"
  return 1
}

# Writes one report (console line, then tags). $1: deadline for the tag retries (0: none).
report() {
  local stored
  stored=$(cat "$STATE/seq" 2>/dev/null)
  [[ $stored =~ ^[0-9]+$ ]] || stored=0
  SEQ=$((stored + 1))
  printf '%s\n' "$SEQ" >"$STATE/seq"
  REPORT_TIME=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  json_report -1 1 "$N"
  printf '%s v%s %s\n' "$CONSOLE_MARKER" "$REPORT_VERSION" "$(b64url "$J")" >>"$CONSOLE" 2>/dev/null
  tag_body
  write_tags "${1:-0}" && log "report seq=$SEQ final=$FINAL written"
}

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

image_present() { docker inspect --type=image --format '{{.Id}}' "$1" >/dev/null 2>&1; }

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
  run_bg "$RUN/pull-$i.log" docker pull "$image" && return 0
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
  out=$(docker inspect --type=image --format "{{range .Config.$2}}{{printf \"%q\" .}}{{\"\\n\"}}{{end}}" "$1") || return 1
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    line=${line#\"}
    line=${line%\"}
    line=${line//\'/\\\'}
    eval "LIST+=(\$'$line')"
  done <<<"$out"
}

# Reads the exit of container $1 from docker inspect into the t.* fields.
capture() {
  local i=$1 id=${S[cid.$1]} info code oom started finished image file msg=
  info=$(docker inspect --format '{{.State.ExitCode}}|{{.State.OOMKilled}}|{{.State.Running}}|{{.State.StartedAt}}|{{.State.FinishedAt}}|{{.Image}}' "$id" 2>/dev/null)
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
  elif [ "$oom" = true ]; then
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
  if [ -n "$4" ]; then
    msg=$(printf '%s' "$4" | head -c "$MAX_MESSAGE_BYTES" | base64 -w0)
  elif [ -s "$file" ]; then
    msg=$(head -c "$MAX_MESSAGE_BYTES" "$file" | base64 -w0)
  elif ((code != 0)) && [ "${TM_POLICY[i]}" = FallbackToLogsOnError ]; then
    msg=$(docker logs --tail "$LOG_TAIL_LINES" "$id" 2>&1 | tail -c "$LOG_TAIL_BYTES" | base64 -w0)
  fi
  S[t.msg.$i]=$msg
}

watch() {
  local i=$1
  rm -f "$RUN/$i.done"
  (
    docker wait "${S[cid.$i]}" >/dev/null 2>&1
    : >"$RUN/$i.done"
  ) &
  WATCHER[i]=$!
}

# Pulls, creates and starts container $1.
attempt() {
  local i=$1 name flags cmd args hostip workload argv id v err
  name=$(cname "$i")
  if [ "${S[pulled.$i]}" != 1 ]; then
    PULL_NEVER=
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
    S[delay.$i]=0
  fi
  eval "flags=(\"\${C${i}_FLAGS[@]}\"); cmd=(\"\${C${i}_CMD[@]}\"); args=(\"\${C${i}_ARGS[@]}\"); hostip=(\"\${C${i}_HOSTIP[@]}\")"
  for v in "${hostip[@]}"; do flags+=("--env=$v=$HOST_IP"); done
  mkdir -p "$STATE/containers/${NAMES[i]}"
  : >"$STATE/containers/${NAMES[i]}/termination-log"
  chmod 0666 "$STATE/containers/${NAMES[i]}/termination-log"
  flags+=("--name=$name" --network=host "--mount=type=bind,source=$STATE/containers/${NAMES[i]}/termination-log,target=${TM_PATH[i]}")
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
  if ! id=$(docker create "${flags[@]}" "${IMAGES[i]}" "${argv[@]}" 2>"$RUN/create-$i.err"); then
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
  S[started.$i]=$(iso_time "$(docker inspect --format '{{.State.StartedAt}}' "$id" 2>/dev/null)")
  log "container ${NAMES[i]}: started ($id)"
  watch "$i"
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
  if [ "${INIT[i]}" = 1 ]; then
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
    log "$GIVE_UP"
    return 0
  fi
  local k
  for k in code reason signal start finish msg; do S[l.$k.$i]=${S[t.$k.$i]}; done
  S[restarts.$i]=$((${S[restarts.$i]} + 1))
  S[quick.$i]=$((${S[quick.$i]} + 1))
  back_off "$i"
  # The kubelet's words: a Go duration, and the Pod as name_namespace(uid).
  set_waiting "$i" CrashLoopBackOff "$(b64 "back-off $(go_duration "${S[delay.$i]}") restarting failed container=${NAMES[i]} pod=${POD_NAME}_${POD_NAMESPACE}($POD_UID)")"
}

# Stops every running container with the Pod's grace period and captures the exits.
stop_all() {
  local i pids=()
  for ((i = 0; i < N; i++)); do
    if [ "${S[st.$i]}" = running ]; then
      docker stop -t "$GRACE_SECONDS" "${S[cid.$i]}" >/dev/null 2>&1 &
      pids+=($!)
    fi
  done
  for i in "${pids[@]}"; do
    while kill -0 "$i" 2>/dev/null; do wait "$i"; done
  done
  for ((i = 0; i < N; i++)); do
    if [ "${S[st.$i]}" = running ]; then
      capture "$i"
      S[st.$i]=exited
    fi
    [ -z "${WATCHER[i]}" ] || kill "${WATCHER[i]}" 2>/dev/null
  done
}

# systemd kills the unit TimeoutStopSec (grace + 30 s) after its SIGTERM: the final report's tag
# attempts all end by STOP_MARGIN seconds before that.
STOP_MARGIN=5
finish() {
  local deadline=0
  if [ -n "$TERM_REQUESTED" ]; then
    STOP_REQUESTED=1
    log "stop requested: stopping containers (grace ${GRACE_SECONDS}s)"
  fi
  stop_all
  [ -z "$TERM_REQUESTED" ] || deadline=$((${TERM_AT:-$(now)} + GRACE_SECONDS + 30 - STOP_MARGIN))
  FINAL=true
  report "$deadline"
  : >"$STATE/final"
  if [ -z "$TERM_REQUESTED" ]; then
    log "pod finished${GIVE_UP:+ ($GIVE_UP)}: powering off"
    shutdown -h now
  fi
  exit 0
}

pod_done() {
  local i
  [ -z "$GIVE_UP" ] && [ -z "$POD_FAILED" ] || return 0
  [ "$PHASE" = app ] || return 1
  for ((i = 0; i < N; i++)); do
    [ "${INIT[i]}" = 1 ] || [ "${S[st.$i]}" = exited ] || [ "${S[st.$i]}" = stuck ] || return 1
  done
}

main() {
  local i changed t
  mkdir -p "$RUN" "$STATE/containers"
  if [ -e "$STATE/final" ]; then
    log "the final report was already written; nothing to run"
    exit 0
  fi
  trap '[ -n "$TERM_REQUESTED" ] || printf -v TERM_AT "%(%s)T" -1; TERM_REQUESTED=1' TERM INT
  log "supervising pod $POD_NAMESPACE/$POD_NAME ($N containers)"
  identify 30 || log "no instance identity from IMDS; reporting on the console only"
  # The aws CLI only when it really runs (a broken install or a file hiding it must not stop the reports).
  if command -v aws >/dev/null 2>&1 && aws --version >/dev/null 2>&1; then AWS_CLI=1; fi
  if [ -n "$AWS_CLI" ]; then log "reports: CreateTags through the aws CLI"; else log "reports: CreateTags through curl + SigV4"; fi
  utf8_locale
  for ((i = 0; i < N; i++)); do
    S[restarts.$i]=0
    S[quick.$i]=0
    S[delay.$i]=0
    S[pulls.$i]=0
    set_waiting "$i" PodInitializing ""
    S[st.$i]=pending
  done
  next_init -1
  report
  while :; do
    [ -z "$TERM_REQUESTED" ] || finish
    changed=
    for ((i = 0; i < N; i++)); do
      if [ "${S[st.$i]}" = running ] && [ -e "$RUN/$i.done" ]; then
        t=$(docker inspect --format '{{.State.Running}}' "${S[cid.$i]}" 2>/dev/null)
        if [ "$t" = true ]; then
          watch "$i"
          continue
        fi
        capture "$i"
        decide "$i"
        changed=1
      fi
    done
    for ((i = 0; i < N; i++)); do
      if [ "${S[st.$i]}" = wait ] && (($(now) >= ${S[next.$i]:-0})) && [ -z "$GIVE_UP" ] && [ -z "$POD_FAILED" ]; then
        attempt "$i"
        changed=1
      fi
    done
    [ -z "$TERM_REQUESTED" ] || finish
    ! pod_done || finish
    if [ -n "$changed" ]; then report; else pause 1; fi
  done
}

main "$@"
