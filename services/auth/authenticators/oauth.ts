// The `oauth` backend: the hub as an OpenID Connect client (authorization code flow, PKCE S256, nonce), which
// also speaks plain OAuth 2 to providers without id_tokens (GitHub-style: authorize_url, token_url and
// userdata_url, the person named by the user-info answer). Options as JupyterHub's oauthenticator names them
// (OAuthenticator.*).
//
// OpenID Connect: `oidc_issuer` alone is enough. The discovery document (<issuer>/.well-known/openid-configuration)
// is read on first use, not at start (a provider briefly down must not stop the hub; a failed read is tried
// again at the next login), kept an hour, then read again in the background while the old one serves (and keeps
// serving if that read fails); explicit authorize_url, token_url and userdata_url override its endpoints. Each
// id_token is verified here with jose: the signature against the provider's JWKS (kept ten minutes, read again
// at once when a token names a key it does not hold: the provider rotated its keys), iss, aud (and azp when
// there are several audiences), exp, iat, the nonce the login started with, at_hash when present. Then the
// user-info endpoint, when there is one, for the rest of the claims (its `sub` must be the id_token's).
//
// Provider calls are plain fetches with the hygiene of the previous client: each bounded by the caller's
// deadline (AbortSignal), bodies capped at 256 KiB, an answer that is 5xx, 429, late, unreadable or absent is
// an outage (`unavailable`), a refusal (a bad code, a bad id_token, a revoked refresh token) is `ok:false` with a
// short reason. No code, token or secret reaches a log line or a reason. (openid-client would verify too, but
// it reads a JWKS again for an unknown key only once the cached one is a minute old, and its errors would have
// to be mapped back to outage-or-refusal; the checks themselves are a page.)
import { createHash } from 'node:crypto';
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify, type JWTPayload, type JWTVerifyGetKey, type JWTVerifyOptions } from 'jose';
import { errors } from '../../../shared/errors.js';
import { cap, type Logger } from '../../../shared/log.js';
import type { Authenticator, AuthenticatorFactory, Identity, Verdict } from './contract.js';

/** Largest answer read from the provider: discovery, keys, tokens and user info are a few KiB at most. */
const MAX_PROVIDER_BODY = 256 * 1024;
/** Room kept within the caller's deadline for our own work and the reply. */
const MARGIN_MS = 50;
/** How long a discovery document is used before it is read again (a failed re-read keeps the old one). */
const DISCOVERY_TTL_MS = 60 * 60_000;
/** How long a JWKS is used before it is read again; an unknown key reads it again sooner. */
const JWKS_TTL_MS = 10 * 60_000;
/** An unknown key reads the JWKS again unless it was read this recently (a burst of logins shares one read). */
const JWKS_MIN_REFETCH_MS = 1000;
/** Clock skew tolerated on exp and iat (seconds). */
const CLOCK_TOLERANCE_S = 60;
/** An id_token is fresh from the token endpoint: one issued longer ago than this is refused (seconds). */
const MAX_ID_TOKEN_AGE_S = 600;
/** The longest code accepted from the callback. */
/** Room kept, after a refresh token was spent, to keep the new tokens when the claims do not come in time. */
const CLAIMS_RESERVE_MS = 400;
const MAX_CODE_LENGTH = 4096;
/** Bounds on what a groups claim may bring. */
const MAX_GROUPS = 10_000;
const MAX_GROUP_NAME = 256;

const ASYMMETRIC_ALGS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];
const SYMMETRIC_ALGS = ['HS256', 'HS384', 'HS512'];

type Claims = Record<string, unknown>;
type Endpoint = 'discovery' | 'jwks' | 'token' | 'userinfo';

/** The provider could not be asked, or did not answer usably: nothing is decided. */
class ProviderDown extends Error {}
/** An answer over MAX_PROVIDER_BODY. */
class TooLarge extends Error {}
/** The provider (or our checks of its answer) refused: the reason is short and holds no token text. */
class Refused extends Error {
  /** `detail`: more for the log than the reason says (the token endpoint's error code under "refresh refused") */
  constructor(reason: string, readonly detail?: string) {
    super(reason);
  }
}

/** What discovery (or the configuration alone) says about the provider. */
interface ProviderInfo {
  /** the issuer, exactly as the provider spells it (the id_token's `iss`); absent: plain OAuth 2 */
  issuer?: string;
  authorization: string;
  token: string;
  userinfo?: string;
  jwksUri?: string;
  endSession?: string;
}

interface TokenAnswer {
  access_token: string;
  refresh_token?: string;
  id_token?: string;
  expires_in?: number;
  /** everything else the token endpoint said (token_type, scope, …) */
  rest: Claims;
}

const isObject = (x: unknown): x is Claims => typeof x === 'object' && x !== null && !Array.isArray(x);
const str = (x: unknown): string | undefined => (typeof x === 'string' && x !== '' ? x : undefined);

