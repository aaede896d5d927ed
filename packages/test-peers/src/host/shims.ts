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
  /**
   * The run's containers directory: podman writes the ID of every container the shim creates to
   * a file of its own there (`<instance>.<pid>.<time>`, by `--cidfile`), so that the simulator
   * removes the guest's containers by ID, even when `podman ps` cannot list them.
   */
  readonly containersDir: string;
  /** The OCI runtime podman uses. */
  readonly runtime: string;
  /** `--ulimit` value for open files, e.g. `nofile=1024:20000`; empty: `1024:<the caller's hard limit>`. */
  readonly nofile: string;
  /** `--ulimit` value for processes, e.g. `nproc=4096:4096`; empty: the caller's hard limit, at most `kernel.pid_max` and 65536. */
  readonly nproc: string;
  /** `--network` value used when the caller gives none. */
  readonly network: string;
  /**
   * The guest's init socket, where the simulator plays the daemon's side of log drivers (the
   * `--log-driver`/`--log-opt` check, the awslogs driver). Without it, any log flag fails the create.
   */
  readonly initSocket?: string;
  /**
   * How long pulling an image the guest's volume does not hold yet takes (ms): an explicit `docker
   * pull` (also `docker image pull`), or the implicit pull of `docker run`/`create` (Docker's
   * `--pull=missing`; `--pull=always` pulls too, `--pull=never` fails for an image the volume does
   * not hold). The volume holds an image once the guest pulled it, recorded as a file named after
   * the image's ID in `imagesDir`; pulling it again costs nothing. Pulls of one image wait for each
   * other (Docker joins them). `docker inspect --type=image` and `docker image inspect` say `No
   * such image` for an image the volume does not hold. An image this machine does not have fails
   * as without a delay. Default 0: every local image is held, pulls are instant, nothing is recorded.
   */
  readonly pullDelayMs?: number;
  /** Where the guest's volume records the images it pulled, one file per image ID. Default `<stateDir>/images`. */
  readonly imagesDir?: string;
  /** A file where the shim says each pull that waits (or does not), as lines of the guest's `events.log`. */
  readonly eventsLog?: string;
}

/**
 * The `docker` shim: the Docker CLI subset of guest contract §3 (`pull`, `create`, `run`,
 * `start`, `wait`, `inspect`, `logs`, `stop`, `kill`, `rm`, `cp`, `stats`, plus `ps`, `exec`,
 * `images`) over real podman with runc. Container names are kept per guest (podman sees
 * `nsim-<instance>--<name>`); time fields in `--format` templates print as Docker prints them
 * (RFC 3339); images are local only; images whose name is `nebula-sim/oomkill` get the scripted
 * OOM outcome (see the README). `--log-driver`/`--log-opt` are checked as Docker's daemon checks
 * them, and the `awslogs` driver's work is done by the simulator (through `initSocket`) around each
 * start; `docker stats --no-stream --format …` prints Docker's figures (CPU over one second, memory
 * without the page cache, binary units) read from the container's cgroup.
 */
