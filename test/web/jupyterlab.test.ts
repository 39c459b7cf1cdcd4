// JupyterLab 4 on the established hub's current single-user server (jupyterhub 6.1.1, from the pinned venv
// `scripts/setup.mjs --for-tests` makes under .cache/jupyter-6.1) behind this hub, driven in a real browser as a
// person uses it: the hub's login page, the home page's start button, JupyterLab's own UI, a notebook whose cell
// runs on the venv's kernel over the gateway's WebSocket proxy, File → Hub Control Panel and File → Log Out.
// The notebook saved, its shareable link copied from the file browser (JupyterLab's /hub/user-redirect link): it
// opens the notebook on the server of whoever opens it, as with the established hub; alice shares her server with
// bob from the hub's share page, and bob reaches her notebook through the share; carol, not shared it, is refused.
// Then the established idle culler 2.0 from the same venv, as a hub-managed service with only the scopes its
// README asks for, stops an idle server. Each test has its own hub; nothing is skipped.
import test, { type ExecutionContext } from 'ava';
import { realpathSync } from 'node:fs';
import { join } from 'node:path';
import { isAlive, sleep, startHub, waitFor } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { serverRecord, systemAccounts } from '../spawner/helpers.js';
import { login, newPage } from './browser.js';
import {
  copyShareableLink, CULLER, fileRow, hopsOf, logsOf, newNotebook, pageConfig, saveNotebookAs, serverLogs, userProcessesEnd, VENV, venvBrowser, venvSpawnerConfig, withEvidence, withFailedLoads,
} from './jupyter-venv.js';

const PASSWORD = 'correct horse battery';
/** the notebook alice saves and shares */
const NOTEBOOK = 'for-bob.ipynb';
const accounts = systemAccounts('h10l');
const browser = venvBrowser(accounts);


/**
 * A person's whole JupyterLab session through the hub served under `base` (Hub.base_url: '/' or '/jupyter/'): every
 * path the browser sees is under it, as the established hub's base_url puts it.
 */
