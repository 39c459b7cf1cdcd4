// The hub as OpenID Connect provider, on top of the OAuth 2 code grant of handlers.ts: id_tokens signed with the
// hub's key (signing-keys.ts), the grant each OIDC access token carries (for userinfo), refresh tokens (offline_access:
// rotated on use, a reused one revokes its whole line; they end with the login they came from and with any of their
// access tokens), and the checks of RP-initiated logout. Claims come from the auth actor (OidcClaims).
import { createHash, randomBytes } from 'node:crypto';
import { compactVerify, createLocalJWKSet, decodeJwt } from 'jose';
import type { AuditPublisher } from '../../shared/audit.js';
import { oidcIssuer, type HubConfig } from '../../shared/config.js';
import type { AuthClient, CallContext, TokensClient } from '../../shared/contracts/index.js';
import { errors } from '../../shared/errors.js';
import { cap, type Logger } from '../../shared/log.js';
import type { SigningKeys } from './signing-keys.js';
import type { ClientRow, OAuthStore, RefreshRow } from './store.js';

export interface OidcDeps {
  config: HubConfig;
  store: OAuthStore;
  tokens: TokensClient;
  auth: AuthClient;
  keys: SigningKeys;
  audit: AuditPublisher;
  log: Logger;
}

/** What an access token was granted, as the token endpoint records it. */
export interface Granted {
  client: ClientRow; user: string; scopes: string[]; oidcScopes: string[]; sessionId: string; nonce: string;
  accessToken: string; tokenId: string; expiresInS: number;
}

/** id_tokens are for the sign-in moment: an hour at most, never longer than the access token. */
const ID_TOKEN_MAX_S = 3600;

const digest = (token: string) => createHash('sha256').update(token).digest('base64url');
/** OIDC Core §3.1.3.6: the left half of the access token's SHA-256. */
const atHash = (accessToken: string) => createHash('sha256').update(accessToken).digest().subarray(0, 16).toString('base64url');
const newRefreshToken = () => randomBytes(32).toString('base64url');

