/**
 * Strips a bash source for embedding: comment lines and blank lines go (the readable source stays
 * in the repository), and so does every line's indentation, while the shebang and `# shellcheck`
 * directives stay, so the installed script still passes shellcheck. Only whole-line comments are
 * removed, and only leading blanks: the supervisor has no multi-line string literals, no
 * here-documents and no line continued inside a word, so no such line is data (a unit test checks
 * that bash defines the same functions and globals from the stripped script as from the source).
 *
 * @param source - the bash source text.
 * @returns the same program with fewer bytes.
 */
export function stripShell(source: string): string {
  const lines = source.split("\n");
  const kept = lines.flatMap((line, i) => {
    const text = line.trim();
    if (i === 0 && text.startsWith("#!")) return [text];
    if (text === "") return [];
    return !text.startsWith("#") || /^#\s*shellcheck\s/.test(text) ? [line.trimStart()] : [];
  });
  return `${kept.join("\n")}\n`;
}
