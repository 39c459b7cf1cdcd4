// The client side of the hub's OAuth (reference §6.6, the seed's "Internal OAuth flow"): what a
// single-user server or a service does to let in browsers that are logged in to the hub and allowed here.
//
//   browser GET, no credentials ──302──▶ /hub/api/oauth2/authorize (state + PKCE in a sealed cookie)
//   <prefix>oauth_callback?code&state ──▶ code exchanged server-to-server ──▶ token in a sealed cookie
//   each request ──▶ GET /hub/api/user with the token (answers cached) ──▶ allowed when its scopes say so
//
// Only node built-ins and shared/cookies.ts, so any service can use it.
import { createHash, createHmac, randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CookieSealer, macEquals, parseCookies, serializeCookie } from './cookies.js';

/** The whoami model (`GET /hub/api/user`): a user or service model plus the token's `scopes`. */
export interface HubIdentity {
  kind?: string;
  name: string;
  admin?: boolean;
  groups?: string[];
  scopes: string[];
  session_id?: string | null;
  token_id?: string | null;
  [field: string]: unknown;
}

export interface HubOAuthConfig {
  apiUrl: string;           // HUB_API_URL, e.g. http://127.0.0.1:8000/hub/api
  apiToken: string;         // HUB_API_TOKEN: also the client secret, and the key the cookies are sealed under
  clientId: string;         // HUB_CLIENT_ID, also the token cookie's name
  prefix: string;           // HUB_SERVICE_PREFIX, with a trailing slash; the cookies' path
  callbackUrl: string;      // HUB_OAUTH_CALLBACK_URL: the redirect_uri registered at the hub
  authorizeUrl: string;     // where browsers are sent: [HUB_HOST]<HUB_BASE_URL>hub/api/oauth2/authorize
  accessScopes: string[];   // HUB_OAUTH_ACCESS_SCOPES: any one of them lets a user in ([] = any hub identity)
  cacheMaxAgeMs: number;    // HUB_CACHE_MAX_AGE (s), default 300
  allowTokenInUrl: boolean; // HUB_ALLOW_TOKEN_IN_URL, default false (as the established hub since 5.0)
  hostPrefixCookies?: boolean; // HUB_COOKIE_HOST_PREFIX_ENABLED: cookies named `__Host-…` (Secure, path `/`), as the established hub's
}

/** pino-compatible; the library never logs tokens, codes or secrets. */
export interface ClientLog {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

/** Consecutive trips to the hub without a working cookie before the dance gives up (no endless redirect loop). */
export const MAX_REDIRECTS = 3;
const STATE_MAX_AGE_S = 600;
const REDIRECT_COUNT_MAX_AGE_S = 120;
const HUB_TIMEOUT_MS = 10_000;
const CACHE_MAX_ENTRIES = 10_000;
const SESSION_COOKIE = 'hub-session-id';

export function hubOAuthConfigFromEnv(env: NodeJS.ProcessEnv = process.env): HubOAuthConfig {
  const need = (k: string): string => {
    const v = env[k];
    if (!v) throw new Error(`${k} is not set: the hub sets it for its servers and services`);
    return v;
  };
  const prefix = need('HUB_SERVICE_PREFIX');
  const base = env.HUB_BASE_URL || '/';
  const scopes = env.HUB_OAUTH_ACCESS_SCOPES ?? env.HUB_OAUTH_SCOPES;
  return {
    apiUrl: need('HUB_API_URL').replace(/\/$/, ''),
    apiToken: need('HUB_API_TOKEN'),
    clientId: need('HUB_CLIENT_ID'),
    prefix,
    callbackUrl: env.HUB_OAUTH_CALLBACK_URL || `${prefix}oauth_callback`,
    authorizeUrl: `${env.HUB_HOST ?? ''}${base.endsWith('/') ? base : `${base}/`}hub/api/oauth2/authorize`,
    accessScopes: scopes ? (JSON.parse(scopes) as string[]) : [],
    cacheMaxAgeMs: Number(env.HUB_CACHE_MAX_AGE ?? 300) * 1000,
    allowTokenInUrl: /^(1|true|yes)$/i.test(env.HUB_ALLOW_TOKEN_IN_URL ?? ''),
    hostPrefixCookies: /^(1|true|yes)$/i.test(env.HUB_COOKIE_HOST_PREFIX_ENABLED ?? ''),
  };
}

/** The hub failed to answer (5xx, network): the request cannot be decided, which is not a "no". */
export class HubUnavailable extends Error {}

interface StateCookie { s: string; v: string; n: string }

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** A path on this site only: never `//host`, `/\host`, or anything with control characters. */
function localPath(next: string | undefined, fallback: string): string {
  // eslint-disable-next-line no-control-regex
  if (!next || !next.startsWith('/') || /^\/[\\/]/.test(next) || next.includes('\\') || /[\u0000-\u001f\u007f]/.test(next)) return fallback;
  return next;
}

function bearer(req: IncomingMessage): string | null {
  return /^(?:token|bearer)\s+(\S+)$/i.exec((req.headers.authorization ?? '').trim())?.[1] ?? null;
}

const isUpgrade = (req: IncomingMessage) => (req.headers.upgrade ?? '').toLowerCase() === 'websocket';

/**
 * Any GET or HEAD of a page goes to the hub's login, whatever its Accept header says (as the established
 * hub's clients redirect any GET: `curl -L` sends `Accept: *\/*`); the API paths under `<prefix>api`,
 * WebSocket upgrades and other methods get a 403.
 */
function isPageRequest(req: IncomingMessage, prefix: string): boolean {
  if ((req.method !== 'GET' && req.method !== 'HEAD') || isUpgrade(req)) return false;
  const path = new URL(req.url ?? '/', 'http://x').pathname;
  return !(path === `${prefix}api` || path.startsWith(`${prefix}api/`));
}

export class HubOAuth {
  private readonly sealer: CookieSealer;
  private readonly cache = new Map<string, { identity: HubIdentity | null; until: number }>();
  private readonly tokenCookie: string;
  private readonly stateCookie: string;
  private readonly countCookie: string;

