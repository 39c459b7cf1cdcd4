// The "oauth" authenticator: the hub as an OAuth 2 / OpenID Connect client of an external identity
// provider. The gateway sends the browser to `loginUrl`; the provider sends it back to
// /hub/oauth_callback with a code, which `complete` exchanges (client secret in the body), then asks the
// user-info endpoint who this is. The provider's tokens are kept per login session, sealed, so that
// `recheck` (RefreshUser, after Authenticator.auth_refresh_age) can ask the provider again: a token it no
// longer accepts, or a user no longer allowed, ends the session. Codes and tokens are never logged.
import { createHmac } from 'node:crypto';
import type { AuditPublisher } from '../../shared/audit.js';
import type { HubConfig } from '../../shared/config.js';
import { CookieSealer } from '../../shared/cookies.js';
import { errors, HubError } from '../../shared/errors.js';
import { cap, type Logger } from '../../shared/log.js';
import { invalidNameReason, normalizeUsername } from '../../shared/names.js';
import { secondsSince } from '../../shared/metrics.js';
import { loginDuration } from './login.js';
import type { AuthStore, SessionRow } from './store.js';

/** Largest answer read from the provider: token and user-info replies are a few hundred bytes. */
const MAX_PROVIDER_BODY = 256 * 1024;
/** Room left for our own work and the reply within the caller's deadline. */
const MARGIN_MS = 300;
/** The gateway gives CompleteExternalLogin this many rpc timeouts (two provider calls and the login). */
export const COMPLETE_DEADLINE_FACTOR = 3;

/** The provider's tokens of one session, as stored (sealed): access token, refresh token, access expiry (epoch ms). */
interface ProviderTokens { a: string; r?: string; e?: number }

type Outcome<T> = { ok: true; value: T } | { ok: false; reason: string };

/** Problems with the OAuthenticator section when the hub logs in through it; the actor refuses to start on any. */
export function providerConfigProblems(config: HubConfig): string[] {
  const O = config.OAuthenticator;
  const url = (key: 'authorize_url' | 'token_url' | 'userdata_url') =>
    (/^https?:\/\/[^/]+/.test(O[key]) ? [] : [`OAuthenticator.${key}: required, an http(s) URL`]);
  return [...url('authorize_url'), ...url('token_url'), ...url('userdata_url'), ...(O.client_id ? [] : ['OAuthenticator.client_id: required'])];
}

/** Where the provider sends browsers back: the hub's public URL, else its own address. */
export function callbackUrl(config: HubConfig): string {
  const { public_url: publicUrl, ip, port } = config.Hub;
  const host = ip.includes(':') ? `[${ip}]` : ip;
  return `${(publicUrl || `http://${host}:${port}`).replace(/\/+$/, '')}/hub/oauth_callback`;
}

/** Sealed at rest under a key derived from the cookie secret: a new secret ends these logins too. */
function tokenSealer(cookieSecretHex: string): CookieSealer {
  return new CookieSealer(createHmac('sha256', Buffer.from(cookieSecretHex, 'hex')).update('hub auth: external provider tokens').digest('hex'));
}

