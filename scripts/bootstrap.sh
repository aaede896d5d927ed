#!/usr/bin/env bash
# Installs what the integration tests need beyond `npm ci`. Idempotent and cached: a second
# run installs and builds nothing.
#
#   bash scripts/bootstrap.sh                 # everything
#   bash scripts/bootstrap.sh apt moto        # only some steps: apt, moto, parliament, zizmor, control-plane, helm, kstatus, metrics-server, coredns, go
#
# Steps:
#   apt            Debian packages the tests need (podman runc busybox-static shellcheck awscli
#                  uidmap openssl procps lua5.4, plus python3-venv when Python lacks venv). Skipped
#                  when all are installed.
#   moto           A Python virtual environment with moto[server] pinned to $NEBULA_MOTO_VERSION,
#                  at $NEBULA_CACHE_DIR/moto-venv.
#   parliament     A Python virtual environment with the IAM policy linter parliament pinned to
#                  $NEBULA_PARLIAMENT_VERSION, at $NEBULA_CACHE_DIR/parliament-venv.
#   zizmor         A Python virtual environment with the GitHub Actions auditor zizmor pinned to
#                  $NEBULA_ZIZMOR_VERSION, at $NEBULA_CACHE_DIR/zizmor-venv.
#   control-plane  kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd built
#                  from their Go modules with Go 1.25+ (step go; CGO_ENABLED=0, version ldflags), at
#                  $NEBULA_CACHE_DIR/control-plane/<k8s-version>/. Each binary is cached on its own;
#                  a cold build takes 10 to 30 minutes on 2 cores (measured: 588 s, of which the
#                  first Kubernetes binary, kube-apiserver, 327 s: it compiles what the others
#                  share), a cached run under a second.
#                  Builds nothing when KUBEBUILDER_ASSETS, or both TEST_ASSET_KUBE_APISERVER and
#                  TEST_ASSET_ETCD, point at existing binaries.
#   helm           Helm $NEBULA_HELM_VERSION built from its Go module (helm.sh/helm/v4) with the
#                  machine's Go, at $NEBULA_CACHE_DIR/helm/<version>/helm (~3 minutes cold); the chart's
#                  tests (deploy/) run it.
#   kstatus        The operator's kstatus checker (apps/operator/kstatus: sigs.k8s.io/cli-utils'
#                  kstatus library over objects read from the API server) built with the machine's
#                  Go, at $NEBULA_CACHE_DIR/kstatus/<hash of its sources>/kstatus (~1 minute cold).
#   metrics-server metrics-server $NEBULA_METRICS_SERVER_VERSION built from its Go module
#                  (sigs.k8s.io/metrics-server) at $NEBULA_CACHE_DIR/metrics-server/<version>/
#                  (~3 minutes cold): the virtual node's tests run `kubectl top` through it.
#   coredns        CoreDNS $NEBULA_COREDNS_VERSION built from its Go module (github.com/coredns/coredns)
#                  at $NEBULA_CACHE_DIR/coredns/<version>/ (~4 minutes cold): the local world's
#                  cluster DNS (its kubernetes plugin over the test's kube-apiserver).
#   go             A Go of at least 1.25 for the builds above (each of them does this first): the
#                  machine's (on PATH or in /usr/local/go), else the official Go $NEBULA_GO_VERSION
#                  (default 1.26.8) toolchain, fetched once from the Go module proxy as the module
#                  golang.org/toolchain and checked against the Go checksum database, at
#                  $NEBULA_CACHE_DIR/go-toolchain/ (about 70 MB; no Go, root or apt needed).
#
# Everything is kept outside the repository, under NEBULA_CACHE_DIR (default ~/.cache/nebula),
# including the Go module and build caches ($NEBULA_CACHE_DIR/go/{mod,build}).
# Versions: NEBULA_K8S_VERSION (default v1.35.4), NEBULA_ETCD_VERSION (default v3.6.13),
# NEBULA_MOTO_VERSION (default 5.2.5), NEBULA_PARLIAMENT_VERSION (default 1.6.4),
# NEBULA_ZIZMOR_VERSION (default 1.32.0),
# NEBULA_HELM_VERSION (default v4.3.1), NEBULA_METRICS_SERVER_VERSION (default v0.8.0),
# NEBULA_COREDNS_VERSION (default v1.14.7).
# packages/test-peers reads the same defaults.
set -euo pipefail

