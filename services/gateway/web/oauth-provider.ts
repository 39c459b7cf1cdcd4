// The hub as OAuth 2 provider for its own servers and services (reference §6.2–6.4): the authorize page
// (GET shows the consent page or skips it, POST records the consent) and the token endpoint. Clients and
// codes live in the oauth actor; this file decides what a logged-in user may grant to which client.
import { errors, HubError, oauthErrorName } from '../../../shared/errors.js';
import type { OAuthClient as OAuthActor, Reply as ActorReply } from '../../../shared/contracts/index.js';
import { cap } from '../../../shared/log.js';
import {
  expandScopes, hasScope, identifyScopes, missingScopes, parseScope, SCOPE_DEFINITIONS, type IntersectContext, type ScopeIssuer, type ScopeOwner,
} from '../../../shared/scopes.js';
import type { Identity } from '../caches.js';
import { callOf, requestContext, type Reply, type RequestInfo } from '../http.js';
import { escapeHtml, hidden, page } from './html.js';
import { form, type PageDeps, type PageKit, type PageRoute } from './pages.js';
import { pushAll } from '../../../shared/lists.js';
import { isOidcScope, OIDC_SCOPE_TEXT } from '../../../shared/oidc.js';

/** The oauth actor's Client message. */
export type OAuthClient = ActorReply<'oauth', 'GetClient'>;
/** A known client and the registered redirect URI this request goes back to. */
interface Checked { client: OAuthClient; redirectUri: string }
/** What an authorization request may be granted: hub scopes and OpenID Connect scopes. */
interface Authorized extends Checked { scopes: string[]; oidcScopes: string[] }

/** The consent page must not be framed by another site (clickjacking a grant). */
const HTML = { 'Content-Type': 'text/html; charset=utf-8', 'X-Frame-Options': 'DENY', 'Content-Security-Policy': "frame-ancestors 'none'" };
const NO_STORE = { 'Cache-Control': 'no-store', Pragma: 'no-cache' };
const MAX_SCOPES = 100;

/** `uri` with `params` added to its query (absent values skipped); relative URIs stay relative. */
export function withParams(uri: string, params: Record<string, string | null | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined) q.append(k, v);
  if (!q.size) return uri;
  const hash = uri.indexOf('#');
  const base = hash >= 0 ? uri.slice(0, hash) : uri;
  return `${base}${base.includes('?') ? '&' : '?'}${q}`;
}

// a tool (Hub.oauth_clients) is reached as the service named by its client id: access:services!service=<client_id>
const issuerOf = (c: OAuthClient): ScopeIssuer => (c.kind === 'server' ? { kind: 'server', user: c.user, name: c.server_name } : { kind: 'service', name: c.service });

/** What every token of this client carries whatever was asked: who the user is, and the right to reach the client. */
export const requiredScopes = (c: OAuthClient, user: string): string[] => [...identifyScopes({ kind: 'user', name: user }), c.access_scope];

/**
 * Scope names as a client asks for them: the legacy `identify` is ignored; a name that is not a scope
 * may be a role, standing for its scopes. Null when some name is neither.
 */
export function resolveScopeNames(names: string[], roles: ReadonlyMap<string, { scopes: string[] }>): string[] | null {
  const out: string[] = [];
  for (const name of names) {
    if (name === 'identify' || name === '') continue;
    if (parseScope(name)) out.push(name);
    else if (roles.has(name)) pushAll(out, roles.get(name)!.scopes);
    else return null;
  }
  return [...new Set(out)];
}

/** A scope is covered by a set when it is in it literally or all it expands to is held (group filters included). */
function covered(scope: string, literal: readonly string[], expandedHeld: ReadonlySet<string>, owner: ScopeOwner, issuer: ScopeIssuer, ctx: IntersectContext): boolean {
  if (literal.includes(scope)) return true;
  if (scope === 'inherit') return false;
  return missingScopes(expandScopes([scope], owner, { issuer }), expandedHeld, ctx).length === 0;
}

