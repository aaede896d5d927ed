/**
 * The user-data of the Parameter Store delivery: a small bootstrap that reads the host supervisor
 * from its SSM parameters (shared by every Pod of the cluster and version, not secret), checks its
 * SHA-256, installs it with the names of the Pod's own parameters, and starts it. It signs the one
 * `GetParameters` call with curl's own SigV4 (`--aws-sigv4`, curl ≥ 7.75) and the instance role's
 * IMDSv2 credentials, so it needs bash, curl and coreutils, as the supervisor does.
 */

/**
 * The bootstrap's bash text (before the pod.ref and unit lines `render.ts` appends).
 * `names`: the supervisor's parameters in order; `sha256`: of the supervisor script; `path`: where
 * to install it; `waitSeconds`: how long to keep trying before saying why and powering off.
 */
export function bootstrapScript(
  names: readonly string[],
  sha256: string,
  path: string,
  waitSeconds: number,
): string {
  const list = names.map((n) => `"${n}"`).join(",");
  return `#!/bin/bash
# Nebula user-data (@nebula/userdata): reads the host supervisor from SSM Parameter Store, installs
# it as a systemd unit with the names of the Pod's own parameters, and starts it.
set -uo pipefail
umask 022
L=/usr/local/lib/nebula
mkdir -p "$L" /var/lib/nebula
I=\${AWS_EC2_METADATA_SERVICE_ENDPOINT:-http://169.254.169.254}
I=\${I%/}
T=
md() { curl -sS -f --max-time 5 -H "X-aws-ec2-metadata-token: $T" "$I/latest/meta-data/$1"; }
cq() { local v=\${1//\\\\/\\\\\\\\}; printf '%s' "\${v//\\"/\\\\\\"}"; }
get() {
  local b='{"Names":[${list}],"WithDecryption":true}' r n c k s t e
  T=$(curl -sS -f --max-time 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' "$I/latest/api/token") || return 1
  r=$(md placement/region) && n=$(md iam/security-credentials/) || return 1
  c=$(md "iam/security-credentials/\${n%%$'\\n'*}") || return 1
  [[ $c =~ \\"AccessKeyId\\"[[:space:]]*:[[:space:]]*\\"([^\\"]+)\\" ]] && k=\${BASH_REMATCH[1]} || return 1
  [[ $c =~ \\"SecretAccessKey\\"[[:space:]]*:[[:space:]]*\\"([^\\"]+)\\" ]] && s=\${BASH_REMATCH[1]} || return 1
  t=
  [[ $c =~ \\"Token\\"[[:space:]]*:[[:space:]]*\\"([^\\"]+)\\" ]] && t=\${BASH_REMATCH[1]}
  e=\${AWS_ENDPOINT_URL_SSM:-\${AWS_ENDPOINT_URL:-https://ssm.$r.amazonaws.com}}
  local hd=(-H "Content-Type: application/x-amz-json-1.1" -H "X-Amz-Target: AmazonSSM.GetParameters")
  [ -z "\${AWS_CA_BUNDLE:-}" ] || hd+=(--cacert "$AWS_CA_BUNDLE")
  # curl signs (SigV4); the credentials reach it as a config on a pipe, never on a command line.
  curl -sS -f --max-time 20 -X POST --aws-sigv4 "aws:amz:$r:ssm" "\${hd[@]}" --data-binary "$b" \\
    -K <(printf 'user = "%s"\\n' "$(cq "$k:$s")"; [ -z "$t" ] || printf 'header = "X-Amz-Security-Token: %s"\\n' "$(cq "$t")") "\${e%/}/"
}
fetch() {
  local text o n p='' N=(${names.map((n) => `"${n}"`).join(" ")})
  local -a parts
  local -A got
  text=$(get) || return 1
  text=\${text//\\\\\\//\\/}
  IFS='}' read -ra parts <<<"$text"
  for o in "\${parts[@]}"; do
    [[ $o =~ \\"Name\\"[[:space:]]*:[[:space:]]*\\"([^\\"]+)\\" ]] || continue
    n=\${BASH_REMATCH[1]}
    [[ $o =~ \\"Value\\"[[:space:]]*:[[:space:]]*\\"([A-Za-z0-9+/=]*)\\" ]] && got[$n]=\${BASH_REMATCH[1]}
  done
  for n in "\${N[@]}"; do
    [ -n "\${got[$n]+set}" ] || return 1
    p+=\${got[$n]}
  done
  printf '%s' "$p" | base64 -d | gzip -dc >"$L/supervisor.part" || return 1
  [ "$(sha256sum <"$L/supervisor.part" | cut -d' ' -f1)" = ${sha256} ] || return 1
  mv -f "$L/supervisor.part" ${path}
}
start=$(date +%s)
until fetch 2>"$L/bootstrap.err"; do
  if (($(date +%s) - start > ${waitSeconds})); then
    echo "nebula user-data: cannot read the host supervisor from SSM (${names[0]?.replace(/\/[^/]*$/, "/") ?? ""}): $(tail -c 300 "$L/bootstrap.err"); powering off" | tee /dev/console
    shutdown -h now
    exit 1
  fi
  sleep 5
done
set -e
`;
}
