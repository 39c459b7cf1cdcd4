// A scripted browser for OAuth flow tests: a cookie jar (name, path, expiry, as RFC 6265 path-matching
// has it, one host), requests with redirects not followed (each hop is asserted by the test), the hub
// login form, and the whoami service as a child process with the environment the hub gives services.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { REPO, waitFor } from '../harness.js';

export interface Cookie { name: string; value: string; path: string; expires: number; httpOnly: boolean }

export interface Page {
  status: number;
  location: string | null;
  body: string;
  headers: Headers;
  /** Set-Cookie lines of this answer, as sent */
  setCookies: string[];
}

/** Path-match (RFC 6265 §5.1.4): the cookie path is the request path or a directory prefix of it. */
function pathMatches(cookiePath: string, path: string): boolean {
  if (path === cookiePath) return true;
  return path.startsWith(cookiePath) && (cookiePath.endsWith('/') || path[cookiePath.length] === '/');
}

function parseSetCookie(line: string, requestPath: string, now: number): Cookie {
  const [pair, ...attrs] = line.split(';').map((s) => s.trim());
  const eq = pair.indexOf('=');
  const cookie: Cookie = { name: pair.slice(0, eq), value: pair.slice(eq + 1), path: requestPath.replace(/[^/]*$/, '') || '/', expires: Infinity, httpOnly: false };
  for (const attr of attrs) {
    const [k, v = ''] = attr.split('=');
    const key = k.toLowerCase();
    if (key === 'path') cookie.path = v;
    else if (key === 'max-age') cookie.expires = now + Number(v) * 1000;
    else if (key === 'expires' && cookie.expires === Infinity) cookie.expires = Date.parse(v);
    else if (key === 'httponly') cookie.httpOnly = true;
  }
  return cookie;
}

export class Browser {
  readonly jar = new Map<string, Cookie>();
  /** cookie names this browser will not keep (a browser that blocks them) */
  readonly refused = new Set<string>();

  constructor(readonly base: string) {}

  cookie(name: string, path?: string): Cookie | undefined {
    for (const c of this.jar.values()) if (c.name === name && (path === undefined || c.path === path) && c.expires > Date.now()) return c;
    return undefined;
  }

  setCookie(c: Cookie): void {
    this.jar.set(`${c.name}\u0000${c.path}`, c);
  }

  private cookieHeader(path: string): string {
    const now = Date.now();
    const sendable = [...this.jar.values()].filter((c) => c.expires > now && pathMatches(c.path, path));
    // longer paths first, as browsers order them
    return sendable.sort((a, b) => b.path.length - a.path.length).map((c) => `${c.name}=${c.value}`).join('; ');
  }

  async request(method: string, url: string, opts: { body?: string; headers?: Record<string, string> } = {}): Promise<Page> {
    const full = new URL(url, this.base);
    const headers: Record<string, string> = { accept: 'text/html,application/xhtml+xml', ...opts.headers };
    const cookies = this.cookieHeader(full.pathname);
    if (cookies) headers.cookie = cookies;
    const r = await fetch(full, { method, headers, body: opts.body, redirect: 'manual', signal: AbortSignal.timeout(15_000) });
    const setCookies = r.headers.getSetCookie();
    const now = Date.now();
    for (const line of setCookies) {
      const c = parseSetCookie(line, full.pathname, now);
      if (c.expires <= now || this.refused.has(c.name)) this.jar.delete(`${c.name}\u0000${c.path}`);
      else this.setCookie(c);
    }
    return { status: r.status, location: r.headers.get('location'), body: await r.text(), headers: r.headers, setCookies };
  }

  get(url: string, headers?: Record<string, string>): Promise<Page> {
    return this.request('GET', url, { headers });
  }

