// The hub's own pages under /hub/: the page kit (answers, login requirement, XSRF, top bar), login and
// logout, and the dispatch; home and spawning live in home.ts, tokens in token-page.ts.
// Forms carry an XSRF token; every redirect target is checked to be a local path.
import { publicHubUrl } from '../../../shared/config.js';
import { within } from '../../../shared/grpc.js';
import { errors } from '../../../shared/errors.js';
import { hasScope } from '../../../shared/scopes.js';
import type { ApiDeps } from '../api/deps.js';
import type { Identity } from '../caches.js';
import { callOf, type Reply, type RequestInfo } from '../http.js';
import { serverPages } from './home.js';
import { sharePages } from './share-page.js';
import { escapeHtml, hidden, page, type Nav } from './html.js';
import { localPath } from './redirects.js';
import { browserLocation, serviceLocation } from '../../../shared/subdomains.js';
import { firstAdminSetup } from './setup-page.js';
import type { WebSessions } from './sessions.js';
import { tokenPages } from './token-page.js';
import { pushAll } from '../../../shared/lists.js';
import { hubUrl } from '../../../shared/urls.js';

export interface PageDeps extends ApiDeps {
  web: WebSessions;
  /** whether this gateway's routing table holds a route (a page waits for a just-ready server's route before sending a browser to it) */
  hasRoute?: (routespec: string) => boolean;
}

export type PageHandler = (info: RequestInfo, reply: Reply, body: Buffer | null, params: string[]) => Promise<void> | void;
/** A page: method, a path pattern whose groups are the (percent-decoded) params, and its handler. */
export interface PageRoute {
  method: string;
  pattern: RegExp;
  handle: PageHandler;
  /** a GET that changes something (logout): not answered for HEAD */
  acts?: boolean;
}

