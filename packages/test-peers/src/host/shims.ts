/**
 * The programs a guest finds on its PATH: `systemctl`, `shutdown` (and `poweroff`, `halt`,
 * `reboot`), `docker`, and the script that enters a guest's sandbox. They are written per guest
 * into a directory that the sandbox mounts over `/usr/local/sbin`, which is on systemd's default
 * PATH, so both the user-data and the units it installs find them without any PATH setting.
 *
 * @packageDocumentation
 */

/** Quotes a string for bash (single quotes). */
function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

/** Settings baked into one guest's `docker` shim. */
export interface DockerShimSettings {
  /** The guest's instance ID (container label `nebula-sim.guest` and name prefix). */
  readonly instanceId: string;
  /** The simulator run's ID (container label `nebula-sim.run`, for cleanup after a crash). */
  readonly runId: string;
  /** A per-guest directory for the name map and the `docker.log` call log. */
  readonly stateDir: string;
  /** The OCI runtime podman uses. */
  readonly runtime: string;
  /** `--ulimit` value for open files, e.g. `nofile=1024:20000`; empty: `1024:<the caller's hard limit>`. */
  readonly nofile: string;
  /** `--ulimit` value for processes, e.g. `nproc=4096:4096`; empty: the caller's hard limit, at most `kernel.pid_max` and 65536. */
  readonly nproc: string;
  /** `--network` value used when the caller gives none. */
  readonly network: string;
}

/**
 * The `docker` shim: the Docker CLI subset of guest contract §3 (`pull`, `create`, `run`,
 * `start`, `wait`, `inspect`, `logs`, `stop`, `kill`, `rm`, `cp`, plus `ps`, `exec`, `images`)
 * over real podman with runc. Container names are kept per guest (podman sees
 * `nsim-<instance>--<name>`); time fields in `--format` templates print as Docker prints them
 * (RFC 3339); images are local only; images whose name is `nebula-sim/oomkill` get the scripted
 * OOM outcome (see the README).
 */
