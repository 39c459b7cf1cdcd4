// Per-user subdomains (Hub.subdomain_host), as the established hub 6.1 lays them out: the hub's pages and API at
// the subdomain host (`hub.example.org`), each user's servers at `<label>.hub.example.org/user/<name>/`, each
// service at `<label>--service.hub.example.org/services/<name>/` (`legacy`: all at `services.hub.example.org`).
// A browser keeps cookies and script apart per host, so one person's server cannot read or send the hub's
// cookies or another person's. The one place names become host labels and hosts become URLs.
import { createHash } from 'node:crypto';
import { domainToASCII } from 'node:url';
import type { HubConfig } from './config.js';
import { servicePrefix } from './servers.js';
import { withinBase } from './urls.js';

export type SubdomainKind = 'user' | 'service';
export type SubdomainHook = 'idna' | 'legacy';

/** A host label as the established hub's `_is_dns_safe`: 1–63 of [A-Za-z0-9-], not all digits, no hyphen at either end. */
function isDnsSafe(label: string, maxLength = 63): boolean {
  return label.length > 0 && label.length <= maxLength && !/^[0-9]+$/.test(label) && !label.startsWith('-') && !label.endsWith('-') && /^[a-z0-9-]+$/i.test(label);
}

/** Always a valid, unique label: `u-<up to 8 safe characters>--<7 hex of SHA-256>` (never `--` at positions 3–4, which IDNA reserves). */
function trimAndHash(name: string): string {
  const hash = createHash('sha256').update(name, 'utf8').digest('hex').slice(0, 7);
  const stub = [...name.toLowerCase()].filter((c) => /^[a-z0-9]$/.test(c)).slice(0, 8).join('');
  return `u-${stub || 'x'}--${hash}`;
}

// IDNA 2008 (RFC 5891/5892) as the established hub's `idna.encode` applies it to one label. Its code point table is
// approximated from Unicode properties (RFC 5892's own derivation: letters, marks and digits that are stable under
// NFKC and case folding; ignorables, spaces and noncharacters excluded), the label must be NFC, start with no mark,
// and a label with right-to-left letters must be all right-to-left (the Bidi rule's practical effect). A name this
// refuses goes to the hash form, as the established hub's does for the names its table refuses.
const LETTER_DIGIT_MARK = /^[\p{Ll}\p{Lo}\p{Lm}\p{Mn}\p{Mc}\p{Nd}]$/u;
const IGNORABLE = /[\p{Default_Ignorable_Code_Point}\p{White_Space}\p{Noncharacter_Code_Point}]/u;
const RTL = /[\p{Script=Hebrew}\p{Script=Arabic}\p{Script=Syriac}\p{Script=Thaana}\p{Script=Nko}]/u;
const RTL_LETTER = /^[\p{Script=Hebrew}\p{Script=Arabic}\p{Script=Syriac}\p{Script=Thaana}\p{Script=Nko}]$/u;

/** RFC 5892's CONTEXTO rules (null: not such a code point): Catalan middle dot, Greek keraia, Hebrew geresh, katakana middle dot, Arabic-Indic digits. */
function contextRule(c: string, chars: readonly string[], i: number): boolean | null {
  switch (c) {
    case '\u00b7': return chars[i - 1] === 'l' && chars[i + 1] === 'l';
    case '\u0375': return /^\p{Script=Greek}$/u.test(chars[i + 1] ?? '');
    case '\u05f3': case '\u05f4': return /^\p{Script=Hebrew}$/u.test(chars[i - 1] ?? '');
    case '\u30fb': return chars.some((x) => x !== c && /^[\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Han}]$/u.test(x));
  }
  if (/^[\u0660-\u0669]$/.test(c)) return !chars.some((x) => /^[\u06f0-\u06f9]$/.test(x));
  if (/^[\u06f0-\u06f9]$/.test(c)) return !chars.some((x) => /^[\u0660-\u0669]$/.test(x));
  return null;
}

function idnaLabel(name: string): string | null {
  if (!/[^\x00-\x7f]/.test(name)) return null; // ASCII comes back unchanged from IDNA, or is refused: never a new label
  if (name.normalize('NFC') !== name || /^\p{M}/u.test(name) || name.includes('.') || IGNORABLE.test(name)) return null;
  const chars = [...name];
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i];
    if (/^[a-z0-9-]$/.test(c)) continue;
    const context = contextRule(c, chars, i);
    if (context !== null) {
      if (!context) return null;
      continue;
    }
    if (!LETTER_DIGIT_MARK.test(c)) return null;
    if (c.normalize('NFKC').toLowerCase().normalize('NFKC') !== c) return null;
  }
  if (RTL.test(name)) {
    if (!RTL_LETTER.test(chars[0]) || !/^\p{L}$/u.test(chars[0])) return null; // starts with a right-to-left letter
    if (chars.some((c) => /^[a-z]$/.test(c) || (/^\p{L}$/u.test(c) && !RTL_LETTER.test(c)))) return null;
  }
  const ascii = domainToASCII(name);
  return ascii && ascii !== name && ascii.startsWith('xn--') && isDnsSafe(ascii) ? ascii : null;
}

/** The established hub's `_strict_dns_safe_encode`: as is when safe, else IDNA, else stub and hash. */
function strictDnsSafeLabel(name: string): string {
  if (name.includes('--')) return trimAndHash(name); // every encoded form holds `--`: never taken as is
  if (isDnsSafe(name)) return name;
  return idnaLabel(name) ?? trimAndHash(name);
}

