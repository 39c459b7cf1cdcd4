// The hub as OpenID Connect provider: the vocabulary the gateway (discovery, authorize, userinfo) and the oauth
// actor (id_tokens, refresh tokens) share. OIDC scopes are not hub scopes: they choose claims, never permissions.
import { oidcIssuer, publicHubUrl, type HubConfig } from './config.js';

/** `openid` makes a grant an OpenID Connect one; `offline_access` adds a refresh token. */
export const OIDC_SCOPES: readonly string[] = Object.freeze(['openid', 'profile', 'email', 'groups', 'offline_access']);
const OIDC_SCOPE_SET: ReadonlySet<string> = new Set(OIDC_SCOPES);
export const isOidcScope = (s: string): boolean => OIDC_SCOPE_SET.has(s);

export const OIDC_CLAIMS: readonly string[] = Object.freeze([
  'iss', 'sub', 'aud', 'exp', 'iat', 'auth_time', 'nonce', 'at_hash', 'preferred_username', 'name', 'groups', 'email',
]);

/** What each OIDC scope means on the consent page. */
export const OIDC_SCOPE_TEXT: Readonly<Record<string, string>> = Object.freeze({
  openid: 'Sign you in with your hub account (your user id)',
  profile: 'Know your user name and display name',
  email: 'Know your email address',
  groups: 'Know which hub groups you are in',
  offline_access: 'Stay signed in while you are away (a refresh token, ended when you log out)',
});

/** The provider's endpoints, where browsers and relying parties reach them (the issuer may be named otherwise). */
export function oidcEndpoints(config: HubConfig) {
  const api = publicHubUrl(config, '/hub/api/oauth2');
  return {
    issuer: oidcIssuer(config),
    authorization_endpoint: `${api}/authorize`,
    token_endpoint: `${api}/token`,
    userinfo_endpoint: `${api}/userinfo`,
    jwks_uri: `${api}/jwks`,
    end_session_endpoint: `${api}/logout`,
  };
}