  constructor(readonly config: HubOAuthConfig, private readonly log?: ClientLog) {
    // the cookies are sealed under a key only this client knows: derived from its own API token
    this.sealer = new CookieSealer(createHmac('sha256', config.apiToken).update('cookie').digest('hex'));
    // `__Host-` cookies are kept by a browser only when this very host set them (Secure, path `/`): no sibling host plants one
    const prefix = config.hostPrefixCookies ? '__Host-' : '';
    this.tokenCookie = `${prefix}${config.clientId}`;
    this.stateCookie = `${prefix}${config.clientId}-oauth-state`;
    this.countCookie = `${prefix}${config.clientId}-oauth-redirects`;
  }

  /** Whether this request is for the OAuth callback (answer it with handleCallback). */
  isCallback(req: IncomingMessage): boolean {
    return new URL(req.url ?? '/', 'http://x').pathname === new URL(this.config.callbackUrl, 'http://x').pathname;
  }

  /**
   * Who is asking, when they may: header token (or `?token=` when allowed) or the token cookie. Otherwise the
   * request has been answered (302 to the hub, 403, or an error page) and null is returned.
   */
  async authenticate(req: IncomingMessage, res: ServerResponse): Promise<HubIdentity | null> {
    const cookies = parseCookies(req.headers.cookie);
    // browsers cannot set headers on a WebSocket, so an upgrade may carry `?token=` even where page URLs may not
    const headerToken = bearer(req) ?? (this.config.allowTokenInUrl || isUpgrade(req) ? new URL(req.url ?? '/', 'http://x').searchParams.get('token') : null);
    if (headerToken) {
      const identity = await this.identify(headerToken, cookies[SESSION_COOKIE] ?? '');
      if (identity) return this.admit(req, res, identity, false);
      this.refuse(req, res, 403, 'Missing or invalid credentials.');
      return null;
    }
    const sealed = this.sealer.open<{ t: string }>(cookies[this.tokenCookie]);
    if (sealed && typeof sealed.t === 'string') {
      const identity = await this.identify(sealed.t, cookies[SESSION_COOKIE] ?? '');
      if (identity) return this.admit(req, res, identity, cookies[this.countCookie] !== undefined);
      // expired or revoked (logout): forget it and start again
      this.log?.info({ event: 'hub_oauth.cookie_token_refused', client_id: this.config.clientId }, 'the hub no longer accepts the cookie token');
    }
    const clear = cookies[this.tokenCookie] !== undefined ? [this.cookie(req, this.tokenCookie, '', 0)] : [];
    if (isPageRequest(req, this.config.prefix)) this.startLogin(req, res, Number(cookies[this.countCookie] ?? 0) || 0, clear);
    else this.refuse(req, res, 403, 'Missing or invalid credentials.', clear);
    return null;
  }