export function dockerShim(settings: DockerShimSettings): string {
  return `#!/bin/bash
# docker for guest ${settings.instanceId}: the Nebula instance-host simulator's Docker CLI over podman + runc.
set -u
GUEST=${shellQuote(settings.instanceId)}
RUN=${shellQuote(settings.runId)}
STATE=${shellQuote(settings.stateDir)}
PODMAN=(podman --runtime ${shellQuote(settings.runtime)} --cgroup-manager=cgroupfs)
NOFILE=${shellQuote(settings.nofile)}
NPROC=${shellQuote(settings.nproc)}
NETWORK=${shellQuote(settings.network)}
# runc may not raise a limit over the caller's hard limit: default to what this process has.
hard_n=$(ulimit -Hn); [[ $hard_n == unlimited ]] && hard_n=1048576
# conmon caps RLIMIT_NPROC at kernel.pid_max; a larger value makes runc fail with EPERM.
pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
hard_u=$(ulimit -Hu); [[ $hard_u == unlimited || $hard_u -gt $pid_max ]] && hard_u=$pid_max
((hard_u > 65536)) && hard_u=65536
[[ -n $NOFILE ]] || NOFILE="nofile=$((hard_n < 1024 ? hard_n : 1024)):$hard_n"
[[ -n $NPROC ]] || NPROC="nproc=$hard_u:$hard_u"
mkdir -p "$STATE/names"
{ printf '%s docker' "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"; printf ' %q' "$@"; echo; } >>"$STATE/docker.log"

ref() { if [[ -f "$STATE/names/$1" ]]; then cat "$STATE/names/$1"; else printf '%s' "$1"; fi; }
forget() {
  local r=$1 f
  if [[ -f "$STATE/names/$r" ]]; then rm -f "$STATE/names/$r"; return; fi
  for f in "$STATE/names/"*; do [[ -f $f && $(cat "$f") == "$r"* ]] && rm -f "$f"; done
}
scripted_prepare() {  # $1 = podman id: give a scripted container its outcome before it starts
  local outcome dir
  outcome=$("\${PODMAN[@]}" inspect --format '{{index .Config.Labels "nebula-sim.outcome"}}' "$1" 2>/dev/null) || return 0
  [[ $outcome == oomkill ]] || return 0
  # podman reads <StaticDir>/oom when the container exits and then reports State.OOMKilled=true.
  # Starting a container first initialises it, which deletes that file: initialise it here (a
  # no-op error when it already is), then mark it, so the mark is there however soon it exits.
  "\${PODMAN[@]}" init "$1" >/dev/null 2>&1
  dir=$("\${PODMAN[@]}" inspect --format '{{.StaticDir}}' "$1" 2>/dev/null) || return 0
  : >"$dir/oom"
}
# translate VALUE_OPTIONS args...: container references become podman references.
# Also sets POS: the container references as the guest gave them (for docker's echo of names).
translate() {
  local value_opts=" $1 " a; shift; OUT=(); POS=()
  while (($#)); do
    a=$1; shift
    if [[ $a == -* ]]; then
      OUT+=("$a")
      if [[ $a != *=* && $value_opts == *" $a "* && $# -gt 0 ]]; then OUT+=("$1"); shift; fi
    else OUT+=("$(ref "$a")"); POS+=("$a"); fi
  done
}
BOOL=" -d --detach -i --interactive -t --tty --rm --privileged --init --read-only --no-healthcheck --oom-kill-disable -P --publish-all --sig-proxy --disable-content-trust -q --quiet "
run_or_create() {  # $1 = run|create, then docker's arguments
  local verb=$1 a key val name="" detach=0 has_net=0 has_pull=0 has_nofile=0 has_nproc=0
  local -a opts=() cmd=() opts_add=()
  shift
  while (($#)); do
    a=$1
    [[ $a == -- ]] && { shift; break; }
    [[ $a == -* && $a != - ]] || break
    shift
    if [[ $a == --*=* ]]; then key=\${a%%=*}; val=\${a#*=}; opts_add=("$a")
    elif [[ $BOOL == *" $a "* || $a =~ ^-[ditPq]+$ ]]; then key=$a; val=""; opts_add=("$a")
      [[ $a =~ ^-[a-zA-Z]*d ]] && detach=1
    elif [[ $a =~ ^-[a-zA-Z].+ ]]; then key=\${a:0:2}; val=\${a:2}; opts_add=("$a")
    else key=$a; val=\${1-}; shift || true; opts_add=("$a" "$val"); fi
    case $key in
      --name) name=$val; continue ;;
      --gpus) continue ;;
      -d|--detach) [[ $val == false ]] || detach=1 ;;
      --network|--net) has_net=1 ;;
      --pull) has_pull=1 ;;
      --ulimit) [[ $val == nofile=* ]] && has_nofile=1; [[ $val == nproc=* ]] && has_nproc=1 ;;
    esac
    opts+=("\${opts_add[@]}")
  done
  local image=\${1-}; shift || true
  cmd=("$@")
  local outcome=""
  if [[ $image =~ (^|/)nebula-sim/oomkill(:|$) ]]; then
    outcome=oomkill; cmd=()
    local -a kept=(); local i=0
    while ((i < \${#opts[@]})); do
      # Created, marked, then started (below): no entrypoint of the caller's, and no detach flag,
      # which podman create refuses.
      case \${opts[i]} in
        --entrypoint) i=$((i + 2)); continue ;;
        --entrypoint=*|-d|--detach|--detach=*) ;;
        -[a-zA-Z]*d*) [[ \${opts[i]} =~ ^-[ditPq]+$ ]] && kept+=("\${opts[i]//d/}") || kept+=("\${opts[i]}") ;;
        *) kept+=("\${opts[i]}") ;;
      esac
      i=$((i + 1))
    done
    opts=("\${kept[@]}")
  fi
  local -a extra=(--label "nebula-sim.guest=$GUEST" --label "nebula-sim.run=$RUN")
  [[ -n $name ]] && extra+=(--name "nsim-$GUEST--$name")
  ((has_pull)) || extra+=(--pull=never)
  ((has_net)) || extra+=(--network "$NETWORK")
  ((has_nofile)) || extra+=(--ulimit "$NOFILE")
  ((has_nproc)) || extra+=(--ulimit "$NPROC")
  local id rc
  if [[ $verb == create || -n $outcome ]]; then
    id=$("\${PODMAN[@]}" create "\${extra[@]}" "\${opts[@]}" "$image" "\${cmd[@]}") || return $?
  else
    if ((detach)); then
      id=$("\${PODMAN[@]}" run "\${extra[@]}" "\${opts[@]}" "$image" "\${cmd[@]}") || return $?
    else
      "\${PODMAN[@]}" run "\${extra[@]}" "\${opts[@]}" "$image" "\${cmd[@]}"; return $?
    fi
  fi
  id=\${id##*$'\\n'}
  [[ -n $name ]] && printf '%s' "$id" >"$STATE/names/$name"
  if [[ $verb == run && -n $outcome ]]; then
    scripted_prepare "$id"
    "\${PODMAN[@]}" start "$id" >/dev/null || return $?
    if ((detach == 0)); then
      "\${PODMAN[@]}" logs -f "$id"
      rc=$("\${PODMAN[@]}" wait "$id") || return $?
      return "$rc"
    fi
  fi
  printf '%s\\n' "$id"
}

[[ \${1-} == container ]] && shift
sub=\${1-}; shift || true
case $sub in
  run|create) run_or_create "$sub" "$@"; exit $? ;;
  start)
    translate "--detach-keys" "$@"
    for a in "\${POS[@]}"; do scripted_prepare "$(ref "$a")"; done
    "\${PODMAN[@]}" start "\${OUT[@]}" >/dev/null || exit $?
    for a in "\${POS[@]}"; do printf '%s\\n' "$a"; done
    exit 0 ;;
  inspect)
    translate "-f --format --type" "$@"
    for i in "\${!OUT[@]}"; do
      OUT[i]=$(printf '%s' "\${OUT[i]}" | sed -E 's/\\{\\{ *\\.State\\.(StartedAt|FinishedAt) *\\}\\}/{{.State.\\1.UTC.Format "2006-01-02T15:04:05.999999999Z07:00"}}/g')
    done
    exec "\${PODMAN[@]}" inspect "\${OUT[@]}" ;;
  wait) translate "--condition --interval -i" "$@"; exec "\${PODMAN[@]}" wait "\${OUT[@]}" ;;
  logs) translate "--tail -n --since --until" "$@"; exec "\${PODMAN[@]}" logs "\${OUT[@]}" ;;
  stop) translate "-t --time -s --signal" "$@"; "\${PODMAN[@]}" stop "\${OUT[@]}" >/dev/null || exit $?
    printf '%s\\n' "\${POS[@]}"; exit 0 ;;
  kill) translate "-s --signal" "$@"; "\${PODMAN[@]}" kill "\${OUT[@]}" >/dev/null || exit $?
    printf '%s\\n' "\${POS[@]}"; exit 0 ;;
  restart) translate "-t --time" "$@"; exec "\${PODMAN[@]}" restart "\${OUT[@]}" ;;
  rm)
    translate "-t --time" "$@"
    "\${PODMAN[@]}" rm "\${OUT[@]}" >/dev/null; rc=$?
    for a in "\${POS[@]}"; do forget "$a"; ((rc)) || printf '%s\\n' "$a"; done
    exit $rc ;;
  cp)
    args=()
    for a in "$@"; do
      if [[ $a != -* && $a == *:* && $a != /* && $a != .* ]]; then args+=("$(ref "\${a%%:*}"):\${a#*:}"); else args+=("$a"); fi
    done
    exec "\${PODMAN[@]}" cp "\${args[@]}" ;;
  exec)
    args=(); while (($#)) && [[ $1 == -* ]]; do
      args+=("$1"); case $1 in -e|--env|-u|--user|-w|--workdir|--env-file|--detach-keys) args+=("$2"); shift ;; esac; shift
    done
    (($#)) && { args+=("$(ref "$1")"); shift; }
    exec "\${PODMAN[@]}" exec "\${args[@]}" "$@" ;;
  ps) exec "\${PODMAN[@]}" ps --filter "label=nebula-sim.guest=$GUEST" "$@" ;;
  pull)
    quiet=0
    for a in "$@"; do
      case $a in
        -q|--quiet) quiet=1 ;;
        -*) ;;
        *)
          if "\${PODMAN[@]}" image exists "$a"; then
            ((quiet)) && printf '%s\\n' "$a" || printf 'Status: Image is up to date for %s\\n%s\\n' "$a" "$a"
          else
            printf 'Error response from daemon: pull access denied for %s, repository does not exist or may require '"'"'docker login'"'"' (the instance-host simulator has local images only)\\n' "$a" >&2
            exit 1
          fi ;;
      esac
    done
    exit 0 ;;
  ""|help|--help) echo "Usage: docker COMMAND (instance-host simulator: podman + runc)"; exit 0 ;;
  *) exec "\${PODMAN[@]}" "$sub" "$@" ;;
esac
`;
}

