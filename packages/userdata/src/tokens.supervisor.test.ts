/**
 * The service-account token code of the host supervisor (src/supervisor/parameters.sh) in real
 * bash: the installed supervisor sourced without its `main "$@"`, with `sigv4_post` answering
 * from files (the test's SSM), so the parser, the atomic writes and the poll's failure handling are
 * checked without a network. The same code against moto's real SSM and a real container is in
 * userdata.integration.test.ts.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { supervisorScript } from "./index.js";
import { podTokenParameterValue } from "./tokens.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const LIBRARY = supervisorScript().replace(/\nmain "\$@"\n$/, "\n");
const T1 = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnLTE";
const T2 = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJiIn0.c2ln-_2";
const T3 = "eyJhbGciOiJFUzI1NiJ9.eyJhdWQiOiJzdHMifQ.";

/** A GetParameters answer as SSM writes it (JSON, one parameter). */
const answer = (value: string) =>
  JSON.stringify({
    Parameters: [
      {
        ARN: "arn:aws:ssm:us-east-1:123456789012:parameter/nebula/c/pods/u/t",
        DataType: "text",
        Name: "/nebula/c/pods/u/t",
        Type: "SecureString",
        Value: value,
        Version: 2,
      },
    ],
    InvalidParameters: [],
  });

/**
 * Runs `body` in bash after sourcing the supervisor, with the Pod's token files in $T/vol: two
 * files of token 0 (modes 0644 and 0600) and one of token 1. `sigv4_post` answers the status in
 * $T/status with the body in $T/answer, and records each request body in $T/calls.
 */
function bash(body: string, files: Record<string, string> = {}): { out: string; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), "nebula-tokens-"));
  dirs.push(dir);
  writeFileSync(join(dir, "lib.sh"), LIBRARY);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  const harness = `
T=${JSON.stringify(dir)}
. "$T/lib.sh"
RUN=$T/run SECRETS=$T/secrets INSTANCE_ID=i-1 REGION=us-east-1 PARAMETER_WAIT_SECONDS=10
mkdir -p "$RUN" "$SECRETS" "$T/vol/sub"
TOKEN_PATH=("$T/vol/token" "$T/vol/sub/private" "$T/vol/sts")
TOKEN_KEY=(0 0 1)
TOKEN_MODE=(0644 0600 0640)
TOKEN_PARAMETER=/nebula/c/pods/u/t
TOKEN_POLL=60
aws_credentials() { :; }
sigv4_post() {
  printf '%s\\n' "$5" >>"$T/calls"
  cp "$T/answer" "$6" 2>/dev/null
  cat "$T/status"
}
log() { printf 'log: %s\\n' "$*" >>"$T/log"; }
${body}
`;
  const out = execFileSync("bash", ["-c", harness], { encoding: "utf8" });
  return { out, dir };
}
const read = (dir: string, name: string) => readFileSync(join(dir, name), "utf8");
const mode = (dir: string, name: string) => (statSync(join(dir, name)).mode & 0o777).toString(8);