  /**
   * Who opens a WebSocket (from the server's 'upgrade' event, which has a socket rather than a response):
   * `Authorization`, `?token=` or the token cookie; null when none is allowed (the caller refuses the upgrade).
   */
  async authenticateUpgrade(req: IncomingMessage): Promise<HubIdentity | null> {
    const cookies = parseCookies(req.headers.cookie);
    const token = bearer(req) ?? new URL(req.url ?? '/', 'http://x').searchParams.get('token') ?? this.sealer.open<{ t: string }>(cookies[this.tokenCookie])?.t;
    if (typeof token !== 'string' || !token) return null;
    const identity = await this.identify(token, cookies[SESSION_COOKIE] ?? '');
    return identity && this.allowed(identity) ? identity : null;
  }

  /** `<prefix>oauth_callback`: state checked against the cookie (403, the seed's rule), code exchanged, token kept. */
  async handleCallback(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const q = new URL(req.url ?? '/', 'http://x').searchParams;
    const code = q.get('code');
    const state = q.get('state');
    const saved = this.sealer.open<StateCookie>(parseCookies(req.headers.cookie)[this.stateCookie]);
    if (!code) return this.refuse(req, res, 403, `OAuth callback without a code${q.get('error') ? ` (${q.get('error_description') ?? q.get('error')})` : ''}.`);
    if (!state || !saved || typeof saved.s !== 'string' || !macEquals(state, saved.s)) {
      return this.refuse(req, res, 403, 'OAuth state does not match. Try visiting the page again.');
    }
    let token: string;
    let expiresIn: number;
    try {
      ({ token, expiresIn } = await this.exchange(code, saved.v));
    } catch (e) {
      this.log?.warn({ event: 'hub_oauth.exchange_failed', client_id: this.config.clientId, err: (e as Error).message }, 'code exchange failed');
      return this.refuse(req, res, 500, `Failed to check authorization: ${(e as Error).message}`);
    }
    const identity = await this.identify(token, parseCookies(req.headers.cookie)[SESSION_COOKIE] ?? '', true);
    if (!identity) return this.refuse(req, res, 500, 'The hub issued a token that identifies nobody.');
    const next = localPath(saved.n, this.config.prefix);
    res.writeHead(302, {
      location: next,
      'set-cookie': [
        this.cookie(req, this.tokenCookie, this.sealer.seal({ t: token }), Math.max(1, Math.floor(expiresIn))),
        this.cookie(req, this.stateCookie, '', 0),
      ],
    }).end();
  }

  /** The identity a token stands for, or null; answers (also "no user") kept for cache_max_age per (session, token). */
  async identify(token: string, sessionId: string, fresh = false): Promise<HubIdentity | null> {
    const key = `${sessionId}\u0000${createHash('sha256').update(token).digest('base64url')}`;
    const hit = this.cache.get(key);
    if (!fresh && hit && hit.until > Date.now()) return hit.identity;
    const r = await this.hub('GET', '/user', { authorization: `token ${token}` });
    let identity: HubIdentity | null = null;
    if (r.status === 200) identity = (await r.json()) as HubIdentity;
    else if (r.status >= 500) throw new HubUnavailable(`the hub answered ${r.status}`);
    else if (r.status !== 401 && r.status !== 403 && r.status !== 404) throw new Error(`the hub answered ${r.status} to whoami`);
    if (this.cache.size >= CACHE_MAX_ENTRIES) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(key, { identity, until: Date.now() + this.config.cacheMaxAgeMs });
    return identity;
  }

  /** Allowed when the token's scopes hold one of the access scopes, or the unfiltered base they are forms of. */
  allowed(identity: HubIdentity): boolean {
    const wanted = this.config.accessScopes;
    if (!wanted.length) return true;
    const held = new Set(identity.scopes ?? []);
    return wanted.some((s) => held.has(s) || held.has(s.split('!', 1)[0]));
  }

  private admit(req: IncomingMessage, res: ServerResponse, identity: HubIdentity, resetCount: boolean): HubIdentity | null {
    if (!this.allowed(identity)) {
      this.refuse(req, res, 403, `${identity.kind === 'service' ? 'Service' : 'User'} ${identity.name} is not allowed here.`);
      return null;
    }
    // a cookie that works ends any run of redirects
    if (resetCount) res.appendHeader('set-cookie', this.cookie(req, this.countCookie, '', 0));
    return identity;
  }

