#!/usr/bin/env bash
# Prepares an instance of a base AMI to become Nebula's host image: installs what the host
# supervisor runs on (Docker Engine, curl, iptables, cloud-init; the aws CLI where the
# distribution has it), enables Docker, then runs check.sh. Run it as root on an instance of
# Amazon Linux 2023, Ubuntu 22.04 or newer, or Debian 12 or newer, then create the image from that
# instance (README.md, "Bake the image").
#
#   sudo bash install.sh
set -euo pipefail
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
# For GPU Pods, add the NVIDIA driver and the NVIDIA container toolkit here (see docs/operating.md).
bash ./check.sh
