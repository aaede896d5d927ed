const SUFFIX: Record<string, number> = {
  "": 1,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
};

/**
 * Parses a Kubernetes resource quantity (`"512Mi"`, `"1.5"`, `"250m"`, `"1e3"`) to a number.
 * Returns `undefined` for anything that is not a quantity. Total.
 */
export function parseQuantity(text: unknown): number | undefined {
  if (typeof text === "number") return Number.isFinite(text) && text >= 0 ? text : undefined;
  if (typeof text !== "string") return undefined;
  const match =
    /^([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$/.exec(
      text.trim(),
    );
  if (!match) return undefined;
  const base = Number(match[1]);
  const value = match[2]
    ? base * 10 ** Number(match[2].slice(1))
    : base * (SUFFIX[match[3] ?? ""] ?? 1);
  return Number.isFinite(value) ? value : undefined;
}