async function labSession(t: ExecutionContext, base: string, accountRole: string): Promise<void> {
  const user = accounts.name(accountRole);
  // bob: shared alice's server; carol: not
  const bob = accounts.name(`${accountRole}b`);
  const carol = accounts.name(`${accountRole}c`);
  for (const u of [user, bob, carol]) accounts.addUser(u);
  /** a path of the hub's URL space as the browser sees it under `base` */
  const at = (path: string) => (base === '/' ? path : `${base.slice(0, -1)}${path}`);
  const hub = await startHub({
    config: {
      Hub: {
        spawner_class: 'localprocess', authenticator_class: 'dummy', env_prefix_aliases: ['JUPYTERHUB_'], activity_resolution: 1, ...(base === '/' ? {} : { base_url: base }),
        // sharing on, as the established hub's sharing tutorial has it: users share their own servers with people by name
        load_roles: [{ name: 'user', scopes: ['self', 'shares!user', 'read:users:name', 'read:groups:name'] }],
      },
      DummyAuthenticator: { password: PASSWORD },
      Spawner: venvSpawnerConfig(),
    },
  });
  const { context, page, errors } = withFailedLoads(await newPage(browser()));
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: hub.url });
  const bobs = withFailedLoads(await newPage(browser()));
  const carols = withFailedLoads(await newPage(browser()));
  try {
    await withEvidence(t, [{ page, errors }, bobs, carols], hub, async () => {
      // bob has signed in once (the hub knows him: alice can share with him)
      await login(bobs.page, `${hub.url}${at('/').slice(0, -1)}`, bob, PASSWORD);
      // the hub's login page, then its home page's start button: spawn-pending, then the server's default URL
      await login(page, `${hub.url}${at('/').slice(0, -1)}`, user, PASSWORD);
      t.is(new URL(page.url()).pathname, at('/hub/home'));
      await Promise.all([page.waitForURL((u) => u.pathname.startsWith(at('/hub/spawn-pending/')), { timeout: 15_000 }), page.click('#default-server button[data-action=start]')]);
      // through the server's OAuth login at the hub (its own server: no consent page) to /lab
      await page.waitForURL((u) => u.pathname === at(`/user/${user}/lab`), { timeout: 60_000 });

      // JupyterLab's own UI: the main dock panel and the launcher
      await page.locator('#jp-main-dock-panel').waitFor({ state: 'visible', timeout: 60_000 });
      // a new notebook on the venv's kernel; a cell typed and run; its output comes over the kernel's WebSocket
      const notebook = await newNotebook(page);
      t.regex(notebook.title, /Python 3/);
      t.is(await notebook.run('print(6*7)'), '42');
      // the kernel is the venv's python, running as the user
      t.is(await notebook.run('import sys, getpass; print(sys.executable, getpass.getuser())'), `${join(realpathSync(VENV), 'bin', 'python')} ${user}`);

      // saved under a name; the file browser's Copy Shareable Link gives the link JupyterLab 4.6 makes with the 6.1
      // server's page config (shareUrl: the hub's /hub/user-redirect): it names the path, not the person
      await saveNotebookAs(page, NOTEBOOK);
      const link = await copyShareableLink(page, NOTEBOOK);
      t.is(link, `${hub.url}${at(`/hub/user-redirect/lab/tree/${NOTEBOOK}`)}`);
      // alice opens it: her own server, by way of the hub's spawn link (it runs: straight on), the notebook open with
      // its saved output
      const opened = await page.goto(link);
      t.deepEqual(hopsOf(opened), [link, `${hub.url}${at(`/hub/spawn/${user}`)}?next=${encodeURIComponent(at(`/user/${user}/lab/tree/${NOTEBOOK}`))}`, `${hub.url}${at(`/user/${user}/lab/tree/${NOTEBOOK}`)}`]);
      await page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output', { hasText: /^\s*42\s*$/ }).waitFor({ timeout: 60_000 });

      // a notebook with run cells is unsaved: JupyterLab asks before the page goes; a person says leave
      page.on('dialog', (d) => void (d.type() === 'beforeunload' ? d.accept() : d.dismiss()));

      // File → Hub Control Panel: the hub's home page in a new tab, the server running
      const fileMenu = page.locator('#jp-menu-panel .lm-MenuBar-item', { hasText: /^File$/ });
      await fileMenu.click();
      const [panel] = await Promise.all([context.waitForEvent('page', { timeout: 15_000 }), page.locator('.lm-Menu-item[data-command="hub:control-panel"]').click()]);
      await panel.waitForURL((u) => u.pathname === at('/hub/home'), { timeout: 15_000 });
      await panel.locator('#default-server .state[data-state=running]').waitFor({ timeout: 15_000 });
      // alice shares her server with bob from there (the hub's share page)
      await Promise.all([panel.waitForURL((u) => u.pathname === at(`/hub/share/${user}`)), panel.click('#default-server a[data-action=share]')]);
      await panel.fill('#share-form input[name=name]', bob);
      await Promise.all([panel.waitForURL((u) => u.pathname === at(`/hub/share/${user}`)), panel.click('#share-form button[data-action=grant]')]);
      await panel.locator(`#shares tr[data-grantee="user:${bob}"]`).waitFor();
      await panel.close();

      // bob opens alice's link: as with the established hub 6.1's /hub/user-redirect, it is the path on the visitor's
      // OWN server (his, started for him by the spawn link), whatever he was shared
      const bobsOwn = await bobs.page.goto(link);
      t.deepEqual(hopsOf(bobsOwn).slice(0, 2), [link, `${hub.url}${at(`/hub/spawn/${bob}`)}?next=${encodeURIComponent(at(`/user/${bob}/lab/tree/${NOTEBOOK}`))}`]);
      await bobs.page.waitForURL((u) => u.pathname === at(`/user/${bob}/lab/tree/${NOTEBOOK}`), { timeout: 60_000 });
      await bobs.page.locator('#jp-main-dock-panel').waitFor({ state: 'visible', timeout: 60_000 });
      t.is(await pageConfig(bobs.page, 'hubServerUser'), bob);
      // the notebook is alice's, on her server: bob reaches it through the share, from his home's "Shared with me"
      await bobs.page.goto(`${hub.url}${at('/hub/home')}`);
      await Promise.all([bobs.page.waitForURL((u) => u.pathname === at('/hub/api/oauth2/authorize'), { timeout: 30_000 }), bobs.page.click(`#shared-with-me tr[data-shared="${user}/"] a[data-action=open]`)]);
      await Promise.all([bobs.page.waitForURL((u) => u.pathname === at(`/user/${user}/lab`), { timeout: 30_000 }), bobs.page.click('button[type=submit]')]);
      await fileRow(bobs.page, NOTEBOOK).dblclick({ timeout: 60_000 });
      await bobs.page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output', { hasText: /^\s*42\s*$/ }).waitFor({ timeout: 60_000 });
      t.is(await pageConfig(bobs.page, 'hubServerUser'), user);
      t.is(await pageConfig(bobs.page, 'hubUser'), bob);
      // carol, not shared anything, opening the notebook on alice's server is refused with a page that says so
      await login(carols.page, `${hub.url}${at('/').slice(0, -1)}`, carol, PASSWORD);
      const refused = await carols.page.goto(`${hub.url}${at(`/user/${user}/lab/tree/${NOTEBOOK}`)}`);
      t.is(refused?.status(), 403, hopsOf(refused).join(' → '));
      t.regex(await carols.page.locator('main').innerText(), new RegExp(`You do not have permission to access Server at ${at(`/user/${user}/`)}`));

      // File → Log Out: the server's logout, then the hub's, which (as the established hub 6.1's) lands on the
      // sign-in page; the hub session is gone
      await fileMenu.click();
      await Promise.all([page.waitForURL((u) => u.pathname === at('/hub/login'), { timeout: 15_000 }), page.locator('.lm-Menu-item[data-command="hub:logout"]').click()]);
      t.true(await page.locator(`form[action^="${at('/hub/login')}"]`).isVisible());
      t.is((await context.request.get(`${hub.url}${at('/hub/api/user')}`)).status(), 403, 'GET /hub/api/user with the browser\'s cookies after logging out');
      // and the server asks for a login again (its OAuth cookie cleared by its own logout)
      const again = await context.request.get(`${hub.url}${at(`/user/${user}/lab`)}`);
      t.is(new URL(again.url()).pathname, at('/hub/login'), `/user/${user}/lab after logging out ended at ${again.url()} (${again.status()})`);

      // the server found the hub it expects: jupyterhub-singleuser checks the hub API's version header against its own
      const serverLog = serverLogs(hub).map(([, text]) => text).join('\n');
      t.notRegex(serverLog, /Hub has no version header|jupyterhub version \S+ != jupyterhub-singleuser version/, 'the single-user server\'s version check');
    });
  } finally {
    for (const c of [context, bobs.context, carols.context]) await c.close();
    await hub.stop();
    for (const u of [user, bob, carol]) await userProcessesEnd(u, t);
  }
}

