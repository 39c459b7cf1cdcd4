// The hub's own pages under /hub/: login and logout, home, spawning, and the token page.
// Forms carry an XSRF token; every redirect target is checked to be a local path.
import { within } from '../../../shared/grpc.js';
import { errors, HubError } from '../../../shared/errors.js';
import { hasScope } from '../../../shared/scopes.js';
import { isActive, serverUrl, progressUrl } from '../../../shared/servers.js';
import type { ApiDeps } from '../api/deps.js';
import { refreshBeforeSpawn } from '../api/servers.js';
import type { Identity } from '../caches.js';
import { callOf, type Reply, type RequestInfo } from '../http.js';
import { escapeHtml, hidden, page } from './html.js';
import { localPath } from './redirects.js';
import type { WebSessions } from './sessions.js';

export interface PageDeps extends ApiDeps {
  web: WebSessions;
}

export type PageHandler = (info: RequestInfo, reply: Reply, body: Buffer | null, params: string[]) => Promise<void> | void;
/** A page: method, a path pattern whose groups are the (percent-decoded) params, and its handler. */
export interface PageRoute { method: string; pattern: RegExp; handle: PageHandler }

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
  const redirect = (reply: Reply, location: string, cookies: string[] = []) => {
    reply.res.cork(() => {
      if (reply.aborted || reply.done) return;
      reply.done = true;
      reply.status = 302;
      reply.res.writeStatus('302 Found').writeHeader('Location', location);
      for (const c of cookies) reply.res.writeHeader('Set-Cookie', c);
      reply.res.end();
    });
  };
  const html = (reply: Reply, status: number, body: string, cookies: string[] = []) => {
    reply.res.cork(() => {
      if (reply.aborted || reply.done) return;
      reply.done = true;
      reply.status = status;
      reply.res.writeStatus(`${status} ${status === 200 ? 'OK' : status === 403 ? 'Forbidden' : status === 429 ? 'Too Many Requests' : 'Error'}`);
      reply.res.writeHeader('Content-Type', HTML['Content-Type']);
      for (const c of cookies) reply.res.writeHeader('Set-Cookie', c);
      reply.res.end(body);
    });
  };

  const here = (info: RequestInfo) => (info.query ? `${info.path}?${info.query}` : info.path);

  /** The logged-in user, or a redirect to the login page that brings the browser back here. */
  async function requireLogin(info: RequestInfo, reply: Reply): Promise<Identity | null> {
    const id = await web.identify(info);
    if (!id) redirect(reply, `/hub/login?next=${encodeURIComponent(here(info))}`);
    return id;
  }

  function checkFormXsrf(info: RequestInfo, id: Identity, f: URLSearchParams): void {
    if (!web.xsrfValid(info, web.xsrfFor(id.sessionId), f.get('_xsrf'))) throw errors.forbidden("'_xsrf' argument missing or invalid", 'HUB_ERR_XSRF');
  }

  return { redirect, html, here, requireLogin, checkFormXsrf };
}

export type PageKit = ReturnType<typeof createPageKit>;

