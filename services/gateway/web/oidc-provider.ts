// The hub as OpenID Connect provider, the endpoints beside authorize and token (oauth-provider.ts): discovery, the
// signing keys (JWKS), userinfo and RP-initiated logout. Keys, grants and the checks live in the oauth actor
// (services/oauth/oidc.ts); userinfo resolves its bearer token through the same cached path as every API request.
import { HubError, oauthErrorName } from '../../../shared/errors.js';
import type { OAuthClient as OAuthActor } from '../../../shared/contracts/index.js';
import { cap } from '../../../shared/log.js';
import { OIDC_CLAIMS, OIDC_SCOPES, oidcEndpoints } from '../../../shared/oidc.js';
import type { Identity } from '../caches.js';
import { callOf, requestContext, type Reply, type RequestInfo } from '../http.js';
import { escapeHtml, hidden, page } from './html.js';
import { form, type PageDeps, type PageKit, type PageRoute } from './pages.js';
import { withParams } from './oauth-provider.js';
import { hubUrl } from '../../../shared/urls.js';

const HTML = { 'Content-Type': 'text/html; charset=utf-8', 'X-Frame-Options': 'DENY', 'Content-Security-Policy': "frame-ancestors 'none'" };
const NO_STORE = { 'Cache-Control': 'no-store', Pragma: 'no-cache' };
/** Relying parties may keep these a while; a rotation publishes the next key one rotation ahead (signing-keys.ts). */
const CACHEABLE = { 'Cache-Control': 'public, max-age=300' };
const BEARER = /^bearer\s+(\S+)$/i;
const LOGOUT_PARAMS = ['id_token_hint', 'client_id', 'post_logout_redirect_uri', 'state'] as const;