test.serial('jupyterlab: log in, start from home, JupyterLab loads, a notebook runs print(6*7) on the venv\'s kernel, Copy Shareable Link and a share, File → Hub Control Panel and File → Log Out', async (t) => {
  await labSession(t, '/', 'u');
});

test.serial('jupyterlab: the same session under Hub.base_url /jupyter/: login, start, JupyterLab, a cell, the shareable link and a share, Hub Control Panel and Log Out all under the prefix', async (t) => {
  await labSession(t, '/jupyter/', 'j');
});

// The culler's idle timeout: the busy server is used every 0.5 s, and its activity reaches the hub within
// Hub.activity_resolution (1 s) plus a NATS hop; 10 s leaves it busy beyond doubt on a loaded machine (at 5 s one
// run under load 7 saw it culled: a request of the loop took seconds)
const CULL_TIMEOUT_S = 10;

test.serial('jupyterlab: the idle culler 2.0 as a hub-managed service, with only the scopes its README lists, stops an idle server and leaves a busy one', async (t) => {
  const idle = accounts.name('i');
  const busy = accounts.name('b');
  accounts.addUser(idle);
  accounts.addUser(busy);
  const admin = randomToken();
  const hub = await startHub({
    config: {
      Hub: {
        spawner_class: 'localprocess', authenticator_class: 'dummy', env_prefix_aliases: ['JUPYTERHUB_'], activity_resolution: 1,
        api_tokens: { [admin]: 'boss' },
        services: [{ name: 'idle-culler', command: [CULLER, `--timeout=${CULL_TIMEOUT_S}`, '--cull-every=2'] }],
        load_roles: [{ name: 'idle-culler', scopes: ['list:users', 'read:users:activity', 'read:servers', 'delete:servers'], services: ['idle-culler'] }],
      },
      Authenticator: { admin_users: ['boss'] },
      DummyAuthenticator: { password: PASSWORD },
      Spawner: venvSpawnerConfig(),
    },
  });
  const api = apiClient(hub.url);
  const server = async (user: string) => (await api('GET', `/users/${user}`, { token: admin })).body.servers?.[''];
  let using = true;
  let use: Promise<void> = Promise.resolve();
  let starting = true;
  let report: Promise<void> = Promise.resolve();
  try {
    for (const user of [idle, busy]) {
      t.is((await api('POST', `/users/${user}`, { token: admin })).status, 201);
      const started = await api('POST', `/users/${user}/server`, { token: admin });
      t.true(started.status === 201 || started.status === 202, `start: ${started.status} ${JSON.stringify(started.body)}\n${logsOf(hub)}`);
    }
    // the busy one is in use from its start on: while it starts, its activity reported through the hub's API, as a
    // server reports its own (a start slower than the culler's timeout, 12 s on a loaded machine, otherwise leaves a
    // ready server that has seemed idle since its start request, and the culler, as the established hub's, culls it)
    report = (async () => {
      while (starting) {
        const at = new Date().toISOString();
        const r = await api('POST', `/users/${busy}/activity`, { token: admin, body: { last_activity: at, servers: { '': { last_activity: at } } } });
        if (r.status !== 200) throw new Error(`activity of ${busy}'s starting server: ${r.status} ${JSON.stringify(r.body)}`);
        await sleep(500);
      }
    })();
    report.catch(() => undefined);
    for (const user of [idle, busy]) {
      await waitFor(`${user}'s server to be ready`, async () => {
        const s = await server(user);
        if (!s) throw new Error('the server is gone before it was ready');
        return s.ready ? s : undefined;
      }, 60_000, 250).catch((e) => { throw new Error(`${(e as Error).message}\n${logsOf(hub)}`); });
    }
    const idlePid = (await serverRecord(hub.natsUrl, idle))!.pid;
    starting = false;
    await report;
    // someone uses the busy one: its contents API through the gateway twice a second (the admin's token: access:servers)
    use = (async () => {
      while (using) {
        const r = await fetch(`${hub.url}/user/${busy}/api/contents`, { headers: { authorization: `token ${admin}` }, signal: AbortSignal.timeout(10_000) }).catch((e: Error) => e);
        if (r instanceof Error || r.status !== 200) throw new Error(`using ${busy}'s server: ${r instanceof Error ? r.message : r.status}`);
        await sleep(500);
      }
    })();
    use.catch(() => undefined);
    // nobody uses the idle one: within timeout + cull-every (2 s) + the hub's activity resolution, the culler stops it
    const t0 = Date.now();
    await waitFor('the culler to stop the idle server', async () => ((await server(idle)) ? undefined : true), 30_000, 250)
      .catch((e) => { throw new Error(`${(e as Error).message}\n${logsOf(hub)}`); });
    t.log(`idle server culled ${Date.now() - t0} ms after both were ready`);
    t.false(isAlive(idlePid), 'the idle server\'s process is gone');
    t.regex(hub.logs(), new RegExp(`Culling server ${idle}\\b`), 'the culler says it culled it (its output is in the hub\'s log)');
    // two more rounds of the culler: the busy one stays
    await sleep(4000);
    t.is((await server(busy))?.ready, true, `the busy server still runs\n${logsOf(hub)}`);
    t.notRegex(hub.logs(), new RegExp(`Culling server ${busy}\\b`));
    using = false;
    await use;
  } finally {
    using = false;
    starting = false;
    await use.catch(() => undefined);
    await report.catch(() => undefined);
    await hub.stop();
    await userProcessesEnd(idle, t);
    await userProcessesEnd(busy, t);
  }
});
