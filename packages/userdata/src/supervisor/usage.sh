# shellcheck shell=bash
# shellcheck disable=SC2154 # U is associative (common.sh); alone, shellcheck reads U[at.$i] as $at
# Supervisor fragment: container logs to CloudWatch Logs (awslogs) and usage metrics (docker
# stats, PutMetricData). This header (up to the first blank line) is for shellcheck of this file
# alone: `npm run embed` drops it and joins the fragments in the order of fragments.ts into the
# installed supervisor.sh.

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
