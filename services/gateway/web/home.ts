// The pages about single-user servers: home (default and named servers, create one), the spawn form,
// the pending page that follows a start over the progress stream, and /hub/user/<name>/ where the proxy
// sends a browser whose server is not running. Starts and stops are form POSTs with the session's XSRF, and
// GET /hub/spawn links (established hub 6): they start at once when there is nothing to choose or the link
// chose (`opt-<key>=<value>`). /hub/user-redirect/<path> sends each person to <path> on their own server (started first if need be).
import { restartWaitMs, within } from '../../../shared/grpc.js';
import { errors, HubError } from '../../../shared/errors.js';
import { hasScope } from '../../../shared/scopes.js';
import { chooseProfile, profilesOf } from '../../../shared/profiles.js';
import {
  hubServerPath, invalidServerNameReason, serverPageUrl, lastOutcome, progressUrl, serverUrl, spawnPendingUrl, spawnUrl, type ServerRecord,
} from '../../../shared/servers.js';
import { prepareSpawn } from '../api/servers.js';
import { forgetGrantees } from '../api/shares.js';
import type { Identity } from '../caches.js';
import { callOf, type Reply, type RequestInfo } from '../http.js';
import { ago, escapeHtml, hidden, page } from './html.js';
import { form, type PageDeps, type PageKit, type PageRoute } from './pages.js';
import { localPath } from './redirects.js';
import { shareButton, sharedWithMe } from './share-page.js';
import { USER_REDIRECT, userRedirectTarget } from './user-redirect.js';
import { browserLocation } from '../../../shared/subdomains.js';
import { hubUrl } from '../../../shared/urls.js';

/** How long a start from a page waits for the spawner to record it before showing the pending page. */
const START_RECORDED_MS = 3000;
/** How long a redirect to a just-ready server waits for the gateway's routing table to hold its route. */
const ROUTE_WAIT_MS = 2000;

type ShownState = 'running' | 'starting' | 'stopping' | 'failed' | 'stopped';

