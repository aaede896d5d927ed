#!/usr/bin/env bash
# Builds and tests nebula-agent (a Go program) with a Go of at least 1.25:
#
#   bash build.sh          # dist/nebula-agent (linux/amd64) and dist/nebula-agent-arm64 (linux/arm64), static
#   bash build.sh test     # go vet ./... and go test ./... (the integration test needs podman and root);
#                          # more arguments go to go test, e.g. bash build.sh test -run TestPinning -v
#
# Go: the machine's (on PATH or in /usr/local/go), else the toolchain that
# `scripts/bootstrap.sh go` fetches once into $NEBULA_CACHE_DIR/go-toolchain. The module and build
# caches are those of bootstrap.sh: $NEBULA_CACHE_DIR/go/{mod,build} (default ~/.cache/nebula),
# outside the repository.
set -euo pipefail
cd "$(dirname "$0")"

cache_dir="${NEBULA_CACHE_DIR:-$HOME/.cache/nebula}"
log() { echo "host-agent: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# Whether the `go` on PATH is at least 1.25.
go_ok() {
  local have
  have="$(go env GOVERSION 2>/dev/null)" || return 1
  have="${have#go}"
  [ "$(printf '1.25\n%s\n' "$have" | sort -V | head -n1)" = "1.25" ]
}

command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"
if ! go_ok; then
  log "no Go 1.25 or newer on PATH: scripts/bootstrap.sh go fetches one (once, about 70 MB)"
  bash ../../scripts/bootstrap.sh go
  newest="$(printf '%s\n' "$cache_dir"/go-toolchain/go*/bin | sort -rV | head -n1)"
  [ -x "$newest/go" ] && PATH="$newest:$PATH"
  go_ok || die "no Go 1.25 or newer after scripts/bootstrap.sh go"
fi
export GOMODCACHE="$cache_dir/go/mod" GOCACHE="$cache_dir/go/build"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod" GOWORK=off

# Runs "$@", saying every 20 s that it is still at it (a cold module download or build is slow).
progress() {
  local label="$1" started=$SECONDS status=0
  shift
  "$@" &
  local pid=$! next=$((SECONDS + 20))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ "$SECONDS" -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      log "$label: still at it, $((SECONDS - started)) s so far"
      next=$((next + 20))
    fi
  done
  wait "$pid" || status=$?
  return "$status"
}

log "$(command -v go) ($(go env GOVERSION)); caches in $cache_dir/go"
progress "go mod download" go mod download

case "${1:-build}" in
build)
  mkdir -p dist
  for target in amd64:nebula-agent arm64:nebula-agent-arm64; do
    arch="${target%%:*}" out="dist/${target#*:}"
    started=$SECONDS
    log "building $out (linux/$arch; a cold build compiles the Kubernetes libraries: a minute or two)"
    GOOS=linux GOARCH="$arch" progress "build $out" \
      go build -trimpath -ldflags "-s -w" -o "$out.tmp" .
    mv "$out.tmp" "$out"
    log "$out built in $((SECONDS - started)) s ($(du -h "$out" | cut -f1))"
  done
  ;;
test)
  log "go vet ./..."
  progress "go vet" go vet ./...
  log "go test ./... (the integration test runs podman containers; it skips without podman or root)"
  progress "go test" go test -count=1 -timeout 10m "${@:2}" ./...
  ;;
*)
  die "unknown command '$1' (build, test)"
  ;;
esac
