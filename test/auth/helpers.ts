// A scripted browser for login tests (a cookie jar, no automatic redirects, an optional client address
// on 127.0.0.0/8 so lockouts per address can be told apart), and the identity-provider fixture.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { freePort, REPO, startHub, stopChild, waitFor } from '../harness.js';

export interface Page {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** the Location header, resolved against the request URL */
  location: string | null;
}

interface StoredCookie { value: string; path: string }

export class Browser {
  /** origin → name → cookie; stricter than a browser (which shares cookies across ports), simpler too */
  private readonly jar = new Map<string, Map<string, StoredCookie>>();

  constructor(private readonly localAddress?: string) {}

  cookie(url: string, name: string): string | undefined {
    return this.jar.get(new URL(url).origin)?.get(name)?.value;
  }

  setCookie(url: string, name: string, value: string, path = '/'): void {
    const origin = new URL(url).origin;
    if (!this.jar.has(origin)) this.jar.set(origin, new Map());
    this.jar.get(origin)!.set(name, { value, path });
  }

  /** Every cookie for `url`'s origin, to replay later from another jar. */
  cookies(url: string): Map<string, StoredCookie> {
    return new Map(this.jar.get(new URL(url).origin) ?? []);
  }

  private cookieHeader(url: URL): string {
    const sent: string[] = [];
    for (const [name, c] of this.jar.get(url.origin) ?? []) if (url.pathname.startsWith(c.path) || `${url.pathname}/` === c.path) sent.push(`${name}=${c.value}`);
    return sent.join('; ');
  }

  private remember(url: URL, setCookies: string[] | undefined): void {
    for (const line of setCookies ?? []) {
      const [pair, ...attrs] = line.split(';').map((s) => s.trim());
      const i = pair.indexOf('=');
      const name = pair.slice(0, i);
      const value = pair.slice(i + 1);
      let path = '/';
      let gone = false;
      for (const a of attrs) {
        const [k, v = ''] = a.split('=');
        if (k.toLowerCase() === 'path') path = v;
        if (k.toLowerCase() === 'max-age' && Number(v) <= 0) gone = true;
      }
      if (gone) this.jar.get(url.origin)?.delete(name);
      else this.setCookie(url.toString(), name, value, path);
    }
  }

  request(method: string, url: string, opts: { form?: Record<string, string>; json?: unknown; headers?: Record<string, string> } = {}): Promise<Page> {
    const u = new URL(url);
    const headers: Record<string, string> = { accept: 'text/html', ...opts.headers };
    const cookie = this.cookieHeader(u);
    if (cookie) headers.cookie = cookie;
    let body: string | undefined;
    if (opts.form) {
      body = new URLSearchParams(opts.form).toString();
      headers['content-type'] = 'application/x-www-form-urlencoded';
    } else if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers['content-type'] = 'application/json';
    }
    if (body !== undefined) headers['content-length'] = String(Buffer.byteLength(body));
    return new Promise((resolve, reject) => {
      const req = http.request({ host: u.hostname, port: u.port, path: u.pathname + u.search, method, headers, agent: false, localAddress: this.localAddress }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          this.remember(u, res.headers['set-cookie']);
          const loc = res.headers.location;
          resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString('utf8'), location: loc ? new URL(loc, u).toString() : null });
        });
        res.on('error', reject);
      });
      req.on('error', reject);
      req.setTimeout(20_000, () => req.destroy(new Error(`${method} ${url}: no answer in 20 s`)));
      req.end(body);
    });
  }

  get(url: string, headers?: Record<string, string>): Promise<Page> {
    return this.request('GET', url, { headers });
  }

  post(url: string, form: Record<string, string>, headers?: Record<string, string>): Promise<Page> {
    return this.request('POST', url, { form, headers });
  }
}

