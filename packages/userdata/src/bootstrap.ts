/**
 * The user-data of the Parameter Store delivery: a small bootstrap that reads the host supervisor
 * from its SSM parameters (shared by every Pod of the cluster and version, not secret), checks its
 * SHA-256, installs it with the names of the Pod's own parameters, and starts it. It signs the one
 * `GetParameters` call with SigV4 (openssl) and the instance role's IMDSv2 credentials, so it needs
 * bash, curl, openssl and coreutils, as the supervisor does.
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
hx() { printf '%s' "$2" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$1" | awk '{print $NF}'; }
h256() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
get() {
  local b='{"Names":[${list}],"WithDecryption":true}' r n c k s t e h a d sc cr sg key
  T=$(curl -sS -f --max-time 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' "$I/latest/api/token") || return 1
  r=$(md placement/region) && n=$(md iam/security-credentials/) || return 1
  c=$(md "iam/security-credentials/\${n%%$'\\n'*}") || return 1
  [[ $c =~ \\"AccessKeyId\\"[[:space:]]*:[[:space:]]*\\"([^\\"]+)\\" ]] && k=\${BASH_REMATCH[1]} || return 1
  [[ $c =~ \\"SecretAccessKey\\"[[:space:]]*:[[:space:]]*\\"([^\\"]+)\\" ]] && s=\${BASH_REMATCH[1]} || return 1
  t=
  [[ $c =~ \\"Token\\"[[:space:]]*:[[:space:]]*\\"([^\\"]+)\\" ]] && t=\${BASH_REMATCH[1]}
  e=\${AWS_ENDPOINT_URL_SSM:-\${AWS_ENDPOINT_URL:-https://ssm.$r.amazonaws.com}}
  e=\${e%/}
  h=\${e#*://}
  h=\${h%%/*}
  a=$(date -u +%Y%m%dT%H%M%SZ)
  d=\${a:0:8}
  sc="$d/$r/ssm/aws4_request"
  cr="POST"$'\\n/\\n\\n'"content-type:application/x-amz-json-1.1"$'\\n'"host:$h"$'\\n'"x-amz-date:$a"$'\\n'
  sg="content-type;host;x-amz-date"
  local hd=(-H "Content-Type: application/x-amz-json-1.1" -H "X-Amz-Date: $a" -H "X-Amz-Target: AmazonSSM.GetParameters")
  if [ -n "$t" ]; then
    cr+="x-amz-security-token:$t"$'\\n'
    sg+=";x-amz-security-token"
    hd+=(-H "X-Amz-Security-Token: $t")
  fi
  sg+=";x-amz-target"
  cr+="x-amz-target:AmazonSSM.GetParameters"$'\\n\\n'"$sg"$'\\n'"$(h256 "$b")"
  key=$(printf '%s' "$d" | openssl dgst -sha256 -mac HMAC -macopt "key:AWS4$s" | awk '{print $NF}')
  key=$(hx "$(hx "$(hx "$key" "$r")" ssm)" aws4_request)
  hd+=(-H "Authorization: AWS4-HMAC-SHA256 Credential=$k/$sc, SignedHeaders=$sg, Signature=$(hx "$key" "AWS4-HMAC-SHA256"$'\\n'"$a"$'\\n'"$sc"$'\\n'"$(h256 "$cr")")")
  [ -z "\${AWS_CA_BUNDLE:-}" ] || hd+=(--cacert "$AWS_CA_BUNDLE")
  curl -sS -f --max-time 20 -X POST "\${hd[@]}" --data-binary "$b" "$e/"
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
