#!/usr/bin/env bash
# The entry point of `npm test` and `npm run demo`. Prepares, on first use, everything they need
# beyond `npm ci`, then runs them on Node.js 24:
#
#   bash scripts/run.sh test               # lint, typecheck, unit, package and integration tests
#   bash scripts/run.sh test-full          # the same, with the sampled chaos and soak suites whole
#   bash scripts/run.sh demo [flags]       # the demo (apps/demo); `--help` lists its flags
#   bash scripts/run.sh prepare            # only the preparation
#
# Preparation (each part cached, so a second run spends about a second here):
#   1. Node.js 24 first on PATH (scripts/use-node24.sh: installed from the npm registry into
#      $NEBULA_CACHE_DIR/node-24 when the machine's Node is older).
#   2. scripts/bootstrap.sh: Debian packages (apt-get, as root or through sudo), the moto virtual
#      environment, and the control plane (kube-apiserver, kubectl, kube-scheduler,
#      kube-controller-manager, etcd) built from their Go modules: 10 to 30 minutes on 2 cores
#      the first time, about 1 s once cached.
#   3. For the demo: the bundles of the demo, nebula-vnode and nebula-operator (nx, cached).
set -euo pipefail
cd "$(dirname "$0")/.."

command_name="${1:-}"
[ "$#" -gt 0 ] && shift

log() { echo "nebula: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

cache_dir="${NEBULA_CACHE_DIR:-$HOME/.cache/nebula}"
k8s_version="${NEBULA_K8S_VERSION:-v1.35.4}"

# Says, before bootstrap.sh starts, what is missing of the given steps (all when none are given)
# and how long preparing it takes.
announce_preparation() {
  local wanted=" ${*:-control-plane helm metrics-server coredns moto} "
  local out="$cache_dir/control-plane/$k8s_version" missing=() name
  for name in etcd kube-apiserver kubectl kube-scheduler kube-controller-manager; do
    [ -x "$out/$name" ] || missing+=("$name")
  done
  if [ -n "${KUBEBUILDER_ASSETS:-}${TEST_ASSET_KUBE_APISERVER:-}" ]; then
    missing=()
  fi
  case "$wanted" in *" control-plane "*) ;; *) missing=() ;; esac
  if [ "${#missing[@]}" -gt 0 ]; then
    log "first use: building ${missing[*]} $k8s_version from source into $out"
    log "  this takes 10 to 30 minutes on 2 cores (less when only some are missing), once; later runs reuse it in about 1 s"
  fi
  if [[ "$wanted" == *" helm "* ]] && [ ! -x "$cache_dir/helm/${NEBULA_HELM_VERSION:-v4.3.1}/helm" ]; then
    log "first use: building helm ${NEBULA_HELM_VERSION:-v4.3.1} from source (about 3 minutes on 2 cores, once)"
  fi
  if [[ "$wanted" == *" metrics-server "* ]] &&
    [ ! -x "$cache_dir/metrics-server/${NEBULA_METRICS_SERVER_VERSION:-v0.8.0}/metrics-server" ]; then
    log "first use: building metrics-server ${NEBULA_METRICS_SERVER_VERSION:-v0.8.0} from source (about 3 minutes on 2 cores, once)"
  fi
  if [[ "$wanted" == *" coredns "* ]] &&
    [ ! -x "$cache_dir/coredns/${NEBULA_COREDNS_VERSION:-v1.14.7}/coredns" ]; then
    log "first use: building CoreDNS ${NEBULA_COREDNS_VERSION:-v1.14.7} from source (about 2 minutes on 2 cores, once)"
  fi
  if [[ "$wanted" == *" moto "* ]] && [ ! -x "$cache_dir/moto-venv/bin/moto_server" ]; then
    log "first use: installing moto into $cache_dir/moto-venv (a few minutes: pip, quiet)"
  fi
}

# Prepares the given bootstrap.sh steps (every step when none are given).
prepare() {
  local started=$SECONDS
  [ -d node_modules ] || die "run 'npm ci' first (node_modules is missing)"
  # shellcheck source=scripts/use-node24.sh
  source scripts/use-node24.sh
  announce_preparation "$@"
  bash scripts/bootstrap.sh "$@"
  export NX_DAEMON="${NX_DAEMON:-false}" NX_NO_CLOUD="${NX_NO_CLOUD:-true}"
  log "prepared in $((SECONDS - started)) s"
}

wants_help() {
  local arg
  for arg in "$@"; do
    case "$arg" in
    -h | --help) return 0 ;;
    esac
  done
  return 1
}