async function readCapped(res: Response): Promise<string> {
  if (Number(res.headers.get('content-length') ?? 0) > MAX_PROVIDER_BODY) throw errors.unavailable('The identity provider');
  if (!res.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    if (size > MAX_PROVIDER_BODY) throw errors.unavailable('The identity provider');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** A JSON object, or a form-encoded body (some providers answer the token request that way), or null. */
function parseReply(text: string, contentType: string): Record<string, unknown> | null {
  try {
    const v = JSON.parse(text) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return contentType.includes('application/x-www-form-urlencoded') ? Object.fromEntries(new URLSearchParams(text)) : null;
  }
}

export interface ExternalDeps {
  config: HubConfig;
  store: AuthStore;
  audit: AuditPublisher;
  log: Logger;
  ensureUser: (name: string, admin: boolean) => Promise<void>;
  openSession: (name: string) => Promise<string>;
}

export function createExternalLogin({ config, store, audit, log, ensureUser, openSession }: ExternalDeps) {
  const O = config.OAuthenticator;
  const A = config.Authenticator;
  const rpcMs = config.Hub.rpc_timeout * 1000;
  const redirectUri = callbackUrl(config);
  const sealer = tokenSealer(config.Hub.cookie_secret);
  const normalize = (name: string) => normalizeUsername(name, A.username_map);
  const admins = new Set([...A.admin_users, ...O.admin_users].map(normalize));
  const allowList = new Set([...A.allowed_users, ...O.allowed_users].map(normalize));
  const isAdmin = (name: string) => admins.has(name);
  const isAllowed = (name: string) => isAdmin(name) || allowList.size === 0 || allowList.has(name);
  const denied = (message: string) => ({ ok: false, name: '', session_id: '', message, retry_after: 0 });

  function requireOauth(): void {
    if (config.Hub.authenticator_class !== 'oauth') throw errors.notFound('This hub does not log in through an external identity provider');
  }

  /**
   * One request to the provider within `deadline`. Unreachable, too slow, 5xx, 429 or an unreadable answer
   * throw (503/504: try again later, nothing is decided); any other answer is returned for the caller to judge.
   */
  async function ask(endpoint: 'token' | 'userinfo', url: string, init: RequestInit, deadline: number): Promise<{ status: number; body: Record<string, unknown> | null }> {
    const left = deadline - Date.now();
    if (left <= 0) throw errors.timeout('The identity provider');
    try {
      const res = await fetch(url, { ...init, redirect: 'manual', signal: AbortSignal.timeout(left) });
      const body = parseReply(await readCapped(res), res.headers.get('content-type') ?? '');
      if (res.status >= 500 || res.status === 429 || (res.status === 200 && !body)) {
        log.warn({ event: 'external.provider.failed', endpoint, status: res.status }, 'identity provider answered with an error');
        throw errors.unavailable('The identity provider');
      }
      return { status: res.status, body };
    } catch (e) {
      if (e instanceof HubError) throw e;
      const timedOut = (e as Error).name === 'TimeoutError';
      log.warn({ event: 'external.provider.unreachable', endpoint, timedOut, reason: cap((e as Error).message ?? String(e)) }, 'identity provider unreachable');
      throw timedOut ? errors.timeout('The identity provider') : errors.unavailable('The identity provider');
    }
  }

  /** The token endpoint, for a code or a refresh token; the client secret goes in the body. */
  async function tokenRequest(grant: Record<string, string>, deadline: number): Promise<Outcome<ProviderTokens>> {
    const form = new URLSearchParams({ ...grant, client_id: O.client_id });
    if (O.client_secret) form.set('client_secret', O.client_secret);
    const r = await ask('token', O.token_url, {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' }, body: form,
    }, deadline);
    const b = r.body ?? {};
    // Some providers answer 200 with an `error` field: a refusal all the same.
    if (r.status !== 200 || typeof b.access_token !== 'string' || !b.access_token || b.error !== undefined) {
      return { ok: false, reason: `token endpoint: ${r.status} ${typeof b.error === 'string' ? cap(b.error, 60) : ''}`.trim() };
    }
    if (typeof b.token_type === 'string' && b.token_type.toLowerCase() !== 'bearer') return { ok: false, reason: 'token endpoint: not a bearer token' };
    const expiresIn = Number(b.expires_in);
    return {
      ok: true,
      value: {
        a: b.access_token,
        r: typeof b.refresh_token === 'string' && b.refresh_token ? b.refresh_token : grant.refresh_token,
        e: Number.isFinite(expiresIn) && expiresIn > 0 ? Date.now() + expiresIn * 1000 : undefined,
      },
    };
  }

  /** Who the access token belongs to, by `username_claim`, as a hub user name. */
  async function whoIs(accessToken: string, deadline: number): Promise<Outcome<string>> {
    const r = await ask('userinfo', O.userdata_url, { headers: { authorization: `Bearer ${accessToken}`, accept: 'application/json' } }, deadline);
    if (r.status !== 200 || !r.body) return { ok: false, reason: `userinfo: ${r.status}` };
    const raw = r.body[O.username_claim];
    const name = typeof raw === 'string' ? normalizeUsername(raw.trim(), A.username_map) : '';
    if (!name || invalidNameReason(name)) return { ok: false, reason: `userinfo: no usable ${cap(O.username_claim, 60)}` };
    return { ok: true, value: name };
  }

  const seal = (t: ProviderTokens) => sealer.seal(t);
  const unseal = (sealed: string | undefined) => {
    const t = sealer.open<ProviderTokens>(sealed);
    return t && typeof t.a === 'string' ? t : null;
  };

  /** Asks the provider again whether the session's token still names its user; renews an expired token once. */
  async function recheckOnce(s: SessionRow): Promise<boolean> {
    const deadline = Date.now() + rpcMs - MARGIN_MS;
    const refuse = (reason: string) => {
      log.info({ event: 'external.refresh.refused', user: s.user_name, reason }, 'identity provider no longer vouches for the login');
      return false;
    };
    let tokens = unseal(await store.externalTokenOf(s.id));
    if (!tokens) return refuse('no provider token for this session'); // another authenticator's login, or an old cookie secret
    let who: Outcome<string> = tokens.e !== undefined && tokens.e <= Date.now() ? { ok: false, reason: 'access token expired' } : await whoIs(tokens.a, deadline);
    if (!who.ok && tokens.r) {
      const renewed = await tokenRequest({ grant_type: 'refresh_token', refresh_token: tokens.r }, deadline);
      if (!renewed.ok) return refuse(renewed.reason);
      tokens = renewed.value;
      await store.transaction(() => store.renewExternalToken(s.id, seal(renewed.value)));
      who = await whoIs(tokens.a, deadline);
    }
    if (!who.ok) return refuse(who.reason);
    if (who.value !== s.user_name) return refuse('the provider names another user');
    if (!isAllowed(who.value)) return refuse('no longer allowed');
    return true;
  }

  // Concurrent requests of one browser share one recheck (and one use of a rotating refresh token).
  const inFlight = new Map<string, Promise<boolean>>();

  return {
    redirectUri,

    loginUrl(r: { state: string; code_challenge: string }) {
      requireOauth();
      if (!r.state || r.state.length > 256) throw errors.badRequest('state: required, at most 256 characters');
      const url = new URL(O.authorize_url);
      url.searchParams.set('client_id', O.client_id);
      url.searchParams.set('redirect_uri', redirectUri);
      url.searchParams.set('response_type', 'code');
      if (O.scope.length) url.searchParams.set('scope', O.scope.join(' '));
      url.searchParams.set('state', r.state);
      if (r.code_challenge) {
        url.searchParams.set('code_challenge', r.code_challenge);
        url.searchParams.set('code_challenge_method', 'S256');
      }
      return { url: url.toString() };
    },

    async complete(r: { code: string; code_verifier: string; remote_addr: string }) {
      requireOauth();
      const deadline = Date.now() + COMPLETE_DEADLINE_FACTOR * rpcMs - MARGIN_MS;
      const start = performance.now();
      const who = 'anonymous';
      const refused = (reason: string, message: string, name = '') => {
        log.info({ event: 'external.login.refused', user: name || undefined, reason }, 'external login refused');
        loginDuration.observe(['failure'], secondsSince(start));
        void audit.publish('login', 'failure', { who, what: name, outcome: 'denied', via: 'oauth', reason, client: r.remote_addr });
        return denied(message);
      };
      if (!r.code || r.code.length > 4096) return refused('no code', 'The identity provider sent no usable code. Please try again.');
      const grant: Record<string, string> = { grant_type: 'authorization_code', code: r.code, redirect_uri: redirectUri };
      if (r.code_verifier) grant.code_verifier = r.code_verifier;
      const tokens = await tokenRequest(grant, deadline);
      if (!tokens.ok) return refused(tokens.reason, 'The identity provider did not accept this login. Please try again.');
      const name = await whoIs(tokens.value.a, deadline);
      if (!name.ok) return refused(name.reason, `The identity provider did not say who you are (claim "${O.username_claim}").`);
      if (!isAllowed(name.value)) return refused('not allowed', `User ${name.value} is not allowed to use this hub.`, name.value);
      await ensureUser(name.value, isAdmin(name.value));
      const sessionId = await openSession(name.value);
      await store.transaction(() => store.putExternalToken(sessionId, seal(tokens.value)));
      log.info({ event: 'external.login', user: name.value }, 'logged in through the identity provider');
      loginDuration.observe(['success'], secondsSince(start));
      void audit.publish('login', 'success', { who: `user:${name.value}`, what: name.value, outcome: 'ok', via: 'oauth', client: r.remote_addr });
      return { ok: true, name: name.value, session_id: sessionId, message: '', retry_after: 0 };
    },

    recheck(s: SessionRow): Promise<boolean> {
      let p = inFlight.get(s.id);
      if (!p) {
        p = recheckOnce(s).finally(() => inFlight.delete(s.id));
        inFlight.set(s.id, p);
      }
      return p;
    },
  };
}
