/**
 * The kubelet's downward-API text formats against Go itself: a Go program with the kubelet's
 * `fieldpath.FormatMap` (its `%v=%q` lines, `sort.Strings` order), fed the same maps as JSON.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { formatDownwardMap, goQuote } from "./downward.js";

/** pkg/fieldpath's FormatMap, as the kubelet writes labels and annotations (Kubernetes 1.35). */
const GO = `package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

func formatMap(m map[string]string) (fmtStr string) {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		fmtStr += fmt.Sprintf("%v=%q\\n", key, m[key])
	}
	fmtStr = strings.TrimSuffix(fmtStr, "\\n")
	return
}

func main() {
	var in struct {
		Strings []string
		Maps    []map[string]string
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		panic(err)
	}
	// Every code point: 1 printable (%q keeps it), 0 not, 2 unassigned in Go's Unicode tables.
	var classes strings.Builder
	for r := rune(0); r <= unicode.MaxRune; r++ {
		switch {
		case strconv.IsPrint(r):
			classes.WriteByte('1')
		case unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C):
			classes.WriteByte('0')
		default:
			classes.WriteByte('2')
		}
	}
	out := struct {
		Quoted, Formatted []string
		Classes           string
	}{Classes: classes.String()}
	for _, s := range in.Strings {
		out.Quoted = append(out.Quoted, fmt.Sprintf("%q", s))
	}
	for _, m := range in.Maps {
		out.Formatted = append(out.Formatted, formatMap(m))
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
`;

/** What Go prints for these strings and maps (one `go run` for all). */
function viaGo(
  strings: readonly string[],
  maps: readonly Record<string, string>[],
): { Quoted: string[] | null; Formatted: string[] | null; Classes: string } {
  const dir = mkdtempSync(join(tmpdir(), "nebula-go-"));
  try {
    writeFileSync(join(dir, "main.go"), GO);
    const out = execFileSync("go", ["run", join(dir, "main.go")], {
      input: JSON.stringify({ Strings: strings, Maps: maps }),
      encoding: "utf8",
      maxBuffer: 16 * 1024 * 1024,
      env: { ...process.env, GOFLAGS: "-mod=mod", GO111MODULE: "off" },
    });
    return JSON.parse(out);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("goQuote and formatDownwardMap", () => {
  it("Go is installed (the peer these tests compare with)", () => {
    expect(spawnSync("go", ["version"]).status).toBe(0);
  });

  it("quote and format exactly as Go's %q and the kubelet's FormatMap", () => {
    const text = fc.oneof(
      fc.string({ unit: "binary", maxLength: 12 }),
      fc.string({ unit: "grapheme", maxLength: 8 }),
      fc.string({ unit: "binary-ascii", maxLength: 12 }),
    );
    const strings = [
      "",
      'say "hi"\n',
      "\x00\x07\b\f\n\r\t\v\x1b\x7f\\",
      "\u00a0\u2028\u200b\ufeff\u0301é✓",
      "\u{10ffff}\u{1f600}\u{e0001}",
      "\ud800 lone \udfff",
      ...fc.sample(text, 300),
    ];
    const maps = [
      {},
      { b: "2", a: "1", "app.kubernetes.io/name": "web", B: "upper" },
      { é: "x", z: "y", "\u{1f600}": "\ufffd", "\uffff": "u" },
      ...fc.sample(fc.dictionary(text, text, { maxKeys: 5 }), 100),
    ];
    // Go's Unicode tables may be older than Node's: a character Go does not know yet is escaped
    // by Go and kept by Node. Every code point is compared; only such characters may differ.
    const { Classes: classes } = viaGo([], []);
    const newer = new Set<number>();
    for (let cp = 0; cp <= 0x10ffff; cp++) {
      // Surrogates are no characters; '"' and '\\' are always escaped (the strings below test them).
      if ((cp >= 0xd800 && cp <= 0xdfff) || cp === 0x22 || cp === 0x5c) continue;
      const ch = String.fromCodePoint(cp);
      const kept = goQuote(ch) === `"${ch}"`;
      if (kept === (classes[cp] === "1")) continue;
      // The only difference allowed: a character Go's tables do not have as printable yet
      // (unassigned there, or assigned in its unicode package but not yet in strconv's own
      // IsPrint table), which Node's newer tables have as a letter, mark, number, punctuation
      // or symbol.
      expect([cp.toString(16), kept]).toEqual([cp.toString(16), true]);
      newer.add(cp);
    }
    // Unicode 15.1, 16.0 and 17.0 added about 10,600 characters after Go's strconv tables (15.0).
    expect(newer.size).toBeLessThan(12_000);
    const known = (s: string) => [...s].filter((ch) => !newer.has(ch.codePointAt(0) ?? 0)).join("");
    const knownStrings = strings.map(known);
    const knownMaps = maps.map((m) =>
      Object.fromEntries(Object.entries(m).map(([k, v]) => [known(k), known(v)])),
    );
    const go = viaGo(knownStrings, knownMaps);
    expect(knownStrings.map(goQuote)).toEqual(go.Quoted);
    expect(knownMaps.map(formatDownwardMap)).toEqual(go.Formatted);
  });

  it("write the kubelet's lines: sorted, quoted, no newline at the end", () => {
    expect(formatDownwardMap({ tier: "front", app: 'a"b' })).toBe('app="a\\"b"\ntier="front"');
    expect(formatDownwardMap({})).toBe("");
    expect(goQuote("\u00a0")).toBe('"\\u00a0"');
  });
});