build_demo() {
  local started=$SECONDS
  log "building the demo, nebula-vnode and nebula-operator (nx; cached after the first run)"
  node_modules/.bin/nx run-many -t build -p @nebula/demo-app @nebula/vnode-app @nebula/operator-app \
    --outputStyle=static >/tmp/nebula-demo-build.$$.log 2>&1 || {
    cat /tmp/nebula-demo-build.$$.log >&2
    rm -f /tmp/nebula-demo-build.$$.log
    die "build failed"
  }
  rm -f /tmp/nebula-demo-build.$$.log
  log "built in $((SECONDS - started)) s"
}

case "$command_name" in
test)
  prepare
  npm run lint
  # nx writes each task's start and duration to NX_PROFILE (a path relative to here); the table at
  # the end shows them per project, beside the previous whole run's on this machine.
  profile=node_modules/.cache/nebula/nx-profile.json
  mkdir -p "$(dirname "$profile")"
  rm -f "$profile"
  history=()
  [ "$#" -eq 0 ] && history=(--history "${NEBULA_TEST_TIMES:-$cache_dir/test-times.json}")
  mkdir -p "$cache_dir"
  # nx's output is also kept (whole) so that, when a task fails, the digest after the time table
  # names each failed test and its error: a CI log that keeps only its tail still says what failed.
  output=node_modules/.cache/nebula/nx-run.log
  status=0
  NX_PROFILE="$profile" node_modules/.bin/nx run-many -t typecheck test check-package test-integration \
    --outputStyle=static "$@" 2>&1 | tee "$output" || status=$?
  node scripts/time-table.mjs "$profile" "${history[@]}" || true
  [ "$status" -eq 0 ] || node scripts/failure-digest.mjs "$output" || true
  exit "$status"
  ;;
test-full)
  # What CI samples, whole (each figure is the one the app's README reports): the chaos runs, the
  # restart with 30 Pods, the quiet world of 30 Pods for 10 minutes, the 500 MB log read, three
  # vnodes with 30 Pods, a 10-minute token renewed at 80 % of its life. Hours, not minutes; nx's cache does not know these variables, so every
  # task runs.
  export NEBULA_CHAOS_KILLS="${NEBULA_CHAOS_KILLS:-20}" NEBULA_CHAOS_PODS="${NEBULA_CHAOS_PODS:-30}"
  export NEBULA_CHAOS_FAULT_KILLS="${NEBULA_CHAOS_FAULT_KILLS:-10}"
  export NEBULA_CHAOS_FAULT_PODS="${NEBULA_CHAOS_FAULT_PODS:-20}"
  export NEBULA_RESTART_PODS="${NEBULA_RESTART_PODS:-30}"
  export NEBULA_E2E_QUIET_PODS="${NEBULA_E2E_QUIET_PODS:-30}"
  export NEBULA_E2E_QUIET_SECONDS="${NEBULA_E2E_QUIET_SECONDS:-600}"
  export NEBULA_E2E_LOG_MB="${NEBULA_E2E_LOG_MB:-500}"
  export NEBULA_E2E_MANY_REPLICAS="${NEBULA_E2E_MANY_REPLICAS:-30}"
  export NEBULA_E2E_TOKEN_NATURAL="${NEBULA_E2E_TOKEN_NATURAL:-1}"
  export NX_SKIP_NX_CACHE=true NEBULA_TEST_TIMES="$cache_dir/test-full-times.json"
  log "test:full: the sampled suites whole (chaos 20 kills/30 Pods and 10/20 under faults, restart 30 Pods, quiet world 30 Pods for 600 s, a 500 MB log read, 30 Pods over three vnodes, a token's own renewal)"
  exec bash scripts/run.sh test "$@"
  ;;
demo)
  if wants_help "$@"; then
    # --help needs no control plane: only Node.js 24 and the demo's bundle.
    # shellcheck source=scripts/use-node24.sh
    source scripts/use-node24.sh 2>/dev/null
    node_modules/.bin/nx run @nebula/demo-app:build --outputStyle=static >/dev/null 2>&1 ||
      die "could not build apps/demo"
    exec node apps/demo/dist/main.js "$@"
  fi
  # The demo's world needs the Debian packages, moto and the control plane; not Helm,
  # metrics-server or the linters, which only the tests use.
  prepare apt moto control-plane
  build_demo
  exec node apps/demo/dist/main.js "$@"
  ;;
prepare)
  prepare
  ;;
*)
  die "usage: bash scripts/run.sh test|test-full|demo|prepare [args]"
  ;;
esac
