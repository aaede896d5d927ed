#!/usr/bin/env bash
# Installs what the test suite needs beyond `npm ci`. Safe to run again: everything is cached.
#
#   bash scripts/bootstrap.sh
#
# Today: nothing beyond Node.js 24 (scripts/use-node24.sh). The test-peer issue adds the
# Debian packages (podman, runc, busybox-static, shellcheck, awscli), the kube-apiserver
# and etcd build, and the moto virtual environment here.
set -euo pipefail
echo "bootstrap: nothing else to install"
