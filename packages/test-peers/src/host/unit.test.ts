import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseServiceUnit, parseTimeSpan, splitUnitWords } from "./unit.js";

const CONTRACT_UNIT = `[Unit]
Description=Nebula host supervisor
After=network-online.target

[Service]
Type=simple
ExecStart=/usr/local/lib/nebula/supervisor.sh
KillMode=mixed
TimeoutStopSec=60
Environment="AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:4000"
Environment=AWS_ENDPOINT_URL_EC2=http://127.0.0.1:5000

[Install]
WantedBy=multi-user.target
`;

describe("parseServiceUnit", () => {
  it("reads the unit the guest contract describes", () => {
    const parsed = parseServiceUnit(CONTRACT_UNIT);
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    expect(parsed.unit).toEqual({
      execStart: ["/usr/local/lib/nebula/supervisor.sh"],
      ignoreFailure: false,
      environment: {
        AWS_EC2_METADATA_SERVICE_ENDPOINT: "http://127.0.0.1:4000",
        AWS_ENDPOINT_URL_EC2: "http://127.0.0.1:5000",
      },
      timeoutStopMs: 60_000,
      killMode: "mixed",
      type: "simple",
    });
  });

  it("applies systemd defaults, prefixes, quoting and variable expansion", () => {
    const parsed = parseServiceUnit(
      // biome-ignore lint/suspicious/noTemplateCurlyInString: systemd's ${VAR} syntax, not a template
      '[Service]\nEnvironment=GREETING="hello world"\nExecStart=-/bin/echo "${GREETING}" \'a b\' \\\n  c\n',
    );
    expect(parsed.ok && parsed.unit).toMatchObject({
      execStart: ["/bin/echo", "hello world", "a b", "c"],
      ignoreFailure: true,
      timeoutStopMs: 90_000,
      killMode: "control-group",
    });
  });

  it("rejects units it cannot run, without throwing", () => {
    for (const text of [
      "[Service]\nType=simple\n",
      '[Service]\nExecStart=/bin/echo "unterminated\n',
      "[Service]\nExecStart=/bin/true\nKillMode=sometimes\n",
      "[Service]\nExecStart=/bin/true\nTimeoutStopSec=soon\n",
      "[Unit]\nExecStart=/bin/true\n",
    ]) {
      const parsed = parseServiceUnit(text);
      expect(parsed.ok ? "ok" : parsed.error.code).toBe("UnitInvalid");
    }
  });

  it("never throws on arbitrary text", () => {
    fc.assert(
      fc.property(fc.string(), (text) => {
        const parsed = parseServiceUnit(`[Service]\n${text}`);
        expect(typeof parsed.ok).toBe("boolean");
      }),
    );
  });
});

describe("parseTimeSpan", () => {
  it("reads bare seconds, units, combinations and infinity", () => {
    expect(parseTimeSpan("40")).toBe(40_000);
    expect(parseTimeSpan("500ms")).toBe(500);
    expect(parseTimeSpan("1min 30s")).toBe(90_000);
    expect(parseTimeSpan("2h")).toBe(7_200_000);
    expect(parseTimeSpan("infinity")).toBeNull();
    expect(parseTimeSpan("soon")).toBeUndefined();
    expect(parseTimeSpan("5 fortnights")).toBeUndefined();
  });

  it("agrees with the seconds it was given for any whole number", () => {
    fc.assert(
      fc.property(fc.nat({ max: 100_000 }), (seconds) => {
        expect(parseTimeSpan(String(seconds))).toBe(seconds * 1000);
        expect(parseTimeSpan(`${seconds}s`)).toBe(seconds * 1000);
      }),
    );
  });
});

describe("splitUnitWords", () => {
  it("round-trips words quoted the way a unit writer quotes them", () => {
    fc.assert(
      fc.property(fc.array(fc.string({ minLength: 1 }), { maxLength: 6 }), (words) => {
        const line = words
          .map((word) => `"${word.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`)
          .join(" ");
        const expected = words.map((word) => word);
        const split = splitUnitWords(line);
        // \n and \t escapes are systemd's; our writer never emits a backslash-n from raw text.
        expect(split?.map((w) => w)).toEqual(expected);
      }),
    );
  });
});
