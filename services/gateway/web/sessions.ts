// Browser logins: the sealed `hub-hub-login` cookie names a login session kept by the auth actor;
// `hub-session-id` ties the OAuth tokens issued during that login to it; XSRF tokens are bound to it.
import { hubPublicUrl, type HubConfig } from '../../../shared/config.js';
import { CookieSealer, macEquals, parseCookies, serializeCookie } from '../../../shared/cookies.js';
import type { AuthClient, TokensClient } from '../../../shared/contracts/index.js';
import { BoundedCache, stringBytes } from '../../../shared/bounded-cache.js';
import type { Identity, UserCache } from '../caches.js';
import { callOf, type RequestInfo } from '../http.js';
import { baseUrl, hubUrl } from '../../../shared/urls.js';

export const LOGIN_COOKIE = 'hub-hub-login';
export const SESSION_COOKIE = 'hub-session-id';
export const XSRF_COOKIE = '_xsrf';

interface LoginPayload { u: string; s: string; t: number }
interface SessionFacts { valid: boolean; user: string; refreshedMs: number }

export function createWebSessions(config: HubConfig, auth: AuthClient, tokens: TokensClient, users: Pick<UserCache, 'forget'>) {
  const sealer = new CookieSealer(config.Hub.cookie_secret);
  const maxAgeMs = config.Hub.cookie_max_age_days * 86_400_000;
  const cacheMs = config.Hub.cache_max_age * 1000;
  let refreshMs = config.Authenticator.auth_refresh_age * 1000; // `hub reload` may change it (useConfig)
  const sessions = new BoundedCache<SessionFacts>(config.Hub.cache_max_bytes * 0.1, cacheMs, (s) => 80 + stringBytes(s.user));
  const scopesOf = new BoundedCache<ReadonlySet<string>>(config.Hub.cache_max_bytes * 0.1, cacheMs, (scopes) => {
    let n = 80;
    for (const s of scopes) n += 32 + stringBytes(s);
    return n;
  });
  const secureCookies = hubPublicUrl(config).startsWith('https://'); // Hub.public_url, or https by default with Hub.ssl_cert

  const isSecure = (info: RequestInfo) => secureCookies || info.headers['x-forwarded-proto'] === 'https';
  // Hub.cookie_host_prefix_enabled, as the established hub's: the login cookie as `__Host-…`, which a browser keeps only
  // when set by this very host, Secure, on path `/`, so no sibling host (a user's server) can plant one for the hub.
  // The login form's XSRF cookie too (there it keeps `_xsrf`): one planted by a user's server would let a form on that
  // server sign a visitor in as someone else. Every cookie the hub sets is host-only (no Domain), so with
  // subdomain_host no user's host ever sees one.
  const hostPrefixed = config.Hub.cookie_host_prefix_enabled;
  const loginCookie = hostPrefixed ? `__Host-${LOGIN_COOKIE}` : LOGIN_COOKIE;
  const xsrfCookie = hostPrefixed ? `__Host-${XSRF_COOKIE}` : XSRF_COOKIE;
  const prefixedAt = (info: RequestInfo) => (hostPrefixed ? { path: '/', secure: true } : { path: hubUrl('/hub/'), secure: isSecure(info) });

  async function session(id: string, info: RequestInfo): Promise<SessionFacts> {
    const hit = sessions.get(id);
    if (hit) return hit;
    const s = await auth.checkSession({ session_id: id }, callOf(info));
    const facts = { valid: s.valid, user: s.user, refreshedMs: Date.parse(s.refreshed) || 0 };
    sessions.set(id, facts);
    return facts;
  }

  /** The login's scopes are its user's own (roles, groups): asked of the tokens actor, kept until an event. */
  async function ownerScopes(user: string, info: RequestInfo): Promise<ReadonlySet<string>> {
    const hit = scopesOf.get(user);
    if (hit) return hit;
    const r = await tokens.ownerScopes({ kind: 'user', name: user }, callOf(info));
    const scopes = new Set(r.scopes);
    scopesOf.set(user, scopes, r.scopes_until_ms || Infinity);
    return scopes;
  }

  return {
    sealer,
    isSecure,

    /** The logged-in user of a browser request, or null (no cookie, forged, expired, logged out, refused on refresh). */
    async identify(info: RequestInfo): Promise<Identity | null> {
      const payload = sealer.open<LoginPayload>(parseCookies(info.headers.cookie)[loginCookie]);
      if (!payload || typeof payload.s !== 'string' || Date.now() - payload.t > maxAgeMs) return null;
      let s = await session(payload.s, info);
      if (!s.valid || s.user !== payload.u) return null;
      if (Date.now() - s.refreshedMs > refreshMs) {
        const r = await auth.refreshUser({ session_id: payload.s, by: `user:${payload.u}` }, callOf(info));
        s = { valid: r.valid, user: r.user, refreshedMs: Date.parse(r.refreshed) || Date.now() };
        sessions.set(payload.s, s);
        if (!s.valid) return null;
      }
      info.who = `user:${s.user}`;
      return { owner: { kind: 'user', name: s.user }, tokenId: '', sessionId: payload.s, scopes: await ownerScopes(s.user, info) };
    },

    loginCookies(info: RequestInfo, user: string, sessionId: string): string[] {
      const secure = isSecure(info);
      return [
        serializeCookie(loginCookie, sealer.seal({ u: user, s: sessionId, t: Date.now() }), { ...prefixedAt(info), maxAgeSeconds: maxAgeMs / 1000 }),
        serializeCookie(SESSION_COOKIE, sessionId, { path: baseUrl(), secure }),
      ];
    },

    clearCookies(info: RequestInfo): string[] {
      const secure = isSecure(info);
      return [
        serializeCookie(loginCookie, '', { ...prefixedAt(info), maxAgeSeconds: 0 }),
        serializeCookie(SESSION_COOKIE, '', { path: baseUrl(), maxAgeSeconds: 0, secure }),
        serializeCookie(xsrfCookie, '', { ...prefixedAt(info), maxAgeSeconds: 0, httpOnly: false }),
      ];
    },

    /** XSRF token of a logged-in browser: bound to its session, so it cannot be replayed from another login. */
    xsrfFor: (sessionId: string) => sealer.mac(`xsrf:${sessionId}`),

    /** For anonymous forms (the login form): a random value in a cookie, repeated in the form. */
    anonymousXsrf(info: RequestInfo): { value: string; setCookie?: string } {
      const existing = parseCookies(info.headers.cookie)[xsrfCookie];
      if (existing && /^[A-Za-z0-9_-]{16,64}$/.test(existing)) return { value: existing };
      const value = sealer.mac(`anon:${Math.random()}:${Date.now()}`).slice(0, 32);
      return { value, setCookie: serializeCookie(xsrfCookie, value, { ...prefixedAt(info), maxAgeSeconds: 3600, httpOnly: false }) };
    },

    /** The XSRF value a request carries (form field, query, or header), checked against what it should be. */
    xsrfValid(info: RequestInfo, expected: string, formValue?: string | null): boolean {
      const given = formValue ?? info.headers['x-xsrftoken'] ?? info.headers['x-csrftoken'] ?? new URLSearchParams(info.query).get('_xsrf');
      return typeof given === 'string' && given.length > 0 && macEquals(given, expected);
    },

    forgetSession: (id: string) => sessions.delete(id),
    forgetUser: (user: string) => scopesOf.delete(user),

    /**
     * A login through this gateway may have made the user or changed them (admin, groups, user_info): what this
     * gateway holds of them goes now, not when the auth actor's event arrives (which may be after the browser's next
     * request, sent as soon as the login's answer reaches it).
     */
    loggedIn(user: string): void {
      scopesOf.delete(user);
      users.forget(user);
    },
    clear() {
      sessions.clear();
      scopesOf.clear();
    },
    /** `hub reload`: Authenticator.auth_refresh_age of the logins checked from now on */
    useConfig(next: HubConfig) {
      refreshMs = next.Authenticator.auth_refresh_age * 1000;
    },
  };
}

export type WebSessions = ReturnType<typeof createWebSessions>;
