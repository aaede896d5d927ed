# shellcheck shell=bash
# Supervisor fragment: the Pod's data: pod.sh (next to the supervisor, or read by parameters.sh
# from the SSM parameters), and its files. This header (up to the first blank line) is for
# checking this file alone: `npm run embed` drops it and joins the fragments in the order of
# fragments.ts into the installed supervisor.sh.

# ---- the Pod's data ----------------------------------------------------------------------------

# Loads pod.sh (fetching it first with the Parameter Store delivery; a host that cannot read it
# says why on the console and powers off), then writes the files the Pod needs before any
# container starts: host directories, ConfigMap, Secret, projected and downwardAPI volume files,
# the service-account tokens, the registry login.
load_pod() {
  local i
  [ -z "${POD_PARAMETERS+set}" ] || pod_fetch
  # shellcheck source=/dev/null
  . "$POD_DATA"
  for i in "${HOST_DIRS[@]}"; do mkdir -p "$i"; done
  for i in "${!FILE_PATH[@]}"; do
    mkdir -p "${FILE_PATH[i]%/*}"
    printf '%s' "${FILE_DATA[i]}" | base64 -d >"${FILE_PATH[i]}"
    chmod "${FILE_MODE[i]}" "${FILE_PATH[i]}"
  done
  unset FILE_DATA
  # The service-account tokens (only the Parameter Store delivery has them: parameters.sh).
  [ -z "${TOKEN_POLL:-}" ] || tokens_boot
  if [ -n "${DOCKER_AUTH:-}" ]; then
    mkdir -p "$SECRETS/docker"
    (umask 077 && printf '%s' "$DOCKER_AUTH" | base64 -d >"$SECRETS/docker/config.json")
    export DOCKER_CONFIG=$SECRETS/docker
    unset DOCKER_AUTH
  fi
}
