// Timestamps as the API shows them: UTC ISO 8601 with a literal Z.

export const isoNow = (): string => new Date().toISOString();

export function isoFromMs(ms: number | null | undefined): string | null {
  return ms ? new Date(ms).toISOString() : null;
}

/** Any ISO 8601 the clients send; naive times are taken as UTC. Null when unparsable. */
export function parseTimestamp(s: string): Date | null {
  if (typeof s !== 'string' || s.length > 64 || !/^\d{4}-\d{2}-\d{2}/.test(s)) return null;
  const naive = /T\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/.test(s);
  const d = new Date(naive ? `${s}Z` : s);
  return Number.isNaN(d.getTime()) ? null : d;
}