cache_dir="${NEBULA_CACHE_DIR:-$HOME/.cache/nebula}"
k8s_version="${NEBULA_K8S_VERSION:-v1.35.4}"
etcd_version="${NEBULA_ETCD_VERSION:-v3.6.13}"
moto_version="${NEBULA_MOTO_VERSION:-5.2.5}"
parliament_version="${NEBULA_PARLIAMENT_VERSION:-1.6.4}"
zizmor_version="${NEBULA_ZIZMOR_VERSION:-1.32.0}"
helm_version="${NEBULA_HELM_VERSION:-v4.3.1}"
metrics_server_version="${NEBULA_METRICS_SERVER_VERSION:-v0.8.0}"
coredns_version="${NEBULA_COREDNS_VERSION:-v1.14.7}"

log() { echo "bootstrap: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# Several sessions may bootstrap at once: each step holds its own lock.
with_lock() {
  local name="$1"
  shift
  mkdir -p "$cache_dir/locks"
  (
    flock 9
    "$@"
  ) 9>"$cache_dir/locks/$name.lock"
}

# --- apt -------------------------------------------------------------------------------------

# openssl mints the control plane's certificates; procps gives the tests pgrep; lua5.4 runs the
# operator's Argo CD health check; iptables and iproute2 (`ip`) build and check the Pod network
# isolation the supervisor sets up (podman pulls iptables in too; named here because tests use it).
apt_packages=(podman runc busybox-static shellcheck awscli uidmap openssl procps lua5.4 iptables iproute2)

step_apt() {
  local missing=() pkg
  for pkg in "${apt_packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=(python3 python3-venv)
  fi
  if [ "${#missing[@]}" -eq 0 ]; then
    log "apt: all packages installed"
    return 0
  fi
  command -v apt-get >/dev/null || die "apt: missing ${missing[*]} and no apt-get"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  log "apt: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# --- Python tools: moto, parliament, zizmor --------------------------------------------------

# Installs a Python tool from PyPI into its own cached virtual environment,
# $NEBULA_CACHE_DIR/<name>-venv, pinned; a stamp file records the version, so a second run only
# checks it. $1 the name, $2 the pip requirement, $3 the version, $4 the command it installs,
# $5 an argument that makes that command answer (the install's check).
python_tool() {
  local name="$1" requirement="$2" version="$3" command="$4" check="$5"
  local venv="$cache_dir/$name-venv"
  local stamp="$venv/.nebula-$name-$version"
  if [ -f "$stamp" ] && [ -x "$venv/bin/$command" ]; then
    log "$name: $version cached in $venv"
    return 0
  fi
  log "$name: installing $requirement into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$requirement"
  "$venv/bin/$command" "$check" >/dev/null
  touch "$stamp"
}

step_moto() { python_tool moto "moto[server]==$moto_version" "$moto_version" moto_server --help; }
step_parliament() {
  python_tool parliament "parliament==$parliament_version" "$parliament_version" parliament --help
}
step_zizmor() { python_tool zizmor "zizmor==$zizmor_version" "$zizmor_version" zizmor --version; }

# --- control plane ---------------------------------------------------------------------------

have_asset_overrides() {
  if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ] &&
    [ -x "$KUBEBUILDER_ASSETS/etcd" ]; then
    return 0
  fi
  [ -n "${TEST_ASSET_KUBE_APISERVER:-}" ] && [ -x "$TEST_ASSET_KUBE_APISERVER" ] &&
    [ -n "${TEST_ASSET_ETCD:-}" ] && [ -x "$TEST_ASSET_ETCD" ]
}

# Whether the `go` on PATH is at least $1 (major.minor).
go_at_least() {
  local have want="$1"
  have="$(go env GOVERSION 2>/dev/null)" || return 1
  have="${have#go}"
  [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n1)" = "$want" ]
}

# The Go toolchain for a machine without a recent enough Go: the official build, as the module
# golang.org/toolchain that `GOTOOLCHAIN` itself downloads, fetched from the Go module proxy with
# curl (no Go needed; Debian's 1.19 is too old to switch toolchains), its zip checked against the Go
# checksum database (through the proxy, as the go command reads it), unpacked into the cache.
# Prints the toolchain's bin directory.
fetch_go() {
  local version="${NEBULA_GO_VERSION:-1.26.8}" arch
  case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) die "go: no Go toolchain for $(uname -m); install Go 1.25 or newer and put it on PATH" ;;
  esac
  local module="golang.org/toolchain" tag="v0.0.1-go$version.linux-$arch"
  local dir="$cache_dir/go-toolchain/go$version.linux-$arch"
  if [ ! -x "$dir/bin/go" ]; then
    local proxy="${GOPROXY:-https://proxy.golang.org}"
    proxy="${proxy%%[,|]*}"
    [ "$proxy" != direct ] && [ "$proxy" != off ] || proxy=https://proxy.golang.org
    log "go: no Go 1.25 or newer here: fetching the Go $version toolchain ($module@$tag) from $proxy (about 70 MB)"
    local tmp
    tmp="$(mktemp -d "$cache_dir/.go-toolchain.XXXXXX")"
    curl -fsSL --retry 3 -o "$tmp/toolchain.zip" "$proxy/$module/@v/$tag.zip" ||
      die "go: could not download $proxy/$module/@v/$tag.zip; install Go 1.25 or newer and put it on PATH"
    local want got
    want="$(curl -fsSL --retry 3 "$proxy/sumdb/sum.golang.org/lookup/$module@$tag" |
      awk -v m="$module" -v t="$tag" '$1 == m && $2 == t { print $3 }')" ||
      die "go: could not read the checksum of $module@$tag from the Go checksum database"
    # The module's h1: hash: SHA-256 over "sha256-hex  path" lines of its files, sorted by path.
    got="$(python3 - "$tmp/toolchain.zip" <<'PY'
