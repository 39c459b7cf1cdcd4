// Per-user subdomains in a real browser (Debian's Chromium, which resolves `*.localhost` to loopback), with the
// established hub's single-user server (jupyterhub-singleuser 6.1.1, JupyterLab 4.6, from the pinned venv) doing its
// own part of it: Hub.subdomain_host `http://hub.localhost:<port>` and `__Host-` cookies. Alice and Bob log in and
// start their servers from the hub's home page; each JupyterLab loads at its own host (a cell runs on alice's kernel over
// the WebSocket there) and links back to the hub's.
// Then script on alice's host — in alice's browser, and in bob's when alice shares her server with him — tries what
// a malicious notebook or file would: the hub's API with the visitor's session (blocked: the browser refuses the
// answer to the script, and a write reaches nothing), bob's server with bob's cookies (blocked), bob's server by path
// on alice's host (404). JupyterLab's Copy Shareable Link on alice's host gives a /hub/user-redirect link there: it
// leads each person who opens it, through the hub's host, to the path on their own server (as the established hub's);
// bob reaches alice's notebook through her share; carol, not shared it, is refused. Nothing is skipped.
import test from 'ava';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startHub, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { systemAccounts } from '../spawner/helpers.js';
import { login, newPage, type Page } from './browser.js';
import {
  copyShareableLink, fileRow, hopsOf, logsOf, newNotebook, pageConfig, saveNotebookAs, userProcessesEnd, venvBrowser, venvSpawnerConfig, withEvidence, withFailedLoads,
} from './jupyter-venv.js';

const PASSWORD = 'correct horse battery';
/** the notebook alice saves and shares */
const NOTEBOOK = 'for-bob.ipynb';
const ADMIN = randomToken();
const accounts = systemAccounts('sd');
const browser = venvBrowser(accounts);


/**
 * What a script on the page's origin gets from `fetch`: the status and the start of the body, or the error's name (a
 * CORS refusal is a TypeError). `xsrf`: with the page's own `_xsrf` cookie as X-XSRFToken, as JupyterLab's requests
 * carry it (the 6.1 server refuses a script's cookie-authenticated request without it).
 */
function probe(page: Page, url: string, init: { method?: string; body?: string; headers?: Record<string, string>; credentials?: 'include' | 'same-origin' | 'omit' } = {}, xsrf = false) {
  return page.evaluate(async ([u, i, withXsrf]) => {
    try {
      const token = /(?:^|; )_xsrf=([^;]*)/.exec(document.cookie)?.[1];
      const r = await fetch(u, withXsrf && token ? { ...(i as RequestInit), headers: { ...(i as RequestInit).headers, 'X-XSRFToken': decodeURIComponent(token) } } : i as RequestInit);
      return { status: r.status, body: (await r.text()).slice(0, 200), error: '' };
    } catch (e) {
      return { status: 0, body: '', error: (e as Error).name };
    }
  }, [url, init, xsrf] as const);
}