describe("tokens_parse: the token parameter's value, all or nothing", () => {
  const parse = (value: string) =>
    bash(
      `if tokens_parse "$(<"$T/answer")"; then for k in "\${!TOKEN_GOT[@]}"; do echo "$k=\${TOKEN_GOT[$k]}"; done | sort; else echo "refused: $(<"$RUN/tokens.err")"; fi`,
      { answer: answer(value) },
    ).out.trim();

  it("reads what podTokenParameterValue writes", () => {
    const v = podTokenParameterValue([
      { key: "0", token: T1 },
      { key: "1", token: T3 },
    ]);
    if (!v.ok) throw v.error;
    expect(parse(v.value)).toBe(`0=${T1}\n1=${T3}`);
  });

  it("reads any well-formed value: every key, every compact JWS", () => {
    const segment = fc.stringMatching(/^[A-Za-z0-9_-]{0,40}$/);
    const jws = fc
      .tuple(fc.stringMatching(/^[A-Za-z0-9_-]{1,40}$/), segment, segment)
      .map((parts) => parts.join("."));
    fc.assert(
      fc.property(fc.array(jws, { minLength: 2, maxLength: 4 }), (tokens) => {
        const value = tokens.map((t, k) => `${k}:${t}`).join(" ");
        expect(parse(value)).toBe(tokens.map((t, k) => `${k}=${t}`).join("\n"));
      }),
      { numRuns: 15 },
    );
  });

  it.each([
    ["an entry that is not key:token", `0:${T1} 1:not-a-token`],
    ["a token with a character outside base64url", `0:${T1} 1:${T3.replace("J", "+")}`],
    ["a key that is not 1 to 3 digits", `0:${T1} x1:${T3}`],
    ["a key of 4 digits", `0:${T1} 1000:${T3}`],
    ["a JSON escape in the value", `0:${T1} 1:${T3}\\n0:${T3}`],
    ["two spaces (an empty entry is no pair)", `0:${T1}  1:${T3}`],
    ["a token cut at an escaped quote", `0:${T1} 1:a.b"c.d`],
  ])("refuses %s, and says so without the token", (_, value) => {
    const said = parse(value);
    expect(said).toBe(
      "refused: the value is not <key>:<token> pairs separated by spaces (ignored)",
    );
    expect(said).not.toContain(T1);
  });

  it("refuses a value without one of the Pod's keys, and an answer without a value", () => {
    expect(parse(`0:${T1}`)).toBe("refused: the value has no token 1 (ignored)");
    const missing = bash(
      `tokens_parse "$(<"$T/answer")" || echo "refused: $(<"$RUN/tokens.err")"`,
      { answer: JSON.stringify({ Parameters: [], InvalidParameters: ["/nebula/c/pods/u/t"] }) },
    ).out.trim();
    expect(missing).toBe(
      "refused: no value in the answer (the parameter is missing or not readable yet)",
    );
  });
});

describe("tokens_boot and tokens_tick: the files, atomically, and only when a token changed", () => {
  it("writes every file from its key with its mode, and asks SSM for the one parameter, decrypted", () => {
    const { dir } = bash("tokens_boot", { status: "200", answer: answer(`0:${T1} 1:${T3}`) });
    expect(read(dir, "vol/token")).toBe(T1);
    expect(read(dir, "vol/sub/private")).toBe(T1);
    expect(read(dir, "vol/sts")).toBe(T3);
    expect([mode(dir, "vol/token"), mode(dir, "vol/sub/private"), mode(dir, "vol/sts")]).toEqual([
      "644",
      "600",
      "640",
    ]);
    expect(read(dir, "calls")).toBe('{"Names":["/nebula/c/pods/u/t"],"WithDecryption":true}\n');
    // No temporary file is left beside them, and the answer is gone from /run.
    expect(readdirSync(join(dir, "vol")).sort()).toEqual(["sts", "sub", "token"]);
    expect(readdirSync(join(dir, "secrets"))).toEqual([]);
    expect(read(dir, "log")).not.toContain(T1);
  });

  it("replaces a renewed token's files by a rename (a new inode), and leaves the others as they are", () => {
    const { out, dir } = bash(
      `tokens_boot
before="$(stat -c %i "$T/vol/token") $(stat -c %i "$T/vol/sts")"
printf '%s' '${answer(`0:${T2} 1:${T3}`)}' >"$T/answer"
TOKEN_NEXT=0
tokens_tick
echo "$before"
echo "$(stat -c %i "$T/vol/token") $(stat -c %i "$T/vol/sts")"`,
      { status: "200", answer: answer(`0:${T1} 1:${T3}`) },
    );
    const [before, after] = out
      .trim()
      .split("\n")
      .map((l) => l.split(" "));
    expect(after?.[0]).not.toBe(before?.[0]);
    expect(after?.[1]).toBe(before?.[1]);
    expect(read(dir, "vol/token")).toBe(T2);
    expect(read(dir, "vol/sub/private")).toBe(T2);
    expect(mode(dir, "vol/sub/private")).toBe("600");
  });

  it("reads once every TOKEN_POLL seconds; a failed read keeps the files and is logged once per streak", () => {
    const { out, dir } = bash(
      `tokens_boot
TOKEN_NEXT=0; echo 403 >"$T/status"; printf '%s' '{"__type":"AccessDeniedException","message":"no"}' >"$T/answer"; tokens_tick
tokens_tick
TOKEN_NEXT=0; tokens_tick
TOKEN_NEXT=0; echo 200 >"$T/status"; printf '%s' '${answer(`0:bad 1:${T3}`)}' >"$T/answer"; tokens_tick
TOKEN_NEXT=0; printf '%s' '${answer(`0:${T2} 1:${T3}`)}' >"$T/answer"; tokens_tick
TOKEN_NEXT=0; echo 500 >"$T/status"; tokens_tick
wc -l <"$T/calls"`,
      { status: "200", answer: answer(`0:${T1} 1:${T3}`) },
    );
    // Boot, then 5 reads: the tick right after one is not due.
    expect(out.trim()).toBe("6");
    const log = read(dir, "log").trim().split("\n").slice(1);
    expect(log).toEqual([
      expect.stringMatching(
        /^log: cannot read the service-account tokens from \/nebula\/c\/pods\/u\/t; the files keep the current ones: HTTP 403 AccessDeniedException: no/,
      ),
      "log: service-account tokens read again from /nebula/c/pods/u/t",
      expect.stringMatching(/^log: cannot read the service-account tokens .*HTTP 500/),
    ]);
    expect(read(dir, "vol/token")).toBe(T2);
    // The HTTP 500 came with a body that holds tokens (no SSM does that): not a byte of it is said.
    for (const token of [T1, T2, T3]) expect(read(dir, "log")).not.toContain(token);
  });

  it("at boot, a host that cannot read its tokens says why on the console and powers off", () => {
    const { out } = bash(
      `CONSOLE=$T/console PARAMETER_WAIT_SECONDS=2
log() { printf 'nebula-supervisor: %s\\n' "$*"; }
shutdown() { echo "shutdown $*" >>"$T/shutdown"; }
( tokens_boot ); echo "rc=$?"; cat "$T/console" "$T/shutdown"`,
      { status: "200", answer: answer(`0:${T1}`) },
    );
    expect(out).toContain(
      "cannot read the pod's service-account tokens from /nebula/c/pods/u/t within 2s: the value has no token 1 (ignored); powering off",
    );
    expect(out).toContain("shutdown -h now");
    expect(out).toContain("rc=1");
  });
});

