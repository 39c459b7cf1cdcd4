// /hub/token: request an API token (note, expiry, optionally fewer scopes), see it once, list one's
// tokens and the OAuth clients one has authorized, revoke any (static/token.js, through the REST API
// with the session's XSRF token). The POST answers with a redirect, so a reload never makes a second
// token; the new token travels to the next GET in a sealed, HttpOnly, one-read cookie.
import { errors, HubError } from '../../../shared/errors.js';
import { parseCookies, serializeCookie } from '../../../shared/cookies.js';
import { escapeName } from '../../../shared/servers.js';
import type { Identity } from '../caches.js';
import { callOf, type RequestInfo } from '../http.js';
import type { TokenRecord } from '../api/models.js';
import { ago, escapeHtml, hidden, page } from './html.js';
import { form, type PageDeps, type PageKit, type PageRoute } from './pages.js';
import { hubUrl } from '../../../shared/urls.js';

const NEW_TOKEN_COOKIE = 'hub-new-token';
const NEW_TOKEN_MAX_AGE = 120;
const NO_STORE = { 'Cache-Control': 'no-store', Pragma: 'no-cache' };
/** Expiry choices, seconds ('' = never), as the established hub's token page offers them. */
export const EXPIRY_CHOICES: [string, string][] = [['3600', '1 hour'], ['86400', '1 day'], ['604800', '1 week'], ['2592000', '30 days'], ['', 'Never']];
const SHOWN_SCOPES = 6;
/** The client the tokens actor names on tokens the hub issued itself (not through an OAuth client). */
const HUB_ITSELF = 'Hub';
const isApiToken = (t: TokenRecord) => !t.oauth_client || t.oauth_client === HUB_ITSELF;

interface Flash { t: string; s: string; at: number }