/** From the hub's home page: Start, the pending page, then the server's JupyterLab at the user's own host. */
async function startFromHome(page: Page, user: string, serverOrigin: string): Promise<void> {
  await Promise.all([page.waitForURL(/\/hub\/spawn-pending\//, { timeout: 15_000 }), page.click('#default-server button[data-action=start]')]);
  // the server's OAuth login at the hub (its own server: no consent page), then /lab at the user's own host
  await page.waitForURL((u) => u.origin === serverOrigin && u.pathname === `/user/${user}/lab`, { timeout: 90_000 });
  await page.locator('#jp-main-dock-panel').waitFor({ state: 'visible', timeout: 60_000 });
}

test.serial('subdomains: JupyterLab at each user\'s own host; script on alice\'s host cannot use the hub\'s API as its visitor nor reach bob\'s server as bob', async (t) => {
  const alice = accounts.name('a');
  const bob = accounts.name('b');
  const carol = accounts.name('c');
  for (const u of [alice, bob, carol]) accounts.addUser(u);
  const port = await freePort();
  const hubOrigin = `http://hub.localhost:${port}`;
  const aliceOrigin = `http://${alice}.hub.localhost:${port}`;
  const bobOrigin = `http://${bob}.hub.localhost:${port}`;
  let hub: HubUnderTest | undefined;
  try {
    hub = await startHub({
      reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port, natsPort: await freePort() },
      config: {
        Hub: {
          subdomain_host: hubOrigin, cookie_host_prefix_enabled: true, spawner_class: 'localprocess', authenticator_class: 'dummy',
          env_prefix_aliases: ['JUPYTERHUB_'], api_tokens: { [ADMIN]: 'boss' },
        },
        Authenticator: { admin_users: ['boss'] },
        DummyAuthenticator: { password: PASSWORD },
        Spawner: venvSpawnerConfig(),
      },
    });
    const api = apiClient(hub.url);
    const a = withFailedLoads(await newPage(browser()));
    const b = withFailedLoads(await newPage(browser()));
    const c = withFailedLoads(await newPage(browser()));
    await a.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: aliceOrigin });
    try {
      await withEvidence(t, [a, b, c], hub, async () => {
        // both log in at the hub's host and start their servers from its home page
        await login(a.page, hubOrigin, alice, PASSWORD);
        t.is(new URL(a.page.url()).origin, hubOrigin);
        await login(b.page, hubOrigin, bob, PASSWORD);
        await Promise.all([startFromHome(a.page, alice, aliceOrigin), startFromHome(b.page, bob, bobOrigin)]);

        // the hub's cookies are the hub's host's alone; the server's own are its host's (both `__Host-`)
        const hubCookies = await a.context.cookies(hubOrigin);
        t.true(hubCookies.some((c) => c.name === '__Host-hub-hub-login'), JSON.stringify(hubCookies.map((c) => c.name)));
        for (const c of await a.context.cookies()) t.false(c.domain.startsWith('.'), `cookie ${c.name} is host-only (domain ${c.domain})`);
        t.false((await a.context.cookies(aliceOrigin)).some((c) => c.name.includes('hub-hub-login') || c.name === 'hub-session-id'), 'alice\'s host gets no hub cookie');
        t.true((await a.context.cookies(aliceOrigin)).some((c) => c.name === `__Host-hub-user-${alice}`), 'the 6.1 server keeps its token in a __Host- cookie of its own host');

        // a cell runs on alice's kernel: its output comes over the WebSocket at her host
        t.is(await (await newNotebook(a.page)).run('print(6*7)'), '42');

        // saved, and its shareable link copied from the file browser: the hub's user-redirect, on alice's host (the
        // 6.1 server's shareUrl is a path; JupyterLab makes it absolute on the page's own origin)
        await saveNotebookAs(a.page, NOTEBOOK);
        const link = await copyShareableLink(a.page, NOTEBOOK);
        t.is(link, `${aliceOrigin}/hub/user-redirect/lab/tree/${NOTEBOOK}`);
        /** the hops a person's browser takes from the link: the hub's host, the spawn link, their own server's path */
        const hopsFor = (user: string, origin: string) => [
          link, `${hubOrigin}/hub/user-redirect/lab/tree/${NOTEBOOK}`,
          `${hubOrigin}/hub/spawn/${user}?next=${encodeURIComponent(`/user/${user}/lab/tree/${NOTEBOOK}`)}`, `${origin}/user/${user}/lab/tree/${NOTEBOOK}`,
        ];
        // alice opens it: her notebook on her server, with its output
        t.deepEqual(hopsOf(await a.page.goto(link)), hopsFor(alice, aliceOrigin));
        await a.page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output', { hasText: /^\s*42\s*$/ }).waitFor({ timeout: 60_000 });

        // JupyterLab's hub links go to the hub's host (the 6.1 server's JUPYTERHUB_HOST): File → Hub Control Panel
        await a.page.locator('#jp-menu-panel .lm-MenuBar-item', { hasText: /^File$/ }).click();
        const [panel] = await Promise.all([a.context.waitForEvent('page', { timeout: 15_000 }), a.page.locator('.lm-Menu-item[data-command="hub:control-panel"]').click()]);
        await panel.waitForURL((u) => u.origin === hubOrigin && u.pathname === '/hub/home', { timeout: 15_000 });
        await panel.locator('#default-server .state[data-state=running]').waitFor({ timeout: 15_000 });
        await panel.close();

        // script on alice's host, in alice's browser: the hub's API answers nothing it may read
        const ownApi = await probe(a.page, '/hub/api/user');
        t.is(ownApi.error, 'TypeError', `fetch('/hub/api/user') on alice's host: ${JSON.stringify(ownApi)}`);
        const hubApi = await probe(a.page, `${hubOrigin}/hub/api/user`, { credentials: 'include' });
        t.is(hubApi.error, 'TypeError', `the hub's API with alice's cookies, from her host: ${JSON.stringify(hubApi)}`);
        const write = await probe(a.page, `${hubOrigin}/hub/api/users/${alice}/tokens`, { method: 'POST', credentials: 'include', headers: { 'content-type': 'text/plain' }, body: JSON.stringify({ note: 'from-alice-host' }) });
        t.is(write.error, 'TypeError');
        const jsonWrite = await probe(a.page, `${hubOrigin}/hub/api/users/${alice}/tokens`, { method: 'POST', credentials: 'include', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ note: 'from-alice-host' }) });
        t.is(jsonWrite.error, 'TypeError');
        const aliceTokens = await api('GET', `/users/${alice}/tokens`, { token: ADMIN });
        t.is(aliceTokens.status, 200);
        t.false(JSON.stringify(aliceTokens.body).includes('from-alice-host'), 'no token was made for alice');
        // the same page reads its own server, so the probe itself works
        t.is((await probe(a.page, `/user/${alice}/api/contents`, {}, true)).status, 200);

        // alice shares her server with bob
        const shared = await api('POST', `/shares/${alice}/`, { token: ADMIN, body: { user: bob } });
        t.is(shared.status, 200, JSON.stringify(shared.body));
        // bob opens alice's link: the path on his OWN server, as the established hub's user-redirect, share or not
        t.deepEqual(hopsOf(await b.page.goto(link)), hopsFor(bob, bobOrigin));
        await b.page.locator('#jp-main-dock-panel').waitFor({ state: 'visible', timeout: 60_000 });
        t.is(await pageConfig(b.page, 'hubServerUser'), bob);
        // bob opens alice's server: her JupyterLab at her host, in bob's browser
        await b.page.goto(`${aliceOrigin}/user/${alice}/lab`);
        // another's server: the hub asks bob first
        await b.page.waitForURL((u) => u.origin === hubOrigin && u.pathname === '/hub/api/oauth2/authorize', { timeout: 15_000 });
        await Promise.all([b.page.waitForURL((u) => u.origin === aliceOrigin && u.pathname === `/user/${alice}/lab`, { timeout: 30_000 }), b.page.click('button[type=submit]')]);
        await b.page.locator('#jp-main-dock-panel').waitFor({ state: 'visible', timeout: 60_000 });
        t.is((await probe(b.page, `/user/${alice}/api/contents`, {}, true)).status, 200, 'bob uses alice\'s server through the share');
        // … and opens her notebook there: its saved output
        await fileRow(b.page, NOTEBOOK).dblclick({ timeout: 60_000 });
        await b.page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output', { hasText: /^\s*42\s*$/ }).waitFor({ timeout: 60_000 });
        t.is(await pageConfig(b.page, 'hubServerUser'), alice);

        // script on alice's host, in bob's browser: bob's server with bob's cookies, by its host or by its path here
        const bobServer = await probe(b.page, `${bobOrigin}/user/${bob}/api/contents`, { credentials: 'include' }, true);
        t.is(bobServer.error, 'TypeError', `bob's server from alice's host: ${JSON.stringify(bobServer)}`);
        const byPath = await probe(b.page, `/user/${bob}/api/contents`);
        t.is(byPath.status, 404, `bob's path on alice's host: ${JSON.stringify(byPath)}`);
        const kernel = await probe(b.page, `${bobOrigin}/user/${bob}/api/kernels`, { method: 'POST', credentials: 'include', headers: { 'content-type': 'text/plain' }, body: '{}' });
        t.is(kernel.error, 'TypeError');
        // … and started nothing there: bob's own tab on his own host lists no kernel (he never opened a notebook)
        const own = await b.context.newPage();
        t.is((await own.goto(`${bobOrigin}/user/${bob}/api/kernels`))?.status(), 200);
        t.deepEqual(JSON.parse(await own.locator('body').innerText()), []);
        await own.close();
        // the hub's API with bob's session, from alice's host
        const bobApi = await probe(b.page, `${hubOrigin}/hub/api/user`, { credentials: 'include' });
        t.is(bobApi.error, 'TypeError', `the hub's API with bob's cookies, from alice's host: ${JSON.stringify(bobApi)}`);

        // carol, not shared anything, opening alice's notebook at her host is refused with a page that says so
        await login(c.page, hubOrigin, carol, PASSWORD);
        const refused = await c.page.goto(`${aliceOrigin}/user/${alice}/lab/tree/${NOTEBOOK}`);
        t.is(refused?.status(), 403, hopsOf(refused).join(' → '));
        const why = await c.page.locator('main').innerText();
        t.true(why.includes(`You do not have permission to access Server at ${aliceOrigin}/user/${alice}/.`), why);

      });
    } finally {
      for (const p of [a, b, c]) await p.context.close();
    }
  } catch (e) {
    if (hub) t.log(logsOf(hub));
    throw e;
  } finally {
    await hub?.stop();
    for (const u of [alice, bob, carol]) await userProcessesEnd(u, t);
  }
});