const routeLabels = new WeakMap<RegExp, string>();
/** `/^\/hub\/spawn\/([^/]+)…$/` → `/hub/spawn/*`: the label of a page's metrics and log lines. */
function routeLabel(pattern: RegExp): string {
  let label = routeLabels.get(pattern);
  if (label === undefined) {
    const literal = pattern.source.replace(/^\^/, '').replace(/\$$/, '').replace(/\\\//g, '/');
    const cut = literal.search(/[(\\[?*+]/);
    label = cut < 0 ? literal : `${literal.slice(0, cut).replace(/\/?$/, '/')}*`;
    routeLabels.set(pattern, label);
  }
  return label;
}

const HTML = { 'Content-Type': 'text/html; charset=utf-8' };

export function form(body: Buffer | null): URLSearchParams {
  return new URLSearchParams(body ? body.toString('utf8') : '');
}

/** What every page handler needs: answers (redirect, html), the login requirement, the form XSRF check. */
export function createPageKit(deps: PageDeps) {
  const { web } = deps;
  const redirect = (reply: Reply, location: string, cookies: string[] = []) => reply.send(302, '', { Location: location }, false, cookies);
  const html = (reply: Reply, status: number, body: string, cookies: string[] = [], headers: Record<string, string> = {}) =>
    reply.send(status, body, { ...HTML, ...headers }, false, cookies);

  /** What the top bar offers this person: the Services menu lists only services they may use (services come and go at run time). */
  const nav = (id: Identity): Nav => ({
    user: id.owner.name, admin: hasScope(id.scopes, 'admin-ui'),
    services: [...deps.services.values()]
      .filter((s) => s.url && s.display !== false && hasScope(id.scopes, 'access:services', { kind: 'service', name: s.name }))
      .map((s) => ({ name: s.name, href: serviceLocation(deps.subdomains, s.name) })),
  });

  /** This request's URL as the browser asked it (Hub.base_url in front of the path the hub routes). */
  const here = (info: RequestInfo) => (info.query ? `${hubUrl(info.path)}?${info.query}` : hubUrl(info.path));

  /** The logged-in user, or a redirect to the login page that brings the browser back here. */
  async function requireLogin(info: RequestInfo, reply: Reply): Promise<Identity | null> {
    const id = await web.identify(info);
    if (!id) redirect(reply, `${hubUrl('/hub/login')}?next=${encodeURIComponent(here(info))}`);
    return id;
  }

  function checkFormXsrf(info: RequestInfo, id: Identity, f: URLSearchParams): void {
    if (!web.xsrfValid(info, web.xsrfFor(id.sessionId), f.get('_xsrf'))) throw errors.forbidden("'_xsrf' argument missing or invalid", 'HUB_ERR_XSRF');
  }

  /**
   * A login ends (/hub/logout, and a relying party's logout at the OpenID Connect provider): with
   * Hub.shutdown_on_logout the person's running servers stop first; then the session is revoked, the tokens issued
   * during it go, and the gateway forgets it. Returns the upstream provider's logout URL, "" when there is none.
   */
  async function endLogin(info: RequestInfo, id: Identity, postLogoutRedirectUri: string): Promise<string> {
    const { config, auth, tokens } = deps;
    const by = `user:${id.owner.name}`;
    if (config.Hub.shutdown_on_logout) {
      await Promise.all(deps.servers.of(id.owner.name).filter((r) => deps.servers.isActive(r)).map((r) =>
        deps.spawner.stopServer({ user: r.user, name: r.name, by }, within((config.Spawner.slow_stop_timeout + config.Hub.rpc_timeout) * 1000, callOf(info)))));
    }
    // 1. the login ends, 2. the tokens issued during it are revoked, 3. the gateway forgets the session
    const ended = await auth.revokeSession({ session_id: id.sessionId, by, post_logout_redirect_uri: postLogoutRedirectUri }, callOf(info));
    await tokens.revokeSessionTokens({ user: id.owner.name, session_id: id.sessionId, by }, callOf(info));
    web.forgetSession(id.sessionId);
    return ended.logout_url;
  }

  return { redirect, html, here, nav, requireLogin, checkFormXsrf, endLogin };
}

export type PageKit = ReturnType<typeof createPageKit>;

/** `extra`: pages other modules add (the OAuth provider's, the external login's). */
export function createPages(deps: PageDeps, extra: (kit: PageKit) => PageRoute[] = () => []) {
  const { config, auth, tokens, web } = deps;
  const kit = createPageKit(deps);
  const { redirect, html } = kit;

  const setup = firstAdminSetup(deps, kit);

  /** What the authenticator offers never changes while the hub runs: asked once (again after a failed ask). */
  let offered: { form: boolean; button: string } | null = null;
  const loginOffer = async (info: RequestInfo) => (offered ??= await auth.loginOptions({}, callOf(info)));

  /** The sign-in page: the authenticator's form, its "Sign in with …" button, or both (as LoginOptions says). */
  async function loginForm(info: RequestInfo, reply: Reply, status: number, message = '', next = ''): Promise<void> {
    const offer = await loginOffer(info);
    const xsrf = web.anonymousXsrf(info);
    const done = new URLSearchParams(info.query).get('setup') === 'done' ? '<p class="notice" id="setup-done">The admin is set up: sign in with the name and password you chose.</p>' : '';
    const nextQuery = next ? `?next=${encodeURIComponent(next)}` : '';
    const button = offer.button ? `<p><a class="button primary" id="login-with" href="${hubUrl('/hub/oauth_login')}${nextQuery}">Sign in with ${escapeHtml(offer.button)}</a></p>` : '';
    const form = offer.form ? `<form method="post" action="${hubUrl('/hub/login')}${nextQuery}">
${hidden('_xsrf', xsrf.value)}${hidden('next', next)}
<label>Username<br><input name="username" autocomplete="username" autofocus required></label>
<label>Password<br><input name="password" type="password" autocomplete="current-password"></label>
<p><button type="submit" class="${button ? '' : 'primary'}">Sign in</button></p></form>` : '';
    // shown by static/hub.js when this page came over plain HTTP to an address that is not this machine
    const insecure = '<p class="notice" id="insecure-login-warning" role="alert" hidden><b>Warning:</b> this hub seems to be served over an unsecured HTTP connection. We strongly recommend enabling HTTPS.</p>';
    const body = `${insecure}${done || (await setup.hint())}<section class="card narrow">${message ? `<p class="error" id="login-error">${escapeHtml(message)}</p>` : ''}
${button}${button && form ? '<p class="muted">or with a name and password:</p>' : ''}${form}</section>`;
    html(reply, status, page('Sign in', body), xsrf.setCookie ? [xsrf.setCookie] : []);
  }

  const routes: PageRoute[] = [
    {
      method: 'GET', pattern: /^\/hub\/login$/,
      async handle(info, reply) {
        const next = localPath(new URLSearchParams(info.query).get('next')) ?? '';
        if (await web.identify(info)) return redirect(reply, browserLocation(deps.subdomains, next || hubUrl('/hub/home')));
        // Authenticator.auto_login: straight to the provider, as the established hub does
        if (config.Authenticator.auto_login && config.Hub.authenticator_class === 'oauth') return redirect(reply, `${hubUrl('/hub/oauth_login')}${next ? `?next=${encodeURIComponent(next)}` : ''}`);
        loginForm(info, reply, 200, '', next);
      },
    },
    {
      method: 'POST', pattern: /^\/hub\/login$/,
      async handle(info, reply, body) {
        const f = form(body);
        const next = localPath(f.get('next') || new URLSearchParams(info.query).get('next')) ?? '';
        const xsrf = web.anonymousXsrf(info);
        if (xsrf.setCookie || !web.xsrfValid(info, xsrf.value, f.get('_xsrf'))) {
          info.denyReason = 'login form without a valid XSRF token';
          return loginForm(info, reply, 403, 'Your form expired. Please sign in again.', next);
        }
        const r = await auth.authenticate({
          username: f.get('username') ?? '', password: f.get('password') ?? '', remote_addr: info.remoteAddress,
        }, callOf(info));
        if (!r.ok) {
          info.audited = true; // the auth actor recorded the failure (login.failure / login.lockout)
          return loginForm(info, reply, r.unavailable ? 503 : 403, r.message, next);
        }
        info.who = `user:${r.name}`;
        web.loggedIn(r.name);
        redirect(reply, browserLocation(deps.subdomains, next || hubUrl('/hub/home')), web.loginCookies(info, r.name, r.session_id));
      },
    },
    ...(['GET', 'POST'] as const).map((method) => ({
      method, pattern: /^\/hub\/logout$/, acts: true,
      async handle(info: RequestInfo, reply: Reply) {
        const id = await web.identify(info);
        if (id) {
          // Hub.shutdown_on_logout (the established hub's) included; then the session cookie goes
          const logoutUrl = await kit.endLogin(info, id, publicHubUrl(config, '/hub/login'));
          // RP-initiated logout: the provider ends its own login too, then sends the browser back here
          if (logoutUrl) return redirect(reply, logoutUrl, web.clearCookies(info));
        }
        // as the established hub 6.1: back to the sign-in page, unless it would send the browser straight to the
        // provider again (auto_login): then a page that says so
        if (!config.Authenticator.auto_login) return redirect(reply, hubUrl('/hub/login'), web.clearCookies(info));
        html(reply, 200, page('Signed out', `<p>You are signed out.</p><p><a class="button primary" href="${hubUrl('/hub/login')}">Sign in again</a></p>`), web.clearCookies(info));
      },
    })),
  ];

  for (const more of [serverPages(deps, kit), sharePages(deps, kit), tokenPages(deps, kit), setup.routes, extra(kit)]) pushAll(routes, more);

  /** Answers a /hub/ page request; false when no page has this path (the caller answers 404). */
  return async function handlePage(info: RequestInfo, reply: Reply, body: Buffer | null): Promise<boolean> {
    for (const route of routes) {
      const m = route.pattern.exec(info.path);
      // HEAD is a GET without the body, except where a GET acts (logging out)
      if (!m || (route.method !== info.method && !(info.method === 'HEAD' && route.method === 'GET' && !route.acts))) continue;
      info.route = routeLabel(route.pattern);
      let params: string[];
      try {
        params = m.slice(1).map((p) => (p === undefined ? undefined : decodeURIComponent(p))) as string[];
      } catch {
        throw errors.notFound();
      }
      await route.handle(info, reply, body, params);
      return true;
    }
    return false;
  };
}