/** The established hub's `_dns_quote`: percent-escapes, `~`, `_` and the like as `%xx`, then every `%` as `_`, lower-cased. */
function legacyLabel(name: string): string {
  let label = encodeURIComponent(name).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`).toLowerCase();
  for (const c of new Set(label)) if (!/[a-z0-9.%-]/.test(c)) label = label.replaceAll(c, `%${c.charCodeAt(0).toString(16)}`);
  return label.replaceAll('%', '_');
}

/** The host (no port) of a user's servers or of a service, under `domain`, by the established hub 6.1's hooks. */
export function subdomainOf(hook: SubdomainHook, name: string, domain: string, kind: SubdomainKind): string {
  if (hook === 'legacy') return kind === 'user' ? `${legacyLabel(name)}.${domain}` : `services.${domain}`;
  return `${strictDnsSafeLabel(name)}${kind === 'user' ? '' : `--${kind}`}.${domain}`;
}

/** Hosts as the gateway and the spawner use them: built once from the config, null without Hub.subdomain_host. */
export interface Subdomains {
  /** `http:` or `https:` */
  readonly scheme: string;
  /** the hub's own host name, lower case (`hub.example.org`) */
  readonly domain: string;
  /** `:8443`, or '' for the scheme's default port */
  readonly portSuffix: string;
  /** the hub's origin, `https://hub.example.org[:port]` (its pages and API) */
  readonly hubOrigin: string;
  /** the host (no port) of a user's servers */
  userHost(user: string): string;
  /** the host (no port) of a service */
  serviceHost(service: string): string;
  /** `https://<user host>[:port]` */
  userOrigin(user: string): string;
  serviceOrigin(service: string): string;
  /** whether a host name (lower case, no port) is one under the hub's own (where only servers and services live) */
  isUnder(hostname: string): boolean;
}

export function subdomainsOf(config: Pick<HubConfig, 'Hub'>): Subdomains | null {
  const configured = config.Hub.subdomain_host;
  if (!configured) return null;
  const url = new URL(configured);
  const hook = config.Hub.subdomain_hook as SubdomainHook;
  const domain = url.hostname.toLowerCase();
  const portSuffix = url.port ? `:${url.port}` : '';
  const scheme = url.protocol;
  const suffix = `.${domain}`;
  // asked per model and per redirect: remembered (bounded; a flood of names only restarts it)
  const known = new Map<string, string>();
  const userHost = (user: string) => {
    let host = known.get(user);
    if (host === undefined) {
      if (known.size >= 10_000) known.clear();
      known.set(user, (host = subdomainOf(hook, user, domain, 'user').toLowerCase()));
    }
    return host;
  };
  const serviceHost = (service: string) => subdomainOf(hook, service, domain, 'service').toLowerCase();
  return {
    scheme, domain, portSuffix, hubOrigin: `${scheme}//${domain}${portSuffix}`,
    userHost, serviceHost,
    userOrigin: (user) => `${scheme}//${userHost(user)}${portSuffix}`,
    serviceOrigin: (service) => `${scheme}//${serviceHost(service)}${portSuffix}`,
    isUnder: (hostname) => hostname.length > suffix.length && hostname.endsWith(suffix),
  };
}

/**
 * A Host header as a host name: lower case, without the port and a trailing dot (`Alice.Hub.Example.org.:8000` →
 * `alice.hub.example.org`). Only for requests whose Host is not spelled as the hub writes it (the common case is
 * matched as sent, without this).
 */
export function hostnameOf(hostHeader: string): string {
  let h = hostHeader.trim().toLowerCase();
  if (h.startsWith('[')) return h.slice(0, h.indexOf(']') + 1);
  const colon = h.lastIndexOf(':');
  if (colon >= 0) h = h.slice(0, colon);
  return h.endsWith('.') ? h.slice(0, -1) : h;
}

/**
 * A path of the hub as a browser should follow it: with subdomains `[<base_url>]user/<name>/…` is at that user's host
 * (`https://alice.hub.example.org/user/alice/…`); anything else, and everything without subdomains, as it is.
 */
export function browserLocation(sub: Subdomains | null, path: string): string {
  if (!sub) return path;
  const inside = withinBase(path); // Hub.base_url aside: `/jupyter/user/alice/` is `/user/alice/`
  if (inside === null || !inside.startsWith('/user/')) return path;
  const end = inside.slice(6).search(/[/?#]/);
  try {
    return sub.userOrigin(decodeURIComponent(end < 0 ? inside.slice(6) : inside.slice(6, 6 + end))) + path;
  } catch {
    return path; // not percent-decodable: no user's host; the proxy answers it on the hub's
  }
}

/** Where browsers reach a service: `/services/<name>/`, at the service's own host with subdomains (as the established hub's). */
export function serviceLocation(sub: Subdomains | null, name: string): string {
  return (sub ? sub.serviceOrigin(name) : '') + servicePrefix(name);
}

/** A service's OAuth redirect URI: its `oauth_redirect_uri`, else `<its location>oauth_callback` (the supervisor gives it, the oauth actor registers it). */
export function serviceCallbackUrl(sub: Subdomains | null, svc: { name: string; oauth_redirect_uri?: unknown }): string {
  return typeof svc.oauth_redirect_uri === 'string' ? svc.oauth_redirect_uri : `${serviceLocation(sub, svc.name)}oauth_callback`;
}
