#!/usr/bin/env bash
# Prepares an instance of a base AMI to become Nebula's host image: installs what the host
# supervisor runs on (Docker Engine, curl, iptables, cloud-init; the aws CLI where the
# distribution has it), enables Docker, then runs check.sh. Run it as root on an instance of
# Amazon Linux 2023, Ubuntu 22.04 or newer, or Debian 12 or newer, then create the image from that
# instance (README.md, "Bake the image").
#
#   sudo bash install.sh                          # what every host needs
#   sudo bash install.sh --kube-proxy ./kube-proxy  # and kube-proxy, for the provider's serviceProxy
#   sudo bash install.sh --agent ./nebula-agent     # and the host agent, for the provider's hostAgent
#
# --kube-proxy takes the kube-proxy binary of your cluster's Kubernetes minor version (from
# https://dl.k8s.io/release/<version>/bin/linux/<amd64|arm64>/kube-proxy, checked against its .sha256)
# and installs it as /usr/local/bin/kube-proxy. --agent takes nebula-agent (apps/host-agent:
# `npm run build -w @nebula/host-agent`, or a release's) and installs it as /usr/local/bin/nebula-agent.
set -euo pipefail

kube_proxy=
agent=
while (($# > 0)); do
  case "$1" in
  --kube-proxy)
    [ -n "${2:-}" ] || { echo "install.sh: --kube-proxy needs the kube-proxy binary's path" >&2; exit 2; }
    kube_proxy=$(realpath -- "$2")
    shift 2
    ;;
  --agent)
    [ -n "${2:-}" ] || { echo "install.sh: --agent needs the nebula-agent binary's path" >&2; exit 2; }
    agent=$(realpath -- "$2")
    shift 2
    ;;
  -h | --help)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "install.sh: unknown option '$1' (--kube-proxy <file>, --agent <file>, --help)" >&2
    exit 2
    ;;
  esac
done
if [ -n "$kube_proxy" ] && ! "$kube_proxy" --version >/dev/null 2>&1; then
  echo "install.sh: $kube_proxy does not run as kube-proxy here (wrong file or architecture?)" >&2
  exit 1
fi
if [ -n "$agent" ] && ! "$agent" --help >/dev/null 2>&1; then
  echo "install.sh: $agent does not run as nebula-agent here (wrong file or architecture?)" >&2
  exit 1
fi
cd "$(dirname "$0")"

[ "$(id -u)" -eq 0 ] || {
  echo "install.sh: run as root (sudo bash install.sh)" >&2
  exit 1
}

if command -v dnf >/dev/null 2>&1; then
  # Amazon Linux 2023: curl-minimal is curl 8.x; docker is Docker Engine from the distribution.
  dnf install -y docker iptables-nft cloud-init awscli-2
elif command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends docker.io curl ca-certificates iptables cloud-init \
    procps util-linux gzip
  # The aws CLI is optional (the fallback for CreateTags); not every release packages it.
  apt-get install -y --no-install-recommends awscli || echo "install.sh: no awscli package here (optional)"
else
  echo "install.sh: neither dnf nor apt-get: install Docker Engine 20.10+, curl 7.75+, iptables and cloud-init yourself, then run check.sh" >&2
  exit 1
fi

systemctl enable --now docker
[ -z "$kube_proxy" ] || install -m 0755 "$kube_proxy" /usr/local/bin/kube-proxy
[ -z "$agent" ] || install -m 0755 "$agent" /usr/local/bin/nebula-agent
# For GPU Pods, add the NVIDIA driver and the NVIDIA container toolkit here (see docs/operating.md).
bash ./check.sh