import base64, hashlib, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = sorted(n for n in z.namelist() if not n.endswith("/"))
    lines = "".join(f"{hashlib.sha256(z.read(n)).hexdigest()}  {n}\n" for n in names)
print("h1:" + base64.b64encode(hashlib.sha256(lines.encode()).digest()).decode())
PY
)"
    if [ -z "$want" ] || [ "$got" != "$want" ]; then
      die "go: $module@$tag does not match the Go checksum database (got $got, want ${want:-nothing}); not used"
    fi
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
      "$tmp/toolchain.zip" "$tmp/x"
    chmod -R u+x "$tmp/x/$module@$tag/bin" "$tmp/x/$module@$tag/pkg/tool"
    mkdir -p "$(dirname "$dir")"
    rm -rf "$dir"
    mv "$tmp/x/$module@$tag" "$dir"
    rm -rf "$tmp"
    log "go: Go $version at $dir (checked: $want)"
  fi
  printf '%s\n' "$dir/bin"
}

# Puts a Go of at least $2 on PATH (the machine's, this image keeps it in /usr/local/go; else the
# official toolchain, fetched once: fetch_go) and sets the cached Go environment; $1 names the step.
use_go() {
  command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"
  if ! command -v go >/dev/null || ! go_at_least "$2"; then
    local bin
    bin="$(with_lock go-toolchain fetch_go)" || die "$1: needs Go $2 or newer"
    PATH="$bin:$PATH"
    go_at_least "$2" || die "$1: needs Go $2 or newer; $bin/go says $(go env GOVERSION)"
  fi
  go_env
}

# Runs `go "$@"` with its output (on a cold cache, hundreds of "go: downloading" lines) kept in a
# log instead of the terminal; says every 30 s that it is still at it, with the time so far; on a
# failure prints the log's last lines. $1 labels the lines (the step and what it builds).
quiet_go() {
  local label="$1"
  shift
  local output status=0 started=$SECONDS next
  mkdir -p "$cache_dir"
  output="$(mktemp "$cache_dir/.go-output.XXXXXX")"
  go "$@" >"$output" 2>&1 &
  local pid=$!
  next=$((started + 30))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ "$SECONDS" -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      log "$label: still at go $1, $((SECONDS - started)) s so far"
      next=$((next + 30))
    fi
  done
  wait "$pid" || status=$?
  if [ "$status" -ne 0 ]; then
    log "$label: go $* failed (status $status); its last lines:"
    tail -n 40 "$output" >&2
  fi
  rm -f "$output"
  return "$status"
}

go_env() {
  export GOMODCACHE="$cache_dir/go/mod" GOCACHE="$cache_dir/go/build"
  export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod" GOWORK=off
}

# The Kubernetes binaries this project runs, all built from one wrapper module of k8s.io/kubernetes.
kube_binaries=(kube-apiserver kubectl kube-scheduler kube-controller-manager kube-proxy)

