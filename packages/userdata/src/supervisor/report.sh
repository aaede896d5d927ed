# shellcheck shell=bash
# shellcheck disable=SC2034 # sets globals that other fragments read
# shellcheck disable=SC2153 # names from common.sh or pod.sh, not misspellings
# Supervisor fragment: the exit report: its JSON, the message budget, the tag channel, CreateTags
# (aws CLI or SigV4). This header (up to the first blank line) is for shellcheck of this file
# alone: `npm run embed` drops it and joins the fragments in the order of fragments.ts into the
# installed supervisor.sh.

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
  [ -z "$REBALANCE_TIME" ] || J+=",\"rebalance\":{\"time\":\"$REBALANCE_TIME\"}"
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

# True when no container has a message in any slot (then every budget step equals the whole report).
no_messages() {
  local i
  for ((i = 0; i < N; i++)); do [ -z "${S[wmsg.$i]}${S[t.msg.$i]}${S[l.msg.$i]}" ] || return 1; done
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
  local s=$1 out='' c i h
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case $c in
      [A-Za-z0-9._~-]) out+=$c ;;
      *)
        printf -v h '%%%02X' "'$c"
        out+=$h
        ;;
    esac
  done
  printf '%s' "$out"
}

sha256_hex() {
  local h
  h=$(printf '%s' "$1" | sha256sum)
  printf '%s' "${h%% *}"
}