/** One line of the consent page per scope: its description, and whom it is limited to. */
function describeScope(scope: string): string {
  const [base, filter] = scope.split('!', 2);
  const text = SCOPE_DEFINITIONS[base]?.description ?? base;
  return `<li><code>${escapeHtml(scope)}</code>: ${escapeHtml(text)}${filter ? ` <i>(only ${escapeHtml(filter.replace('=', ' '))})</i>` : ''}</li>`;
}

export function oauthProviderRoutes(deps: PageDeps, kit: PageKit, oauth: OAuthActor): PageRoute[] {
  const { config, web, users, book } = deps;
  const htmlPage = (reply: Reply, status: number, title: string, body: string, user?: string) => reply.send(status, page(title, body, user), HTML);

  /**
   * The client and the redirect URI to use (one of its registered ones, exactly; may be left out when it has only
   * one), or null after an error page: nothing is redirected to a URI that was not checked (reference §6.2 step 2).
   */
  async function checkedClient(info: RequestInfo, reply: Reply, q: URLSearchParams, id: Identity): Promise<Checked | null> {
    const clientId = q.get('client_id') ?? '';
    let client: OAuthClient;
    try {
      client = await oauth.getClient({ client_id: clientId }, callOf(info));
    } catch (e) {
      if ((e as HubError).status !== 404) throw e;
      void deps.audit.publish('oauth_grant', 'denied', { who: info.who, what: cap(clientId, 100), outcome: 'denied', reason: 'unknown client', request: requestContext(info) });
      htmlPage(reply, 400, 'Invalid OAuth request', `<p>There is no OAuth client <code>${escapeHtml(cap(clientId, 100))}</code>.</p>`, id.owner.name);
      return null;
    }
    const asked = q.get('redirect_uri');
    const redirectUri = asked ?? (client.redirect_uris.length === 1 ? client.redirect_uris[0] : null);
    if (redirectUri === null || !client.redirect_uris.includes(redirectUri)) {
      void deps.audit.publish('oauth_grant', 'denied', { who: info.who, what: client.client_id, outcome: 'denied', reason: 'redirect_uri not registered', request: requestContext(info) });
      htmlPage(reply, 400, 'Invalid OAuth request', `<p>The redirect_uri ${asked === null ? 'is missing: there is more than one' : 'does not match the one'} registered for ${escapeHtml(client.description)}.</p>`, id.owner.name);
      return null;
    }
    return { client, redirectUri };
  }

  /**
   * What the user grants: the asked-for scopes (or the client's allowance) plus the required ones, each
   * within the client's allowance (else `invalid_scope`), then narrowed to what the user holds.
   */
  async function grantable(client: OAuthClient, id: Identity, asked: string[] | null): Promise<{ scopes: string[] } | { error: string; description: string }> {
    const me = id.owner.name;
    const owner: ScopeOwner = { kind: 'user', name: me };
    const issuer = issuerOf(client);
    const myGroups = (await users.get(me))?.groups ?? [];
    const ctx: IntersectContext = { groupsOfUser: (u) => (u === me ? myGroups : []) };
    const required = requiredScopes(client, me);
    const resolved = asked === null ? client.allowed_scopes : resolveScopeNames(asked, book);
    if (resolved === null || resolved.length > MAX_SCOPES) return { error: 'invalid_scope', description: 'Unknown scope or role requested' };
    const allowance = [...client.allowed_scopes, ...required];
    const allowanceExpanded = expandScopes(allowance, owner, { issuer });
    const refused = resolved.filter((s) => !covered(s, allowance, allowanceExpanded, owner, issuer, ctx));
    if (refused.length) return { error: 'invalid_scope', description: `Client ${client.client_id} may not request ${refused.slice(0, 5).join(', ')}` };
    // the user may not grant more than they hold: the rest is dropped, silently as upstream does
    const held = resolved.filter((s) => s === 'inherit' || covered(s, [], id.scopes, owner, issuer, ctx));
    return { scopes: [...new Set([...held, ...required])] };
  }

  /** The access gate (reference §6.2 step 4): reaching the client at all needs its access scope. */
  async function mayAccess(client: OAuthClient, id: Identity): Promise<boolean> {
    if (client.kind !== 'server') return hasScope(id.scopes, 'access:services', { kind: 'service', name: client.service });
    const groups = (await users.get(client.user))?.groups ?? [];
    return hasScope(id.scopes, 'access:servers', { kind: 'server', user: client.user, name: client.server_name, groups });
  }

  const skipsConsent = (client: OAuthClient, id: Identity) => (client.kind === 'server' && client.user === id.owner.name) || client.no_confirm;

  function consentPage(info: RequestInfo, reply: Reply, client: OAuthClient, id: Identity, scopes: string[], oidcScopes: string[]): void {
    const required = new Set(requiredScopes(client, id.owner.name));
    const shown = scopes.filter((s) => !required.has(s));
    const oidcLines = oidcScopes.map((s) => `<li>${escapeHtml(OIDC_SCOPE_TEXT[s] ?? s)}</li>`).join('');
    const list = shown.includes('inherit')
      ? '<li>Anything you have access to</li>'
      : shown.length || oidcLines ? shown.map(describeScope).join('') + oidcLines : '<li>Identify you (no actions: it learns your name and groups)</li>';
    const fields = [...oidcScopes, ...scopes].map((s) => hidden('scopes', s)).join('');
    htmlPage(reply, 200, 'Authorize access', `<p><b>${escapeHtml(client.description)}</b> would like permission to:</p><ul>${list}</ul>
<form method="post" action="${escapeHtml(kit.here(info))}">${hidden('_xsrf', web.xsrfFor(id.sessionId))}${fields}<button type="submit">Authorize</button></form>`, id.owner.name);
  }

  /** The grant recorded as a code; the browser goes back to the client with it and the client's state. */
  async function issue(info: RequestInfo, reply: Reply, q: URLSearchParams, ok: Authorized, id: Identity): Promise<void> {
    const challenge = q.get('code_challenge') ?? '';
    const { code } = await oauth.issueCode({
      client_id: ok.client.client_id, user: id.owner.name, scopes: ok.scopes, redirect_uri: ok.redirectUri, session_id: id.sessionId,
      code_challenge: challenge, code_challenge_method: challenge ? q.get('code_challenge_method') || 'plain' : '',
      oidc_scopes: ok.oidcScopes, nonce: q.get('nonce') ?? '',
    }, callOf(info));
    kit.redirect(reply, withParams(ok.redirectUri, { code, state: q.get('state') }));
  }

  /** Errors after the redirect URI is known go back to the client (RFC 6749 §4.1.2.1). */
  const redirectError = (info: RequestInfo, reply: Reply, { client, redirectUri }: Checked, q: URLSearchParams, error: string, description: string) => {
    void deps.audit.publish('oauth_grant', 'denied', {
      who: info.who, what: client.client_id, outcome: 'denied', reason: `${error}: ${cap(description, 160)}`, request: requestContext(info),
    });
    kit.redirect(reply, withParams(redirectUri, { error, error_description: description, state: q.get('state') }));
  };

  /** Steps shared by GET and POST: a valid client, a valid request, the access gate, the grantable scopes. */
  async function authorizeRequest(info: RequestInfo, reply: Reply, id: Identity, askedNames: string[] | null): Promise<Authorized | null> {
    const q = new URLSearchParams(info.query);
    const checked = await checkedClient(info, reply, q, id);
    if (!checked) return null;
    const { client } = checked;
    // OIDC scopes choose claims, not permissions: they are set apart from the hub scopes asked for
    const oidcScopes = askedNames === null ? [] : [...new Set(askedNames.filter(isOidcScope))];
    const asked = askedNames === null ? null : askedNames.filter((s) => !isOidcScope(s));
    if (q.get('response_type') !== 'code') {
      redirectError(info, reply, checked, q, 'unsupported_response_type', 'Only response_type=code is supported');
      return null;
    }
    const method = q.get('code_challenge_method');
    if (method !== null && !['S256', 'plain'].includes(method)) {
      redirectError(info, reply, checked, q, 'invalid_request', 'code_challenge_method must be S256 or plain');
      return null;
    }
    if (client.public && (!q.get('code_challenge') || method !== 'S256')) {
      redirectError(info, reply, checked, q, 'invalid_request', 'code_challenge with code_challenge_method=S256 required (a public client)');
      return null;
    }
    if (oidcScopes.length && !oidcScopes.includes('openid')) {
      redirectError(info, reply, checked, q, 'invalid_scope', `${oidcScopes.join(', ')} need the openid scope`);
      return null;
    }
    if (oidcScopes.includes('openid') && client.require_nonce && !q.get('nonce')) {
      redirectError(info, reply, checked, q, 'invalid_request', 'nonce is required for this client');
      return null;
    }
    // Hub.oauth_require_pkce (the established hub 6.0's): every client proves its code with a verifier
    if (config.Hub.oauth_require_pkce && !q.get('code_challenge')) {
      redirectError(info, reply, checked, q, 'invalid_request', 'code_challenge required (this hub requires PKCE)');
      return null;
    }
    const g = await grantable(client, id, asked);
    if ('error' in g) {
      redirectError(info, reply, checked, q, g.error, g.description);
      return null;
    }
    if (!(await mayAccess(client, id))) {
      info.denyReason = `no access scope for OAuth client ${client.client_id}`;
      void deps.audit.publish('oauth_grant', 'denied', { who: info.who, what: client.client_id, outcome: 'denied', reason: `no ${client.access_scope}`, request: requestContext(info) });
      htmlPage(reply, 403, 'Forbidden', `<p>You do not have permission to access ${escapeHtml(client.description)}.</p>
<p>Signing in to it needs <code>${escapeHtml(client.access_scope)}</code>; ask an administrator of this hub for a role that grants it.</p>`, id.owner.name);
      return null;
    }
    return { ...checked, scopes: g.scopes, oidcScopes };
  }

  const spaceList = (s: string | null) => (s === null ? null : s.split(/\s+/).filter(Boolean));

  return [
    {
      method: 'GET', pattern: /^\/hub\/api\/oauth2\/authorize$/, acts: true, // issues a code when consent is not asked
      async handle(info, reply) {
        const id = await kit.requireLogin(info, reply);
        if (!id) return;
        const q = new URLSearchParams(info.query);
        const ok = await authorizeRequest(info, reply, id, spaceList(q.get('scope')));
        if (!ok) return;
        if (skipsConsent(ok.client, id)) return issue(info, reply, q, ok, id);
        consentPage(info, reply, ok.client, id, ok.scopes, ok.oidcScopes);
      },
    },
    {
      method: 'POST', pattern: /^\/hub\/api\/oauth2\/authorize$/,
      async handle(info, reply, body) {
        const id = await web.identify(info);
        const f = form(body);
        if (!id || !web.xsrfValid(info, web.xsrfFor(id.sessionId), f.get('_xsrf'))) {
          info.denyReason = 'consent form without a login or a valid XSRF token';
          return htmlPage(reply, 403, 'Forbidden', "<p>'_xsrf' argument missing or invalid, or you are not logged in.</p>", id?.owner.name);
        }
        // the consented scopes are checked again: a form can be edited
        const ok = await authorizeRequest(info, reply, id, f.getAll('scopes'));
        if (ok) await issue(info, reply, new URLSearchParams(info.query), ok, id);
      },
    },
    {
      method: 'POST', pattern: /^\/hub\/api\/oauth2\/token$/,
      async handle(info, reply, body) {
        try {
          const t = tokenRequest(info, body);
          const r = t.grant_type === 'refresh_token' ? await oauth.refresh(t, callOf(info)) : await oauth.exchangeCode(t, callOf(info));
          reply.json(200, {
            access_token: r.access_token, token_type: 'Bearer', expires_in: Math.round(r.expires_in), scope: r.scope,
            ...(r.id_token ? { id_token: r.id_token } : {}), ...(r.refresh_token ? { refresh_token: r.refresh_token } : {}),
          }, NO_STORE);
        } catch (e) {
          const name = e instanceof HubError ? oauthErrorName(e) : null;
          if (!name) throw e; // actor failures are logged and answered (503/504/500) as everywhere else
          const err = e as HubError;
          void deps.audit.publish('oauth_token', 'denied', {
            who: `oauth:${cap(new URLSearchParams(body?.toString('utf8') ?? '').get('client_id') ?? 'unknown', 80)}`,
            what: cap(new URLSearchParams(body?.toString('utf8') ?? '').get('grant_type') ?? 'unknown', 40), outcome: 'denied', reason: `${name}: ${cap(err.message, 160)}`, request: requestContext(info),
          });
          const challenge: Record<string, string> = err.status === 401 ? { 'WWW-Authenticate': 'Basic realm="hub"' } : {};
          reply.json(err.status, { error: name, error_description: err.message }, { ...NO_STORE, ...challenge });
        }
      },
    },
  ];
}