# Builds the named binaries (from kube_binaries) of k8s.io/kubernetes $k8s_version into $out.
build_kube_binaries() {
  local out="$1" work="$2"
  shift 2
  local minor="${k8s_version#v1.}"
  minor="${minor%%.*}"
  mkdir -p "$work/kubernetes"
  cd "$work/kubernetes"
  # The kubernetes module's own go.mod replaces every staging module with a local folder, which
  # a dependency's go.mod cannot do: mirror that replace block with the published v0.X.Y tags.
  local info gomod
  info="$(go mod download -json "k8s.io/kubernetes@$k8s_version")"
  gomod="$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [ -f "$gomod" ] || die "control-plane: no go.mod for k8s.io/kubernetes@$k8s_version"
  {
    echo "module nebula.local/build/kubernetes"
    echo
    grep -E '^go [0-9]' "$gomod"
    grep -E '^godebug ' "$gomod" || true
    echo
    echo "require k8s.io/kubernetes $k8s_version"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._/-]*\) => \./staging/src/k8s\.io/.*$#\1#p' "$gomod" |
      while read -r mod; do echo "	$mod => $mod v0.${k8s_version#v1.}"; done
    echo ")"
  } >go.mod
  grep -q '=> k8s.io/api ' go.mod || die "control-plane: found no staging replaces in $gomod"
  local name
  for name in "$@"; do
    quiet_go "control-plane: $name" get "k8s.io/kubernetes/cmd/$name@$k8s_version"
  done
  local pkg=k8s.io/component-base/version cpkg=k8s.io/client-go/pkg/version ldflags="-s -w" key val
  local commit date
  commit="$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"Hash": "\(.*\)",\{0,1\}$/\1/p')"
  date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  for key in gitVersion:"$k8s_version" gitMajor:1 gitMinor:"$minor" gitTreeState:clean \
    gitCommit:"${commit:-unknown}" buildDate:"$date"; do
    val="${key#*:}"
    key="${key%%:*}"
    ldflags+=" -X $pkg.$key=$val -X $cpkg.$key=$val"
  done
  local started
  for name in "$@"; do
    started=$SECONDS
    log "control-plane: building $name $k8s_version (cold: the first Kubernetes binary compiles what the others share, about 5 minutes on 2 cores; each later one 0.5 to 1.5)"
    quiet_go "control-plane: $name" build -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "k8s.io/kubernetes/cmd/$name"
    mv "$out/$name.tmp" "$out/$name"
    log "control-plane: $name built in $((SECONDS - started))s"
  done
}

build_etcd() {
  local out="$1" work="$2"
  mkdir -p "$work/etcd"
  cd "$work/etcd"
  printf 'module nebula.local/build/etcd\n\ngo 1.24\n' >go.mod
  quiet_go "control-plane: etcd" get "go.etcd.io/etcd/server/v3@$etcd_version"
  quiet_go "control-plane: etcd" build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$out/etcd.tmp" "$out/etcd"
}

# Prints the names of the Kubernetes binaries not yet in $1.
missing_kube_binaries() {
  local name
  for name in "${kube_binaries[@]}"; do
    [ -x "$1/$name" ] || echo "$name"
  done
}

step_control_plane() {
  if have_asset_overrides; then
    log "control-plane: using KUBEBUILDER_ASSETS / TEST_ASSET_* binaries, building nothing"
    return 0
  fi
  local out="$cache_dir/control-plane/$k8s_version"
  local missing=()
  mapfile -t missing < <(missing_kube_binaries "$out")
  if [ "${#missing[@]}" -eq 0 ] && [ -x "$out/etcd" ] && [ -f "$out/etcd.version" ] &&
    [ "$(cat "$out/etcd.version")" = "$etcd_version" ]; then
    log "control-plane: $k8s_version cached in $out"
    return 0
  fi
  use_go control-plane 1.24
  mkdir -p "$out"
  local work started=$SECONDS
  work="$(mktemp -d "$cache_dir/control-plane/.build.XXXXXX")"
  # A subshell outside any `if`, so that `set -e` holds inside it; its status is read after.
  local status=0
  set +e
  (
    set -e
    if [ ! -x "$out/etcd" ] || [ "$(cat "$out/etcd.version" 2>/dev/null)" != "$etcd_version" ]; then
      log "control-plane: building etcd $etcd_version"
      build_etcd "$out" "$work"
      echo "$etcd_version" >"$out/etcd.version"
    fi
    if [ "${#missing[@]}" -gt 0 ]; then
      log "control-plane: to build: ${missing[*]} (first time: 10 to 30 minutes on 2 cores, then cached)"
      build_kube_binaries "$out" "$work" "${missing[@]}"
    fi
  )
  status=$?
  set -e
  rm -rf "$work"
  [ "$status" -eq 0 ] || die "control-plane: build failed (status $status)"
  log "control-plane: built in $((SECONDS - started))s into $out"
  "$out/kube-apiserver" --version >&2
  "$out/etcd" --version | head -1 >&2
}

