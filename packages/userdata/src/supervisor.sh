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
REPORT_BUDGET_STEPS='@@TAG_BUDGET_STEPS@@'
MAX_MESSAGE_BYTES=@@MAX_TERMINATION_MESSAGE_BYTES@@
CONSOLE_MARKER='@@CONSOLE_REPORT_MARKER@@'
LOG_TAIL_BYTES=@@LOG_FALLBACK_MAX_BYTES@@
LOG_TAIL_LINES=@@LOG_FALLBACK_MAX_LINES@@
# How often the Spot interruption notice is read from IMDS, and the seconds of the two-minute
# warning kept for the final report.
SPOT_POLL_SECONDS=5
SPOT_REPORT_SECONDS=20

# Pod data: N, NAMES, INIT, IMAGES, PULL_POLICY, TM_PATH, TM_POLICY, HAS_CMD, HAS_ARGS, SHIM,
# C<i>_FLAGS, C<i>_CMD, C<i>_ARGS, C<i>_HOSTIP, POD_NAME, POD_NAMESPACE, POD_UID, RESTART_POLICY, GRACE_SECONDS,
# RESTART_LIMIT, BACKOFF_INITIAL, BACKOFF_MAX, BACKOFF_RESET, PULL_ATTEMPTS, REPORT_ATTEMPTS, REPORT_BASE_MS,
# HOST_DIRS, FILE_PATH/FILE_MODE/FILE_DATA (files to write first), DOCKER_AUTH, and when turned on
# LOG_GROUP (logs) and METRICS_NAMESPACE/METRICS_SAMPLE/METRICS_PUBLISH (metrics): from pod.sh, sourced by
# main. With the Parameter Store delivery, pod.ref names the SSM parameters that hold pod.sh
# (POD_PARAMETERS, POD_SHA256, PARAMETER_WAIT_SECONDS) and pod.sh is fetched into memory-backed /run.
SECRETS=/run/nebula
POD_DATA=$LIB/pod.sh
if [ -f "$LIB/pod.ref" ]; then
  # shellcheck source=/dev/null
  . "$LIB/pod.ref"
  POD_DATA=$SECRETS/pod.sh
fi

IMDS=${AWS_EC2_METADATA_SERVICE_ENDPOINT:-http://169.254.169.254}
IMDS=${IMDS%/}
TERM_REQUESTED=
TERM_AT=
STOP_REQUESTED=
STOP_ISO=
SPOT_ACTION=
SPOT_TIME=
SPOT_AT=
SPOT_NEXT=0
LIMIT_HIT=
SUPERVISOR_AT=
WRITER=
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
declare -A S ALLOC U
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

# Kills process $1 and all its descendants (a CreateTags attempt and the curl or aws under it).
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null
}

# Runs "$@" in the background and waits for it, so a SIGTERM is handled at once. Unless the final
# report is being written, a SIGTERM also ends the command (and what it started): returns 1.
interruptible() {
  local pid rc
  "$@" &
  pid=$!
  while :; do
    wait "$pid"
    rc=$?
    # A wait cut short by a trapped signal returns over 128 while the command still runs.
    kill -0 "$pid" 2>/dev/null || return "$rc"
    if [ -n "$TERM_REQUESTED" ] && [ "$FINAL" != true ]; then
      kill_tree "$pid"
      wait "$pid" 2>/dev/null
      return 1
    fi
  done
}

# Current time in RFC 3339 UTC with milliseconds.
iso_now() { date -u +%Y-%m-%dT%H:%M:%S.%3NZ; }

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