/** The `systemctl` shim: forwards its arguments to the simulator's init over the guest's socket. */
export function systemctlShim(socketPath: string): string {
  return `#!/bin/bash
# systemctl of the Nebula instance-host simulator: the simulator plays the guest's init.
out=$(printf '%s\\0' "$@" | curl -sS --max-time 86400 --unix-socket ${shellQuote(socketPath)} --data-binary @- http://init/systemctl) || {
  echo "systemctl: the instance-host simulator's init is not answering" >&2; exit 1; }
code=\${out%%$'\\n'*}
body=\${out#*$'\\n'}
[[ $out == *$'\\n'* ]] || body=""
if [[ -n $body ]]; then if [[ $code == 0 ]]; then printf '%s\\n' "$body"; else printf '%s\\n' "$body" >&2; fi; fi
exit "\${code:-1}"
`;
}

/** The `shutdown` shim (also installed as `poweroff`, `halt` and `reboot`). */
export function shutdownShim(socketPath: string, verb: string): string {
  return `#!/bin/bash
# ${verb} of the Nebula instance-host simulator: asks the simulator's init to stop every unit in order, then power off.
out=$( (printf '%s\\0' ${shellQuote(verb)}; printf '%s\\0' "$@") | curl -sS --max-time 60 --unix-socket ${shellQuote(socketPath)} --data-binary @- http://init/shutdown) || {
  echo "${verb}: the instance-host simulator's init is not answering" >&2; exit 1; }
code=\${out%%$'\\n'*}
body=\${out#*$'\\n'}
[[ $out == *$'\\n'* ]] || body=""
[[ -n $body ]] && printf '%s\\n' "$body" >&2
exit "\${code:-1}"
`;
}