  /** 302 to the hub's authorize page, with a fresh state and PKCE verifier sealed in a short-lived cookie. */
  private startLogin(req: IncomingMessage, res: ServerResponse, redirectsSoFar: number, extraCookies: string[]): void {
    if (redirectsSoFar >= MAX_REDIRECTS) {
      this.log?.warn({ event: 'hub_oauth.redirect_loop', client_id: this.config.clientId, redirects: redirectsSoFar }, 'login keeps failing: stopped redirecting');
      return this.refuse(req, res, 500, `Logging in through the hub failed ${redirectsSoFar} times in a row. Your browser may be refusing this site's cookies; allow them, or clear them, and reload.`,
        [...extraCookies, this.cookie(req, this.countCookie, '', 0)], 'Login loop stopped');
    }
    const state = randomBytes(16).toString('base64url');
    const verifier = randomBytes(32).toString('base64url');
    const authorize = `${this.config.authorizeUrl}?${new URLSearchParams({
      client_id: this.config.clientId, redirect_uri: this.config.callbackUrl, response_type: 'code', state,
      code_challenge: createHash('sha256').update(verifier).digest('base64url'), code_challenge_method: 'S256',
    })}`;
    const saved: StateCookie = { s: state, v: verifier, n: localPath(req.url, this.config.prefix) };
    res.writeHead(302, {
      location: authorize,
      'set-cookie': [
        ...extraCookies,
        this.cookie(req, this.stateCookie, this.sealer.seal(saved), STATE_MAX_AGE_S),
        this.cookie(req, this.countCookie, String(redirectsSoFar + 1), REDIRECT_COUNT_MAX_AGE_S),
      ],
    }).end();
  }

  /** The code for a token, server to server (form body, secret in the body, the PKCE verifier). */
  private async exchange(code: string, verifier: string): Promise<{ token: string; expiresIn: number }> {
    const body = new URLSearchParams({
      grant_type: 'authorization_code', code, client_id: this.config.clientId, client_secret: this.config.apiToken,
      redirect_uri: this.config.callbackUrl, code_verifier: verifier,
    });
    const r = await this.hub('POST', '/oauth2/token', { 'content-type': 'application/x-www-form-urlencoded' }, body.toString());
    const answer = (await r.json().catch(() => ({}))) as { access_token?: string; expires_in?: number; error?: string; error_description?: string };
    if (r.status !== 200 || typeof answer.access_token !== 'string') throw new Error(answer.error_description ?? answer.error ?? `token endpoint answered ${r.status}`);
    return { token: answer.access_token, expiresIn: Number(answer.expires_in) || 0 };
  }

  private async hub(method: string, path: string, headers: Record<string, string>, body?: string): Promise<Response> {
    try {
      return await fetch(`${this.config.apiUrl}${path}`, { method, headers, body, redirect: 'manual', signal: AbortSignal.timeout(HUB_TIMEOUT_MS) });
    } catch (e) {
      throw new HubUnavailable(`the hub did not answer: ${(e as Error).message}`);
    }
  }

  private cookie(req: IncomingMessage, name: string, value: string, maxAgeSeconds: number): string {
    const proto = String(req.headers['x-forwarded-proto'] ?? '').split(',').pop()?.trim();
    if (this.config.hostPrefixCookies) return serializeCookie(name, value, { path: '/', maxAgeSeconds, httpOnly: true, secure: true, sameSite: 'Lax' });
    return serializeCookie(name, value, { path: this.config.prefix, maxAgeSeconds, httpOnly: true, secure: proto === 'https', sameSite: 'Lax' });
  }

  /** An error answer: HTML for browsers, `{"status", "message"}` for everyone else. */
  private refuse(req: IncomingMessage, res: ServerResponse, status: number, message: string, cookies: string[] = [], title = status === 403 ? 'Forbidden' : 'Error'): void {
    const html = (req.headers.accept ?? '').includes('text/html');
    const body = html
      ? `<!doctype html><meta charset="utf-8"><title>${status} ${escapeHtml(title)}</title><h1>${status} ${escapeHtml(title)}</h1><p>${escapeHtml(message)}</p>`
      : JSON.stringify({ status, message });
    const headers: Record<string, string | string[]> = { 'content-type': html ? 'text/html; charset=utf-8' : 'application/json', 'content-length': String(Buffer.byteLength(body)) };
    if (cookies.length) headers['set-cookie'] = cookies;
    res.writeHead(status, headers).end(req.method === 'HEAD' ? undefined : body);
  }
}
