// Sharing from the browser: /hub/share/<user>[/<server>] lists who has access to one server (Revoke), shares it
// with a person or a group, and makes a share code (its link shown once, with its expiry); home links here from
// each server the visitor may share, and lists what is shared with them (Open, Leave). Every form is a POST with
// the session's XSRF value; the checks are the API's (api/shares.ts), the shares themselves the tokens actor's.
import { hubPublicUrl } from '../../../shared/config.js';
import { errors, HubError } from '../../../shared/errors.js';
import { hasScope } from '../../../shared/scopes.js';
import { hubServerPath, serverUrl } from '../../../shared/servers.js';
import { acceptShareUrl } from '../../../shared/shares.js';
import { checkMayName, checkShareable, forgetGrantees } from '../api/shares.js';
import type { Identity } from '../caches.js';
import type { Reply } from '../http.js';
import { ago, escapeHtml, hidden, page } from './html.js';
import { form, type PageDeps, type PageKit, type PageRoute } from './pages.js';
import { hubUrl } from '../../../shared/urls.js';

/** Expiry choices of a share code (seconds), within the API's one minute to one year. */
const CODE_EXPIRY: [number, string][] = [[3600, '1 hour'], [86_400, '1 day'], [604_800, '1 week'], [2_592_000, '30 days']];
const NO_STORE = { 'Cache-Control': 'no-store' };

export const sharePageUrl = (user: string, name: string) => hubServerPath('share', user, name);
const leaveUrl = (user: string, name: string) => hubServerPath('share-leave', user, name);

type Share = Awaited<ReturnType<PageDeps['tokens']['listShares']>>['shares'][number];

/** What is shared with this person, directly and through their groups: for home's "Shared with me". */
export async function sharedWithMe(deps: PageDeps, id: Identity): Promise<string> {
  const me = id.owner.name;
  const { shares } = await deps.tokens.listShares({ owner: '', has_server: false, server_name: '', grantee: { kind: 'user', name: me }, with_groups: true });
  if (!shares.length) return '';
  const xsrf = hidden('_xsrf', deps.web.xsrfFor(id.sessionId));
  const rows = shares.map((s) => {
    const url = serverUrl(s.owner, s.server_name);
    const running = deps.servers.get(s.owner, s.server_name)?.state === 'running';
    const via = s.grantee?.kind === 'group' ? `group ${escapeHtml(s.grantee.name)}` : 'you';
    const leave = s.grantee?.kind === 'user'
      ? `<form method="post" action="${escapeHtml(leaveUrl(s.owner, s.server_name))}" class="inline">${xsrf}<button data-action="leave">Leave</button></form>` : '';
    return `<tr data-shared="${escapeHtml(`${s.owner}/${s.server_name}`)}"><td>${escapeHtml(s.server_name ? `${s.server_name} of ${s.owner}` : `${s.owner}'s server`)}</td>` +
      `<td>${escapeHtml(via)}</td><td><span class="state ${running ? 'running' : 'stopped'}">${running ? 'running' : 'not running'}</span></td>` +
      `<td><div class="actions">${running ? `<a class="button primary" href="${escapeHtml(url)}" data-action="open">Open</a>` : ''}${leave}</div></td></tr>`;
  }).join('');
  return `<section class="card" id="shared-with-me"><h2>Shared with me</h2>
<table><thead><tr><th>Server</th><th>Shared with</th><th>State</th><th></th></tr></thead><tbody>${rows}</tbody></table></section>`;
}

/** A Share button for home, when this person may manage the sharing of the server. */
export function shareButton(id: Identity, user: string, name: string, groups: string[]): string {
  return hasScope(id.scopes, 'shares', { kind: 'server', user, name, groups })
    ? `<a class="button" href="${escapeHtml(sharePageUrl(user, name))}" data-action="share">Share</a>` : '';
}