describe("the user-data delivery's supervisor", () => {
  const variant = supervisorScript({ delivery: "user-data" });

  it("has none of the Parameter Store code, and only guarded calls into it", () => {
    for (const name of [
      "ssm_endpoint",
      "fetch_pod",
      "pod_from_parameters",
      "pod_fetch",
      "tokens_boot",
      "tokens_tick",
      "tokens_parse",
    ]) {
      expect(variant).not.toContain(`${name}() {`);
      expect(supervisorScript()).toContain(`${name}() {`);
    }
    expect(variant).not.toContain("AmazonSSM");
    // biome-ignore lint/suspicious/noTemplateCurlyInString: bash text
    expect(variant).toContain('[ -z "${POD_PARAMETERS+set}" ] || pod_fetch\n');
    // biome-ignore lint/suspicious/noTemplateCurlyInString: bash text
    expect(variant).toContain('[ -z "${TOKEN_POLL:-}" ] || tokens_boot\n');
    // biome-ignore lint/suspicious/noTemplateCurlyInString: bash text
    expect(variant).toContain('[ -z "${TOKEN_POLL:-}" ] || tokens_tick\n');
  });

  it("defines every function it calls (bash finds none missing when the guards are off)", () => {
    const dir = mkdtempSync(join(tmpdir(), "nebula-variant-"));
    dirs.push(dir);
    writeFileSync(join(dir, "lib.sh"), variant.replace(/\nmain "\$@"\n$/, "\n"));
    const defined = execFileSync(
      "bash",
      ["-c", '. "$1/lib.sh"; declare -F | cut -d" " -f3', "_", dir],
      { encoding: "utf8" },
    )
      .trim()
      .split("\n");
    // The names the script calls as commands at the start of a line or after `||`/`&&`.
    const called = new Set(
      [...variant.matchAll(/(?:^|\|\| |&& |; )([a-z_]+)(?=[ \n;])/gm)].map((m) => m[1] ?? ""),
    );
    const own = [...called].filter((name) => /_/.test(name) && !defined.includes(name));
    // Only the parameters-only functions behind their guards, nothing else.
    expect(own.sort()).toEqual([
      "host_agent_down",
      "host_agent_tick",
      "host_agent_up",
      "pod_fetch",
      "proxy_down",
      "proxy_tick",
      "proxy_up",
      "tokens_boot",
      "tokens_tick",
    ]);
  });
});
