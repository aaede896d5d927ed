#!/bin/bash
# shellcheck disable=SC2034 # its globals are read by the other fragments
# Supervisor fragment: constants, global state, logging, time, background waits, IMDS identity.
# The first fragment. This header (up to the first blank line) is for shellcheck of this file
# alone: `npm run embed` keeps its shebang, drops the rest, and joins the fragments in the order
# of fragments.ts into the installed supervisor.sh.

# Nebula host supervisor, installed by user-data from @nebula/userdata (do not edit on the host).
# Runs the Pod's containers with the Docker CLI, captures every exit from `docker inspect`, applies
# the Pod's restartPolicy with the kubelet's back-off, writes the exit report (instance tags and the
# serial console) after every change of state, and powers the instance off when the Pod is done.
# Pod data comes from pod.sh (written next to this file); nothing from the Pod is ever evaluated.
# N, NAMES, C<i>_* and the other Pod data come from pod.sh (said here, not after the directive:
# the directive stays in the installed script, whose bytes count against EC2's 16 KiB user-data).
# shellcheck disable=SC2153,SC2154
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
# IMDS is on the host: a poll every 2 s costs two local curls and keeps the notice's delay small.
# A host that is not Spot skips both: IMDS instance-life-cycle is read once (LIFE_CYCLE, spot_check).
SPOT_POLL_SECONDS=2
SPOT_REPORT_SECONDS=20

# Pod data: N, NAMES, INIT, IMAGES, PULL_POLICY, TM_PATH, TM_POLICY, HAS_CMD, HAS_ARGS, SHIM,
# C<i>_FLAGS, C<i>_CMD, C<i>_ARGS, C<i>_HOSTIP, POD_NAME, POD_NAMESPACE, POD_UID, RESTART_POLICY, GRACE_SECONDS,
# RESTART_LIMIT, BACKOFF_INITIAL, BACKOFF_MAX, BACKOFF_RESET, PULL_ATTEMPTS, REPORT_ATTEMPTS, REPORT_BASE_MS,
# HOST_DIRS, FILE_PATH/FILE_MODE/FILE_DATA (files to write first), DOCKER_AUTH, and when turned on
# LOG_GROUP (logs), METRICS_NAMESPACE/METRICS_SAMPLE/METRICS_PUBLISH (metrics) and DOORBELL_QUEUE_URL
# (the doorbell): from pod.sh, sourced by main. With the Parameter Store delivery, pod.ref names the SSM parameters that hold pod.sh
# (POD_PARAMETERS, POD_SHA256, PARAMETER_WAIT_SECONDS) and pod.sh is fetched into memory-backed /run;
# there pod.sh may also name service-account token files (TOKEN_PATH/TOKEN_KEY/TOKEN_MODE,
# TOKEN_PARAMETER, TOKEN_POLL), which parameters.sh reads and renews.
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
REBALANCE_TIME=
REBALANCE_NEW=
LIFE_CYCLE=
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
WAKE_FD=
WRITER_SEQ=
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

# The main loop's wake pipe ($RUN/wake, held open read-write for the supervisor's life, so a line
# written while the loop is busy waits for its next nap): an exit watcher writes a line when its
# container exits, and the loop captures the exit at once instead of at its next tick.
wake_open() {
  rm -f "$RUN/wake"
  if mkfifo -m 600 "$RUN/wake" 2>/dev/null && exec {WAKE_FD}<>"$RUN/wake"; then return 0; fi
  WAKE_FD=
  log "no wake pipe: exits are seen at the loop's next tick (up to 1 s later)"
}
wake() { [ -z "$WAKE_FD" ] || printf '\n' >&"$WAKE_FD"; }

# Like pause, but ends early when the wake pipe has a line (and takes that one line).
nap() {
  [ -n "$WAKE_FD" ] || {
    pause "$1"
    return
  }
  [ -z "$TERM_REQUESTED" ] || return 1
  read -r -t "$1" -u "$WAKE_FD" _ &
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
# Each is stopped before its children are listed, so none starts a child that outlives it (a
# loop's next `sleep`); the SIGTERM waits for the SIGCONT that follows it.
kill_tree() {
  local child
  kill -STOP "$1" 2>/dev/null
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null
  kill -CONT "$1" 2>/dev/null
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
