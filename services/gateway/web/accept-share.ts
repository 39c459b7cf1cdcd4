// /hub/accept-share?code=…: a person who was sent a share code sees what is shared with them and by whom, and
// confirms with a POST (XSRF-checked form); the tokens actor then creates or extends their share for as long as
// the code lives, and the browser goes to the server. Unknown or expired codes get a readable page, no redirect.
import { HubError } from '../../../shared/errors.js';
import { ACCEPT_SHARE_PATH } from '../../../shared/shares.js';
import { SCOPE_DEFINITIONS } from '../../../shared/scopes.js';
import { serverUrl } from '../../../shared/servers.js';
import { hubUrl } from '../../../shared/urls.js';
import { forgetGrantees } from '../api/shares.js';
import type { Identity } from '../caches.js';
import type { Reply } from '../http.js';
import { ago, escapeHtml, hidden, page } from './html.js';
import { form, type PageDeps, type PageKit, type PageRoute } from './pages.js';
import { localPath } from './redirects.js';

/** A grant must not be clicked from inside another site's frame. */
const NO_FRAMES = { 'X-Frame-Options': 'DENY' };

const serverLabel = (owner: string, name: string) => (name ? `server ${name} of ${owner}` : `the server of ${owner}`);

export function acceptShareRoutes(deps: PageDeps, kit: PageKit): PageRoute[] {
  const { tokens, web } = deps;
  const show = (reply: Reply, status: number, title: string, body: string, id: Identity) => kit.html(reply, status, page(title, `<section class="card">${body}</section>`, kit.nav(id)), [], NO_FRAMES);

  /** The code's own errors (unknown, expired, one's own server) as pages; anything else as usual. */
  function refusal(reply: Reply, e: unknown, id: Identity): void {
    if (!(e instanceof HubError) || (e.code !== 'HUB_ERR_SHARE_CODE_NOT_FOUND' && e.code !== 'HUB_ERR_SHARE_INVALID')) throw e;
    const title = e.status === 404 ? 'Share code not found' : 'Cannot accept this share';
    show(reply, e.status, title, `<p class="error">${escapeHtml(e.message)}.</p><p><a href="${hubUrl('/hub/home')}">Home</a></p>`, id);
  }

  const isPath = new RegExp(`^${ACCEPT_SHARE_PATH}$`);
  return [
    {
      method: 'GET', pattern: isPath,
      async handle(info, reply) {
        const id = await kit.requireLogin(info, reply);
        if (!id) return;
        const q = new URLSearchParams(info.query);
        const code = q.get('code') ?? '';
        if (!code) return show(reply, 400, 'Cannot accept this share', '<p class="error">The link has no share code in it.</p>', id);
        let c;
        try {
          c = await tokens.peekShareCode({ code });
        } catch (e) {
          return refusal(reply, e, id);
        }
        if (c.owner === id.owner.name) {
          return show(reply, 403, 'Cannot accept this share', '<p class="error">This is a share code for your own server: you have access already.</p>', id);
        }
        const next = localPath(q.get('next')) ?? '';
        const scopes = c.scopes.map((s) => `<li><code>${escapeHtml(s)}</code>: ${escapeHtml(SCOPE_DEFINITIONS[s.split('!')[0]]?.description ?? '')}</li>`).join('');
        show(reply, 200, 'Accept a share', `<p><b>${escapeHtml(c.owner)}</b> shares ${escapeHtml(serverLabel(c.owner, c.server_name))} with you
(<code>${escapeHtml(serverUrl(c.owner, c.server_name))}</code>); the offer ends <span title="${escapeHtml(c.expires_at)}">${escapeHtml(ago(c.expires_at))}</span>, and so does the access it gives:</p><ul>${scopes}</ul>
<form method="post" action="${escapeHtml(hubUrl(ACCEPT_SHARE_PATH))}">${hidden('_xsrf', web.xsrfFor(id.sessionId))}${hidden('code', code)}${hidden('next', next)}
<div class="actions"><button type="submit" class="primary" data-action="accept">Accept</button><a class="button" href="${hubUrl('/hub/home')}">Cancel</a></div></form>`, id);
      },
    },
    {
      method: 'POST', pattern: isPath,
      async handle(info, reply, body) {
        const id = await kit.requireLogin(info, reply);
        if (!id) return;
        const f = form(body);
        kit.checkFormXsrf(info, id, f);
        const code = f.get('code') || new URLSearchParams(info.query).get('code') || '';
        let r;
        try {
          r = await tokens.exchangeShareCode({ code, user: id.owner.name, by: `user:${id.owner.name}` });
        } catch (e) {
          return refusal(reply, e, id);
        }
        forgetGrantees(deps, r.affected);
        kit.redirect(reply, localPath(f.get('next')) ?? serverUrl(r.share!.owner, r.share!.server_name));
      },
    },
  ];
}