export function tokenPages(deps: PageDeps, kit: PageKit): PageRoute[] {
  const { tokens, web } = deps;
  const { redirect, html, nav, requireLogin, checkFormXsrf } = kit;
  const flashCookie = (info: RequestInfo, value: string, maxAgeSeconds: number) =>
    serializeCookie(NEW_TOKEN_COOKIE, value, { path: hubUrl('/hub/token'), maxAgeSeconds, secure: web.isSecure(info) });

  const scopeList = (scopes: string[]) => {
    const shown = scopes.slice(0, SHOWN_SCOPES).map((s) => `<code>${escapeHtml(s)}</code>`).join(' ');
    return scopes.length > SHOWN_SCOPES ? `${shown} <span class="muted" title="${escapeHtml(scopes.join(' '))}">+${scopes.length - SHOWN_SCOPES} more</span>` : shown;
  };
  const revoke = (ids: string[], label: string) =>
    `<button class="danger" data-revoke="${escapeHtml(ids.join(' '))}" data-label="${escapeHtml(label)}">Revoke</button>`;

  async function render(info: RequestInfo, id: Identity, fresh: string | null, status = 200, error = '', kept?: URLSearchParams): Promise<string> {
    const me = id.owner.name;
    const list = (await tokens.listTokens({ kind: 'user', name: me })).tokens;
    const api = list.filter(isApiToken).sort((a, b) => b.created.localeCompare(a.created));
    const clients = new Map<string, TokenRecord[]>();
    for (const t of list.filter((x) => !isApiToken(x))) clients.set(t.oauth_client, [...(clients.get(t.oauth_client) ?? []), t]);
    const chosen = kept?.get('expires_in') ?? '';
    const expiry = EXPIRY_CHOICES.map(([v, label]) => `<option value="${v}"${v === chosen ? ' selected' : ''}>${label}</option>`).join('');
    const created = fresh
      ? `<section class="notice" id="new-token-box"><p><b>Your new API token</b> — copy it now, it will not be shown again:</p>
<p><code class="token" id="new-token">${escapeHtml(fresh)}</code> <button type="button" id="copy-token" data-copy="new-token">Copy</button> <span id="copied" class="ok hidden">Copied</span></p></section>`
      : '';
    const requestForm = `<section class="card"><h2>Request a new API token</h2>${error ? `<p class="error" id="token-error">${escapeHtml(error)}</p>` : ''}
<form method="post" action="${hubUrl('/hub/token')}" id="request-token">${hidden('_xsrf', web.xsrfFor(id.sessionId))}
<label>Note <input name="note" maxlength="200" size="40" value="${escapeHtml(kept?.get('note') ?? '')}" placeholder="what the token is for"></label>
<label>Expires in <select name="expires_in">${expiry}</select></label>
<label>Scopes <input name="scopes" size="50" value="${escapeHtml(kept?.get('scopes') ?? '')}" placeholder="empty: everything you may do; e.g. read:users!user self"></label>
<p class="muted">Scopes are separated by spaces; a token never has more than you.</p>
<button class="primary">Request new API token</button></form></section>`;
    const rows = api.map((t) => `<tr data-token="${escapeHtml(t.id)}"><td>${escapeHtml(t.note || '(no note)')}</td><td>${scopeList(t.scopes)}</td>` +
      `<td>${escapeHtml(ago(t.created))}</td><td>${escapeHtml(ago(t.last_activity))}</td><td>${t.expires_at ? escapeHtml(ago(t.expires_at)) : 'never'}</td>` +
      `<td>${revoke([t.id], t.note || t.id)}</td></tr>`).join('');
    const apps = [...clients].map(([client, ts]) => {
      const newest = ts.reduce((a, b) => (a.created > b.created ? a : b));
      const used = ts.map((t) => t.last_activity ?? '').reduce((a, b) => (a > b ? a : b), '');
      const scopes = [...new Set(ts.flatMap((t) => t.scopes))].sort();
      return `<tr data-client="${escapeHtml(client)}"><td>${escapeHtml(client)}</td><td>${scopeList(scopes)}</td><td>${escapeHtml(ago(newest.created))}</td>` +
        `<td>${escapeHtml(ago(used))}</td><td>${newest.expires_at ? escapeHtml(ago(newest.expires_at)) : 'never'}</td><td>${revoke(ts.map((t) => t.id), client)}</td></tr>`;
    }).join('');
    const head = '<thead><tr><th>Note</th><th>Scopes</th><th>Created</th><th>Last used</th><th>Expires</th><th></th></tr></thead>';
    const body = `${created}${requestForm}
<section class="card"><h2>API tokens</h2><table id="api-tokens">${head}<tbody>${rows || '<tr><td colspan="6" class="muted">No API tokens.</td></tr>'}</tbody></table></section>
<section class="card"><h2>Authorized applications</h2><table id="oauth-clients">${head.replace('<th>Note</th>', '<th>Application</th>')}<tbody>${apps || '<tr><td colspan="6" class="muted">No applications.</td></tr>'}</tbody></table></section>
<p id="revoke-error" class="error hidden"></p>`;
    void status;
    return page('API tokens', body, nav(id), { scripts: ['token.js'], data: { tokens_url: hubUrl(`/hub/api/users/${escapeName(me)}/tokens/`), xsrf: web.xsrfFor(id.sessionId) } });
  }

  return [
    {
      method: 'GET', pattern: /^\/hub\/token$/,
      async handle(info, reply) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const raw = parseCookies(info.headers.cookie)[NEW_TOKEN_COOKIE];
        const flash = raw ? web.sealer.open<Flash>(raw) : null;
        const fresh = flash && flash.s === id.sessionId && Date.now() - flash.at < NEW_TOKEN_MAX_AGE * 1000 ? flash.t : null;
        html(reply, 200, await render(info, id, fresh), raw ? [flashCookie(info, '', 0)] : [], NO_STORE);
      },
    },
    {
      method: 'POST', pattern: /^\/hub\/token$/,
      async handle(info, reply, body) {
        const id = await requireLogin(info, reply);
        if (!id) return;
        const f = form(body);
        checkFormXsrf(info, id, f);
        const expires = f.get('expires_in') ?? '';
        const scopes = (f.get('scopes') ?? '').split(/[\s,]+/).filter(Boolean);
        let token: string;
        try {
          if (!EXPIRY_CHOICES.some(([v]) => v === expires)) throw errors.badRequest('Choose an expiry from the list');
          token = (await tokens.createToken({
            owner: id.owner, requester: id.owner, note: (f.get('note') ?? '').trim().slice(0, 200) || 'Requested via token page',
            expires_in: Number(expires || 0), has_scopes: scopes.length > 0, scopes, has_roles: false, roles: [], requester_scopes: [...id.scopes],
          }, callOf(info))).token;
        } catch (e) {
          if (!(e instanceof HubError) || e.status >= 500) throw e;
          return html(reply, e.status, await render(info, id, null, e.status, e.message, f), [], NO_STORE);
        }
        redirect(reply, hubUrl('/hub/token'), [flashCookie(info, web.sealer.seal({ t: token, s: id.sessionId, at: Date.now() } satisfies Flash), NEW_TOKEN_MAX_AGE)]);
      },
    },
  ];
}