ec2_endpoint() {
  local ep=${AWS_ENDPOINT_URL_EC2:-${AWS_ENDPOINT_URL:-https://ec2.$REGION.amazonaws.com}}
  printf '%s' "${ep%/}"
}

# One CreateTags call with the tags in KEYS/VALUES: through curl + SigV4 (no interpreter to start:
# the exit shows sooner), and through the aws CLI when that fails and the CLI runs here (a broken
# signer or CLI must not cost reports). Each way is one attempt of at most ATTEMPT_SECONDS; $1: no
# attempt starts unless that much is left before this epoch second (0: no deadline).
create_tags() {
  local deadline=$1 rc=1
  if attempt_start "$deadline"; then
    create_tags_sigv4 && rc=0
  fi
  if ((rc != 0)) && { [ "$FINAL" = true ] || [ -z "$TERM_REQUESTED" ]; } && aws_cli && attempt_start "$deadline"; then
    create_tags_cli && rc=0
  fi
  ATTEMPT_END=
  return "$rc"
}

# True when the aws CLI runs here (a broken install or a file hiding it must not cost reports).
# Asked the first time the own signer's call fails, not at start: the CLI is an interpreter whose
# start costs about a third of a CPU-second, which no boot should pay for a fallback it may never
# use. The answer is kept in $RUN/aws-cli ("1" or "-"): create_tags runs in subshells.
aws_cli() {
  [ -n "$AWS_CLI" ] || AWS_CLI=$(cat "$RUN/aws-cli" 2>/dev/null)
  if [ -z "$AWS_CLI" ]; then
    AWS_CLI=-
    command -v aws >/dev/null 2>&1 && timeout -k 1 10 aws --version >/dev/null 2>&1 && AWS_CLI=1
    echo "$AWS_CLI" >"$RUN/aws-cli"
    log "CreateTags through curl + SigV4 failed: $([ "$AWS_CLI" = 1 ] && echo the aws CLI takes over || echo no aws CLI here)"
  fi
  [ "$AWS_CLI" = 1 ]
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

# CreateTags over the EC2 Query API, signed with SigV4 by curl with the role's IMDS credentials.
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

# The role's IMDS credentials, kept in this shell's CRED_* for CREDS_TTL seconds: the signed calls
# of one report (CreateTags, its doorbell) share one fetch instead of three local calls each. EC2
# offers new credentials at least five minutes before the old ones expire, so a minute-old copy is
# never an expired one. sigv4_post runs in $(…), a subshell whose fetch is lost: a caller that
# makes several calls fetches first, in its own shell (report does). Returns 1 when IMDS fails.
CREDS_TTL=60
CRED_KEY='' CRED_SECRET='' CRED_TOKEN='' CRED_AT=0
aws_credentials() {
  local t creds role
  printf -v t '%(%s)T' -1
  [ -n "$CRED_KEY" ] && ((t - CRED_AT < CREDS_TTL)) && return 0
  CRED_KEY='' CRED_SECRET='' CRED_TOKEN=''
  TOKEN=$(imds_token) || return 1
  role=$(imds_get iam/security-credentials/) || return 1
  role=${role%%$'\n'*}
  creds=$(imds_get "iam/security-credentials/$role") || return 1
  [[ $creds =~ \"AccessKeyId\"[[:space:]]*:[[:space:]]*\"([^\"]+)\" ]] && CRED_KEY=${BASH_REMATCH[1]}
  [[ $creds =~ \"SecretAccessKey\"[[:space:]]*:[[:space:]]*\"([^\"]+)\" ]] && CRED_SECRET=${BASH_REMATCH[1]}
  [[ $creds =~ \"Token\"[[:space:]]*:[[:space:]]*\"([^\"]+)\" ]] && CRED_TOKEN=${BASH_REMATCH[1]}
  if [ -z "$CRED_KEY" ] || [ -z "$CRED_SECRET" ]; then
    CRED_KEY='' CRED_SECRET='' CRED_TOKEN=''
    return 1
  fi
  CRED_AT=$t
}

# One AWS API call over HTTPS POST, signed by curl itself (--aws-sigv4, curl >= 7.75) with the
# role's IMDS credentials (aws_credentials). The key, secret and session token reach curl through a
# config read from a pipe, never a command line another process could read. $1 service, $2 endpoint
# URL, $3 content type, $4 X-Amz-Target ("" for none), $5 body, $6 the response body's file, $7 the
# error file. Prints the HTTP status.
sigv4_post() {
  local service=$1 endpoint=$2 ctype=$3 target=$4 body=$5 out=$6 err=$7
  aws_credentials || return 1
  local curl_args=(-sS --max-time "$(call_time 10)" -o "$out" -w '%{http_code}' -X POST
    --aws-sigv4 "aws:amz:$REGION:$service" -H "Content-Type: $ctype" --data-binary @-)
  [ -z "$target" ] || curl_args+=(-H "X-Amz-Target: $target")
  [ -z "${AWS_CA_BUNDLE:-}" ] || curl_args+=(--cacert "$AWS_CA_BUNDLE")
  printf '%s' "$body" | curl "${curl_args[@]}" -K <(curl_credentials "$CRED_KEY" "$CRED_SECRET" "$CRED_TOKEN") "$endpoint/" 2>"$err"
}

# A curl config with the credentials: `user` (key:secret) and the session token's header. Printed
# by builtins only, so no process ever has them in its arguments.
curl_credentials() {
  printf 'user = "%s"\n' "$(config_quote "$1:$2")"
  [ -z "$3" ] || printf 'header = "X-Amz-Security-Token: %s"\n' "$(config_quote "$3")"
}
config_quote() {
  local s=${1//\\/\\\\}
  printf '%s' "${s//\"/\\\"}"
}

# Fills KEYS/VALUES with the tag channel of BODY: the header and the chunks.
tag_pairs() {
  local k j h
  k=$(((${#BODY} + REPORT_CHUNK_SIZE - 1) / REPORT_CHUNK_SIZE))
  KEYS=("$REPORT_TAG_KEY")
  h=$(sha256_hex "$BODY")
  VALUES=("v$REPORT_VERSION seq=$SEQ chunks=$k sha256=${h:0:16}")
  for ((j = 1; j <= k; j++)); do
    KEYS+=("$REPORT_CHUNK_TAG_PREFIX$j")
    VALUES+=("${BODY:(j - 1) * REPORT_CHUNK_SIZE:REPORT_CHUNK_SIZE}")
  done
  # The host agent's certificate (host-agent.sh), for the virtual node to pin.
  [ -z "${AGENT_FP:-}" ] || {
    KEYS+=("$AGENT_TAG_KEY")
    VALUES+=("v1 port=$AGENT_PORT sha256=$AGENT_FP")
  }
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
  local cli=
  # create_tags ran in subshells: whether the CLI was tried is in $RUN/aws-cli.
  [ -n "$AWS_CLI" ] || AWS_CLI=$(cat "$RUN/aws-cli" 2>/dev/null)
  [ "$AWS_CLI" != 1 ] || cli=" (aws CLI: $(tail -c 300 "$RUN/create-tags-cli.err" 2>/dev/null))"
  log "report seq=$SEQ: CreateTags failed: $(tail -c 300 "$RUN/create-tags.err" 2>/dev/null)$cli"
  return 1
}

# Ends the background retries of an older report (a newer one replaces it). Retries that already
# wrote the tags are left to finish: only their log line and doorbell are left.
stop_writer() {
  [ -n "$WRITER" ] || return 0
  if [ ! -e "$RUN/written.$WRITER_SEQ" ]; then
    kill_tree "$WRITER"
    wait "$WRITER" 2>/dev/null
  fi
  rm -f "$RUN/written.$WRITER_SEQ"
  WRITER=
}

# Writes one report: the console line first, then the tags. $1: deadline for the tag retries (0:
# none). A non-final report makes one attempt here and leaves its retries to the background, so a
# throttled CreateTags never holds up the containers nor a stop.
report() {
  local stored=
  read -r stored 2>/dev/null <"$STATE/seq"
  [[ $stored =~ ^[0-9]+$ ]] || stored=0
  SEQ=$((stored + 1))
  printf '%s\n' "$SEQ" >"$STATE/seq"
  REPORT_TIME=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  LAST_REPORT=$(now)
  PROBE_DIRTY=
  json_report whole "$N"
  BODY=$(b64url "$J")
  printf '%s v%s %s\n' "$CONSOLE_MARKER" "$REPORT_VERSION" "$BODY" >>"$CONSOLE" 2>/dev/null
  # With no message to share a budget, the tag body is the whole report whenever it fits (the
  # same bytes tag_body would make, without making them again: each step forks).
  if ! no_messages || ((${#BODY} > REPORT_CHUNK_SIZE * REPORT_MAX_CHUNKS)); then tag_body; fi
  stop_writer
  [ -n "$INSTANCE_ID" ] || identify 1 || return 1
  # Fetched here, in this shell: the tag writes and the doorbell below share them.
  aws_credentials || true
  tag_pairs
  if [ "$FINAL" = true ]; then
    write_tags "${1:-0}" && log "report seq=$SEQ final=true written" && doorbell
    return 0
  fi
  if interruptible create_tags 0; then
    log "report seq=$SEQ final=false written"
    doorbell &
    return 0
  fi
  [ -z "$TERM_REQUESTED" ] || return 0
  { write_tags 0 1 && : >"$RUN/written.$SEQ" && log "report seq=$SEQ final=false written" && doorbell; } &
  WRITER=$!
  WRITER_SEQ=$SEQ
}

# With DOORBELL_QUEUE_URL (pod.sh), once a report's tags are written: one SQS SendMessage of
# {"v":1,"instance":"<id>","seq":<seq>}, so the controller reads this instance now. It proves
# nothing (the tags do): one try of about 3 s; a failure is logged and forgotten (the poll reads it).
doorbell() {
  [ -n "${DOORBELL_QUEUE_URL:-}" ] || return 0
  local ep=${AWS_ENDPOINT_URL_SQS:-${AWS_ENDPOINT_URL:-https://sqs.$REGION.amazonaws.com}} b
  printf -v b '{"QueueUrl":"%s","MessageBody":"{\\"v\\":1,\\"instance\\":\\"%s\\",\\"seq\\":%s}"}' "$DOORBELL_QUEUE_URL" "$INSTANCE_ID" "$SEQ"
  ATTEMPT_END=$(($(now) + 3))
  b=$(sigv4_post sqs "${ep%/}" application/x-amz-json-1.0 AmazonSQS.SendMessage "$b" "$RUN/bell" "$RUN/bell.err")
  [ "$b" = 200 ] || log "report seq=$SEQ: doorbell failed (HTTP ${b:-000})"
  ATTEMPT_END=
}