# --- kstatus ---------------------------------------------------------------------------------

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The cache key: the checker's sources (go.mod, go.sum, main.go), so an edit rebuilds it.
kstatus_dir() {
  local src="$repo_dir/apps/operator/kstatus" hash
  hash="$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-16)"
  echo "$cache_dir/kstatus/$hash"
}

step_kstatus() {
  local out
  out="$(kstatus_dir)"
  if [ -x "$out/kstatus" ]; then
    log "kstatus: cached in $out"
    return 0
  fi
  use_go kstatus 1.25
  mkdir -p "$out"
  local started=$SECONDS
  (cd "$repo_dir/apps/operator/kstatus" && quiet_go kstatus build -trimpath -ldflags "-s -w" -o "$out/kstatus.tmp" .)
  mv "$out/kstatus.tmp" "$out/kstatus"
  log "kstatus: built in $((SECONDS - started))s into $out"
}

# --- helm ------------------------------------------------------------------------------------

# Builds the Go program $3 (a package path) at version $2 into $cache_dir/$1/$2/$1, from a
# throwaway module that `go get`s it; $4: extra -ldflags. Cached: does nothing when it is there.
build_go_program() {
  local name="$1" version="$2" package="$3" extra_ldflags="${4:-}"
  local out="$cache_dir/$name/$version"
  if [ -x "$out/$name" ]; then
    log "$name: $version cached in $out"
    return 0
  fi
  use_go "$name" 1.25
  mkdir -p "$out"
  local work started=$SECONDS
  work="$(mktemp -d "$cache_dir/$name/.build.XXXXXX")"
  log "$name: building $version from $package (cold: about 3 minutes on 2 cores)"
  (
    trap 'rm -rf "$work"' EXIT
    cd "$work"
    printf 'module nebula.local/build/%s\n\ngo 1.25\n' "$name" >go.mod
    quiet_go "$name" get "$package@$version"
    quiet_go "$name" build -trimpath -ldflags "-s -w $extra_ldflags" -o "$out/$name.tmp" "$package"
  )
  mv "$out/$name.tmp" "$out/$name"
  log "$name: built in $((SECONDS - started))s into $out"
}

step_helm() {
  build_go_program helm "$helm_version" helm.sh/helm/v4/cmd/helm \
    "-X helm.sh/helm/v4/internal/version.version=$helm_version"
}

# --- metrics-server --------------------------------------------------------------------------

step_metrics_server() {
  build_go_program metrics-server "$metrics_server_version" sigs.k8s.io/metrics-server/cmd/metrics-server
}

# --- coredns ---------------------------------------------------------------------------------

step_coredns() {
  build_go_program coredns "$coredns_version" github.com/coredns/coredns \
    "-X github.com/coredns/coredns/coremain.GitCommit=$coredns_version"
}

# --- go --------------------------------------------------------------------------------------

step_go() {
  use_go go 1.25
  log "go: $(command -v go) ($(go env GOVERSION))"
}

# --- main ------------------------------------------------------------------------------------

steps=("$@")
[ "${#steps[@]}" -gt 0 ] || steps=(apt moto parliament zizmor control-plane helm kstatus metrics-server coredns)
for step in "${steps[@]}"; do
  case "$step" in
  apt) with_lock apt step_apt ;;
  moto) with_lock moto step_moto ;;
  parliament) with_lock parliament step_parliament ;;
  zizmor) with_lock zizmor step_zizmor ;;
  control-plane) with_lock control-plane step_control_plane ;;
  helm) with_lock helm step_helm ;;
  kstatus) with_lock kstatus step_kstatus ;;
  metrics-server) with_lock metrics-server step_metrics_server ;;
  coredns) with_lock coredns step_coredns ;;
  go) step_go ;;
  *) die "unknown step '$step' (apt, moto, parliament, zizmor, control-plane, helm, kstatus, metrics-server, coredns, go)" ;;
  esac
done
log "done"