/** `extra`: pages other modules add (the OAuth provider's, the external login's). */
export function createPages(deps: PageDeps, extra: (kit: PageKit) => PageRoute[] = () => []) {
  const { config, auth, tokens, spawner, servers, web, users } = deps;
  const kit = createPageKit(deps);
  const { redirect, html, requireLogin, checkFormXsrf } = kit;

  function loginForm(info: RequestInfo, reply: Reply, status: number, message = '', next = ''): void {
    const xsrf = web.anonymousXsrf(info);
    const body = `${message ? `<p class="error">${escapeHtml(message)}</p>` : ''}
<form method="post" action="/hub/login${next ? `?next=${encodeURIComponent(next)}` : ''}">
${hidden('_xsrf', xsrf.value)}${hidden('next', next)}
<label>Username <input name="username" autocomplete="username" autofocus required></label><br>
<label>Password <input name="password" type="password" autocomplete="current-password"></label><br>
<button type="submit">Sign in</button></form>`;
    html(reply, status, page('Sign in', body), xsrf.setCookie ? [xsrf.setCookie] : []);
  }

  const mayStart = (id: Identity, user: string, name: string, groups: string[]) =>
    hasScope(id.scopes, 'start:servers', { kind: 'server', user, name, groups });

  function serverRow(id: Identity, user: string, name: string): string {
    const r = servers.get(user, name);
    const state = !r || !isActive(r) ? 'stopped' : r.state === 'running' ? 'running' : r.state === 'spawn' ? 'starting' : 'stopping';
    const label = name ? escapeHtml(name) : '(default)';
    const xsrf = hidden('_xsrf', web.xsrfFor(id.sessionId));
    const action = state === 'running'
      ? `<a href="${escapeHtml(serverUrl(user, name))}">Open</a> <form method="post" action="/hub/stop/${encodeURIComponent(user)}/${encodeURIComponent(name)}" style="display:inline">${xsrf}<button>Stop</button></form>`
      : state === 'stopped'
        ? `<form method="post" action="/hub/spawn/${encodeURIComponent(user)}${name ? `/${encodeURIComponent(name)}` : ''}" style="display:inline">${xsrf}<button>Start</button></form>`
        : `<a href="/hub/user/${encodeURIComponent(user)}/${name ? `${encodeURIComponent(name)}/` : ''}">${state}…</a>`;
    return `<tr><td>${label}</td><td>${state}</td><td>${action}</td></tr>`;
  }

  const routes: PageRoute[] = [
    { method: 'GET', pattern: /^\/hub\/?$/, handle: (_i, reply) => redirect(reply, '/hub/home') },

    {
      method: 'GET', pattern: /^\/hub\/login$/,
      async handle(info, reply) {
        const next = localPath(new URLSearchParams(info.query).get('next')) ?? '';
        if (await web.identify(info)) return redirect(reply, next || '/hub/home');
        if (config.Hub.authenticator_class === 'oauth') return redirect(reply, `/hub/oauth_login${next ? `?next=${encodeURIComponent(next)}` : ''}`);
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
          return loginForm(info, reply, 403, r.message, next);
        }
        info.who = `user:${r.name}`;
        redirect(reply, next || '/hub/home', web.loginCookies(info, r.name, r.session_id));
      },
    },
    ...(['GET', 'POST'] as const).map((method) => ({
      method, pattern: /^\/hub\/logout$/,
      async handle(info: RequestInfo, reply: Reply) {
        const id = await web.identify(info);
        if (id) {
          // 1. the login ends, 2. the tokens issued during it are revoked, 3. the session cookie goes
          await auth.revokeSession({ session_id: id.sessionId, by: `user:${id.owner.name}` }, callOf(info));
          await tokens.revokeSessionTokens({ user: id.owner.name, session_id: id.sessionId, by: `user:${id.owner.name}` }, callOf(info));
          web.forgetSession(id.sessionId);
        }
        html(reply, 200, page('Signed out', '<p>You are signed out.</p><p><a href="/hub/login">Sign in again</a></p>'), web.clearCookies(info));
      },
    })),
    {
      method: 'GET', pattern: /^\/hub\/home$/,
      async handle(info, reply) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const me = id.owner.name;
        const names = ['', ...servers.of(me).filter((r) => r.name && isActive(r)).map((r) => r.name)];
        const rows = names.map((n) => serverRow(id, me, n)).join('');
        const named = config.Hub.allow_named_servers
          ? `<form method="post" action="/hub/spawn-named">${hidden('_xsrf', web.xsrfFor(id.sessionId))}<input name="server" placeholder="new server name" pattern="[a-z][a-z0-9-]*"><button>Start named server</button></form>` : '';
        const svc = [...deps.services.values()].filter((s) => s.url && s.display !== false)
          .map((s) => `<li><a href="/services/${encodeURIComponent(s.name)}/">${escapeHtml(s.name)}</a></li>`).join('');
        html(reply, 200, page('Home', `<table><tr><th>Server</th><th>State</th><th></th></tr>${rows}</table>${named}${svc ? `<h2>Services</h2><ul>${svc}</ul>` : ''}`, me));
      },
    },
    {
      method: 'POST', pattern: /^\/hub\/spawn-named$/,
      async handle(info, reply, body) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const f = form(body);
        checkFormXsrf(info, id, f);
        await startFromPage(info, reply, id, id.owner.name, f.get('server') ?? '');
      },
    },
    {
      method: 'GET', pattern: /^\/hub\/spawn\/([^/]+)(?:\/([^/]*))?$/,
      async handle(info, reply, _b, [user, name = '']) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        html(reply, 200, page('Start a server', `<p>Start ${name ? `server <b>${escapeHtml(name)}</b>` : 'the server'} of ${escapeHtml(user)}?</p>
<form method="post">${hidden('_xsrf', web.xsrfFor(id.sessionId))}<button>Start</button></form>`, id.owner.name));
      },
    },
    {
      method: 'POST', pattern: /^\/hub\/spawn\/([^/]+)(?:\/([^/]*))?$/,
      async handle(info, reply, body, [user, name = '']) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        checkFormXsrf(info, id, form(body));
        await startFromPage(info, reply, id, user, name);
      },
    },
    {
      method: 'POST', pattern: /^\/hub\/stop\/([^/]+)\/([^/]*)$/,
      async handle(info, reply, body, [user, name]) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        checkFormXsrf(info, id, form(body));
        const target = await users.get(user);
        if (!target || !hasScope(id.scopes, 'delete:servers', { kind: 'server', user, name, groups: target.groups })) throw errors.notFound();
        await spawner.stopServer({ user, name, by: `user:${id.owner.name}` }, within((config.Spawner.slow_stop_timeout + config.Hub.rpc_timeout) * 1000, callOf(info)));
        redirect(reply, '/hub/home');
      },
    },
    {
      // Where a browser lands for a server that is not (yet) running: offers to start it, follows a start.
      method: 'GET', pattern: /^\/hub\/user\/([^/]+)\/?(?:([^/]+)\/?)?(.*)$/,
      async handle(info, reply, _b, [user, name = '']) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const r = servers.get(user, name);
        const url = serverUrl(user, name);
        if (r?.state === 'running') return redirect(reply, url);
        if (r?.state === 'spawn') {
          const script = `<script>const es=new EventSource(${JSON.stringify(progressUrl(user, name))});es.onmessage=(m)=>{const e=JSON.parse(m.data);document.getElementById('p').value=e.progress;document.getElementById('m').textContent=e.message;if(e.ready){es.close();location.href=e.url}if(e.failed){es.close()}}</script>`;
          return html(reply, 200, page('Starting…', `<p>Your server is starting.</p><progress id="p" max="100" value="0"></progress><p id="m"></p>${script}`, id.owner.name));
        }
        const action = `/hub/spawn/${encodeURIComponent(user)}${name ? `/${encodeURIComponent(name)}` : ''}`;
        html(reply, 200, page('Server not running', `<p>The server at <code>${escapeHtml(url)}</code> is not running.</p>
<form method="post" action="${escapeHtml(action)}">${hidden('_xsrf', web.xsrfFor(id.sessionId))}<button>Start it</button></form>`, id.owner.name));
      },
    },
    {
      method: 'GET', pattern: /^\/hub\/token$/,
      async handle(info, reply) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        html(reply, 200, page('API token', tokenForm(id), id.owner.name));
      },
    },
    {
      method: 'POST', pattern: /^\/hub\/token$/,
      async handle(info, reply, body) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const f = form(body);
        checkFormXsrf(info, id, f);
        const days = Number(f.get('expires_days') || 0);
        const r = await tokens.createToken({
          owner: id.owner, requester: id.owner, note: (f.get('note') ?? '').slice(0, 200) || 'Requested via token page',
          expires_in: Number.isFinite(days) && days > 0 ? Math.round(days * 86400) : 0, has_scopes: false, scopes: [], has_roles: false, roles: [],
          requester_scopes: [...id.scopes],
        }, callOf(info));
        html(reply, 200, page('API token', `<p>Your new token (shown once): <code id="token">${escapeHtml(r.token)}</code></p>${tokenForm(id)}`, id.owner.name));
      },
    },
  ];

  function tokenForm(id: Identity): string {
    return `<form method="post" action="/hub/token">${hidden('_xsrf', web.xsrfFor(id.sessionId))}
<label>Note <input name="note"></label> <label>Expires in days (empty: never) <input name="expires_days" type="number" min="0"></label>
<button>Request new API token</button></form>`;
  }

  async function startFromPage(info: RequestInfo, reply: Reply, id: Identity, user: string, name: string): Promise<void> {
    const target = await users.get(user);
    if (!target || !mayStart(id, user, name, target.groups)) throw errors.notFound(`No such user: ${user}`);
    await refreshBeforeSpawn(deps, id.sessionId, callOf(info));
    try {
      await spawner.startServer({ user, name, user_options_json: '', by: `user:${id.owner.name}` }, within((config.Spawner.slow_spawn_timeout + config.Hub.rpc_timeout) * 1000, callOf(info)));
    } catch (e) {
      if (!(e instanceof HubError) || !/already running|pending/.test(e.message)) throw e;
    }
    redirect(reply, `/hub/user/${encodeURIComponent(user)}/${name ? `${encodeURIComponent(name)}/` : ''}`);
  }


  routes.push(...extra(kit));

  /** Answers a /hub/ page request; false when no page has this path (the caller answers 404). */
  return async function handlePage(info: RequestInfo, reply: Reply, body: Buffer | null): Promise<boolean> {
    for (const route of routes) {
      const m = route.pattern.exec(info.path);
      if (!m || route.method !== info.method) continue;
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