# Decoded length of the base64 text $1.
b64_bytes() {
  local v=$1 pad=0
  case $v in *==) pad=2 ;; *=) pad=1 ;; esac
  printf '%s' $((${#v} * 3 / 4 - pad))
}

# Prints the first ($3 = head) or last ($3 = tail) at most $2 bytes of file $1, cut on a UTF-8
# character boundary: the cut moves at most 3 bytes inwards, off continuation bytes (10xxxxxx).
utf8_cut() {
  local file=$1 max=$2 n k b size
  size=$(stat -c %s "$file" 2>/dev/null) || return 0
  if ((size <= max)); then
    cat "$file"
  elif [ "$3" = head ]; then
    n=$max
    for ((k = 0; k < 3 && n > 0; k++)); do
      b=$(od -An -tu1 -j "$n" -N1 "$file")
      ((b < 128 || b >= 192)) && break
      n=$((n - 1))
    done
    head -c "$n" "$file"
  else
    n=$((size - max))
    for ((k = 0; k < 3 && n < size; k++)); do
      b=$(od -An -tu1 -j "$n" -N1 "$file")
      ((b < 128 || b >= 192)) && break
      n=$((n + 1))
    done
    tail -c "+$((n + 1))" "$file"
  fi
}

# The base64 message $1 cut to $2 bytes from the $3 end (head or tail), base64.
cut_b64() {
  printf '%s' "$1" | base64 -d >"$RUN/cut" 2>/dev/null
  utf8_cut "$RUN/cut" "$2" "$3" | base64 -w0
}

# Appends ,"<key>":"<b64>" to J, keeping $3 bytes (-1: all) from the $4 end; sets TRUNC on a cut.
json_msg() {
  local key=$1 value=$2 keep=$3
  [ -n "$value" ] || return 0
  if ((keep >= 0 && keep < $(b64_bytes "$value"))); then
    TRUNC=1
    ((keep > 0)) || return 0
    value=$(cut_b64 "$value" "$keep" "$4")
    [ -n "$value" ] || return 0
  fi
  J+=",\"$key\":\"$value\""
}

# Appends a termination object's fields (without braces) for prefix $1 (t: current, l: last).
json_termination() {
  local p=$1 i=$2 keep=$3
  J+="\"exitCode\":${S[$p.code.$i]},\"reason\":\"${S[$p.reason.$i]}\""
  [ -z "${S[$p.signal.$i]}" ] || J+=",\"signal\":${S[$p.signal.$i]}"
  [ -z "${S[$p.start.$i]}" ] || J+=",\"startedAt\":\"${S[$p.start.$i]}\""
  [ -z "${S[$p.finish.$i]}" ] || J+=",\"finishedAt\":\"${S[$p.finish.$i]}\""
  json_msg messageB64 "${S[$p.msg.$i]}" "$keep" tail
}

# The message of container $2 for slot $1 (cur or last), as the report carries it.
slot_msg() {
  if [ "$1" = last ]; then
    [ -z "${S[l.code.$2]}" ] || printf '%s' "${S[l.msg.$2]}"
  else
    case ${S[st.$2]} in
      running) ;;
      exited) printf '%s' "${S[t.msg.$2]}" ;;
      *) printf '%s' "${S[wmsg.$2]}" ;;
    esac
  fi
}

# True when container $1 is failing: a non-zero exit, a waiting reason other than starting up,
# or a restart after a non-zero exit.
failing() {
  case ${S[st.$1]} in
    running) ;;
    exited) ((${S[t.code.$1]} == 0)) || return 0 ;;
    *) case ${S[wreason.$1]} in ContainerCreating | PodInitializing) ;; *) return 0 ;; esac ;;
  esac
  [ -n "${S[l.code.$1]}" ] && ((${S[l.code.$1]} != 0))
}

# Spends the shared message budget $1 on the messages, most useful first (a failing container's
# current message, then its previous exit's, then the healthy containers'): whole while they fit,
# the first that does not is cut to what is left, the rest dropped. Result in ALLOC[cur|last.i].
plan_budget() {
  local left=$1 rank i slot bytes bad
  ALLOC=()
  for rank in 0 1 2 3; do
    for ((i = 0; i < N; i++)); do
      bad=1
      failing "$i" && bad=0
      ((rank < 2 ? bad == 0 : bad == 1)) || continue
      if ((rank % 2 == 0)); then slot=cur; else slot=last; fi
      bytes=$(b64_bytes "$(slot_msg "$slot" "$i")")
      ((bytes > 0)) || continue
      if ((bytes <= left)); then
        ALLOC[$slot.$i]=$bytes
        left=$((left - bytes))
      else
        ALLOC[$slot.$i]=$left
        left=0
      fi
    done
  done
}