/**
 * The token request's fields (RFC 6749 §4.1.3): a form body; the client authenticates with
 * client_id/client_secret in the body or with HTTP Basic (§2.3.1), not both.
 */
function tokenRequest(info: RequestInfo, body: Buffer | null) {
  if (!(info.headers['content-type'] ?? '').toLowerCase().startsWith('application/x-www-form-urlencoded')) {
    throw errors.oauth('invalid_request', 'The body must be application/x-www-form-urlencoded');
  }
  const f = form(body);
  const grant = f.get('grant_type');
  if (grant !== 'authorization_code' && grant !== 'refresh_token') {
    throw errors.oauth(grant ? 'unsupported_grant_type' : 'invalid_request', grant ? `grant_type ${cap(grant, 40)} is not supported` : 'grant_type is required');
  }
  let clientId = f.get('client_id') ?? '';
  let secret = f.get('client_secret') ?? '';
  const basic = /^basic\s+(\S+)$/i.exec(info.headers.authorization ?? '');
  if (basic) {
    if (secret) throw errors.oauth('invalid_request', 'Use one way of client authentication, not two');
    const decoded = Buffer.from(basic[1], 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    const [id, pw] = colon < 0 ? [decoded, ''] : [decoded.slice(0, colon), decoded.slice(colon + 1)];
    try {
      [clientId, secret] = [decodeURIComponent(id.replace(/\+/g, ' ')), decodeURIComponent(pw.replace(/\+/g, ' '))];
    } catch {
      throw errors.oauth('invalid_client', 'Malformed Basic credentials');
    }
    if (f.get('client_id') && f.get('client_id') !== clientId) throw errors.oauth('invalid_request', 'client_id differs from the authenticated client');
  }
  if (grant === 'refresh_token') {
    const refresh = f.get('refresh_token');
    if (!refresh) throw errors.oauth('invalid_request', 'refresh_token is required');
    return { grant_type: grant, client_id: clientId, client_secret: secret, refresh_token: refresh, scopes: (f.get('scope') ?? '').split(/\s+/).filter(Boolean).slice(0, MAX_SCOPES) };
  }
  const code = f.get('code');
  if (!code) throw errors.oauth('invalid_request', 'code is required');
  return { grant_type: grant, client_id: clientId, client_secret: secret, code, redirect_uri: f.get('redirect_uri') ?? '', code_verifier: f.get('code_verifier') ?? '' };
}