/** A form field's value in a page (hidden inputs: `name="x" value="y"`). */
export function field(html: string, name: string): string | undefined {
  const m = new RegExp(`name="${name}"[^>]*value="([^"]*)"`).exec(html);
  return m?.[1].replace(/&#(\d+);/g, (_, n) => String.fromCharCode(Number(n)));
}

/** Logs in through the hub's own form; returns the answer to the POST. */
export async function formLogin(b: Browser, hubUrl: string, username: string, password: string, next = ''): Promise<Page> {
  const form = await b.get(`${hubUrl}/hub/login${next ? `?next=${encodeURIComponent(next)}` : ''}`);
  if (form.status !== 200) throw new Error(`login form: ${form.status}`);
  return b.post(`${hubUrl}/hub/login`, { _xsrf: field(form.body, '_xsrf') ?? '', next: field(form.body, 'next') ?? '', username, password });
}

/** `GET /hub/api/user` with whatever the browser holds (its login cookie). */
export async function whoami(b: Browser, hubUrl: string): Promise<{ status: number; body: any }> {
  const r = await b.get(`${hubUrl}/hub/api/user`, { accept: 'application/json' });
  let body: unknown = r.body;
  try { body = JSON.parse(r.body); } catch { /* not JSON */ }
  return { status: r.status, body };
}

export interface Idp {
  url: string;
  proc: ChildProcess;
  revoke(user: string): Promise<number>;
  hang(endpoint: 'token' | 'userinfo' | ''): Promise<void>;
  stats(): Promise<{ authorize: number; token: number; userinfo: number; last_token_request: Record<string, unknown> | null }>;
  issued(): Promise<{ codes: string[]; access_tokens: string[]; refresh_tokens: string[] }>;
  stop(): Promise<void>;
}

export async function startIdp(env: Record<string, string>): Promise<Idp> {
  const proc = spawn(process.execPath, [join(REPO, 'test', 'fixtures', 'idp.mjs')], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: proc.stdout! });
  let port = 0;
  lines.once('line', (l) => { port = JSON.parse(l).port; });
  await waitFor('the identity provider to listen', async () => (port || undefined), 10_000);
  const url = `http://127.0.0.1:${port}`;
  const call = async (method: string, path: string) => {
    const r = await fetch(`${url}${path}`, { method, signal: AbortSignal.timeout(5000) });
    return r.json();
  };
  return {
    url, proc,
    revoke: async (user) => (await call('POST', `/revoke?user=${encodeURIComponent(user)}`)).revoked,
    hang: async (endpoint) => void (await call('POST', `/control?hang=${endpoint}`)),
    stats: () => call('GET', '/stats'),
    issued: () => call('GET', '/issued'),
    stop: () => stopChild(proc),
  };
}

/**
 * A hub whose logins go through a fresh identity-provider fixture (`users`: name → password). The hub's
 * port is chosen first, since the provider must know the callback before the hub starts.
 */
export async function startHubWithIdp(users: Record<string, string>, config: Record<string, Record<string, unknown>> = {}) {
  const port = await freePort();
  const secret = `idp-secret-${randomBytes(16).toString('hex')}`;
  const idp = await startIdp({
    IDP_USERS: JSON.stringify(users), IDP_CLIENT_ID: 'hub-at-idp', IDP_CLIENT_SECRET: secret,
    IDP_REDIRECT_URI: `http://127.0.0.1:${port}/hub/oauth_callback`, IDP_TOKEN_TTL: '3600',
  });
  const hub = await startHub({
    reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port, natsPort: await freePort() },
    config: {
      ...config,
      Hub: { authenticator_class: 'oauth', ...config.Hub },
      OAuthenticator: { authorize_url: `${idp.url}/authorize`, token_url: `${idp.url}/token`, userdata_url: `${idp.url}/userinfo`, client_id: 'hub-at-idp', client_secret: secret, ...config.OAuthenticator },
    },
  });
  return { hub, idp };
}

/** Fills in the provider's login form shown at `formPage` and returns the provider's redirect back. */
export async function submitProviderForm(b: Browser, idp: Idp, formPage: Page, username: string, password: string): Promise<Page> {
  const fields = Object.fromEntries(['client_id', 'redirect_uri', 'response_type', 'scope', 'state', 'code_challenge', 'code_challenge_method']
    .map((k) => [k, field(formPage.body, k) ?? '']).filter(([, v]) => v));
  return b.post(`${idp.url}/authorize`, { ...fields, username, password, action: 'login' });
}