# Appends container $1 to J. $2: whole (console), budget (ALLOC), lean (no messages, no last,
# no boot timings).
json_container() {
  local i=$1 mode=$2 init=false cur=-1 lst=-1
  TRUNC=
  if [ "$mode" = budget ]; then
    cur=${ALLOC[cur.$i]:-0}
    lst=${ALLOC[last.$i]:-0}
  elif [ "$mode" = lean ]; then
    cur=0
    lst=0
    [ -z "$(slot_msg last "$i")" ] || TRUNC=1
  fi
  [ "${INIT[i]}" = 1 ] && init=true
  J+="{\"name\":\"${NAMES[i]}\",\"init\":$init,\"restarts\":${S[restarts.$i]}"
  case ${S[st.$i]} in
    running)
      J+=",\"state\":\"running\""
      [ -z "${S[started.$i]}" ] || J+=",\"startedAt\":\"${S[started.$i]}\""
      [ "${PROBED[i]}" != 1 ] || J+=",\"started\":${S[startedp.$i]:-false},\"ready\":${S[ready.$i]:-false}"
      ;;
    exited)
      J+=",\"state\":\"terminated\","
      json_termination t "$i" "$cur"
      ;;
    *)
      J+=",\"state\":\"waiting\",\"reason\":\"${S[wreason.$i]}\""
      json_msg messageB64 "${S[wmsg.$i]}" "$cur" head
      ;;
  esac
  [ -z "${S[cid.$i]}" ] || J+=",\"containerID\":\"docker://${S[cid.$i]}\""
  [ -z "${S[imageid.$i]}" ] || J+=",\"imageID\":\"${S[imageid.$i]}\""
  if [ "$mode" != lean ]; then
    if [ -n "${S[l.code.$i]}" ]; then
      J+=",\"last\":{"
      json_termination l "$i" "$lst"
      J+="}"
    fi
    [ -z "${S[pullat.$i]}" ] || J+=",\"pullStartedAt\":\"${S[pullat.$i]}\""
    [ -z "${S[pulledat.$i]}" ] || J+=",\"pullFinishedAt\":\"${S[pulledat.$i]}\""
    [ -z "${S[firstat.$i]}" ] || J+=",\"firstStartedAt\":\"${S[firstat.$i]}\""
  fi
  [ -z "${S[limit.$i]}" ] || J+=",\"restartLimitReached\":true"
  [ -z "${S[because.$i]}" ] || J+=",\"stoppedBecause\":\"${S[because.$i]}\""
  if [ -n "$TRUNC" ]; then
    J+=",\"truncated\":true"
    CUT=1
  fi
  J+="}"
}

# Builds the report JSON into J: $1 mode (see json_container), $2 containers.
json_report() {
  local mode=$1 count=$2 i
  CUT=
  [ "$mode" != lean ] || CUT=1
  J="{\"v\":$REPORT_VERSION,\"seq\":$SEQ,\"time\":\"$REPORT_TIME\",\"final\":$FINAL"
  # A stop this supervisor did not start (Spot interruption, a stop by the user or the controller).
  [ -z "$STOP_REQUESTED" ] || J+=",\"stopRequested\":true,\"stopRequestedAt\":\"$STOP_ISO\""
  [ -z "$SPOT_ACTION" ] || J+=",\"interruption\":{\"kind\":\"spot\",\"action\":\"$SPOT_ACTION\"${SPOT_TIME:+,\"time\":\"$SPOT_TIME\"}}"
  [ -z "$LIMIT_HIT" ] || J+=",\"restartLimit\":{\"container\":\"${NAMES[LIMIT_HIT]}\",\"limit\":$RESTART_LIMIT}"
  J+=",\"supervisorStartedAt\":\"$SUPERVISOR_AT\",\"containers\":["
  for ((i = 0; i < count; i++)); do
    ((i == 0)) || J+=","
    json_container "$i" "$mode"
  done
  J+="]"
  ((count == N)) || J+=",\"containersOmitted\":$((N - count))"
  [ -z "$CUT" ] || J+=",\"cut\":true"
  J+="}"
}