export function createOidc({ config, store, tokens, auth, keys, audit, log }: OidcDeps) {
  const issuer = oidcIssuer(config);
  // a refresh token cannot outlive what a login would
  const refreshLifetimeMs = config.Hub.cookie_max_age_days * 86_400_000;

  /** The claims of a person for these OIDC scopes (id_token and userinfo share them). */
  async function claimsOf(user: string, sessionId: string, oidcScopes: string[], call?: CallContext) {
    const c = await auth.oidcClaims({ user, session_id: sessionId }, call && { deadline: call.deadline });
    const claims: Record<string, unknown> = { sub: c.sub, preferred_username: user, name: c.name };
    if (oidcScopes.includes('groups')) claims.groups = c.groups;
    if (oidcScopes.includes('email') && c.email) claims.email = c.email;
    return { claims, authTime: c.auth_time, sessionValid: c.session_valid };
  }

  async function idToken(g: Granted, nonce: string, call?: CallContext): Promise<{ idToken: string; sessionValid: boolean }> {
    const { claims, authTime, sessionValid } = await claimsOf(g.user, g.sessionId, g.oidcScopes, call);
    const now = Math.floor(Date.now() / 1000);
    const token = await keys.sign({
      iss: issuer, ...claims, aud: g.client.client_id, iat: now, exp: now + Math.max(1, Math.min(ID_TOKEN_MAX_S, Math.floor(g.expiresInS))),
      ...(authTime ? { auth_time: authTime } : {}), ...(nonce ? { nonce } : {}), at_hash: atHash(g.accessToken),
    });
    return { idToken: token, sessionValid };
  }

  /** The grant userinfo reads, and a refresh token when `offline_access` was granted. */
  async function record(g: Granted, family: string | null): Promise<string> {
    await store.insertGrant({
      token_id: g.tokenId, client_id: g.client.client_id, user_name: g.user, oidc_scopes: JSON.stringify(g.oidcScopes), session_id: g.sessionId,
      expires_at: Date.now() + g.expiresInS * 1000,
    });
    if (!g.oidcScopes.includes('offline_access')) return '';
    const refresh = newRefreshToken();
    const hash = digest(refresh);
    await store.insertRefresh({
      token_hash: hash, family: family ?? hash, client_id: g.client.client_id, user_name: g.user, scopes: JSON.stringify(g.scopes),
      oidc_scopes: JSON.stringify(g.oidcScopes), session_id: g.sessionId, access_token_id: g.tokenId, expires_at: Date.now() + refreshLifetimeMs,
    });
    return refresh;
  }

  /** Refresh tokens of these lines revoked, and every access token they gave with them. */
  async function revokeLines(by: Parameters<OAuthStore['revokeFamilies']>[0], reason: string): Promise<string[]> {
    const ids = await store.revokeFamilies(by);
    if (ids.length) await tokens.revokeTokens({ ids, oauth_client: '', by: 'actor:oauth', reason });
    return ids;
  }

  const refused = (row: Pick<RefreshRow, 'client_id' | 'user_name'>, reason: string) =>
    void audit.publish('oauth_refresh', 'denied', { who: `oauth:${row.client_id}`, what: `user:${row.user_name}`, outcome: 'denied', reason });

  return {
    /** After a code's exchange: the id_token (with `openid`) and the refresh token (with `offline_access`). */
    async afterExchange(g: Granted, call: CallContext): Promise<{ id_token: string; refresh_token: string }> {
      if (!g.oidcScopes.includes('openid')) return { id_token: '', refresh_token: '' };
      const { idToken: id_token } = await idToken(g, g.nonce, call);
      return { id_token, refresh_token: await record(g, null) };
    },

    /**
     * grant_type=refresh_token (RFC 6749 §6): the client's own token, unused, unexpired, its login still on; it is
     * spent and a new one given (same line). A spent one presented again revokes the line and what it gave.
     */
    async refresh(client: ClientRow, r: { refresh_token: string; scopes: string[] }, call: CallContext, expiresInS: number) {
      const row = r.refresh_token ? await store.refresh(digest(r.refresh_token)) : undefined;
      if (!row || row.client_id !== client.client_id) throw errors.oauth('invalid_grant', 'Invalid refresh token');
      if (row.revoked) {
        refused(row, 'revoked refresh token');
        throw errors.oauth('invalid_grant', 'The refresh token has been revoked');
      }
      const replay = async (): Promise<never> => {
        const revoked = await revokeLines({ families: [row.family] }, 'refresh token reused');
        log.warn({ event: 'oauth.refresh_reused', client_id: row.client_id, user: row.user_name, revoked }, 'a spent refresh token presented again: its line is revoked');
        void audit.publish('oauth_refresh', 'reuse', { who: `oauth:${row.client_id}`, what: `user:${row.user_name}`, outcome: 'denied', reason: 'refresh token presented again: its line is revoked', revoked });
        throw errors.oauth('invalid_grant', 'The refresh token has already been used');
      };
      if (row.used_at !== null) return replay();
      if (row.expires_at <= Date.now()) {
        refused(row, 'expired refresh token');
        throw errors.oauth('invalid_grant', 'The refresh token has expired');
      }
      const grantedScopes = JSON.parse(row.scopes) as string[];
      const grantedOidc = JSON.parse(row.oidc_scopes) as string[];
      const widened = r.scopes.filter((s) => !grantedScopes.includes(s) && !grantedOidc.includes(s));
      if (widened.length) throw errors.oauth('invalid_scope', `Not granted before: ${cap(widened.join(' '), 100)}`);
      // a narrower request keeps the OIDC scopes it names (openid always) and the hub scopes as granted
      const oidcScopes = r.scopes.length ? grantedOidc.filter((s) => s === 'openid' || r.scopes.includes(s)) : grantedOidc;
      const { sessionValid } = await claimsOf(row.user_name, row.session_id, [], call);
      if (!sessionValid) {
        await revokeLines({ families: [row.family] }, 'the login of the grant ended');
        refused(row, 'the login of the grant ended');
        throw errors.oauth('invalid_grant', 'The login this grant came from has ended');
      }
      if (call.cancelled) throw errors.timeout('the refresh');
      if (!(await store.claimRefresh(row.token_hash, Date.now()))) return replay();
      const minted = await tokens.issueOAuthToken({
        user: row.user_name, scopes: grantedScopes, session_id: row.session_id, oauth_client: client.client_id, note: client.description, expires_in: expiresInS,
      }, { deadline: call.deadline });
      const g: Granted = {
        client, user: row.user_name, scopes: grantedScopes, oidcScopes, sessionId: row.session_id, nonce: '',
        accessToken: minted.token, tokenId: minted.model!.id, expiresInS,
      };
      const refresh = await record(g, row.family);
      const { idToken: id_token } = await idToken(g, '', call);
      void audit.publish('oauth_refresh', 'redeem', { who: `oauth:${client.client_id}`, what: `user:${row.user_name}/${minted.model!.id}`, outcome: 'ok' });
      return {
        access_token: minted.token, scope: [...oidcScopes, ...grantedScopes].join(' '), expires_in: expiresInS, token_id: minted.model!.id,
        user: row.user_name, id_token, refresh_token: refresh,
      };
    },

    /** userinfo: the claims of an access token granted `openid`, as they are now. */
    async userInfo(r: { token_id: string; user: string }, call: CallContext) {
      const g = r.token_id ? await store.grant(r.token_id) : undefined;
      if (!g || g.user_name !== r.user || g.expires_at <= Date.now()) throw errors.oauth('invalid_token', 'This access token was not granted openid');
      const { claims } = await claimsOf(g.user_name, g.session_id, JSON.parse(g.oidc_scopes) as string[], call);
      return { claims_json: JSON.stringify(claims) };
    },

    async jwks() {
      return { jwks_json: JSON.stringify(await keys.jwks()) };
    },

    /**
     * RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0 §2-3): the hint must be an id_token this hub signed
     * (expired is fine); the client is the hint's audience or client_id (both must agree); a post-logout URI must be
     * one the client registered, exactly.
     */
    async checkEndSession(r: { client_id: string; id_token_hint: string; post_logout_redirect_uri: string }, getClient: (id: string) => Promise<ClientRow | undefined>) {
      let hinted: { aud: string; user: string } | null = null;
      if (r.id_token_hint) {
        try {
          await compactVerify(r.id_token_hint, createLocalJWKSet(await keys.jwks()));
          const p = decodeJwt(r.id_token_hint);
          if (p.iss !== issuer) throw new Error('another issuer');
          hinted = { aud: Array.isArray(p.aud) ? String(p.aud[0]) : String(p.aud ?? ''), user: String(p.preferred_username ?? '') };
        } catch (e) {
          throw errors.oauth('invalid_request', `id_token_hint is not an id_token of this hub (${cap((e as Error).message ?? '', 60)})`);
        }
      }
      if (hinted && r.client_id && hinted.aud !== r.client_id) throw errors.oauth('invalid_request', 'client_id is not the audience of id_token_hint');
      const clientId = r.client_id || hinted?.aud || '';
      if (r.post_logout_redirect_uri) {
        const client = clientId ? await getClient(clientId) : undefined;
        if (!client) throw errors.oauth('invalid_request', 'post_logout_redirect_uri needs the client (client_id or id_token_hint)');
        if (!(JSON.parse(client.post_logout_redirect_uris) as string[]).includes(r.post_logout_redirect_uri)) {
          void audit.publish('oidc_logout', 'denied', { who: `oauth:${clientId}`, what: cap(r.post_logout_redirect_uri, 200), outcome: 'denied', reason: 'post_logout_redirect_uri not registered' });
          throw errors.oauth('invalid_request', 'post_logout_redirect_uri is not registered for this client');
        }
      }
      return { client_id: clientId, user: hinted?.user ?? '', redirect_uri: r.post_logout_redirect_uri };
    },

    /** A revoked access token takes the refresh line it belongs to with it (logout, deletion, an admin's revoke). */
    async onTokenRevoked(tokenId: string): Promise<void> {
      const ids = await revokeLines({ accessTokenIds: [tokenId] }, 'an access token of the grant was revoked');
      if (ids.length) log.info({ event: 'oauth.refresh_line_revoked', token_id: tokenId }, 'refresh tokens revoked with their access token');
    },

    /** A reused code: the refresh lines of the tokens it gave go too. */
    revokeLinesOf: (accessTokenIds: string[]) => revokeLines({ accessTokenIds }, 'authorization code reused'),

    /** `hub rotate-oidc-key`. */
    async rotateSigningKey(r: { by: string }) {
      const out = await keys.rotate();
      log.info({ event: 'oidc.key_rotated', kid: out.kid, previous_kid: out.previous_kid }, 'new OpenID Connect signing key');
      void audit.publish('oidc_key', 'rotate', { who: r.by || 'unknown', what: out.kid, outcome: 'ok', previous: out.previous_kid });
      return out;
    },
  };
}

export type Oidc = ReturnType<typeof createOidc>;