export function sharePages(deps: PageDeps, kit: PageKit): PageRoute[] {
  const { tokens, users, web } = deps;
  const { html, nav, redirect, requireLogin, checkFormXsrf } = kit;

  /** The server, when this person may manage its sharing (else the same 404 as for no such server). */
  async function mayShare(id: Identity, user: string, name: string): Promise<{ user: string; name: string }> {
    const target = await users.get(user);
    if (!target || !hasScope(id.scopes, 'shares', { kind: 'server', user: target.name, name, groups: target.groups })) throw errors.notFound(`No such server: ${user}/${name}`);
    await checkShareable(deps, target.name, name);
    return { user: target.name, name };
  }

  async function render(reply: Reply, id: Identity, s: { user: string; name: string }, status = 200, note = ''): Promise<void> {
    const [{ shares }, { codes }] = await Promise.all([
      tokens.listShares({ owner: s.user, has_server: true, server_name: s.name, grantee: null, with_groups: false }),
      tokens.listShareCodes({ owner: s.user, has_server: true, server_name: s.name }),
    ]);
    const xsrf = hidden('_xsrf', web.xsrfFor(id.sessionId));
    const action = escapeHtml(sharePageUrl(s.user, s.name));
    const post = (fields: string, label: string, cls = '') =>
      `<form method="post" action="${action}" class="inline">${xsrf}${fields}<button class="${cls}" data-action="${escapeHtml(label.toLowerCase())}">${escapeHtml(label)}</button></form>`;
    const who = (sh: Share) => `${sh.grantee?.kind === 'group' ? 'group ' : ''}${sh.grantee?.name ?? ''}`;
    const shareRows = shares.map((sh) => `<tr data-grantee="${escapeHtml(`${sh.grantee?.kind}:${sh.grantee?.name}`)}"><td>${escapeHtml(who(sh))}</td>` +
      `<td>${sh.scopes.map((x) => `<code>${escapeHtml(x.split('!')[0])}</code>`).join(' ')}</td><td>${escapeHtml(sh.expires_at ? `until ${ago(sh.expires_at).replace(/^in /, '')} from now` : ago(sh.created_at))}</td>` +
      `<td>${post(hidden('op', 'revoke') + hidden('kind', sh.grantee?.kind ?? '') + hidden('name', sh.grantee?.name ?? ''), 'Revoke', 'danger')}</td></tr>`).join('');
    const codeRows = codes.map((c) => `<tr data-code="${escapeHtml(c.id)}"><td><code>${escapeHtml(c.id)}</code></td><td>expires ${escapeHtml(ago(c.expires_at))}</td>` +
      `<td>used ${c.exchange_count} time${c.exchange_count === 1 ? '' : 's'}</td><td>${post(hidden('op', 'revoke-code') + hidden('id', c.id), 'Revoke', 'danger')}</td></tr>`).join('');
    const label = s.name ? `server ${s.name} of ${s.user}` : `the server of ${s.user}`;
    const expiry = CODE_EXPIRY.map(([v, l]) => `<option value="${v}"${v === 86_400 ? ' selected' : ''}>${escapeHtml(l)}</option>`).join('');
    const body = `${note}<p class="muted">Who may open ${escapeHtml(label)} (<code>${escapeHtml(serverUrl(s.user, s.name))}</code>). A share lets them in through the hub; revoking it shuts them out at once.</p>
<section class="card"><h2>Shared with</h2><table id="shares"><thead><tr><th>Who</th><th>May</th><th>Since</th><th></th></tr></thead><tbody>${shareRows || '<tr><td colspan="4" class="muted">Nobody yet.</td></tr>'}</tbody></table>
<form method="post" action="${action}" id="share-form" class="actions">${xsrf}${hidden('op', 'grant')}
<label class="inline"><select name="kind"><option value="user">User</option><option value="group">Group</option></select></label>
<label class="inline">Name <input name="name" required maxlength="255"></label><button class="primary" data-action="grant">Share</button></form></section>
<section class="card"><h2>Share links</h2><p class="muted">Anyone who opens a link, signs in and accepts gets access until the link expires.</p>
<table id="codes"><tbody>${codeRows || '<tr><td class="muted">No links.</td></tr>'}</tbody></table>
<form method="post" action="${action}" id="code-form" class="actions">${xsrf}${hidden('op', 'code')}<label class="inline">Expires in <select name="expires_in">${expiry}</select></label><button data-action="make link">Make a link</button></form></section>`;
    html(reply, status, page(`Share ${s.name || 'your server'}`, body, nav(id)), [], NO_STORE);
  }

  const shareParams = /^\/hub\/share\/([^/]+)(?:\/([^/]+))?\/?$/;
  return [
    {
      method: 'GET', pattern: shareParams,
      async handle(info, reply, _b, [user, name = '']) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        await render(reply, id, await mayShare(id, user, name));
      },
    },
    {
      method: 'POST', pattern: shareParams,
      async handle(info, reply, body, [user, name = '']) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const f = form(body);
        checkFormXsrf(info, id, f);
        const s = await mayShare(id, user, name);
        const by = `user:${id.owner.name}`;
        const op = f.get('op');
        try {
          if (op === 'grant' || op === 'revoke') {
            const kind = f.get('kind') === 'group' ? 'group' : 'user';
            const who = (f.get('name') ?? '').trim();
            if (!who) throw errors.badRequest('Name the user or group to share with');
            let affected: string[];
            if (op === 'grant') {
              await checkMayName(deps, id.scopes, kind, who);
              affected = (await tokens.grantShare({
                owner: s.user, server_name: s.name, grantee: { kind, name: who }, has_scopes: false, scopes: [], requester_scopes: [...id.scopes], by,
              })).affected;
            } else {
              affected = (await tokens.revokeShare({ owner: s.user, server_name: s.name, grantee: { kind, name: who }, has_scopes: false, scopes: [], by })).affected;
            }
            forgetGrantees(deps, affected);
          } else if (op === 'code') {
            const expiresIn = Number(f.get('expires_in'));
            if (!CODE_EXPIRY.some(([v]) => v === expiresIn)) throw errors.badRequest('Choose an expiry from the list');
            const r = await tokens.createShareCode({
              owner: s.user, server_name: s.name, has_scopes: false, scopes: [], expires_in: expiresIn, requester_scopes: [...id.scopes], by,
            });
            // the code exists only in this answer: shown once, never stored in a cookie or a redirect
            // a link to send must be whole: Hub.public_url, else the address this browser used to reach the hub
            const base = (deps.config.Hub.public_url && hubPublicUrl(deps.config)) || `${web.isSecure(info) ? 'https' : 'http'}://${info.headers.host ?? '127.0.0.1'}`;
            const link = `${base}${acceptShareUrl(r.code)}`;
            return render(reply, id, s, 200, `<p class="notice" id="new-link">Send this link (shown once here; it expires ${escapeHtml(ago(r.model!.expires_at))}):<br><code id="share-link">${escapeHtml(link)}</code></p>`);
          } else if (op === 'revoke-code') {
            await tokens.deleteShareCodes({ owner: s.user, server_name: s.name, id: f.get('id') || 'none', code: '', by });
          } else {
            throw errors.badRequest('Unknown action');
          }
        } catch (e) {
          if (!(e instanceof HubError) || e.status >= 500) throw e;
          return render(reply, id, s, e.status, `<p class="error" id="share-error">${escapeHtml(e.message)}</p>`);
        }
        redirect(reply, sharePageUrl(s.user, s.name));
      },
    },
    {
      // leaving a share given to oneself
      method: 'POST', pattern: /^\/hub\/share-leave\/([^/]+)(?:\/([^/]+))?\/?$/,
      async handle(info, reply, body, [owner, name = '']) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        checkFormXsrf(info, id, form(body));
        const me = id.owner.name;
        if (!hasScope(id.scopes, 'users:shares', { kind: 'user', name: me, groups: (await users.get(me))?.groups ?? [] })) throw errors.forbidden('You may not change your shares');
        const r = await tokens.deleteShares({ owner, has_server: true, server_name: name, grantee: { kind: 'user', name: me }, with_groups: false, by: `user:${me}` });
        forgetGrantees(deps, r.affected);
        redirect(reply, hubUrl('/hub/home'));
      },
    },
  ];
}
