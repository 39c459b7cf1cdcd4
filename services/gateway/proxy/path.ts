// Request paths are normalised once, here: percent-decoded per segment, dot segments resolved
// (including encoded ones such as %2e%2e), then re-encoded. Routes are matched on the decoded
// segments and the target receives the re-encoded path, so what was matched is what is forwarded:
// no `..` or encoded slash can make the target see a path outside the matched route's prefix.

export interface NormalPath {
  /** decoded segments; `/a/b/` → ['a', 'b', ''] */
  segments: string[];
  /** the path to forward, canonically encoded */
  path: string;
}

/** Characters a path segment may carry unencoded (RFC 3986 pchar). */
const PLAIN_SEGMENT = /^[A-Za-z0-9\-._~!$&'()*+,;=:@]*$/;
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;
const NOT_VISIBLE_ASCII = /[^\u0021-\u007e]/;

export function encodeSegment(s: string): string {
  if (PLAIN_SEGMENT.test(s)) return s;
  // encodeURIComponent also escapes sub-delimiters that are legal in paths; keep those as sent
  return encodeURIComponent(s).replace(/%(24|26|2B|2C|3B|3D|3A|40)/g, (m) => decodeURIComponent(m));
}

/** Null when the path cannot be accepted: not absolute, bad percent-encoding, or a control character. */
export function normalizePath(raw: string): NormalPath | null {
  if (raw[0] !== '/') return null;
  const parts = raw.split('/');
  parts.shift();
  // The common case: nothing encoded, no dot segment, no backslash, only visible ASCII: the path is already canonical.
  if (!raw.includes('%') && !raw.includes('/.') && !raw.includes('\\') && !NOT_VISIBLE_ASCII.test(raw)) return { segments: parts, path: raw };
  const out: string[] = [];
  for (let i = 0; i < parts.length; i++) {
    let s: string;
    try {
      s = decodeURIComponent(parts[i]);
    } catch {
      return null;
    }
    if (CONTROL.test(s)) return null;
    const last = i === parts.length - 1;
    if (s === '.' || s === '..') {
      if (s === '..') out.pop();
      if (last) out.push(''); // `/a/b/..` is `/a/`
      continue;
    }
    out.push(s);
  }
  return { segments: out, path: `/${out.map(encodeSegment).join('/')}` };
}

/**
 * A routespec's host and path, as the established hub writes them with subdomains: `alice.hub.example.org/user/alice/`
 * is host `alice.hub.example.org` (lower case), path `/user/alice/`; `/user/alice/` has host ''.
 */
export function splitRoutespec(routespec: string): { host: string; path: string } {
  if (routespec.startsWith('/')) return { host: '', path: routespec };
  const slash = routespec.indexOf('/');
  return slash < 0 ? { host: routespec.toLowerCase(), path: '/' } : { host: routespec.slice(0, slash).toLowerCase(), path: routespec.slice(slash) };
}

/** The segments a routespec's path matches: `/user/alice/` → ['user', 'alice']; `/` → []; the host of a host-based spec aside. */
export function routespecSegments(routespec: string): string[] | null {
  const n = normalizePath(splitRoutespec(routespec).path);
  if (!n) return null;
  const segs = n.segments;
  while (segs.length && segs[segs.length - 1] === '') segs.pop();
  return segs;
}

/** routespec → its canonical spelling and depth; bounded (routes are few; a flood of specs just restarts it). */
const prefixes = new Map<string, { spec: string; depth: number }>();
const MAX_PREFIXES = 100_000;

/**
 * The path forwarded to a route's target: the matched prefix spelled as the hub spelled the routespec
 * (shared/servers.ts escapeName: `o'brien` is `o%27brien`), so a server always sees the prefix it was
 * given whatever encoding the browser chose, then the rest of the path canonically encoded.
 */
export function forwardPath(n: NormalPath, routespec: string): string {
  let p = prefixes.get(routespec);
  if (!p) {
    const depth = routespecSegments(routespec)?.length ?? 0;
    const path = splitRoutespec(routespec).path;
    p = { spec: path.endsWith('/') ? path : `${path}/`, depth };
    if (prefixes.size >= MAX_PREFIXES) prefixes.clear();
    prefixes.set(routespec, p);
  }
  if (p.depth === 0 || n.path.startsWith(p.spec)) return n.path;
  const rest = n.segments.slice(p.depth);
  return p.spec.slice(0, -1) + (rest.length ? `/${rest.map(encodeSegment).join('/')}` : '');
}
