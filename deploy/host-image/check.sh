#!/usr/bin/env bash
# Checks that this machine can be a Nebula host: what the host supervisor (the user-data of every
# Pod's instance) runs on. Prints one line per requirement and what to do about a missing one;
# exits 1 when any is missing. install.sh ends with it; the AMI you bake should pass it.
#
#   bash check.sh             # on an instance of the image (or while baking it)
#   bash check.sh --at-boot   # from user-data: cloud-init is what runs it, so it is not looked for
#
# deploy/host-image/host-image.integration.test.ts runs it as user-data on the local world's
# simulated instances, and on a machine that lacks pieces.
set -uo pipefail

at_boot=0
case "${1:-}" in
"") ;;
--at-boot) at_boot=1 ;;
-h | --help)
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
  ;;
*)
  echo "check.sh: unknown option '$1' (--at-boot, --help)" >&2
  exit 2
  ;;
esac

failed=0
ok() { printf 'nebula-host-check: ok      %s\n' "$*"; }
bad() {
  printf 'nebula-host-check: MISSING %s\n' "$*"
  failed=1
}
note() { printf 'nebula-host-check: note    %s\n' "$*"; }

# "a.b[.c]" >= "x.y"?
at_least() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

# bash: associative arrays, `printf %(...)T`, `${var@Q}`, `wait -n`.
if at_least "${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]}" 4.4; then
  ok "bash ${BASH_VERSION%%(*}"
else
  bad "bash 4.4 or newer (this is $BASH_VERSION): install the distribution's bash"
fi

# The programs the supervisor calls, by package.
missing=()
for cmd in base64 cut date head install mkfifo od sha256sum sleep stat tail tee timeout tr wc \
  grep sed gzip kill dmesg; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
if [ "${#missing[@]}" -eq 0 ]; then
  ok "coreutils, grep, sed, gzip, procps, util-linux"
else
  bad "${missing[*]}: install coreutils, grep, sed, gzip, procps and util-linux"
fi
# GNU behaviours it relies on (BusyBox's applets differ): dates with milliseconds, unwrapped base64.
if [ "$(date -u -d '2026-01-02T03:04:05.678Z' +%s%3N 2>/dev/null)" = 1767323045678 ] &&
  [ "$(printf 'nebula' | base64 -w0 2>/dev/null)" = bmVidWxh ]; then
  ok "GNU date and base64"
else
  bad "GNU date (-d, %3N) and base64 (-w0): install GNU coreutils (BusyBox's are not enough)"
fi

# curl signs the host's AWS calls itself (--aws-sigv4, 7.75 and newer).
if command -v curl >/dev/null 2>&1; then
  curl_version="$(curl --version 2>/dev/null | awk 'NR == 1 { print $2 }')"
  if at_least "${curl_version:-0}" 7.75; then
    ok "curl $curl_version"
  else
    bad "curl 7.75 or newer for --aws-sigv4 (this is ${curl_version:-unknown}): install a current curl"
  fi
else
  bad "curl: install curl 7.75 or newer (it signs CreateTags and the doorbell with --aws-sigv4)"
fi

# The container runtime: the Docker CLI with its daemon up.
if ! command -v docker >/dev/null 2>&1; then
  bad "docker: install Docker Engine 20.10 or newer and enable its service (systemctl enable docker)"
elif ! server="$(docker version --format '{{.Server.Version}}' 2>/dev/null)" || [ -z "$server" ]; then
  bad "a running Docker daemon (docker version shows no server): systemctl enable --now docker"
else
  components="$(docker version --format '{{range .Server.Components}}{{.Name}} {{end}}' 2>/dev/null || true)"
  if [[ " $components " == *" Engine "* ]]; then
    if at_least "$server" 20.10; then
      ok "Docker Engine $server"
    else
      bad "Docker Engine 20.10 or newer (this is $server): its local log copy keeps docker logs working under awslogs"
    fi
  else
    ok "docker CLI, server $server"
    note "the server is not Docker Engine ($(docker --version 2>/dev/null | head -n1)); Nebula's hosts are tested with Docker Engine on AMIs and with podman + runc in the local simulator"
  fi
fi

# The IMDS block rule for the Pod's containers.
if command -v iptables >/dev/null 2>&1 && command -v ip6tables >/dev/null 2>&1; then
  ok "iptables and ip6tables"
else
  bad "iptables and ip6tables: install iptables (the supervisor keeps containers off IMDS with them)"
fi

# systemd runs the supervisor as a unit; shutdown powers the instance off when the Pod is done.
if command -v systemctl >/dev/null 2>&1 && command -v shutdown >/dev/null 2>&1; then
  ok "systemd (systemctl, shutdown)"
else
  bad "systemd: the supervisor runs as a systemd unit and powers off with shutdown"
fi

if ((at_boot)); then
  ok "cloud-init (it ran this user-data)"
elif command -v cloud-init >/dev/null 2>&1; then
  ok "cloud-init $(cloud-init --version 2>&1 | awk '{ print $NF }')"
else
  bad "cloud-init: it runs the user-data at boot; install cloud-init"
fi

# Optional: the host agent, for the provider's hostAgent (kubectl exec, attach, port-forward).
if command -v nebula-agent >/dev/null 2>&1; then
  ok "nebula-agent (for the provider's hostAgent: kubectl exec, attach, port-forward)"
else
  note "no nebula-agent: needed only with the provider's hostAgent; install.sh --agent <file> puts it in /usr/local/bin"
fi
# Optional: kube-proxy and nsenter, for the provider's serviceProxy (ClusterIP Services reached from
# the Pods: the supervisor runs kube-proxy in each Pod's network namespace).
if command -v kube-proxy >/dev/null 2>&1 && command -v nsenter >/dev/null 2>&1; then
  ok "kube-proxy $(kube-proxy --version 2>/dev/null | awk '{ print $NF }') and nsenter (for the provider's serviceProxy)"
else
  note "no kube-proxy (or nsenter): needed only with the provider's serviceProxy; install.sh --kube-proxy <file> puts the cluster's kube-proxy in /usr/local/bin"
fi

# Optional: the aws CLI is the fallback for CreateTags when curl's signing fails.
if command -v aws >/dev/null 2>&1; then
  ok "aws CLI (the fallback for CreateTags)"
else
  note "no aws CLI: optional, the fallback for CreateTags"
fi

if ((failed)); then
  echo "nebula-host-check: this machine cannot run Nebula's host supervisor yet (see MISSING above)"
  exit 1
fi
echo "nebula-host-check: this machine can run Nebula's host supervisor"