export function shownState(r: ServerRecord | undefined): ShownState {
  if (!r) return 'stopped';
  return r.state === 'running' ? 'running' : r.state === 'spawn' ? 'starting' : r.state === 'stop' ? 'stopping' : r.state === 'failed' ? 'failed' : 'stopped';
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Answers that depend on where a server stands now, and GETs that act, are never cached. */
const NO_STORE = { 'Cache-Control': 'no-store' };

/** `?next=<path>` to carry a local `next` from page to page ('' without one). */
const nextQuery = (next: string | null) => (next ? `?next=${encodeURIComponent(next)}` : '');

export function serverPages(deps: PageDeps, kit: PageKit): PageRoute[] {
  const { config, spawner, servers, users, web } = deps;
  const { redirect, html, nav, requireLogin, checkFormXsrf } = kit;
  const redirectNoStore = (reply: Reply, location: string) => reply.send(302, '', { Location: location, ...NO_STORE });
  const profiles = profilesOf(config);
  // with per-user subdomains a server's pages are at its user's host: links and redirects to it name that host
  const sub = deps.subdomains;
  const atServer = (path: string) => browserLocation(sub, path);

  const resourceOf = async (user: string, name: string) => {
    const target = await users.get(user);
    return target ? { kind: 'server' as const, user: target.name, name, groups: target.groups } : null;
  };
  const xsrf = (id: Identity) => hidden('_xsrf', web.xsrfFor(id.sessionId));
  const postButton = (id: Identity, action: string, label: string, cls = '', extra = '') =>
    `<form method="post" action="${escapeHtml(action)}" class="inline">${xsrf(id)}${extra}<button class="${cls}" data-action="${escapeHtml(label.toLowerCase())}">${escapeHtml(label)}</button></form>`;

  function profileSelect(): string {
    if (!profiles.length) return '';
    const options = profiles.map((p) => `<option value="${escapeHtml(p.name)}"${p.default ? ' selected' : ''}>${escapeHtml(p.display_name)}${p.description ? ` — ${escapeHtml(p.description)}` : ''}</option>`).join('');
    return `<label class="inline">Profile <select name="profile">${options}</select></label>${profileOptionFields()}`;
  }

  /**
   * KubeSpawner.profile_list's profile_options, named as KubeSpawner's form names them (`profile-option-<slug>--<name>`,
   * "unlisted-choice" choosing the free-form field `...--unlisted-choice`); only the chosen profile's are read.
   */
  function profileOptionFields(): string {
    return profiles.flatMap((p) => Object.entries(p.kube?.profile_options ?? {}).map(([key, option]) => {
      const name = `profile-option-${p.name}--${key}`;
      const choices = Object.entries(option.choices).map(([k, c]) => `<option value="${escapeHtml(k)}"${c.default ? ' selected' : ''}>${escapeHtml(c.display_name)}</option>`).join('');
      const u = option.unlisted_choice;
      const other = u.enabled ? `<option value="unlisted-choice"${Object.keys(option.choices).length ? '' : ' selected'}>Other…</option>` : '';
      const free = u.enabled
        ? `<label class="inline">${escapeHtml(u.display_name || `${option.display_name} (other)`)} <input name="${escapeHtml(`${name}--unlisted-choice`)}"${u.validation_regex ? ` pattern="${escapeHtml(u.validation_regex)}"` : ''}${u.validation_message ? ` title="${escapeHtml(u.validation_message)}"` : ''}></label>`
        : '';
      return `<label class="inline" data-profile-option="${escapeHtml(p.name)}">${escapeHtml(p.display_name)}: ${escapeHtml(option.display_name)} <select name="${escapeHtml(name)}">${choices}${other}</select></label>${free}`;
    })).join('');
  }

  /**
   * Chosen fields as the spawner takes user_options (JSON): a key given more than once becomes a list; a
   * profile must be one of `Spawner.profiles` (400 naming the choices, before anything starts).
   */
  function userOptions(fields: Array<[string, string]>): string {
    const out = new Map<string, string | string[]>();
    for (const [key, value] of fields) {
      const had = out.get(key);
      out.set(key, had === undefined ? value : [...(Array.isArray(had) ? had : [had]), value]);
    }
    const options = Object.fromEntries(out);
    chooseProfile(config, options);
    return JSON.stringify(options);
  }

  /** The user options a form chose (a profile, and its profile_options as KubeSpawner reads them), as the spawner takes them; '' reuses the last ones. */
  function chosenOptions(f: URLSearchParams): string {
    const chosen = f.get('profile');
    if (!profiles.length || chosen === null) return '';
    const fields: Array<[string, string]> = [['profile', chosen]];
    for (const key of Object.keys(profiles.find((p) => p.name === chosen)?.kube?.profile_options ?? {})) {
      const picked = f.get(`profile-option-${chosen}--${key}`);
      if (picked === 'unlisted-choice') fields.push([`${key}--unlisted-choice`, f.get(`profile-option-${chosen}--${key}--unlisted-choice`) ?? '']);
      else if (picked !== null) fields.push([key, picked]);
    }
    return userOptions(fields);
  }

  /** The user options a spawn link chose, `opt-<key>=<value>` (`opt-profile=<name>` a profile); null when none. */
  function queryOptions(q: URLSearchParams): string | null {
    const fields: Array<[string, string]> = [];
    for (const [key, value] of q) if (key.startsWith('opt-') && key.length > 4) fields.push([key.slice(4), value]);
    return fields.length ? userOptions(fields) : null;
  }

  /** The spawn form (a profile to choose); `next` rides in the action, `problem` is what a link chose wrongly. */
  function spawnForm(id: Identity, user: string, name: string, next: string | null, problem = ''): string {
    const what = name ? `server <b>${escapeHtml(name)}</b>` : 'the server';
    return `${problem ? `<p class="error" id="spawn-error">${escapeHtml(problem)}</p>` : ''}<p>Start ${what} of <b>${escapeHtml(user)}</b>?</p>
<form method="post" action="${escapeHtml(spawnUrl(user, name) + nextQuery(next))}" class="actions">${xsrf(id)}${profileSelect()}<button class="primary" data-action="start">Start</button></form>`;
  }

  /**
   * Delete of a named server: static/hub.js asks in a dialog (data-confirm) and sends confirmed=1; without
   * the script the POST comes without it and the answer is a page that asks (confirmDeletePage).
   */
  const deleteButton = (id: Identity, user: string, name: string) =>
    `<form method="post" action="${escapeHtml(hubServerPath('delete', user, name))}" class="inline" data-confirm-title="Delete server" ` +
    `data-confirm="${escapeHtml(`Delete server “${name}”? It leaves your list, and what you shared of it is no longer shared.`)}" data-confirm-label="Delete">` +
    `${xsrf(id)}<button class="danger" data-action="delete">Delete</button></form>`;

  function confirmDeletePage(id: Identity, user: string, name: string): string {
    return `<p id="confirm-delete">Delete server <b>${escapeHtml(name)}</b>${user !== id.owner.name ? ` of <b>${escapeHtml(user)}</b>` : ''}? It leaves the list, and what was shared of it is no longer shared.</p>
<form method="post" action="${escapeHtml(hubServerPath('delete', user, name))}" class="actions">${xsrf(id)}${hidden('confirmed', '1')}<button class="danger" data-action="confirm">Delete</button><a class="button" href="${hubUrl('/hub/home')}" data-action="cancel">Cancel</a></form>`;
  }

  /** Buttons for one server on home: Open/Stop while running, Start (Retry) when not, the pending page while starting. */
  function actions(id: Identity, user: string, name: string, state: ShownState, groups: string[] = []): string {
    const out: string[] = [];
    if (state === 'running') out.push(`<a class="button primary" href="${escapeHtml(atServer(serverUrl(user, name)))}" data-action="open">Open</a>`);
    if (state === 'starting') out.push(`<a class="button" href="${escapeHtml(spawnPendingUrl(user, name))}" data-action="progress">Starting…</a>`);
    if (state === 'stopped' || state === 'failed') out.push(postButton(id, spawnUrl(user, name), state === 'failed' ? 'Retry' : 'Start', 'primary'));
    if (state === 'running' || state === 'starting') out.push(postButton(id, hubServerPath('stop', user, name), 'Stop'));
    if (name && (state === 'stopped' || state === 'failed')) out.push(deleteButton(id, user, name));
    out.push(shareButton(id, user, name, groups));
    return `<div class="actions">${out.join('')}</div>`;
  }

  /** Why the server is not running, when nobody asked for that (a failed start, or an end of its own, with when): escaped HTML. */
  function failure(r: ServerRecord | undefined): string {
    const outcome = r && lastOutcome(r);
    if (!outcome) return '';
    return `${escapeHtml(outcome.message)}${r.state === 'stopped' && r.ended ? ` <span class="muted">(${escapeHtml(ago(r.ended.at))})</span>` : ''}`;
  }

  /** `groups`: the visitor's (group filters decide who may share); `shared`: the "Shared with me" section. */
  function homePage(id: Identity, groups: string[], shared: string): string {
    const me = id.owner.name;
    const def = servers.get(me, '');
    const defState = shownState(def);
    const defFailure = failure(def);
    const defaultCard = `<section class="card" id="default-server"><h2>Your server <span class="state ${defState}" data-state="${defState}">${defState}</span></h2>
${defState === 'running' ? `<p class="muted">At <a href="${escapeHtml(atServer(serverUrl(me, '')))}">${escapeHtml(atServer(serverUrl(me, '')))}</a>, last active ${escapeHtml(ago(def!.last_activity))}</p>` : ''}
${defFailure ? `<p class="error" data-outcome>${defFailure}</p>` : ''}${actions(id, me, '', defState, groups)}</section>`;
    if (!config.Hub.allow_named_servers) return defaultCard + shared;
    const named = servers.of(me).filter((r) => r.name).sort((a, b) => a.name.localeCompare(b.name));
    const rows = named.map((r) => {
      const st = shownState(r);
      const why = failure(r);
      const url = atServer(serverUrl(me, r.name));
      return `<tr data-server="${escapeHtml(r.name)}"><td>${escapeHtml(r.name)}</td>` +
        `<td>${st === 'running' ? `<a href="${escapeHtml(url)}">${escapeHtml(url)}</a>` : `<span class="muted">${escapeHtml(url)}</span>`}</td>` +
        `<td>${escapeHtml(ago(r.last_activity))}</td><td><span class="state ${st}" data-state="${st}">${st}</span>${why ? `<div class="error" data-outcome>${why}</div>` : ''}</td>` +
        `<td>${actions(id, me, r.name, st, groups)}</td></tr>`;
    }).join('');
    const limit = config.Hub.named_server_limit_per_user;
    const create = `<form method="post" action="${hubUrl('/hub/spawn-named')}" id="create-server" class="actions">${xsrf(id)}
<label class="inline">Name <input name="server" required maxlength="30" pattern="[a-z]([a-z0-9]|-(?!-))*" title="lowercase letters, digits and single hyphens, starting with a letter" placeholder="e.g. analysis-2"></label>${profileSelect()}
<button class="primary">Create and start</button></form>${limit ? `<p class="muted">Up to ${limit} named servers.</p>` : ''}`;
    return `${defaultCard}<section class="card" id="named-servers"><h2>Named servers</h2>
<table><thead><tr><th>Name</th><th>URL</th><th>Last activity</th><th>State</th><th></th></tr></thead><tbody>${rows || '<tr><td colspan="5" class="muted">None yet.</td></tr>'}</tbody></table>
<h2>New named server</h2>${create}</section>${shared}`;
  }

  /** Asks the spawner to start, and waits only until the start is recorded (not until the server is ready). */
  async function start(info: RequestInfo, id: Identity, user: string, name: string, options: string): Promise<void> {
    const resource = await resourceOf(user, name);
    if (!resource || !hasScope(id.scopes, 'start:servers', resource)) throw errors.notFound(`No such user: ${user}`);
    const fromLogin = await prepareSpawn(deps, resource.user, id.owner.name === resource.user ? id.sessionId : undefined, `user:${id.owner.name}`, callOf(info));
    const call = spawner.startServer({ user: resource.user, name, user_options_json: options, by: `user:${id.owner.name}`, auth_environment: fromLogin, groups: resource.groups },
      { ...within((config.Spawner.slow_spawn_timeout + config.Hub.rpc_timeout) * 1000, callOf(info)), waitForCalleeMs: restartWaitMs(config), repeatable: true });
    call.catch(() => undefined); // a failure after the pending page is shown reaches it through the record
    await new Promise<void>((resolve, reject) => {
      let over = false;
      const finish = (err?: unknown) => {
        if (over) return;
        over = true;
        clearTimeout(timer);
        unwatch();
        if (err) reject(err);
        else resolve();
      };
      const unwatch = servers.watch(resource.user, name, (r) => { if (r && (r.state === 'spawn' || r.state === 'running')) finish(); });
      const timer = setTimeout(() => finish(), START_RECORDED_MS);
      call.then(() => finish(), (e) => finish(e instanceof HubError && /already running|pending/.test(e.message) ? undefined : e));
    });
  }

  async function stop(info: RequestInfo, id: Identity, user: string, name: string, remove: boolean): Promise<void> {
    const resource = await resourceOf(user, name);
    if (!resource || !hasScope(id.scopes, 'delete:servers', resource)) throw errors.notFound(`No such user: ${user}`);
    await spawner.stopServer({ user: resource.user, name, by: `user:${id.owner.name}`, remove },
      within((config.Spawner.slow_stop_timeout + config.Hub.rpc_timeout) * 1000, callOf(info)));
    // a removed server takes what was shared of it along
    if (remove) forgetGrantees(deps, (await deps.tokens.forgetServer({ owner: resource.user, server_name: name, by: `user:${id.owner.name}` }, callOf(info))).affected);
  }

  /** The pending page: a bar fed by the progress stream (static/spawn.js); failure shows the message and Retry. */
  function pendingPage(id: Identity, resource: { kind: 'server'; user: string; name: string; groups: string[] }, r: ServerRecord, next: string | null): string {
    const { user, name } = resource;
    const failed = r.state === 'failed';
    const last = r.progress[r.progress.length - 1];
    const what = name ? `server ${escapeHtml(name)}` : 'your server';
    const mayStop = hasScope(id.scopes, 'delete:servers', resource);
    // while starting, the stream replays every message from the first: the list starts empty
    const log = failed ? r.progress.map((e) => `<li>${escapeHtml(e.message)}</li>`).join('') : '';
    return `<p id="spawn-status">${failed ? `Starting ${what} failed.` : `Starting ${what}${user !== id.owner.name ? ` of ${escapeHtml(user)}` : ''}…`}</p>
<div id="progress" class="progress ${failed ? 'failed' : 'indeterminate'}" role="progressbar" aria-valuemin="0" aria-valuemax="100" aria-valuenow="${last?.progress ?? 0}"><div class="bar"></div></div>
<p id="progress-message">${escapeHtml(last?.message ?? 'Waiting for the spawner…')}</p>
<ol class="log" id="progress-log">${log}</ol>
<div id="spawn-failed" class="${failed ? '' : 'hidden'}"><p class="error" id="failure-message">${failed ? failure(r) : ''}</p>
<div class="actions">${postButton(id, spawnUrl(user, name) + nextQuery(next), 'Retry', 'primary')}<a class="button" href="${hubUrl('/hub/home')}">Home</a></div></div>
<div id="spawn-running" class="actions ${failed ? 'hidden' : ''}">${mayStop ? postButton(id, hubServerPath('stop', user, name), 'Stop') : ''}</div>`;
  }

  /** A just-ready server: wait (bounded) for this gateway's routing table to hold its route, so the browser is not bounced back here. */
  async function toServer(reply: Reply, user: string, name: string, location: string): Promise<void> {
    const deadline = Date.now() + ROUTE_WAIT_MS;
    const routespec = (sub ? sub.userHost(user) : '') + serverUrl(user, name);
    while (deps.hasRoute && !deps.hasRoute(routespec) && Date.now() < deadline && !reply.aborted) await sleep(50);
    redirectNoStore(reply, atServer(location));
  }

  const withQuery = (info: RequestInfo, location: string) => location + (info.query ? `?${info.query}` : '');

  /** `/hub/user/<u>/<s>/…`: which server a path names (a second segment is a server only if that named server exists). */
  function serverOfPath(user: string, second: string | undefined): string {
    return second && config.Hub.allow_named_servers && servers.get(user, second) ? second : '';
  }

  return [
    { method: 'GET', pattern: /^\/hub\/?$/, handle: (_i, reply) => redirect(reply, hubUrl('/hub/home')) },
    {
      method: 'GET', pattern: /^\/hub\/home$/,
      async handle(info, reply) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const groups = (await users.get(id.owner.name))?.groups ?? [];
        html(reply, 200, page('Home', homePage(id, groups, await sharedWithMe(deps, id)), nav(id)));
      },
    },
    {
      method: 'POST', pattern: /^\/hub\/spawn-named$/,
      async handle(info, reply, body) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const f = form(body);
        checkFormXsrf(info, id, f);
        const name = (f.get('server') ?? '').trim();
        if (!config.Hub.allow_named_servers) throw errors.badRequest('Named servers are not enabled.');
        const why = invalidServerNameReason(name);
        if (why) throw errors.badRequest(`Invalid server name '${name.slice(0, 60)}': ${why}`);
        if (servers.get(id.owner.name, name)) throw errors.badRequest(`You already have a server named '${name}'`);
        await start(info, id, id.owner.name, name, chosenOptions(f));
        redirect(reply, spawnPendingUrl(id.owner.name, name));
      },
    },
    {
      // GET /hub/spawn[/<user>[/<server>]], as the established hub 6: a running server is followed (to `next`), a
      // starting one shown starting; else the start happens here, unless there are profiles and the link chose
      // none (`opt-<key>=<value>`): then the form. Acts, so never cached and not answered for HEAD.
      method: 'GET', pattern: /^\/hub\/spawn(?:\/([^/]+)(?:\/([^/]+))?)?\/?$/, acts: true,
      async handle(info, reply, _b, [asked, name = '']) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const resource = await resourceOf(asked ?? id.owner.name, name);
        if (!resource || !hasScope(id.scopes, 'start:servers', resource)) throw errors.notFound(`No such user: ${asked ?? id.owner.name}`);
        if (name && !config.Hub.allow_named_servers) throw errors.badRequest('Named servers are not enabled.');
        const { user } = resource;
        const query = new URLSearchParams(info.query);
        const next = localPath(query.get('next'));
        const pending = spawnPendingUrl(user, name) + nextQuery(next);
        const r = servers.get(user, name);
        if (r?.state === 'running') return toServer(reply, user, name, next ?? serverUrl(user, name));
        if (r?.state === 'spawn') return redirectNoStore(reply, pending);
        if (r?.state === 'stop') {
          const what = name ? `Server ${escapeHtml(name)}` : user === id.owner.name ? 'Your server' : `The server of ${escapeHtml(user)}`;
          return html(reply, 409, page('Server stopping', `<p id="stopping">${what} is stopping. Start it again once it has stopped.</p>
<p class="actions"><a class="button primary" href="${escapeHtml(withQuery(info, hubUrl(info.path)))}" data-action="again">Try again</a><a class="button" href="${hubUrl('/hub/home')}">Home</a></p>`, nav(id)), [], NO_STORE);
        }
        let options: string | null;
        try {
          options = queryOptions(query);
        } catch (e) {
          // a link that chose wrongly: with choices to offer, the form says what was wrong
          if (!(e instanceof HubError) || e.status !== 400 || !profiles.length) throw e;
          return html(reply, 400, page('Start a server', spawnForm(id, user, name, next, e.message), nav(id)), [], NO_STORE);
        }
        if (options === null && profiles.length) return html(reply, 200, page('Start a server', spawnForm(id, user, name, next), nav(id)), [], NO_STORE);
        await start(info, id, user, name, options ?? '');
        redirectNoStore(reply, pending);
      },
    },
    {
      method: 'POST', pattern: /^\/hub\/spawn\/([^/]+)(?:\/([^/]+))?\/?$/,
      async handle(info, reply, body, [user, name = '']) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const f = form(body);
        checkFormXsrf(info, id, f);
        await start(info, id, user, name, chosenOptions(f));
        redirect(reply, spawnPendingUrl((await users.get(user))!.name, name) + nextQuery(localPath(new URLSearchParams(info.query).get('next'))));
      },
    },
    {
      method: 'GET', pattern: /^\/hub\/spawn-pending\/([^/]+)(?:\/([^/]+))?\/?$/,
      async handle(info, reply, _b, [user, name = '']) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const resource = await resourceOf(user, name);
        if (!resource || !hasScope(id.scopes, 'read:servers', resource)) throw errors.notFound(`No such user: ${user}`);
        const r = servers.get(resource.user, name);
        // `next` (a local path, from a spawn link): where the browser goes once the server is ready; never carried further
        const query = new URLSearchParams(info.query);
        const next = localPath(query.get('next'));
        let toOpen = withQuery(info, serverUrl(resource.user, name));
        if (query.has('next')) {
          query.delete('next');
          toOpen = serverUrl(resource.user, name) + (query.size ? `?${query}` : '');
        }
        if (r?.state === 'running') return toServer(reply, resource.user, name, next ?? toOpen);
        if (!r || (r.state !== 'spawn' && r.state !== 'failed')) return redirect(reply, serverPageUrl(resource.user, name));
        html(reply, 200, page(r.state === 'failed' ? 'Start failed' : 'Starting…', pendingPage(id, resource, r, next), nav(id), {
          scripts: ['spawn.js'],
          data: { progress_url: progressUrl(resource.user, name), server_url: atServer(serverUrl(resource.user, name)), ...(next ? { next_url: atServer(next) } : {}), failed: r.state === 'failed' },
        }), [], NO_STORE);
      },
    },
    ...(['stop', 'delete'] as const).map((verb): PageRoute => ({
      method: 'POST', pattern: new RegExp(`^\\/hub\\/${verb}\\/([^/]+)(?:\\/([^/]*))?$`),
      async handle(info, reply, body, [user, name = '']) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const f = form(body);
        checkFormXsrf(info, id, f);
        if (verb === 'delete' && !name) throw errors.badRequest('Only named servers can be deleted');
        if (verb === 'delete' && f.get('confirmed') !== '1') {
          // not confirmed (the page's script asks first; without it, this page asks)
          const resource = await resourceOf(user, name);
          if (!resource || !hasScope(id.scopes, 'delete:servers', resource) || !servers.get(resource.user, name)) throw errors.notFound(`No such server: ${user}/${name}`);
          return html(reply, 200, page('Delete server', confirmDeletePage(id, resource.user, name), nav(id)), [], NO_STORE);
        }
        await stop(info, id, user, name, verb === 'delete');
        redirect(reply, hubUrl('/hub/home'));
      },
    })),
    {
      // Where the proxy sends a browser for a server without a route: follows a start, or offers one.
      method: 'GET', pattern: /^\/hub\/user\/([^/]+)(?:\/([^/]*))?(?:\/.*)?$/,
      async handle(info, reply, _b, [user, second]) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const target = await users.get(user);
        if (!target) throw errors.notFound(`No such user: ${user}`);
        const name = serverOfPath(target.name, second);
        const r = servers.get(target.name, name);
        const resource = { kind: 'server' as const, user: target.name, name, groups: target.groups };
        // running (the route not yet here): to the server, whose own login decides who may use it
        if (r?.state === 'running') return toServer(reply, target.name, name, withQuery(info, hubUrl(info.path.slice('/hub'.length))));
        if ((r?.state === 'spawn' || r?.state === 'failed') && hasScope(id.scopes, 'read:servers', resource)) return redirect(reply, spawnPendingUrl(target.name, name));
        const label = name ? `Server ${escapeHtml(name)} of ${escapeHtml(target.name)}` : target.name === id.owner.name ? 'Your server' : `The server of ${escapeHtml(target.name)}`;
        const offer = hasScope(id.scopes, 'start:servers', resource)
          ? `<form method="post" action="${escapeHtml(spawnUrl(target.name, name))}" class="actions">${xsrf(id)}${profileSelect()}<button class="primary" data-action="start">Start ${name ? 'it' : 'your server'}</button><a class="button" href="${hubUrl('/hub/home')}">Home</a></form>`
          : `<p><a class="button" href="${hubUrl('/hub/home')}">Home</a></p>`;
        html(reply, 503, page('Server not running', `<p id="not-running">${label} is not running.</p>${offer}`, nav(id)));
      },
    },
    {
      // /hub/user-redirect/<path>: <path> (segments as given, the query kept) on the person's own server, by way of
      // /hub/spawn/<name>?next=<it> as the established hub's: a server that is not running is started first
      method: 'GET', pattern: /^\/hub\/user-redirect(?:\/.*)?$/,
      async handle(info, reply) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        // the raw path: its segments stay percent-encoded as the link gave them
        const target = userRedirectTarget(id.owner.name, info.path.slice(USER_REDIRECT.length), info.query);
        if (!target) throw errors.badRequest('This link does not name a path on your server.');
        redirectNoStore(reply, hubServerPath('spawn', id.owner.name, '') + nextQuery(target));
      },
    },
  ];
}