# The tag channel's body: the shared message budget, then smaller ones, then no last and no
# timings, then fewer containers, so the report always fits (the rules of the report format).
tag_body() {
  local limit=$((REPORT_CHUNK_SIZE * REPORT_MAX_CHUNKS)) budget count
  for budget in $REPORT_BUDGET_STEPS; do
    plan_budget "$budget"
    json_report budget "$N"
    BODY=$(b64url "$J")
    ((${#BODY} <= limit)) && return 0
  done
  for ((count = N; count >= 0; count--)); do
    json_report lean "$count"
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
  local j body status
  body="Action=CreateTags&Version=2016-11-15&ResourceId.1=$(urlencode "$INSTANCE_ID")"
  for j in "${!KEYS[@]}"; do
    body+="&Tag.$((j + 1)).Key=$(urlencode "${KEYS[j]}")&Tag.$((j + 1)).Value=$(urlencode "${VALUES[j]}")"
  done
  status=$(sigv4_post ec2 "$(ec2_endpoint)" "application/x-www-form-urlencoded; charset=utf-8" "" "$body" \
    "$RUN/create-tags.out" "$RUN/create-tags.err") || return 1
  [ "$status" = 200 ] && return 0
  { printf 'HTTP %s: ' "$status"; head -c 300 "$RUN/create-tags.out"; } >>"$RUN/create-tags.err" 2>/dev/null
  return 1
}

# One AWS API call over HTTPS POST, signed with SigV4 (openssl) and the role's IMDS credentials.
# $1 service, $2 endpoint URL, $3 content type, $4 X-Amz-Target ("" for none), $5 body, $6 the
# response body's file, $7 the error file. Prints the HTTP status.
sigv4_post() {
  local service=$1 endpoint=$2 ctype=$3 target=$4 body=$5 out=$6 err=$7
  local creds role key secret token host path amz day scope canonical signed sts k sig
  TOKEN=$(imds_token) || return 1
  role=$(imds_get iam/security-credentials/) || return 1
  role=${role%%$'\n'*}
  creds=$(imds_get "iam/security-credentials/$role") || return 1
  [[ $creds =~ \"AccessKeyId\"[[:space:]]*:[[:space:]]*\"([^\"]+)\" ]] && key=${BASH_REMATCH[1]}
  [[ $creds =~ \"SecretAccessKey\"[[:space:]]*:[[:space:]]*\"([^\"]+)\" ]] && secret=${BASH_REMATCH[1]}
  [[ $creds =~ \"Token\"[[:space:]]*:[[:space:]]*\"([^\"]+)\" ]] && token=${BASH_REMATCH[1]}
  [ -n "$key" ] && [ -n "$secret" ] || return 1
  host=${endpoint#*://}
  path=/
  case $host in */*) path=/${host#*/} ;; esac
  host=${host%%/*}
  amz=$(date -u +%Y%m%dT%H%M%SZ)
  day=${amz:0:8}
  scope="$day/$REGION/$service/aws4_request"
  canonical="POST"$'\n'"$path"$'\n\n'"content-type:$ctype"$'\n'"host:$host"$'\n'"x-amz-date:$amz"$'\n'
  signed="content-type;host;x-amz-date"
  if [ -n "$token" ]; then
    canonical+="x-amz-security-token:$token"$'\n'
    signed+=";x-amz-security-token"
  fi
  if [ -n "$target" ]; then
    canonical+="x-amz-target:$target"$'\n'
    signed+=";x-amz-target"
  fi
  canonical+=$'\n'"$signed"$'\n'"$(sha256_hex "$body")"
  sts="AWS4-HMAC-SHA256"$'\n'"$amz"$'\n'"$scope"$'\n'"$(sha256_hex "$canonical")"
  k=$(printf '%s' "$day" | openssl dgst -sha256 -mac HMAC -macopt "key:AWS4$secret" | awk '{print $NF}')
  k=$(hmac_hex "$k" "$REGION")
  k=$(hmac_hex "$k" "$service")
  k=$(hmac_hex "$k" aws4_request)
  sig=$(hmac_hex "$k" "$sts")
  local curl_args=(-sS --max-time "$(call_time 10)" -o "$out" -w '%{http_code}' -X POST
    -H "Content-Type: $ctype"
    -H "X-Amz-Date: $amz"
    -H "Authorization: AWS4-HMAC-SHA256 Credential=$key/$scope, SignedHeaders=$signed, Signature=$sig"
    --data-binary @-)
  [ -z "$token" ] || curl_args+=(-H "X-Amz-Security-Token: $token")
  [ -z "$target" ] || curl_args+=(-H "X-Amz-Target: $target")
  [ -z "${AWS_CA_BUNDLE:-}" ] || curl_args+=(--cacert "$AWS_CA_BUNDLE")
  printf '%s' "$body" | curl "${curl_args[@]}" "$endpoint/" 2>"$err"
}

# Fills KEYS/VALUES with the tag channel of BODY: the header and the chunks.
tag_pairs() {
  local k j
  k=$(((${#BODY} + REPORT_CHUNK_SIZE - 1) / REPORT_CHUNK_SIZE))
  KEYS=("$REPORT_TAG_KEY")
  VALUES=("v$REPORT_VERSION seq=$SEQ chunks=$k sha256=$(sha256_hex "$BODY" | cut -c1-16)")
  for ((j = 1; j <= k; j++)); do
    KEYS+=("$REPORT_CHUNK_TAG_PREFIX$j")
    VALUES+=("${BODY:(j - 1) * REPORT_CHUNK_SIZE:REPORT_CHUNK_SIZE}")
  done
}

# Writes the tag channel with jittered exponential back-off. $1: give up at this epoch second
# (0: none; after a SIGTERM, systemd's TimeoutStopSec less STOP_MARGIN). $2: the attempt to start
# at (1 when the first attempt was already made). Every wait is interruptible.
write_tags() {
  local deadline=$1 attempt=${2:-0} delay
  for (( ; attempt < REPORT_ATTEMPTS; attempt++)); do
    if ((attempt > 0)); then
      [ "$FINAL" = true ] || [ -z "$TERM_REQUESTED" ] || return 1
      ((deadline > 0)) || [ -z "$TERM_REQUESTED" ] || deadline=$((TERM_AT + GRACE_SECONDS + 30 - STOP_MARGIN))
      if ((deadline > 0 && $(now) + ATTEMPT_SECONDS >= deadline)); then
        echo "no time left for another attempt before the stop deadline" >>"$RUN/create-tags.err"
        break
      fi
      delay=$((REPORT_BASE_MS << (attempt - 1)))
      ((delay <= 20000)) || delay=20000
      delay=$((delay / 2 + RANDOM % (delay / 2 + 1)))
      if ((deadline > 0 && $(now) + delay / 1000 + 1 >= deadline)); then break; fi
      interruptible sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))" || return 1
    fi
    interruptible create_tags "$deadline" && return 0
  done
  log "report seq=$SEQ: CreateTags failed: $(tail -c 300 "$RUN/create-tags.err" 2>/dev/null)${AWS_CLI:+ (aws CLI: $(tail -c 300 "$RUN/create-tags-cli.err" 2>/dev/null))}"
  return 1
}

# Ends the background retries of an older report (a newer one replaces it).
stop_writer() {
  [ -n "$WRITER" ] || return 0
  kill_tree "$WRITER"
  wait "$WRITER" 2>/dev/null
  WRITER=
}

# Writes one report: the console line first, then the tags. $1: deadline for the tag retries (0:
# none). A non-final report makes one attempt here and leaves its retries to the background, so a
# throttled CreateTags never holds up the containers nor a stop.
report() {
  local stored
  stored=$(cat "$STATE/seq" 2>/dev/null)
  [[ $stored =~ ^[0-9]+$ ]] || stored=0
  SEQ=$((stored + 1))
  printf '%s\n' "$SEQ" >"$STATE/seq"
  REPORT_TIME=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  LAST_REPORT=$(now)
  PROBE_DIRTY=
  json_report whole "$N"
  printf '%s v%s %s\n' "$CONSOLE_MARKER" "$REPORT_VERSION" "$(b64url "$J")" >>"$CONSOLE" 2>/dev/null
  tag_body
  stop_writer
  [ -n "$INSTANCE_ID" ] || identify 1 || return 1
  tag_pairs
  if [ "$FINAL" = true ]; then
    write_tags "${1:-0}" && log "report seq=$SEQ final=true written"
    return 0
  fi
  if interruptible create_tags 0; then
    log "report seq=$SEQ final=false written"
    return 0
  fi
  [ -z "$TERM_REQUESTED" ] || return 0
  { write_tags 0 1 && log "report seq=$SEQ final=false written"; } &
  WRITER=$!
}

# ---- probes and lifecycle hooks ----------------------------------------------------------------
# Probes run as the kubelet runs them, one background loop per probe and container, stopped with
# the container. They talk to the main loop through files in $RUN: <i>.started (the startup probe
# succeeded, or there is none), <i>.ready (the readiness probe's verdict), <i>.killed (a liveness or
# startup failure stopped the container: the message of its exit).
# Readiness and startup changes alone cause at most one report per PROBE_REPORT_SECONDS (6 a
# minute), so a flapping probe stays within EC2's CreateTags budget.
PROBE_REPORT_SECONDS=10
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
      # shellcheck disable=SC2016 # the connect runs in the child shell, with its arguments
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

# ---- native sidecars ---------------------------------------------------------------------------
# Init containers with restartPolicy Always: started in order with the other init containers, the
# next one waiting until the sidecar has started (its startup probe passed, or it runs); restarted
# whenever they exit; never holding the Pod from completing; stopped after the regular containers.

# True when container $1 belongs to set $2: all (empty), regular (not a sidecar), sidecar.
in_set() {
  case $2 in
    regular) [ "${SIDECAR[$1]}" != 1 ] ;;
    sidecar) [ "${SIDECAR[$1]}" = 1 ] ;;
    *) return 0 ;;
  esac
}

# Moves the init sequence past every sidecar that has started.
sidecars_advance() {
  local i
  [ "$PHASE" = init ] || return 0
  for ((i = 0; i < N; i++)); do
    if [ "${SIDECAR[i]}" = 1 ] && [ "${S[st.$i]}" = running ] && [ "${S[startedp.$i]}" = true ] && [ -z "${S[advanced.$i]}" ]; then
      S[advanced.$i]=1
      next_init "$i"
    fi
  done
}

# stop_all for the regular containers, then for the sidecars with what is left of grace $1.
stop_sidecars_last() {
  local grace=$1 t0 left
  t0=$(now)
  stop_all "$grace" "$2" regular
  left=$((grace - ($(now) - t0)))
  ((left > 0)) || left=0
  stop_all "$left" "$2" sidecar
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

# Reads the exit of container $1 from docker inspect into the t.* fields.
capture() {
  local i=$1 id=${S[cid.$1]} info code oom started finished image file msg=
  usage_mark "$i"
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

# Waits for container $1 to exit (marker $RUN/<i>.done), sampling its memory cgroup's OOM record
# every half second meanwhile (marker $RUN/<i>.oom): the runtime removes the cgroup on exit.
watch() {
  local i=$1 cg=${S[cg.$1]}
  rm -f "$RUN/$i.done"
  (
    docker wait "${S[cid.$i]}" >/dev/null 2>&1 &
    w=$!
    while kill -0 "$w" 2>/dev/null; do
      if [ -n "$cg" ] && [ ! -e "$RUN/$i.oom" ] && cgroup_oom "$cg"; then : >"$RUN/$i.oom"; fi
      sleep 0.5 &
      wait $!
    done
    : >"$RUN/$i.done"
  ) &
  WATCHER[i]=$!
}

# ---- logs and usage metrics ------------------------------------------------------------------

# Adds Docker's awslogs driver to `flags` of container $1 (with LOG_GROUP): one CloudWatch Logs
# stream per run, <namespace>/<pod>/<uid>/<container>/<restart>. The Docker daemon writes with the
# instance role and creates the stream, never the group. Docker >= 20.10 keeps a local copy of the
# log for any driver ("dual logging"), so `docker logs` (FallbackToLogsOnError) keeps working.
log_flags() {
  local i=$1 ep=${AWS_ENDPOINT_URL_LOGS:-${AWS_ENDPOINT_URL:-}}
  [ -n "${LOG_GROUP:-}" ] || return 0
  [ -n "$REGION" ] || identify 1 || { log "container ${NAMES[i]}: no region from IMDS: its log stays on the host"; return 0; }
  flags+=(--log-driver=awslogs --log-opt "awslogs-region=$REGION" --log-opt "awslogs-group=$LOG_GROUP"
    --log-opt "awslogs-stream=$POD_NAMESPACE/$POD_NAME/$POD_UID/${NAMES[i]}/${S[restarts.$i]}" --log-opt awslogs-create-group=false)
  [ -z "$ep" ] || flags+=(--log-opt "awslogs-endpoint=$ep")
}

# With METRICS_SAMPLE, a background loop samples the running containers with `docker stats` every
# METRICS_SAMPLE seconds and sends the samples in one PutMetricData per METRICS_PUBLISH seconds. The
# main loop names the running containers in $RUN/usage/<i> ("<id> <start, epoch ms>"), written at
# the start and removed at the exit's capture, and never waits for the loop. Samples wait in
# $RUN/metrics.cur, a line per datum: "<tries> <container> <metric> <unit> <value> <time>". A failed
# call keeps its datums for one more try, then drops them; at most METRICS_MAX wait.
USAGE_PID=
METRICS_MAX=3000

usage_start() {
  [ -n "${METRICS_SAMPLE:-}" ] || return 0
  mkdir -p "$RUN/usage"
  rm -f "$RUN"/usage/* "$RUN/metrics.cur"
  usage_loop &
  USAGE_PID=$!
}

# Ends the loop (it also ends by itself once the supervisor is gone).
usage_stop() {
  [ -n "$USAGE_PID" ] || return 0
  kill_tree "$USAGE_PID"
  wait "$USAGE_PID" 2>/dev/null
  USAGE_PID=
}

# Container $1 runs as $2; without $2 it exited.
usage_mark() {
  [ -n "$USAGE_PID" ] || return 0
  if [ -z "$2" ]; then
    rm -f "$RUN/usage/$1"
  elif printf '%s %s\n' "$2" "$(date +%s%3N)" >"$RUN/usage/$1.tmp"; then
    mv -f "$RUN/usage/$1.tmp" "$RUN/usage/$1"
  fi
}

usage_loop() {
  local parent=$$ next t
  ATTEMPT_END=
  next=$(($(now) + METRICS_PUBLISH))
  while kill -0 "$parent" 2>/dev/null; do
    usage_sample
    t=$(now)
    if ((t >= next)); then
      usage_publish
      next=$((next + METRICS_PUBLISH))
      ((next > t)) || next=$((t + METRICS_PUBLISH))
    fi
    sleep "$METRICS_SAMPLE"
  done
}

# Reads one `docker stats` line, $1 = "<id>\t<CPUPerc>\t<MemUsage>" (12.34%, 1.5MiB / 1.944GiB),
# into U_ID, U_CPU (hundredths of a percent of one core) and U_MEM (bytes); 1 for a line it cannot read.
usage_parse() {
  local id cpu mem f k
  IFS=$'\t' read -r id cpu mem <<<"$1"
  [[ $id =~ ^[0-9a-f]{1,64}$ && $cpu =~ ^([0-9]{1,9})(\.([0-9]*))?%$ ]] || return 1
  f=${BASH_REMATCH[3]}00
  U_CPU=$((10#${BASH_REMATCH[1]} * 100 + 10#${f:0:2}))
  [[ ${mem%% / *} =~ ^([0-9]{1,6})(\.([0-9]*))?(B|KiB|MiB|GiB|TiB)$ ]] || return 1
  case ${BASH_REMATCH[4]} in B) k=0 ;; KiB) k=10 ;; MiB) k=20 ;; GiB) k=30 ;; *) k=40 ;; esac
  f=${BASH_REMATCH[3]}0000
  U_MEM=$(((10#${BASH_REMATCH[1]} << k) + ((10#${f:0:4} << k) / 10000)))
  U_ID=$id
}

# Samples every running container once: appends its CPU time since its start (core-seconds, CPU
# percentage integrated over the time since the previous sample) and its memory to metrics.cur.
usage_sample() {
  local f i id t0 ms ts line ids=() n
  for f in "$RUN"/usage/*; do
    i=${f##*/}
    [[ $i =~ ^[0-9]+$ ]] || continue
    { read -r id t0 <"$f"; } 2>/dev/null || continue
    [[ $t0 =~ ^[0-9]+$ ]] || continue
    if [ "${U[id.$i]}" != "$id" ]; then
      U[id.$i]=$id
      U[cpu.$i]=0
      U[at.$i]=$t0
    fi
    ids+=("$id")
  done
  ((${#ids[@]} > 0)) || return 0
  timeout -k 2 30 docker stats --no-stream --format '{{.ID}}\t{{.CPUPerc}}\t{{.MemUsage}}' "${ids[@]}" >"$RUN/usage.out" 2>"$RUN/usage.err"
  ms=$(date +%s%3N)
  ts=$(date -u -d "@$((ms / 1000))" +%Y-%m-%dT%H:%M:%SZ)
  n=0
  [ ! -f "$RUN/metrics.cur" ] || n=$(wc -l <"$RUN/metrics.cur")
  while IFS= read -r line; do
    usage_parse "$line" || continue
    for ((i = 0; i < N; i++)); do
      id=${U[id.$i]}
      [[ -n $id && $id == "$U_ID"* ]] || continue
      ((${#U_ID} >= 12)) || [ "$id" = "$U_ID" ] || continue
      t0=$((ms - ${U[at.$i]}))
      ((t0 > 0)) || t0=0
      U[cpu.$i]=$((${U[cpu.$i]} + U_CPU * t0 / 10))
      U[at.$i]=$ms
      ((n < METRICS_MAX)) || break
      n=$((n + 2))
      printf '0 %s CPUUsageCoreSeconds Seconds %d.%06d %s\n0 %s MemoryWorkingSetBytes Bytes %d %s\n' "${NAMES[i]}" \
        $((${U[cpu.$i]} / 1000000)) $((${U[cpu.$i]} % 1000000)) "$ts" "${NAMES[i]}" "$U_MEM" "$ts" >>"$RUN/metrics.cur"
      break
    done
  done <"$RUN/usage.out"
}

# The PutMetricData form body (query protocol) of the datum lines "$@". High resolution
# (StorageResolution=1, the same price): CloudWatch keeps each sample at its second, so a reader
# pairs a CPU counter with the time it was read, which a rate (metrics-server's) needs.
metrics_body() {
  local line name metric unit value ts n=0 p uid body
  uid=$(urlencode "$POD_UID")
  body="Action=PutMetricData&Version=2010-08-01&Namespace=$(urlencode "$METRICS_NAMESPACE")"
  for line; do
    read -r _ name metric unit value ts <<<"$line"
    n=$((n + 1))
    p=MetricData.member.$n
    body+="&$p.MetricName=$metric&$p.Dimensions.member.1.Name=PodUID&$p.Dimensions.member.1.Value=$uid&$p.Dimensions.member.2.Name=Container&$p.Dimensions.member.2.Value=$name&$p.Timestamp=${ts//:/%3A}&$p.Value=$value&$p.Unit=$unit&$p.StorageResolution=1"
  done
  printf '%s' "$body"
}

cloudwatch_endpoint() {
  local ep=${AWS_ENDPOINT_URL_CLOUDWATCH:-${AWS_ENDPOINT_URL:-https://monitoring.$REGION.amazonaws.com}}
  printf '%s' "${ep%/}"
}

# Sends metrics.cur in PutMetricData calls of at most 1000 datums (usually one); the datums of a
# failed call are kept for one more try, those already tried once are dropped.
usage_publish() {
  local all=() keep=() line j status
  [ -s "$RUN/metrics.cur" ] || return 0
  mapfile -t all <"$RUN/metrics.cur"
  : >"$RUN/metrics.cur"
  for ((j = 0; j < ${#all[@]}; j += 1000)); do
    [ -n "$REGION" ] || identify 1
    status=$(sigv4_post monitoring "$(cloudwatch_endpoint)" "application/x-www-form-urlencoded; charset=utf-8" "" \
      "$(metrics_body "${all[@]:j:1000}")" "$RUN/metrics.out" "$RUN/metrics.err") && [ "$status" = 200 ] && continue
    log "metrics: PutMetricData failed (HTTP ${status:-000}): $(head -c 300 "$RUN/metrics.out" 2>/dev/null) $(tail -c 200 "$RUN/metrics.err" 2>/dev/null)"
    for line in "${all[@]:j:1000}"; do
      [ "${line%% *}" != 0 ] || keep+=("1 ${line#* }")
    done
  done
  ((${#keep[@]} == 0)) || printf '%s\n' "${keep[@]}" >>"$RUN/metrics.cur"
}

# After the final report: the samples not sent yet, in one try, when the stop deadline $1 (0:
# none) leaves time for it.
usage_flush() {
  local t
  [ -n "${METRICS_SAMPLE:-}" ] && [ -s "$RUN/metrics.cur" ] || return 0
  t=$(now)
  (($1 == 0 || t + 3 < $1)) || return 0
  ATTEMPT_END=$((t + 10))
  (($1 == 0 || ATTEMPT_END <= $1)) || ATTEMPT_END=$1
  usage_publish
  ATTEMPT_END=
}

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
# Sets NET; returns 1 with SANDBOX_ERR when the Pod cannot get a namespace of its own.
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
  local flags=("--name=$SANDBOX_NAME" --network=bridge "${SANDBOX_FLAGS[@]}")
  ((${#SANDBOX_CMD[@]} == 0)) || flags+=("--entrypoint=${SANDBOX_CMD[0]}")
  if ! id=$(docker create "${flags[@]}" -- "$SANDBOX_IMAGE" "${SANDBOX_CMD[@]:1}" 2>"$RUN/sandbox.err") ||
    ! docker start "${id##*$'\n'}" >/dev/null 2>>"$RUN/sandbox.err"; then
    SANDBOX_ERR="failed to create the Pod sandbox: $(tail -c 512 "$RUN/sandbox.err")"
    return 1
  fi
  NET=container:${id##*$'\n'}
  log "pod sandbox started (${id##*$'\n'}); IMDS blocked for the Pod's network"
}

# Removes the Pod sandbox after every container has stopped (podman refuses to remove a container
# others joined, even exited ones, which are kept for inspection: then it is only stopped).
sandbox_down() {
  [ "$NET" != host ] || return 0
  timeout -k 2 15 docker rm -f "$SANDBOX_NAME" >/dev/null 2>&1 || timeout -k 2 15 docker stop -t 0 "$SANDBOX_NAME" >/dev/null 2>&1
}

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
  sandbox_down
  FINAL=true
  report "$deadline"
  : >"$STATE/final"
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
# SPOT_TIME and SPOT_AT (when it was seen: the stop time, recorded first).
spot_check() {
  local body t
  printf -v t '%(%s)T' -1
  ((t >= SPOT_NEXT)) || return 1
  SPOT_NEXT=$((t + SPOT_POLL_SECONDS))
  [ -n "$INSTANCE_ID" ] || return 1
  interruptible imds_to "$RUN/spot" spot/instance-action || return 1
  body=$(cat "$RUN/spot")
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
  # The stop time is recorded first, in the trap itself.
  trap '[ -n "$TERM_REQUESTED" ] || printf -v TERM_AT "%(%s)T" -1; TERM_REQUESTED=1' TERM INT
  SUPERVISOR_AT=$(iso_now)
  load_pod
  log "supervising pod $POD_NAMESPACE/$POD_NAME ($N containers)"
  [ -n "$INSTANCE_ID" ] || identify 30 || log "no instance identity from IMDS; reporting on the console only"
  # The aws CLI only when it really runs (a broken install or a file hiding it must not stop the reports).
  if command -v aws >/dev/null 2>&1 && aws --version >/dev/null 2>&1; then AWS_CLI=1; fi
  if [ -n "$AWS_CLI" ]; then log "reports: CreateTags through the aws CLI"; else log "reports: CreateTags through curl + SigV4"; fi
  utf8_locale
  usage_start
  for ((i = 0; i < N; i++)); do
    S[restarts.$i]=0
    S[quick.$i]=0
    S[delay.$i]=0
    S[pulls.$i]=0
    set_waiting "$i" PodInitializing ""
    S[st.$i]=pending
  done
  next_init -1
  if ! sandbox_up; then
    log "$SANDBOX_ERR"
    GIVE_UP=$SANDBOX_ERR
    for ((i = 0; i < N; i++)); do S[wmsg.$i]=$(b64 "$SANDBOX_ERR"); done
  fi
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
        probes_stop "$i"
        capture "$i" "" "" "$(probe_verdict "$i")"
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
    ! spot_check || finish
    probes_read
    sidecars_advance
    if [ -n "$PROBE_DIRTY" ] && (($(now) >= LAST_REPORT + PROBE_REPORT_SECONDS)); then changed=1; fi
    if [ -n "$changed" ]; then report; else pause 1; fi
  done
}

main "$@"