export function dockerShim(settings: DockerShimSettings): string {
  return `#!/bin/bash
# docker for guest ${settings.instanceId}: the Nebula instance-host simulator's Docker CLI over podman + runc.
set -u
GUEST=${shellQuote(settings.instanceId)}
RUN=${shellQuote(settings.runId)}
STATE=${shellQuote(settings.stateDir)}
CIDS=${shellQuote(settings.containersDir)}
PODMAN=(podman --runtime ${shellQuote(settings.runtime)} --cgroup-manager=cgroupfs)
NOFILE=${shellQuote(settings.nofile)}
NPROC=${shellQuote(settings.nproc)}
NETWORK=${shellQuote(settings.network)}
INIT=${shellQuote(settings.initSocket ?? "")}
PULL_DELAY_MS=${Math.max(0, Math.trunc(settings.pullDelayMs ?? 0))}
IMAGES=${shellQuote(settings.imagesDir ?? `${settings.stateDir}/images`)}
EVENTS=${shellQuote(settings.eventsLog ?? "")}
# runc may not raise a limit over the caller's hard limit: default to what this process has.
hard_n=$(ulimit -Hn); [[ $hard_n == unlimited ]] && hard_n=1048576
# conmon caps RLIMIT_NPROC at kernel.pid_max; a larger value makes runc fail with EPERM.
pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
hard_u=$(ulimit -Hu); [[ $hard_u == unlimited || $hard_u -gt $pid_max ]] && hard_u=$pid_max
((hard_u > 65536)) && hard_u=65536
[[ -n $NOFILE ]] || NOFILE="nofile=$((hard_n < 1024 ? hard_n : 1024)):$hard_n"
[[ -n $NPROC ]] || NPROC="nproc=$hard_u:$hard_u"
mkdir -p "$STATE/names" "$CIDS"
{ printf '%s docker' "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"; printf ' %q' "$@"; echo; } >>"$STATE/docker.log"

# daemon PATH ARGS...: the simulator's side of Docker's daemon (log drivers); sets DCODE and DOUT.
daemon() {
  local path=$1 out; shift
  if [[ -z $INIT ]]; then DCODE=1; DOUT="log drivers need the instance-host simulator (this docker has no init socket)"; return; fi
  out=$(printf '%s\\0' "$@" | curl -sS --max-time 300 --unix-socket "$INIT" --data-binary @- "http://init$path") || {
    DCODE=1; DOUT="the instance-host simulator's init is not answering"; return; }
  DCODE=\${out%%$'\\n'*}; DOUT=\${out#*$'\\n'}; [[ $out == *$'\\n'* ]] || DOUT=""
}
# With a pull delay (PULL_DELAY_MS > 0), the guest's volume holds only the images it pulled: a file
# named after the image's ID in $IMAGES. say LINE: a line in the guest's events.log.
say() { [[ -z $EVENTS ]] || printf '%s %s\\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" "$*" >>"$EVENTS"; }
# image_id REF: the ID of a local image; fails when this machine has no such image.
image_id() { "\${PODMAN[@]}" image inspect --format '{{.Id}}' "$1" 2>/dev/null; }
# held ID: whether the guest's volume holds the image.
held() { [[ -n $1 && -f $IMAGES/$1 ]]; }
# long_ref REF: the reference as Docker's pull messages print it (":latest" added when untagged).
long_ref() { if [[ $1 == *@* || \${1##*/} == *:* ]]; then printf '%s' "$1"; else printf '%s:latest' "$1"; fi; }
# download REF ID: the volume gets the image. It waits PULL_DELAY_MS when the volume does not hold
# it yet (a pull of the same image in flight is waited for, as Docker joins it), nothing when it
# does. Returns 0 when it downloaded, 1 when the volume held the image already.
download() {
  local ref=$1 id=$2 lock rc=1
  mkdir -p "$IMAGES"
  exec {lock}>>"$IMAGES/.$id.lock"
  flock "$lock"
  if held "$id"; then
    say "docker pull $ref: image \${id:0:12} is on this host's volume: no download"
  else
    say "docker pull $ref: image \${id:0:12} is not on this host's volume: downloading ($PULL_DELAY_MS ms)"
    sleep "$((PULL_DELAY_MS / 1000)).$(printf '%03d' $((PULL_DELAY_MS % 1000)))"
    printf '%s\\n' "$ref" >"$IMAGES/.$id.part" && mv -f "$IMAGES/.$id.part" "$IMAGES/$id"
    say "docker pull $ref: image \${id:0:12} downloaded; on this host's volume from now on"
    rc=0
  fi
  exec {lock}>&-
  return $rc
}
# pull_cmd ARGS...: docker pull. Local images only; with a pull delay, one the volume does not hold
# yet takes that long.
pull_cmd() {
  local quiet=0 a id status
  for a in "$@"; do
    case $a in
      -q|--quiet) quiet=1 ;;
      -*) ;;
      *)
        if "\${PODMAN[@]}" image exists "$a"; then
          status="Image is up to date for"
          if ((PULL_DELAY_MS > 0)) && id=$(image_id "$a") && download "$a" "$id"; then
            status="Downloaded newer image for"
          fi
          if ((quiet)); then printf '%s\\n' "$a"; else printf 'Status: %s %s\\n%s\\n' "$status" "$a" "$a"; fi
        else
          printf 'Error response from daemon: pull access denied for %s, repository does not exist or may require '"'"'docker login'"'"' (the instance-host simulator has local images only)\\n' "$a" >&2
          exit 1
        fi ;;
    esac
  done
  exit 0
}
# inspect_images ARGS...: docker inspect --type=image (or docker image inspect) with a pull delay:
# an image the volume does not hold is "No such image", as on a host that never pulled it.
inspect_images() {
  local a id fmt=0
  local -a opts=() refs=() kept=() missing=()
  while (($#)); do
    a=$1; shift
    if [[ $a == -* ]]; then
      opts+=("$a")
      [[ $a == -f || $a == --format ]] && fmt=1
      [[ $a == --format=* ]] && fmt=1
      if [[ $a == -f || $a == --format || $a == --type ]] && (($#)); then opts+=("$1"); shift; fi
    else refs+=("$a"); fi
  done
  for a in "\${refs[@]}"; do
    if id=$(image_id "$a") && held "$id"; then kept+=("$a"); else missing+=("$a"); fi
  done
  ((\${#missing[@]} == 0)) && exec "\${PODMAN[@]}" inspect "\${opts[@]}" "\${refs[@]}"
  if ((\${#kept[@]} > 0)); then "\${PODMAN[@]}" inspect "\${opts[@]}" "\${kept[@]}"
  elif ((!fmt)); then echo "[]"; fi
  for a in "\${missing[@]}"; do printf 'Error: No such image: %s\\n' "$a" >&2; done
  exit 1
}
# logopts_of REF: the awslogs options file of the container (by full or short podman ID), if any.
logopts_of() {
  local f
  [[ -n $1 ]] || return 0
  for f in "$STATE/logopts/$1"*; do [[ -f $f ]] && { printf '%s' "$f"; return 0; }; done
  return 0
}
# start_one REF: starts a container; with the awslogs driver, the simulator creates its stream
# first (a failure fails the start, as Docker's does) and forwards the run's output after.
start_one() {
  local r=$1 f rc result=started
  local -a o=()
  scripted_prepare "$r"
  f=$(logopts_of "$r")
  if [[ -z $f ]]; then "\${PODMAN[@]}" start "$r" >/dev/null; return $?; fi
  mapfile -t o <"$f"
  daemon /docker/awslogs-start "\${f##*/}" "\${o[@]}"
  if [[ $DCODE != 0 ]]; then
    printf 'Error response from daemon: failed to create task for container: failed to initialize logging driver: %s\\n' "$DOUT" >&2
    return 1
  fi
  "\${PODMAN[@]}" start "$r" >/dev/null; rc=$?
  ((rc == 0)) || result=failed
  daemon /docker/awslogs-started "\${f##*/}" "$result"
  return $rc
}
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
  local net_ctr="" has_hostname=0
  local log_driver="" has_log=0 awslogs=0 cidfile="" pull_policy=missing
  local -a opts=() cmd=() opts_add=() log_opts=() log_podman=()
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
      --log-driver) log_driver=$val; has_log=1; continue ;;
      --log-opt) log_opts+=("$val"); has_log=1; continue ;;
      -d|--detach) [[ $val == false ]] || detach=1 ;;
      --network|--net) has_net=1; [[ $val == container:* ]] && net_ctr=\${val#container:} ;;
      --hostname|-h) has_hostname=1 ;;
      --pull) if ((PULL_DELAY_MS > 0)); then pull_policy=$val; continue; fi; has_pull=1 ;;
      --cidfile) cidfile=$val ;;
      --ulimit) [[ $val == nofile=* ]] && has_nofile=1; [[ $val == nproc=* ]] && has_nproc=1 ;;
    esac
    opts+=("\${opts_add[@]}")
  done
  if ((has_log)); then
    # Docker's daemon checks the log configuration on create; the simulator says what Docker would.
    daemon /docker/log-config "$log_driver" "\${log_opts[@]}"
    if [[ $DCODE != 0 ]]; then
      printf 'docker: Error response from daemon: %s.\\nSee '"'"'docker %s --help'"'"'.\\n' "$DOUT" "$verb" >&2
      return 125
    fi
    case $DOUT in
      none) log_podman=(--log-driver none) ;;
      awslogs) awslogs=1 ;;
    esac  # json-file, local: podman's own log (k8s-file), which docker logs reads
  fi
  if [[ -n $net_ctr ]]; then
    # Docker gives a container that joins another's network that container's host name (and
    # refuses one of its own); podman keeps a UTS namespace of the joiner's own unless told.
    if ((has_hostname)); then
      printf 'docker: Error response from daemon: conflicting options: hostname and the network mode.\nSee '"'"'docker %s --help'"'"'.\n' "$verb" >&2
      return 125
    fi
    opts+=(--uts "container:$net_ctr")
  fi
  local image=\${1-}; shift || true
  cmd=("$@")
  if ((PULL_DELAY_MS > 0)) && [[ -n $image ]] && "\${PODMAN[@]}" image exists "$image"; then
    # Docker's --pull on a volume that holds only what the guest pulled (an image this machine
    # does not have fails in podman, --pull=never, as without a pull delay).
    local iid; iid=$(image_id "$image")
    case $pull_policy in
      missing)
        if ! held "$iid"; then
          printf 'Unable to find image '"'"'%s'"'"' locally\\n' "$(long_ref "$image")" >&2
          download "$image" "$iid"
          printf 'Status: Downloaded newer image for %s\\n' "$(long_ref "$image")" >&2
        fi ;;
      always)
        if download "$image" "$iid"; then
          printf 'Status: Downloaded newer image for %s\\n' "$(long_ref "$image")" >&2
        else printf 'Status: Image is up to date for %s\\n' "$(long_ref "$image")" >&2; fi ;;
      never)
        if ! held "$iid"; then
          printf 'docker: Error response from daemon: No such image: %s.\\nSee '"'"'docker %s --help'"'"'.\\n' "$(long_ref "$image")" "$verb" >&2
          return 125
        fi ;;
      *)
        printf 'docker: invalid pull option: '"'"'%s'"'"': must be one of "always", "missing" or "never".\\nSee '"'"'docker %s --help'"'"'.\\n' "$pull_policy" "$verb" >&2
        return 125 ;;
    esac
  fi
  if ((awslogs)) && [[ $verb == run ]]; then
    # Created, then started by start_one (below): no detach flag, which podman create refuses.
    local -a kept_opts=()
    for a in "\${opts[@]}"; do
      case $a in
        -d|--detach|--detach=*) ;;
        -[a-zA-Z]*d*) [[ $a =~ ^-[ditPq]+$ ]] && kept_opts+=("\${a//d/}") || kept_opts+=("$a") ;;
        *) kept_opts+=("$a") ;;
      esac
    done
    opts=("\${kept_opts[@]}")
  fi
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
  extra+=("\${log_podman[@]}")
  # The simulator removes containers by these IDs. A --cidfile of the caller's wins (podman takes
  # one); its ID is copied into the run's containers directory once podman returns.
  local own_cid="$CIDS/$GUEST.$$.\${EPOCHREALTIME/./}"
  [[ -n $cidfile ]] || extra+=(--cidfile "$own_cid")
  local id rc
  if [[ $verb == create || -n $outcome ]] || ((awslogs)); then
    id=$("\${PODMAN[@]}" create "\${extra[@]}" "\${opts[@]}" "$image" "\${cmd[@]}"); rc=$?
  elif ((detach)); then
    id=$("\${PODMAN[@]}" run "\${extra[@]}" "\${opts[@]}" "$image" "\${cmd[@]}"); rc=$?
  else
    "\${PODMAN[@]}" run "\${extra[@]}" "\${opts[@]}" "$image" "\${cmd[@]}"; rc=$?
  fi
  [[ -z $cidfile || ! -s $cidfile ]] || cp -- "$cidfile" "$own_cid" 2>/dev/null
  ((rc == 0)) || return $rc
  [[ $verb == create || -n $outcome ]] || ((awslogs || detach)) || return 0
  id=\${id##*$'\\n'}
  [[ -n $name ]] && printf '%s' "$id" >"$STATE/names/$name"
  if ((awslogs)); then mkdir -p "$STATE/logopts"; printf '%s\\n' "\${log_opts[@]}" >"$STATE/logopts/$id"; fi
  if [[ $verb == run ]] && { [[ -n $outcome ]] || ((awslogs)); }; then
    start_one "$id" || return 125
    if ((detach == 0)); then
      "\${PODMAN[@]}" logs -f "$id"
      rc=$("\${PODMAN[@]}" wait "$id") || return $?
      return "$rc"
    fi
  fi
  printf '%s\\n' "$id"
}

# cg_cpu CGROUP: the cgroup's CPU time so far, in ns (cgroup v1 cpuacct, or v2 cpu.stat).
cg_cpu() {
  local v
  if [[ -r /sys/fs/cgroup/cpuacct$1/cpuacct.usage ]]; then cat "/sys/fs/cgroup/cpuacct$1/cpuacct.usage"
  elif [[ -r /sys/fs/cgroup$1/cpu.stat ]]; then
    v=$(awk '$1 == "usage_usec" { print $2 }' "/sys/fs/cgroup$1/cpu.stat"); echo $((\${v:-0} * 1000))
  else echo 0; fi
}
# cg_mem CGROUP: "<usage without inactive file pages> <limit> <pids>", as Docker computes them.
cg_mem() {
  local d u inactive limit pids total
  if [[ -d /sys/fs/cgroup/memory$1 ]]; then
    d=/sys/fs/cgroup/memory$1
    u=$(<"$d/memory.usage_in_bytes"); limit=$(<"$d/memory.limit_in_bytes")
    inactive=$(awk '$1 == "total_inactive_file" { print $2 }' "$d/memory.stat")
    pids=$(cat "/sys/fs/cgroup/pids$1/pids.current" 2>/dev/null)
  else
    d=/sys/fs/cgroup$1
    u=$(<"$d/memory.current"); limit=$(<"$d/memory.max")
    inactive=$(awk '$1 == "inactive_file" { print $2 }' "$d/memory.stat")
    pids=$(cat "$d/pids.current" 2>/dev/null)
  fi
  inactive=\${inactive:-0}
  ((inactive < u)) && u=$((u - inactive))
  # Without a limit Docker shows the machine's memory.
  total=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo); total=$((total * 1024))
  [[ $limit == max ]] && limit=$total
  ((limit > total)) && limit=$total
  echo "$u $limit \${pids:-0}"
}
# bytes N: N as Docker's units.BytesSize prints it (binary units, 4 significant digits).
bytes() {
  awk -v n="$1" 'BEGIN { split("B KiB MiB GiB TiB PiB EiB", u, " "); i = 1
    while (n >= 1024 && i < 7) { n /= 1024; i++ }; printf "%.4g%s", n, u[i] }'
}
# stats ARGS...: docker stats. With --no-stream and a --format template, prints Docker's figures:
# CPU % over one second (as Docker's two samples), memory without the inactive page cache, binary
# units. Anything else is podman's stats.
stats() {
  local nostream=0 notrunc=0 other=0 fmt="" a i line t0 t1 id name cpu mem limit pids out rest
  local -a refs=() all=("$@") ids=() names=() running=() cgs=() c0=() c1=()
  while (($#)); do
    case $1 in
      --no-stream|--no-stream=true) nostream=1 ;;
      --no-trunc|--no-trunc=true) notrunc=1 ;;
      --format) fmt=\${2-}; shift ;;
      --format=*) fmt=\${1#*=} ;;
      -*) other=1 ;;
      *) refs+=("$1") ;;
    esac
    shift || true
  done
  if ((!nostream || other || \${#refs[@]} == 0)) || [[ -z $fmt || $fmt == table* ]]; then
    translate "--format -i --interval" "\${all[@]}"; exec "\${PODMAN[@]}" stats "\${OUT[@]}"
  fi
  shopt -u patsub_replacement 2>/dev/null
  fmt=$(printf '%s' "$fmt" | sed -E 's/\\{\\{ *\\.([A-Za-z]+) *\\}\\}/{{.\\1}}/g')
  fmt=\${fmt//'\\t'/$'\\t'}; fmt=\${fmt//'\\n'/$'\\n'}
  rest=$fmt
  for a in ID Name Container CPUPerc MemUsage MemPerc PIDs; do rest=\${rest//"{{.$a}}"/}; done
  if [[ $rest == *"{{"* ]]; then
    echo "docker stats: the instance-host simulator formats {{.ID}} {{.Name}} {{.Container}} {{.CPUPerc}} {{.MemUsage}} {{.MemPerc}} {{.PIDs}} only" >&2
    return 1
  fi
  for i in "\${!refs[@]}"; do
    line=$("\${PODMAN[@]}" inspect --format '{{.ID}}|{{.Name}}|{{.State.Running}}|{{.State.CgroupPath}}' "$(ref "\${refs[i]}")" 2>/dev/null) || {
      printf 'Error response from daemon: No such container: %s\\n' "\${refs[i]}" >&2; return 1; }
    IFS='|' read -r "ids[i]" "names[i]" "running[i]" "cgs[i]" <<<"$line"
  done
  t0=$(date +%s%N)
  for i in "\${!refs[@]}"; do [[ \${running[i]} == true ]] && c0[i]=$(cg_cpu "\${cgs[i]}"); done
  sleep 1
  t1=$(date +%s%N)
  for i in "\${!refs[@]}"; do [[ \${running[i]} == true ]] && c1[i]=$(cg_cpu "\${cgs[i]}"); done
  for i in "\${!refs[@]}"; do
    id=\${ids[i]}; ((notrunc)) || id=\${id:0:12}
    name=\${names[i]#"nsim-$GUEST--"}
    if [[ \${running[i]} == true ]]; then
      cpu=$(awk -v d=$((c1[i] - c0[i])) -v t=$((t1 - t0)) 'BEGIN { printf "%.2f%%", (t > 0 && d > 0 ? d / t * 100 : 0) }')
      read -r mem limit pids <<<"$(cg_mem "\${cgs[i]}")"
    else cpu="0.00%"; mem=0; limit=0; pids=0; fi
    out=$fmt
    out=\${out//"{{.ID}}"/$id}; out=\${out//"{{.Name}}"/$name}; out=\${out//"{{.Container}}"/\${refs[i]}}
    out=\${out//"{{.CPUPerc}}"/$cpu}; out=\${out//"{{.MemUsage}}"/"$(bytes "$mem") / $(bytes "$limit")"}
    out=\${out//"{{.MemPerc}}"/$(awk -v m="$mem" -v l="$limit" 'BEGIN { printf "%.2f%%", (l > 0 ? m / l * 100 : 0) }')}
    out=\${out//"{{.PIDs}}"/$pids}
    printf '%s\\n' "$out"
  done
}
[[ \${1-} == container ]] && shift
sub=\${1-}; shift || true
case $sub in
  run|create) run_or_create "$sub" "$@"; exit $? ;;
  start)
    translate "--detach-keys" "$@"
    if ((\${#OUT[@]} != \${#POS[@]})); then  # with flags (-a, -i): podman's start, no log driver work
      for a in "\${POS[@]}"; do scripted_prepare "$(ref "$a")"; done
      exec "\${PODMAN[@]}" start "\${OUT[@]}"
    fi
    for a in "\${POS[@]}"; do
      start_one "$(ref "$a")" || { printf 'Error: failed to start containers: %s\\n' "$a" >&2; exit 1; }
      printf '%s\\n' "$a"
    done
    exit 0 ;;
  inspect)
    if ((PULL_DELAY_MS > 0)); then
      prev=
      for a in "$@"; do
        [[ $a == --type=image || ( $prev == --type && $a == image ) ]] && inspect_images "$@"
        prev=$a
      done
    fi
    translate "-f --format --type" "$@"
    for i in "\${!OUT[@]}"; do
      OUT[i]=$(printf '%s' "\${OUT[i]}" | sed -E 's/\\{\\{ *\\.State\\.(StartedAt|FinishedAt) *\\}\\}/{{.State.\\1.UTC.Format "2006-01-02T15:04:05.999999999Z07:00"}}/g')
    done
    exec "\${PODMAN[@]}" inspect "\${OUT[@]}" ;;
  wait) translate "--condition --interval -i" "$@"
    # Docker's wait answers at the exit (containerd's event); podman's looks every 250 ms. For one
    # running container and no options, follow its process (tail --pid, every 20 ms) first: podman
    # has the exit a moment later, and looks for it every 20 ms until then.
    if ((\${#POS[@]} == 1 && \${#OUT[@]} == 1)); then
      pid=$("\${PODMAN[@]}" inspect --format '{{.State.Pid}}' "\${OUT[0]}" 2>/dev/null) || pid=
      if [[ $pid =~ ^[1-9][0-9]*$ ]]; then
        tail --pid="$pid" -s 0.02 -f /dev/null 2>/dev/null
        exec "\${PODMAN[@]}" wait --interval 20ms "\${OUT[@]}"
      fi
    fi
    exec "\${PODMAN[@]}" wait "\${OUT[@]}" ;;
  logs) translate "--tail -n --since --until" "$@"; exec "\${PODMAN[@]}" logs "\${OUT[@]}" ;;
  stop) translate "-t --time -s --signal" "$@"; "\${PODMAN[@]}" stop "\${OUT[@]}" >/dev/null || exit $?
    printf '%s\\n' "\${POS[@]}"; exit 0 ;;
  kill) translate "-s --signal" "$@"; "\${PODMAN[@]}" kill "\${OUT[@]}" >/dev/null || exit $?
    printf '%s\\n' "\${POS[@]}"; exit 0 ;;
  restart)
    translate "-t --time" "$@"
    "\${PODMAN[@]}" stop "\${OUT[@]}" >/dev/null || exit $?
    for a in "\${POS[@]}"; do
      start_one "$(ref "$a")" || { printf 'Error: failed to restart containers: %s\\n' "$a" >&2; exit 1; }
      printf '%s\\n' "$a"
    done
    exit 0 ;;
  stats) stats "$@"; exit $? ;;
  rm)
    translate "-t --time" "$@"
    "\${PODMAN[@]}" rm "\${OUT[@]}" >/dev/null; rc=$?
    for a in "\${POS[@]}"; do
      f=$(logopts_of "$(ref "$a")"); [[ -z $f ]] || rm -f "$f"
      forget "$a"; ((rc)) || printf '%s\\n' "$a"
    done
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
  attach)
    args=(); while (($#)) && [[ $1 == -* ]]; do
      args+=("$1"); case $1 in --detach-keys) args+=("$2"); shift ;; esac; shift
    done
    (($#)) && { args+=("$(ref "$1")"); shift; }
    exec "\${PODMAN[@]}" attach "\${args[@]}" "$@" ;;
  ps) exec "\${PODMAN[@]}" ps --filter "label=nebula-sim.guest=$GUEST" "$@" ;;
  pull) pull_cmd "$@" ;;
  image)
    # With a pull delay, the volume's view of images: docker image pull and docker image inspect.
    if ((PULL_DELAY_MS > 0)) && [[ \${1-} == pull ]]; then shift; pull_cmd "$@"; fi
    if ((PULL_DELAY_MS > 0)) && [[ \${1-} == inspect ]]; then shift; inspect_images --type=image "$@"; fi
    exec "\${PODMAN[@]}" image "$@" ;;
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
 * The sandbox entry script, run as
 * `unshare --mount --propagation unchanged -- bash enter.sh <mounts-file> <argv...>`. First it
 * makes every shared mount of the new mount namespace private, except `/run/netns` and what is
 * under it: that one stays in the host's peer group (the simulator made it shared), so the network
 * namespaces the guest's podman mounts there are seen by podman on the host too. (With all of them
 * private, a running container with a network namespace of its own broke every `podman ps`
 * outside its guest that listed it: `/run/netns/netns-…` is an empty file there, "unknown FS
 * magic".)
 *
 * Each line of the mounts file is `bind<TAB>source<TAB>target` (bind-mount, private to the new
 * mount namespace) or `hide<TAB><scratch-dir><TAB>path` (make `path` absent: its directory is
 * replaced by a view of symlinks to everything else in it, built on a tmpfs over the scratch
 * directory). Then it execs argv, so the process keeps its PID.
 */
export const ENTER_SCRIPT = `#!/bin/bash
# Enters a guest sandbox of the Nebula instance-host simulator (inside unshare --mount).
set -e
mounts=$1; shift
while read -r -a f; do
  shared=
  for ((i = 6; i < \${#f[@]}; i++)); do
    [[ \${f[i]} == - ]] && break
    [[ \${f[i]} == shared:* ]] && shared=1
  done
  [[ -n $shared ]] || continue
  mp=$(printf '%b' "\${f[4]}")
  [[ $mp == /run/netns || $mp == /run/netns/* ]] || mount --make-private "$mp"
done </proc/self/mountinfo
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
 * The simulator's watchdog, run as `bash -c WATCHDOG_SCRIPT watchdog <node-pid> <pgid-file>
 * <run-id> <runtime> <containers-dir> [<dir-to-remove>]`: when the Node process that runs the
 * simulator disappears without `close()` (SIGKILL, crash), it kills every guest process group
 * listed in the file, removes the run's containers by the IDs in the containers directory (see
 * {@link DockerShimSettings.containersDir}), then those `podman ps` lists with the run's label,
 * ends the run's containers that podman forgot while runc still has them (see `engine.ts`), and
 * removes the directory. What fails is said on its stderr. `close()` ends it with SIGTERM first.
 */
export const WATCHDOG_SCRIPT = `parent=$1; pgids=$2; run=$3; runtime=$4; cids=$5; leftover=\${6-}; s=
trap 'kill "$s" 2>/dev/null; exit 0' TERM
while kill -0 "$parent" 2>/dev/null; do sleep 1 & s=$!; wait "$s"; done
while read -r pg; do [ -n "$pg" ] && kill -KILL -- "-$pg" 2>/dev/null; done <"$pgids"
P=(podman --runtime "$runtime" --cgroup-manager=cgroupfs)
say() { echo "$(date -u +%FT%TZ) nebula instance-host simulator watchdog (run $run): $*" >&2; }
# One ID per file, without a newline: awk ends each file's line.
mapfile -t ids < <(awk 1 "$cids"/* 2>/dev/null | grep -xE '[0-9a-f]{64}' | sort -u)
((\${#ids[@]} == 0)) || "\${P[@]}" rm -f -t 0 -i --depend "\${ids[@]}" >/dev/null ||
  say "podman rm of the run's \${#ids[@]} containers failed"
if listed=$("\${P[@]}" ps -aq --filter "label=nebula-sim.run=$run"); then
  [ -z "$listed" ] || "\${P[@]}" rm -f -t 0 -i --depend $listed >/dev/null ||
    say "podman rm of the containers listed with the run's label failed"
else
  say "podman ps failed: containers of the run that were not recorded by ID may be left over"
fi
# Containers podman forgot while runc still has them (a podman killed half-way): end them too.
for st in /run/runc/*/state.json; do
  grep -qF "io.podman.annotations.cid-file=$cids/" "$st" 2>/dev/null || continue
  id=\${st%/state.json}; id=\${id##*/}
  ! "\${P[@]}" container exists "$id" 2>/dev/null || continue
  netns=$(grep -oE '"/run/netns/[^"]+"' "$st" | head -n 1 | tr -d '"')
  pkill -KILL -f -- "conmon .*-c $id" 2>/dev/null
  "$runtime" --root /run/runc delete --force "$id" >/dev/null 2>&1 || say "runc delete --force $id failed"
  [ -z "$netns" ] || ip netns delete "\${netns#/run/netns/}" 2>/dev/null
  say "ended container $id, which podman had forgotten while it ran"
done
[ -z "$leftover" ] || rm -rf -- "$leftover"
exit 0`;