  post(url: string, form: Record<string, string | string[]>, headers: Record<string, string> = {}): Promise<Page> {
    const body = new URLSearchParams();
    for (const [k, v] of Object.entries(form)) for (const one of [v].flat()) body.append(k, one);
    return this.request('POST', url, { body: body.toString(), headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers } });
  }

  /** Follows redirects until an answer that is not one (at most `max` hops); every hop is returned. */
  async follow(url: string, max = 10): Promise<Page[]> {
    const hops: Page[] = [];
    let next: string | null = url;
    while (next && hops.length < max) {
      const page = await this.get(next);
      hops.push(page);
      next = page.status >= 300 && page.status < 400 ? page.location : null;
    }
    return hops;
  }

  /** The hub's login form: GET for its XSRF field, POST the credentials; returns the POST's answer. */
  async login(user: string, password: string, next = ''): Promise<Page> {
    const form = await this.get(`/hub/login${next ? `?next=${encodeURIComponent(next)}` : ''}`);
    return this.post(`/hub/login${next ? `?next=${encodeURIComponent(next)}` : ''}`, { _xsrf: hiddenField(form.body, '_xsrf'), username: user, password, next });
  }
}

/** A browser logged in to the hub at `base` through its login form (a 302 expected, else it throws with the status). */
export async function loggedInBrowser(base: string, user: string, password: string): Promise<Browser> {
  const b = new Browser(base);
  const r = await b.login(user, password);
  if (r.status !== 302) throw new Error(`login ${user}: ${r.status}`);
  return b;
}

/** The value of a hidden form field in a page. */
export function hiddenField(html: string, name: string): string {
  const m = new RegExp(`name="${name}" value="([^"]*)"`).exec(html);
  if (!m) throw new Error(`no field ${name} in page: ${html.slice(0, 300)}`);
  return m[1].replace(/&#(\d+);/g, (_, c) => String.fromCharCode(Number(c)));
}

export function hiddenFields(html: string, name: string): string[] {
  return [...html.matchAll(new RegExp(`name="${name}" value="([^"]*)"`, 'g'))].map((m) => m[1].replace(/&#(\d+);/g, (_, c) => String.fromCharCode(Number(c))));
}

export const WHOAMI = join(REPO, 'dist', 'hub-services', 'whoami.js');

/** The whoami service, run as the hub would run it (env as for a hub-managed service); resolves once it listens. */
export async function startWhoami(o: { hubPort: number; port: number; token: string; name?: string; cacheMaxAge?: number }): Promise<ChildProcess & { output: () => string }> {
  const name = o.name ?? 'whoami';
  const prefix = `/services/${name}/`;
  const child = spawn(process.execPath, [WHOAMI], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      PATH: process.env.PATH, HUB_SERVICE_NAME: name, HUB_API_TOKEN: o.token, HUB_API_URL: `http://127.0.0.1:${o.hubPort}/hub/api`, HUB_BASE_URL: '/',
      HUB_SERVICE_PREFIX: prefix, HUB_SERVICE_URL: `http://127.0.0.1:${o.port}`, HUB_CLIENT_ID: `service-${name}`,
      HUB_OAUTH_CALLBACK_URL: `${prefix}oauth_callback`, HUB_OAUTH_ACCESS_SCOPES: JSON.stringify([`access:services!service=${name}`]),
      HUB_OAUTH_CLIENT_ALLOWED_SCOPES: '[]', HUB_CACHE_MAX_AGE: String(o.cacheMaxAge ?? 300),
    },
  });
  let output = '';
  child.stdout!.on('data', (d) => { output += d; });
  child.stderr!.on('data', (d) => { output += d; });
  await waitFor('whoami to listen', async () => {
    if (child.exitCode !== null) throw new Error(`whoami exited: ${output}`);
    return output.includes('whoami.listening') ? true : undefined;
  }, 10_000);
  return Object.assign(child, { output: () => output });
}

export { stopChild } from '../harness.js';

/** The query parameters of a Location (relative or absolute). */
export const paramsOf = (location: string | null) => new URL(location ?? '', 'http://x').searchParams;
export const pathOf = (location: string | null) => new URL(location ?? '', 'http://x').pathname;