/** An absolute http(s) URL with a host and no spaces. */
function isHttpUrl(v: string): boolean {
  if (/\s/.test(v)) return false;
  try {
    const u = new URL(v);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '';
  } catch {
    return false;
  }
}

/** An OAuth error code for a reason line: a short token of safe characters, never a description. */
function errorCode(x: unknown): string {
  return typeof x === 'string' ? x.replace(/[^A-Za-z0-9_.-]/g, '').slice(0, 40) : '';
}

/** A claim by name, else by dotted path (`realm_access.roles`), own properties only. */
export function claimAt(claims: Claims, path: string): unknown {
  if (Object.hasOwn(claims, path)) return claims[path];
  let at: unknown = claims;
  for (const part of path.split('.')) {
    if (!isObject(at) || !Object.hasOwn(at, part)) return undefined;
    at = at[part];
  }
  return at;
}

/** A groups claim as a list of names: a list (strings kept), or one string; anything else is no claim. */
function groupsFrom(value: unknown): string[] | undefined {
  if (typeof value === 'string') return value ? [value] : [];
  if (!Array.isArray(value)) return undefined;
  const out = new Set<string>();
  for (const g of value) {
    if (typeof g === 'string' && g !== '' && g.length <= MAX_GROUP_NAME) out.add(g);
    if (out.size >= MAX_GROUPS) break;
  }
  return [...out];
}

/** The subject of a claim set: OIDC's `sub`, else the `id` plain OAuth 2 providers (GitHub) give. */
function subjectOf(claims: Claims | undefined): string | undefined {
  if (!claims) return undefined;
  const s = claims.sub ?? claims.id;
  return typeof s === 'string' && s ? s : typeof s === 'number' && Number.isFinite(s) ? String(s) : undefined;
}

async function readCapped(res: Response): Promise<string> {
  if (Number(res.headers.get('content-length') ?? 0) > MAX_PROVIDER_BODY) {
    await res.body?.cancel().catch(() => {});
    throw new TooLarge();
  }
  if (!res.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    if (size > MAX_PROVIDER_BODY) throw new TooLarge();
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** A JSON object, or a form-encoded body (some providers answer the token request that way), or null. */
function parseReply(text: string, contentType: string): Claims | null {
  try {
    const v = JSON.parse(text) as unknown;
    return isObject(v) ? v : null;
  } catch {
    return contentType.includes('application/x-www-form-urlencoded') ? Object.fromEntries(new URLSearchParams(text)) : null;
  }
}

/** A promise that gives up (an outage) at `deadline`, for callers joining work started by another. */
function within<T>(p: Promise<T>, deadline: number): Promise<T> {
  const left = deadline - MARGIN_MS - Date.now();
  if (left <= 0) return Promise.reject(new ProviderDown('no time left'));
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new ProviderDown('timed out')), left); });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** at_hash (OIDC Core 3.1.3.6): the left half of the access token's hash, by the id_token's algorithm. */
function atHash(accessToken: string, alg: string): string | undefined {
  const bits = /(256|384|512)$/.exec(alg)?.[1] ?? (alg === 'EdDSA' || alg === 'Ed25519' ? '512' : undefined);
  if (!bits) return undefined;
  const digest = createHash(`sha${bits}`).update(accessToken, 'ascii').digest();
  return digest.subarray(0, digest.length / 2).toString('base64url');
}

/** A jose error as a short reason (no token text: jose's codes and claim names only). */
function joseReason(e: unknown, what: string): string {
  const err = e as { code?: string; claim?: string };
  switch (err?.code) {
    case 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED': return `${what}: bad signature`;
    case 'ERR_JWKS_NO_MATCHING_KEY': return `${what}: signed by a key the provider does not publish`;
    case 'ERR_JOSE_ALG_NOT_ALLOWED': case 'ERR_JOSE_NOT_SUPPORTED': return `${what}: signing algorithm not accepted`;
    case 'ERR_JWT_EXPIRED': return `${what}: expired`;
    case 'ERR_JWT_CLAIM_VALIDATION_FAILED': return `${what}: ${errorCode(err.claim) || 'claim'} check failed`;
    case 'ERR_JWT_INVALID': case 'ERR_JWS_INVALID': case 'ERR_JWT_CLAIM_INVALID': return `${what}: malformed`;
    default: return `${what}: not verified`;
  }
}

