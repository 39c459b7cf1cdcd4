// Sizes in bytes as the established hub reads them (its ByteSpecification): a number, or "512M", "2G", "1.5T"
// (powers of 1024; "B", "iB" after the letter allowed). Its own module, with no imports, so that anything (the
// config, a backend's manifests) can read a size without loading the other.

/** Bytes of `v`, or null when it is not a size. */
export function parseByteSize(v: string | number): number | null {
  if (typeof v === 'number') return Number.isSafeInteger(v) && v >= 0 ? v : null;
  const m = /^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$/i.exec(v);
  if (!m) return null;
  const bytes = Number(m[1]) * 1024 ** ' KMGT'.indexOf((m[2] || ' ').toUpperCase());
  return Number.isFinite(bytes) ? Math.floor(bytes) : null;
}
