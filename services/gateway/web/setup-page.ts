// /hub/setup: the first-admin set-up. While the auth actor has it open (password authenticator, no
// admin yet), the one-time code printed at start-up, a name and a password make that person an admin;
// afterwards the page is a 404. The auth actor keeps the code (as a hash) and decides.
import { errors, HubError } from '../../../shared/errors.js';
import type { RequestInfo } from '../http.js';
import type { Reply } from '../http.js';
import { escapeHtml, hidden, page } from './html.js';
import { form, type PageDeps, type PageKit, type PageRoute } from './pages.js';
import { hubUrl } from '../../../shared/urls.js';

export function firstAdminSetup(deps: PageDeps, kit: PageKit): { routes: PageRoute[]; hint: () => Promise<string> } {
  const { auth, web } = deps;
  const { redirect, html } = kit;
  // closed stays closed (a new code needs a restart), so once closed the gateway stops asking
  let closed = false;

  async function isOpen(): Promise<boolean> {
    if (closed) return false;
    const r = await auth.setupStatus({});
    if (!r.needed) closed = true;
    return r.needed;
  }

  function setupForm(info: RequestInfo, reply: Reply, status: number, message = '', name = ''): void {
    const xsrf = web.anonymousXsrf(info);
    const body = `<section class="card narrow"><p>This hub has no admin yet. Enter the set-up code printed when the hub started,
and choose the name and password of its first admin.</p>${message ? `<p class="error" id="setup-error">${escapeHtml(message)}</p>` : ''}
<form method="post" action="${hubUrl('/hub/setup')}" id="setup-form">${hidden('_xsrf', xsrf.value)}
<label>Set-up code<br><input name="code" required autocomplete="one-time-code" placeholder="XXXX-XXXX-XXXX" size="16"></label>
<label>Admin name<br><input name="username" required autocomplete="username" value="${escapeHtml(name)}"></label>
<label>Password<br><input name="password" type="password" required autocomplete="new-password"></label>
<label>Password again<br><input name="password2" type="password" required autocomplete="new-password"></label>
<p><button class="primary" type="submit">Create the admin</button></p></form></section>`;
    html(reply, status, page('Set up this hub', body), xsrf.setCookie ? [xsrf.setCookie] : [], { 'Cache-Control': 'no-store' });
  }

  const routes: PageRoute[] = [
    {
      method: 'GET', pattern: /^\/hub\/setup$/,
      async handle(info, reply) {
        if (!(await isOpen())) throw errors.notFound('No such page: this hub is set up');
        setupForm(info, reply, 200);
      },
    },
    {
      method: 'POST', pattern: /^\/hub\/setup$/,
      async handle(info, reply, body) {
        if (!(await isOpen())) throw errors.notFound('No such page: this hub is set up');
        const f = form(body);
        const name = f.get('username') ?? '';
        const xsrf = web.anonymousXsrf(info);
        if (xsrf.setCookie || !web.xsrfValid(info, xsrf.value, f.get('_xsrf'))) return setupForm(info, reply, 403, 'Your form expired. Please try again.', name);
        if ((f.get('password') ?? '') !== (f.get('password2') ?? '')) return setupForm(info, reply, 400, 'The two passwords differ.', name);
        try {
          await auth.completeSetup({ code: f.get('code') ?? '', name, password: f.get('password') ?? '', remote_addr: info.remoteAddress });
        } catch (e) {
          if (!(e instanceof HubError) || e.status >= 500) throw e;
          if (e.status === 404) closed = true;
          return setupForm(info, reply, e.status, e.message, name);
        }
        closed = true;
        redirect(reply, `${hubUrl('/hub/login')}?setup=done`);
      },
    },
  ];

  /** For the login page: a line pointing at the set-up while it is open. */
  async function hint(): Promise<string> {
    if (deps.config.Hub.authenticator_class !== 'password') return '';
    const open = await isOpen().catch(() => false);
    return open ? `<p class="notice" id="setup-hint">No admin yet? <a href="${hubUrl('/hub/setup')}">Set up this hub</a> with the code printed when it started.</p>` : '';
  }

  return { routes, hint };
}