export function oidcProviderRoutes(deps: PageDeps, kit: PageKit, oauth: OAuthActor): PageRoute[] {
  const { config, web, identities } = deps;
  const endpoints = oidcEndpoints(config);
  const discovery = JSON.stringify({
    ...endpoints,
    scopes_supported: OIDC_SCOPES,
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token'],
    subject_types_supported: ['public'],
    id_token_signing_alg_values_supported: ['ES256'],
    token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'none'],
    code_challenge_methods_supported: ['S256'],
    claims_supported: OIDC_CLAIMS,
    request_parameter_supported: false,
    claims_parameter_supported: false,
  });
  const htmlPage = (reply: Reply, status: number, title: string, body: string, cookies: string[] = [], user?: string) =>
    reply.send(status, page(title, body, user), HTML, false, cookies);

  /** RFC 6750 §3: a refused bearer token is a 401 naming the error in WWW-Authenticate. */
  function bearerError(reply: Reply, status: number, error: string, description: string) {
    reply.json(status, { error, error_description: description }, { ...NO_STORE, 'WWW-Authenticate': `Bearer error="${error}", error_description="${description.replace(/["\\]/g, '')}"` });
  }

  async function userInfo(info: RequestInfo, reply: Reply, body: Buffer | null) {
    const header = info.headers.authorization;
    const fromForm = info.method === 'POST' && (info.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded') ? form(body).get('access_token') : null;
    const token = header !== undefined ? BEARER.exec(header.trim())?.[1] : fromForm;
    if (!token) return reply.send(401, '', { ...NO_STORE, 'WWW-Authenticate': 'Bearer' });
    const identity: Identity | null = await identities.resolve(token, info.requestId);
    if (!identity || identity.owner.kind !== 'user') return bearerError(reply, 401, 'invalid_token', 'The access token is invalid or expired');
    info.who = `user:${identity.owner.name}`;
    try {
      const r = await oauth.userInfo({ token_id: identity.tokenId, user: identity.owner.name }, callOf(info));
      reply.send(200, r.claims_json, { 'Content-Type': 'application/json', ...NO_STORE });
    } catch (e) {
      if (e instanceof HubError && oauthErrorName(e) === 'invalid_token') return bearerError(reply, 401, 'invalid_token', e.message);
      throw e;
    }
  }

  /** Where the browser goes once signed out: the checked post-logout URI with the client's state, else the sign-in page. */
  const afterLogout = (q: URLSearchParams, checkedUri: string) => (checkedUri ? withParams(checkedUri, { state: q.get('state') }) : hubUrl('/hub/login'));

  async function logout(info: RequestInfo, reply: Reply, body: Buffer | null) {
    const posted = info.method === 'POST' ? form(body) : null;
    const q = new URLSearchParams();
    const source = posted ?? new URLSearchParams(info.query);
    for (const name of LOGOUT_PARAMS) {
      const v = source.get(name);
      if (v !== null) q.set(name, cap(v, 8192));
    }
    let checked: { client_id: string; user: string; redirect_uri: string };
    try {
      checked = await oauth.checkEndSession({
        client_id: q.get('client_id') ?? '', id_token_hint: q.get('id_token_hint') ?? '', post_logout_redirect_uri: q.get('post_logout_redirect_uri') ?? '',
      }, callOf(info));
    } catch (e) {
      if (!(e instanceof HubError) || oauthErrorName(e) !== 'invalid_request') throw e;
      info.denyReason = `logout refused: ${cap(e.message, 120)}`;
      return htmlPage(reply, 400, 'Invalid logout request', `<p>${escapeHtml(e.message)}.</p><p>You are still signed in. <a href="${hubUrl('/hub/home')}">Home</a></p>`);
    }
    const id = await web.identify(info);
    const to = afterLogout(q, checked.redirect_uri);
    if (!id) return kit.redirect(reply, to, web.clearCookies(info));
    // without an id_token of this person, a page could log them out behind their back: they confirm (a form with XSRF)
    const confirmed = posted !== null && web.xsrfValid(info, web.xsrfFor(id.sessionId), posted.get('_xsrf'));
    if (checked.user !== id.owner.name && !confirmed) {
      if (posted !== null) info.denyReason = 'logout form without a valid XSRF token';
      const fields = LOGOUT_PARAMS.map((n) => (q.get(n) === null ? '' : hidden(n, q.get(n)!))).join('');
      return htmlPage(reply, posted ? 403 : 200, 'Sign out', `<p>${checked.client_id ? `<b>${escapeHtml(checked.client_id)}</b> asks to sign you out of the hub.` : 'Sign out of the hub?'}</p>
<form method="post" action="${hubUrl('/hub/api/oauth2/logout')}">${hidden('_xsrf', web.xsrfFor(id.sessionId))}${fields}<button type="submit">Sign out</button></form>`, [], id.owner.name);
    }
    await kit.endLogin(info, id, '');
    void deps.audit.publish('oidc_logout', 'logout', {
      who: `user:${id.owner.name}`, what: checked.client_id || 'hub', outcome: 'ok', via: confirmed ? 'confirmed' : 'id_token_hint', request: requestContext(info),
    });
    kit.redirect(reply, to, web.clearCookies(info));
  }

  return [
    {
      method: 'GET', pattern: /^\/hub\/\.well-known\/openid-configuration$/,
      handle: (_info, reply) => reply.send(200, discovery, { 'Content-Type': 'application/json', ...CACHEABLE }),
    },
    {
      method: 'GET', pattern: /^\/hub\/api\/oauth2\/jwks$/,
      async handle(info, reply) {
        const r = await oauth.jwks({}, callOf(info));
        reply.send(200, r.jwks_json, { 'Content-Type': 'application/jwk-set+json', ...CACHEABLE });
      },
    },
    ...(['GET', 'POST'] as const).map((method) => ({ method, pattern: /^\/hub\/api\/oauth2\/userinfo$/, handle: userInfo })),
    ...(['GET', 'POST'] as const).map((method) => ({ method, pattern: /^\/hub\/api\/oauth2\/logout$/, acts: true, handle: logout })),
  ];
}