/**
 * The sandbox entry script, run as `unshare --mount -- bash enter.sh <mounts-file> <argv...>`.
 * Each line of the mounts file is `bind<TAB>source<TAB>target` (bind-mount, private to the new
 * mount namespace) or `hide<TAB><scratch-dir><TAB>path` (make `path` absent: its directory is
 * replaced by a view of symlinks to everything else in it, built on a tmpfs over the scratch
 * directory). Then it execs argv, so the process keeps its PID.
 */
export const ENTER_SCRIPT = `#!/bin/bash
# Enters a guest sandbox of the Nebula instance-host simulator (inside unshare --mount).
set -e
mounts=$1; shift
n=0; scratch_ready=
while IFS=$'\t' read -r kind src dst; do
  case $kind in
    bind)
      [[ -e $dst ]] || mkdir -p "$dst"
      mount --bind "$src" "$dst"
      ;;
    hide)
      [[ -e $dst ]] || continue
      dir=\${dst%/*}; n=$((n + 1))
      [[ -n $scratch_ready ]] || { mount -t tmpfs -o size=16m,mode=0755 nebula-sim-hide "$src"; scratch_ready=1; }
      mkdir -p "$src/$n/real" "$src/$n/view"
      mount --bind "$dir" "$src/$n/real"
      cp -as "$src/$n/real/." "$src/$n/view/"
      rm -f "$src/$n/view/\${dst##*/}"
      mount --bind "$src/$n/view" "$dir" ;;
  esac
done <"$mounts"
cd /
exec "$@"
`;

/**
 * The simulator's watchdog, run as
 * `bash -c WATCHDOG_SCRIPT watchdog <node-pid> <pgid-file> <run-id> <runtime> [<dir-to-remove>]`:
 * when the Node process that runs the simulator disappears without `close()` (SIGKILL, crash), it
 * kills every guest process group listed in the file, removes the run's containers and the
 * directory. `close()` ends it with SIGTERM first.
 */
export const WATCHDOG_SCRIPT = `parent=$1; pgids=$2; run=$3; runtime=$4; leftover=\${5-}; s=
trap 'kill "$s" 2>/dev/null; exit 0' TERM
while kill -0 "$parent" 2>/dev/null; do sleep 1 & s=$!; wait "$s"; done
while read -r pg; do [ -n "$pg" ] && kill -KILL -- "-$pg" 2>/dev/null; done <"$pgids"
podman --runtime "$runtime" --cgroup-manager=cgroupfs ps -aq --filter "label=nebula-sim.run=$run" |
  xargs -r podman --runtime "$runtime" --cgroup-manager=cgroupfs rm -f -t 0 >/dev/null 2>&1
[ -z "$leftover" ] || rm -rf -- "$leftover"
exit 0`;
