/**
 * Strips a bash source for embedding: comment lines and blank lines go (the readable source stays
 * in the repository), while the shebang and `# shellcheck` directives stay, so the installed
 * script still passes shellcheck. Only whole-line comments are removed: the supervisor has no
 * multi-line string literals and no here-documents, so no such line is data.
 *
 * @param source - the bash source text.
 * @returns the same program with fewer bytes.
 */
export function stripShell(source: string): string {
  const lines = source.split("\n");
  const kept = lines.filter((line, i) => {
    const text = line.trim();
    if (i === 0 && text.startsWith("#!")) return true;
    if (text === "") return false;
    return !text.startsWith("#") || /^#\s*shellcheck\s/.test(text);
  });
  return `${kept.join("\n")}\n`;
}