export const createOAuthenticator: AuthenticatorFactory = ({ config, log }) => {
  const O = config.OAuthenticator;
  const oidc = O.oidc_issuer !== '';
  const idTokenRequired = oidc && O.scope.includes('openid');
  const rpcMs = config.Hub.rpc_timeout * 1000;
  const allowedGroups = new Set(O.allowed_groups);
  const adminGroups = new Set(O.admin_groups);
  const issuerUrl = O.oidc_issuer.replace(/\/+$/, '');
  const algorithms = [...ASYMMETRIC_ALGS, ...(O.client_secret && O.token_endpoint_auth_method !== 'none' ? SYMMETRIC_ALGS : [])];

  if (O.token_endpoint_auth_method !== 'none' && !O.client_secret && O.client_id) {
    log.warn({ event: 'oauth.config', method: O.token_endpoint_auth_method }, 'OAuthenticator.client_secret is empty: the provider will likely refuse the token request (token_endpoint_auth_method "none" for a public client)');
  }
  if (O.token_endpoint_auth_method === 'none' && !O.enable_pkce) {
    log.warn({ event: 'oauth.config' }, 'a public client (token_endpoint_auth_method "none") without enable_pkce: codes are not bound to the browser that asked');
  }

  // ---- one provider call ---------------------------------------------------------------------------------

  /**
   * One request within `deadline`. Unreachable, too slow, 5xx, 429 or a body over the cap throw ProviderDown;
   * any other answer is returned for the caller to judge.
   */
  async function call(endpoint: Endpoint, url: string, init: RequestInit, deadline: number, clog: Logger): Promise<{ status: number; contentType: string; text: string }> {
    const left = deadline - MARGIN_MS - Date.now();
    if (left <= 0) throw new ProviderDown(`${endpoint}: no time left`);
    try {
      const res = await fetch(url, { redirect: 'manual', ...init, signal: AbortSignal.timeout(left) });
      const text = await readCapped(res);
      if (res.status >= 500 || res.status === 429) {
        clog.warn({ event: 'oauth.provider.failed', endpoint, status: res.status }, 'identity provider answered with an error');
        throw new ProviderDown(`${endpoint}: ${res.status}`);
      }
      return { status: res.status, contentType: res.headers.get('content-type') ?? '', text };
    } catch (e) {
      if (e instanceof ProviderDown) throw e;
      if (e instanceof TooLarge) {
        clog.warn({ event: 'oauth.provider.failed', endpoint, reason: 'answer over 256 KiB' }, 'identity provider answered with too much');
        throw new ProviderDown(`${endpoint}: answer too large`);
      }
      const name = (e as Error)?.name;
      const timedOut = name === 'TimeoutError' || name === 'AbortError';
      const cause = (e as { cause?: { code?: string } })?.cause?.code;
      clog.warn({ event: 'oauth.provider.unreachable', endpoint, timedOut, reason: cap(String(cause ?? (e as Error)?.message ?? e), 120) }, 'identity provider unreachable');
      throw new ProviderDown(`${endpoint}: ${timedOut ? 'timed out' : 'unreachable'}`);
    }
  }

  /** A GET of a public JSON document (discovery, keys); redirects followed; anything but a JSON object is an outage. */
  async function getJson(endpoint: Endpoint, url: string, deadline: number, clog: Logger): Promise<Claims> {
    const r = await call(endpoint, url, { redirect: 'follow', headers: { accept: 'application/json' } }, deadline, clog);
    const body = r.status === 200 ? parseReply(r.text, 'application/json') : null;
    if (!body) {
      clog.warn({ event: 'oauth.provider.failed', endpoint, status: r.status }, 'identity provider answered without the expected document');
      throw new ProviderDown(`${endpoint}: ${r.status === 200 ? 'unreadable answer' : r.status}`);
    }
    return body;
  }

  // ---- discovery -----------------------------------------------------------------------------------------

  let discovered: { info: ProviderInfo; at: number } | undefined;
  let discovering: Promise<ProviderInfo> | undefined;

  function fromConfig(): ProviderInfo {
    return { authorization: O.authorize_url, token: O.token_url, userinfo: O.userdata_url || undefined };
  }

  async function discover(deadline: number, clog: Logger): Promise<ProviderInfo> {
    const doc = await getJson('discovery', `${issuerUrl}/.well-known/openid-configuration`, deadline, clog);
    const url = (key: string, required: boolean): string | undefined => {
      const v = doc[key];
      if (v === undefined && !required) return undefined;
      if (typeof v === 'string' && isHttpUrl(v)) return v;
      clog.error({ event: 'oauth.discovery.invalid', field: key }, 'the provider\'s discovery document lacks a usable endpoint');
      throw new ProviderDown(`discovery: no usable ${key}`);
    };
    const issuer = doc.issuer;
    if (typeof issuer !== 'string' || issuer.replace(/\/+$/, '') !== issuerUrl) {
      clog.error({ event: 'oauth.discovery.invalid', configured: O.oidc_issuer, announced: typeof issuer === 'string' ? cap(issuer, 200) : typeof issuer }, 'the provider\'s discovery document names another issuer than OAuthenticator.oidc_issuer');
      throw new ProviderDown('discovery: another issuer');
    }
    const info: ProviderInfo = {
      issuer,
      authorization: O.authorize_url || url('authorization_endpoint', true)!,
      token: O.token_url || url('token_endpoint', true)!,
      userinfo: O.userdata_url || url('userinfo_endpoint', false),
      jwksUri: url('jwks_uri', true),
      endSession: url('end_session_endpoint', false),
    };
    clog.debug({ event: 'oauth.discovery', issuer, userinfo: Boolean(info.userinfo), endSession: Boolean(info.endSession) }, 'read the provider\'s discovery document');
    return info;
  }

  /**
   * The provider's endpoints: from the configuration alone (plain OAuth 2), else by discovery. A document past
   * its hour is still used while it is read again in the background (a failed re-read keeps it).
   */
  async function provider(deadline: number, clog: Logger): Promise<ProviderInfo> {
    if (!oidc) return fromConfig();
    if (discovered && Date.now() - discovered.at < DISCOVERY_TTL_MS) return discovered.info;
    if (!discovering) {
      const p = discover(discovered ? Date.now() + rpcMs : deadline, clog).then((info) => {
        if (discovered?.info.jwksUri !== info.jwksUri) jwks = undefined;
        discovered = { info, at: Date.now() };
        return info;
      });
      discovering = p;
      p.catch((e) => {
        if (discovered) clog.warn({ event: 'oauth.discovery.stale', reason: (e as Error).message }, 'could not read the discovery document again; using the one read before');
      }).finally(() => { if (discovering === p) discovering = undefined; });
    }
    if (discovered) return discovered.info;
    return within(discovering, deadline);
  }

  // ---- keys and id_tokens --------------------------------------------------------------------------------

  let jwks: { getKey: JWTVerifyGetKey; at: number } | undefined;
  let fetchingJwks: Promise<JWTVerifyGetKey> | undefined;

  async function keys(uri: string, deadline: number, clog: Logger, again: boolean): Promise<JWTVerifyGetKey> {
    const now = Date.now();
    if (jwks && (again ? now - jwks.at < JWKS_MIN_REFETCH_MS : now - jwks.at < JWKS_TTL_MS)) return jwks.getKey;
    if (!fetchingJwks) {
      fetchingJwks = getJson('jwks', uri, deadline, clog)
        .then((doc) => {
          let getKey: JWTVerifyGetKey;
          try {
            getKey = createLocalJWKSet(doc as never);
          } catch {
            clog.error({ event: 'oauth.jwks.invalid' }, 'the provider\'s JWKS is not a key set');
            throw new ProviderDown('jwks: not a key set');
          }
          jwks = { getKey, at: Date.now() };
          clog.debug({ event: 'oauth.jwks', keys: Array.isArray(doc.keys) ? doc.keys.length : 0 }, 'read the provider\'s keys');
          return getKey;
        })
        .finally(() => { fetchingJwks = undefined; });
    }
    try {
      return await within(fetchingJwks, deadline);
    } catch (e) {
      // Keys read before still verify what they verified: a JWKS briefly unreadable must not stop logins.
      if (jwks && !again) return jwks.getKey;
      throw e;
    }
  }

  /** jwtVerify with a key set that may hold several candidates (no `kid`): each is tried. */
  async function verifyWith(token: string, key: JWTVerifyGetKey | Uint8Array, options: JWTVerifyOptions): Promise<JWTPayload> {
    try {
      return (await jwtVerify(token, key as JWTVerifyGetKey, options)).payload;
    } catch (e) {
      if ((e as { code?: string })?.code !== 'ERR_JWKS_MULTIPLE_MATCHING_KEYS') throw e;
      let last: unknown = e;
      for await (const candidate of e as AsyncIterable<CryptoKey>) {
        try {
          return (await jwtVerify(token, candidate, options)).payload;
        } catch (x) {
          last = x;
        }
      }
      throw last;
    }
  }

  /** A signed JWT from the provider, its signature checked against the JWKS (read again for an unknown key). */
  async function verifySigned(token: string, info: ProviderInfo, options: JWTVerifyOptions, what: string, deadline: number, clog: Logger): Promise<JWTPayload> {
    let alg: unknown;
    try {
      alg = decodeProtectedHeader(token).alg;
    } catch {
      throw new Refused(`${what}: malformed`);
    }
    if (typeof alg !== 'string' || !algorithms.includes(alg)) throw new Refused(`${what}: signing algorithm not accepted`);
    const opts = { ...options, algorithms };
    try {
      if (SYMMETRIC_ALGS.includes(alg)) return await verifyWith(token, new TextEncoder().encode(O.client_secret), opts);
      if (!info.jwksUri) throw new Refused(`${what}: the provider publishes no keys`);
      try {
        return await verifyWith(token, await keys(info.jwksUri, deadline, clog, false), opts);
      } catch (e) {
        if ((e as { code?: string })?.code !== 'ERR_JWKS_NO_MATCHING_KEY') throw e;
        clog.info({ event: 'oauth.jwks.unknown_key' }, 'a token names a key not in the provider\'s JWKS: reading it again');
        return await verifyWith(token, await keys(info.jwksUri, deadline, clog, true), opts);
      }
    } catch (e) {
      if (e instanceof ProviderDown || e instanceof Refused) throw e;
      throw new Refused(joseReason(e, what));
    }
  }

  /** OIDC Core 3.1.3.7: an id_token from the token endpoint, checked; `nonce` undefined: not checked (refresh). */
  async function verifyIdToken(idToken: string, accessToken: string, nonce: string | undefined, info: ProviderInfo, deadline: number, clog: Logger): Promise<Claims> {
    const payload = await verifySigned(idToken, info, {
      issuer: info.issuer, audience: O.client_id, clockTolerance: CLOCK_TOLERANCE_S, maxTokenAge: MAX_ID_TOKEN_AGE_S,
      requiredClaims: ['iss', 'sub', 'aud', 'exp', 'iat'],
    }, 'id_token', deadline, clog);
    const aud = Array.isArray(payload.aud) ? payload.aud : [payload.aud];
    if (aud.length > 1 && payload.azp === undefined) throw new Refused('id_token: several audiences and no azp');
    if (payload.azp !== undefined && payload.azp !== O.client_id) throw new Refused('id_token: azp check failed');
    if (typeof payload.sub !== 'string' || !payload.sub) throw new Refused('id_token: no sub');
    if (nonce !== undefined && payload.nonce !== (nonce || undefined)) throw new Refused('id_token: nonce mismatch');
    if (payload.at_hash !== undefined) {
      const alg = decodeProtectedHeader(idToken).alg ?? '';
      if (payload.at_hash !== atHash(accessToken, alg)) throw new Refused('id_token: at_hash mismatch');
    }
    return payload as Claims;
  }

  // ---- token and user-info endpoints ---------------------------------------------------------------------

  /** The token endpoint, for a code or a refresh token; the client authenticates per token_endpoint_auth_method. */
  async function tokenRequest(grant: Record<string, string>, info: ProviderInfo, deadline: number, clog: Logger): Promise<TokenAnswer> {
    const body = new URLSearchParams(grant);
    const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' };
    if (O.token_endpoint_auth_method === 'client_secret_basic') {
      const enc = (s: string) => encodeURIComponent(s).replace(/%20/g, '+'); // RFC 6749 §2.3.1: form-encoded, then Basic
      headers.authorization = `Basic ${Buffer.from(`${enc(O.client_id)}:${enc(O.client_secret)}`).toString('base64')}`;
    } else {
      body.set('client_id', O.client_id);
      if (O.token_endpoint_auth_method === 'client_secret_post' && O.client_secret) body.set('client_secret', O.client_secret);
    }
    const r = await call('token', info.token, { method: 'POST', headers, body }, deadline, clog);
    const b = parseReply(r.text, r.contentType);
    if (r.status === 200 && !b) {
      clog.warn({ event: 'oauth.provider.failed', endpoint: 'token', status: 200 }, 'identity provider answered the token request with something unreadable');
      throw new ProviderDown('token: unreadable answer');
    }
    // Some providers answer 200 with an `error` field: a refusal all the same.
    if (r.status !== 200 || !b || b.error !== undefined || typeof b.access_token !== 'string' || !b.access_token) {
      throw new Refused(`token endpoint: ${r.status}${b && b.error !== undefined ? ` ${errorCode(b.error)}` : ''}`);
    }
    if (typeof b.token_type === 'string' && b.token_type.toLowerCase() !== 'bearer') throw new Refused('token endpoint: not a bearer token');
    const { access_token: accessToken, refresh_token: refreshToken, id_token: idToken, ...rest } = b;
    const expiresIn = Number(b.expires_in);
    return {
      access_token: accessToken,
      refresh_token: str(refreshToken),
      id_token: str(idToken),
      expires_in: Number.isFinite(expiresIn) && expiresIn > 0 ? expiresIn : undefined,
      rest,
    };
  }

  /** The user-info endpoint: JSON claims, or a signed JWT (application/jwt) checked like an id_token's signature. */
  async function userinfo(url: string, accessToken: string, info: ProviderInfo, deadline: number, clog: Logger): Promise<Claims> {
    const r = await call('userinfo', url, { headers: { authorization: `Bearer ${accessToken}`, accept: 'application/json' } }, deadline, clog);
    if (r.status !== 200) throw new Refused(`userinfo: ${r.status}`);
    if (r.contentType.startsWith('application/jwt')) {
      const payload = await verifySigned(r.text.trim(), info, {}, 'userinfo', deadline, clog);
      if (payload.iss !== undefined && payload.iss !== info.issuer) throw new Refused('userinfo: iss check failed');
      if (payload.aud !== undefined && !(Array.isArray(payload.aud) ? payload.aud : [payload.aud]).includes(O.client_id)) throw new Refused('userinfo: aud check failed');
      return payload as Claims;
    }
    const body = parseReply(r.text, 'application/json');
    if (!body) {
      clog.warn({ event: 'oauth.provider.failed', endpoint: 'userinfo', status: 200 }, 'identity provider answered user info with something unreadable');
      throw new ProviderDown('userinfo: unreadable answer');
    }
    return body;
  }

  // ---- the verdict ---------------------------------------------------------------------------------------

  /** Who the claims say the person is, with the tokens to keep as auth state. */
  function identify(claims: Claims, tokens: { access_token: string; refresh_token?: string; id_token?: string; expires_at?: number; rest: Claims }, fallbackName?: string): Verdict {
    const raw = claimAt(claims, O.username_claim);
    const name = typeof raw === 'string' ? raw.trim() : typeof raw === 'number' && Number.isFinite(raw) ? String(raw) : (fallbackName ?? '');
    if (!name) throw new Refused(`no ${cap(O.username_claim, 60)} claim`);
    const identity: Identity = { name };
    const groups = groupsFrom(claimAt(claims, O.auth_state_groups_key || 'groups'));
    if (groups !== undefined) identity.groups = groups;
    const roles = config.Authenticator.manage_roles ? groupsFrom(claimAt(claims, O.claim_roles_key || 'roles')) : undefined;
    if (roles !== undefined) identity.roles = roles;
    if (allowedGroups.size && groups?.some((g) => allowedGroups.has(g))) identity.allowed = true;
    if (adminGroups.size) identity.admin = groups?.some((g) => adminGroups.has(g)) ?? false;
    const email = claims.email;
    if (typeof email === 'string' && email.includes('@') && email.length <= 320) identity.email = email;
    // what clients show of the person (user_info): the standard claims for a display name and a picture
    const userInfo: Record<string, string> = {};
    if (typeof claims.name === 'string' && claims.name.trim()) userInfo.display_name = claims.name.trim();
    if (typeof claims.picture === 'string' && /^https:\/\//.test(claims.picture)) userInfo.avatar_url = claims.picture;
    if (Object.keys(userInfo).length) identity.userInfo = userInfo;
    const authState: Record<string, unknown> = { access_token: tokens.access_token };
    if (tokens.refresh_token) authState.refresh_token = tokens.refresh_token;
    if (tokens.id_token) authState.id_token = tokens.id_token;
    authState.token_response = tokens.rest;
    if (tokens.expires_at !== undefined) authState.expires_at = tokens.expires_at;
    authState.oauth_user = claims;
    identity.authState = authState;
    return { ok: true, identity };
  }

  /** The error a flow ended with, as a verdict (unexpected errors: an outage, logged without their text's tokens). */
  function failed(e: unknown, clog: Logger, what: string): Verdict {
    if (e instanceof Refused) {
      clog.info({ event: `oauth.${what}.refused`, reason: e.message, detail: e.detail }, 'the identity provider refused, or its answer did not pass the checks');
      return { ok: false, reason: e.message };
    }
    if (e instanceof ProviderDown) return { ok: false, reason: `provider unavailable: ${e.message}`, unavailable: true };
    clog.error({ event: `oauth.${what}.error`, err: { name: (e as Error)?.name, code: (e as { code?: unknown })?.code } }, 'unexpected error while asking the identity provider');
    return { ok: false, reason: 'provider unavailable: unexpected error', unavailable: true };
  }

  const expiresAt = (expiresIn: number | undefined) => (expiresIn === undefined ? undefined : Math.floor(Date.now() / 1000) + expiresIn);

  // ---- refresh -------------------------------------------------------------------------------------------

  /** With a refresh token: new tokens (perhaps a new refresh token), then the claims again. */
  async function refreshWithToken(refreshToken: string, state: Claims, previous: Claims, fallbackName: string, deadline: number, clog: Logger): Promise<Verdict> {
    const info = await provider(deadline, clog);
    let t: TokenAnswer;
    try {
      t = await tokenRequest({ grant_type: 'refresh_token', refresh_token: refreshToken }, info, deadline, clog);
    } catch (e) {
      if (e instanceof Refused) throw new Refused('refresh refused', e.message);
      throw e;
    }
    const tokens = {
      access_token: t.access_token,
      refresh_token: t.refresh_token ?? refreshToken,
      id_token: t.id_token ?? str(state.id_token),
      expires_at: expiresAt(t.expires_in),
      rest: t.rest,
    };
    const before = subjectOf(previous) ?? subjectOfIdToken(str(state.id_token));
    // The provider has rotated the refresh token: from here on an outage must not lose the new tokens (the old
    // refresh token is spent). The claims are asked within a shorter deadline, and if the provider's keys or user
    // info do not answer, the login stands on what it said before, with the new tokens kept.
    const claimsBy = deadline - CLAIMS_RESERVE_MS;
    let claims: Claims | undefined;
    try {
      if (Date.now() >= claimsBy) throw new ProviderDown('no time left for the claims');
      if (t.id_token && oidc) {
        const id = await verifyIdToken(t.id_token, t.access_token, undefined, info, claimsBy, clog);
        if (before !== undefined && id.sub !== before) throw new Refused('id_token: another sub than the login\'s');
        claims = id;
      }
      if (info.userinfo) {
        const u = await userinfo(info.userinfo, t.access_token, info, claimsBy, clog);
        const was = subjectOf(claims) ?? before;
        if (was !== undefined && subjectOf(u) !== undefined && subjectOf(u) !== was) throw new Refused('userinfo: another sub than the login\'s');
        if (claims && u.sub !== claims.sub) throw new Refused('userinfo: sub differs from the id_token\'s');
        claims = { ...claims, ...u };
      }
    } catch (e) {
      if (e instanceof Refused) throw e;
      clog.warn({ event: 'oauth.refresh.claims_unavailable', reason: cap((e as Error).message ?? String(e), 120) }, 'new tokens kept; the provider\'s claims could not be read, the login stands on its earlier ones');
      return identify(previous, tokens, fallbackName);
    }
    return identify(claims ?? previous, tokens, fallbackName);
  }

  function subjectOfIdToken(idToken: string | undefined): string | undefined {
    if (!idToken) return undefined;
    try {
      return subjectOf(decodeJwt(idToken) as Claims);
    } catch {
      return undefined;
    }
  }

  // Concurrent refreshes of one login share one use of its refresh token (a rotating provider would take a
  // second use for a replay and end the whole grant).
  const refreshing = new Map<string, Promise<Verdict>>();

  // ---- the backend ---------------------------------------------------------------------------------------

  return {
    offer: { form: false, button: O.login_service },
    admitsAllByDefault: false,
    hasAllowRule: O.allowed_groups.length > 0,

    configProblems() {
      const problems: string[] = [];
      if (!O.client_id) problems.push('OAuthenticator.client_id: required (the hub\'s client id at the provider)');
      for (const key of ['oidc_issuer', 'authorize_url', 'token_url', 'userdata_url'] as const) {
        if (O[key] && !isHttpUrl(O[key])) problems.push(`OAuthenticator.${key}: ${JSON.stringify(cap(O[key], 120))} is not an http(s) URL`);
      }
      if (O.oidc_issuer && isHttpUrl(O.oidc_issuer) && /[?#]/.test(O.oidc_issuer)) problems.push('OAuthenticator.oidc_issuer: an issuer URL has no query or fragment');
      if (!O.oidc_issuer) {
        const missing = (['authorize_url', 'token_url', 'userdata_url'] as const).filter((k) => !O[k]);
        if (missing.length) problems.push(`OAuthenticator: set oidc_issuer (endpoints by discovery), or all of authorize_url, token_url and userdata_url (missing: ${missing.join(', ')})`);
      }
      if (O.logout_redirect_url && !isHttpUrl(O.logout_redirect_url) && !/^\/(?!\/)\S*$/.test(O.logout_redirect_url)) {
        problems.push(`OAuthenticator.logout_redirect_url: ${JSON.stringify(cap(O.logout_redirect_url, 120))} is neither an http(s) URL nor a path`);
      }
      if (!O.username_claim.trim()) problems.push('OAuthenticator.username_claim: required');
      if (!O.auth_state_groups_key.trim() && (O.allowed_groups.length || O.admin_groups.length)) {
        problems.push('OAuthenticator.auth_state_groups_key: required with allowed_groups or admin_groups');
      }
      return problems;
    },

    async loginUrl({ state, codeChallenge, nonce, redirectUri }) {
      let info: ProviderInfo;
      try {
        info = await provider(Date.now() + rpcMs - 300, log);
      } catch (e) {
        throw e instanceof ProviderDown && e.message.endsWith('timed out') ? errors.timeout('The identity provider') : errors.unavailable('The identity provider');
      }
      const url = new URL(info.authorization);
      url.searchParams.set('response_type', 'code');
      url.searchParams.set('client_id', O.client_id);
      url.searchParams.set('redirect_uri', redirectUri);
      if (O.scope.length) url.searchParams.set('scope', O.scope.join(' '));
      url.searchParams.set('state', state);
      if (oidc && nonce) url.searchParams.set('nonce', nonce);
      if (O.enable_pkce && codeChallenge) {
        url.searchParams.set('code_challenge', codeChallenge);
        url.searchParams.set('code_challenge_method', 'S256');
      }
      // OIDC Core §11: offline access (a refresh token) is asked for with prompt=consent, unless the operator says otherwise
      if (oidc && O.scope.includes('offline_access')) url.searchParams.set('prompt', 'consent');
      // extra_authorize_params: what a provider wants besides (Google's access_type=offline, prompt=login, hd=…)
      for (const [key, value] of Object.entries(O.extra_authorize_params)) url.searchParams.set(key, value);
      return url.toString();
    },

    async completeLogin({ code, codeVerifier, nonce, redirectUri }, ctx) {
      const clog = ctx.log;
      try {
        if (!code || code.length > MAX_CODE_LENGTH) throw new Refused('no usable code');
        const info = await provider(ctx.deadline, clog);
        const grant: Record<string, string> = { grant_type: 'authorization_code', code, redirect_uri: redirectUri };
        if (O.enable_pkce && codeVerifier) grant.code_verifier = codeVerifier;
        const t = await tokenRequest(grant, info, ctx.deadline, clog);
        let claims: Claims | undefined;
        if (oidc && t.id_token) claims = await verifyIdToken(t.id_token, t.access_token, nonce, info, ctx.deadline, clog);
        else if (idTokenRequired) throw new Refused('token endpoint: no id_token');
        if (info.userinfo) {
          const u = await userinfo(info.userinfo, t.access_token, info, ctx.deadline, clog);
          if (claims && u.sub !== claims.sub) throw new Refused('userinfo: sub differs from the id_token\'s');
          claims = { ...claims, ...u };
        }
        if (!claims) throw new Refused('the provider said nothing about the person');
        // A plain OAuth 2 provider's id_token (no issuer configured) cannot be verified: it is kept, not read.
        return identify(claims, { access_token: t.access_token, refresh_token: t.refresh_token, id_token: t.id_token, expires_at: expiresAt(t.expires_in), rest: t.rest });
      } catch (e) {
        return failed(e, clog, 'login');
      }
    },

    async refresh({ name, authState }, ctx) {
      const clog = ctx.log;
      if (!authState) {
        // Without kept auth state there are no tokens to ask with: the login stands (JupyterHub: refresh_user is True).
        if (!config.Authenticator.enable_auth_state) return null;
        return { ok: false, reason: 'no auth state to refresh with' };
      }
      const previous = isObject(authState.oauth_user) ? authState.oauth_user : {};
      const refreshToken = str(authState.refresh_token);
      const accessToken = str(authState.access_token);
      try {
        if (refreshToken) {
          const key = createHash('sha256').update(refreshToken).digest('base64url');
          let p = refreshing.get(key);
          if (!p) {
            p = refreshWithToken(refreshToken, authState, previous, name, ctx.deadline, clog).catch((e) => failed(e, clog, 'refresh'));
            refreshing.set(key, p);
            void p.finally(() => refreshing.delete(key));
          }
          return await within(p, ctx.deadline);
        }
        const exp = typeof authState.expires_at === 'number' ? authState.expires_at : undefined;
        if (!accessToken) return { ok: false, reason: 'no provider token in the auth state' };
        if (exp !== undefined && exp * 1000 <= Date.now()) return { ok: false, reason: 'access token expired and no refresh token' };
        const info = await provider(ctx.deadline, clog);
        if (!info.userinfo) return null; // nothing to ask the provider with an access token alone
        const u = await userinfo(info.userinfo, accessToken, info, ctx.deadline, clog);
        const before = subjectOf(previous) ?? subjectOfIdToken(str(authState.id_token));
        if (before !== undefined && subjectOf(u) !== before) throw new Refused('userinfo: another sub than the login\'s');
        return identify({ ...previous, ...u }, {
          access_token: accessToken, id_token: str(authState.id_token), expires_at: exp,
          rest: isObject(authState.token_response) ? authState.token_response : {},
        }, name);
      } catch (e) {
        return failed(e, clog, 'refresh');
      }
    },

    async logoutUrl({ authState, postLogoutRedirectUri }) {
      if (O.logout_redirect_url) return O.logout_redirect_url;
      if (!oidc) return undefined;
      let info: ProviderInfo;
      try {
        info = await provider(Date.now() + rpcMs - 300, log);
      } catch {
        return undefined; // the hub's own logout stands; the provider's session is left
      }
      if (!info.endSession) return undefined;
      const url = new URL(info.endSession);
      const idToken = str(authState?.id_token);
      if (idToken) url.searchParams.set('id_token_hint', idToken);
      if (postLogoutRedirectUri) url.searchParams.set('post_logout_redirect_uri', postLogoutRedirectUri);
      url.searchParams.set('client_id', O.client_id);
      return url.toString();
    },

    async close() {
      discovered = undefined;
      jwks = undefined;
    },
  };
};
