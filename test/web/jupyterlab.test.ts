// JupyterLab 4 on the established hub's current single-user server (jupyterhub 6.1.1, from the pinned venv
// `scripts/setup.mjs --for-tests` makes under .cache/jupyter-6.1) behind this hub, driven in a real browser as a
// person uses it: the hub's login page, the home page's start button, JupyterLab's own UI, a notebook whose cell
// runs on the venv's kernel over the gateway's WebSocket proxy, File → Hub Control Panel and File → Log Out.
// Then the established idle culler 2.0 from the same venv, as a hub-managed service with only the scopes its
// README asks for, stops an idle server. Each test has its own hub; nothing is skipped.
import test, { type ExecutionContext } from 'ava';
import { realpathSync } from 'node:fs';
import { join } from 'node:path';
import { isAlive, sleep, startHub, waitFor } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { serverRecord, systemAccounts } from '../spawner/helpers.js';
import { login, newPage } from './browser.js';
import { CULLER, logsOf, newNotebook, serverLogs, userProcessesEnd, VENV, venvBrowser, venvSpawnerConfig, withEvidence } from './jupyter-venv.js';

const PASSWORD = 'correct horse battery';
const accounts = systemAccounts('h10l');
const browser = venvBrowser(accounts);


/**
 * A person's whole JupyterLab session through the hub served under `base` (Hub.base_url: '/' or '/jupyter/'): every
 * path the browser sees is under it, as the established hub's base_url puts it.
 */
async function labSession(t: ExecutionContext, base: string, accountRole: string): Promise<void> {
  const user = accounts.name(accountRole);
  accounts.addUser(user);
  /** a path of the hub's URL space as the browser sees it under `base` */
  const at = (path: string) => (base === '/' ? path : `${base.slice(0, -1)}${path}`);
  const hub = await startHub({
    config: {
      Hub: { spawner_class: 'localprocess', authenticator_class: 'dummy', env_prefix_aliases: ['JUPYTERHUB_'], activity_resolution: 1, ...(base === '/' ? {} : { base_url: base }) },
      DummyAuthenticator: { password: PASSWORD },
      Spawner: venvSpawnerConfig(),
    },
  });
  const { context, page, errors } = await newPage(browser());
  try {
    await withEvidence(t, [{ page, errors }], hub, async () => {
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

      // a notebook with run cells is unsaved: JupyterLab asks before the page goes; a person says leave
      page.on('dialog', (d) => void (d.type() === 'beforeunload' ? d.accept() : d.dismiss()));

      // File → Hub Control Panel: the hub's home page in a new tab, the server running
      const fileMenu = page.locator('#jp-menu-panel .lm-MenuBar-item', { hasText: /^File$/ });
      await fileMenu.click();
      const [panel] = await Promise.all([context.waitForEvent('page', { timeout: 15_000 }), page.locator('.lm-Menu-item[data-command="hub:control-panel"]').click()]);
      await panel.waitForURL((u) => u.pathname === at('/hub/home'), { timeout: 15_000 });
      await panel.locator('#default-server .state[data-state=running]').waitFor({ timeout: 15_000 });
      await panel.close();

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
    await context.close();
    await hub.stop();
    await userProcessesEnd(user, t);
  }
}

test.serial('jupyterlab: log in, start from home, JupyterLab loads, a notebook runs print(6*7) on the venv\'s kernel, File → Hub Control Panel and File → Log Out', async (t) => {
  await labSession(t, '/', 'u');
});

test.serial('jupyterlab: the same session under Hub.base_url /jupyter/: login, start, JupyterLab, a cell, Hub Control Panel and Log Out all under the prefix', async (t) => {
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
  try {
    for (const user of [idle, busy]) {
      t.is((await api('POST', `/users/${user}`, { token: admin })).status, 201);
      const started = await api('POST', `/users/${user}/server`, { token: admin });
      t.true(started.status === 201 || started.status === 202, `start: ${started.status} ${JSON.stringify(started.body)}\n${logsOf(hub)}`);
    }
    for (const user of [idle, busy]) {
      await waitFor(`${user}'s server to be ready`, async () => {
        const s = await server(user);
        if (!s) throw new Error('the server is gone before it was ready');
        return s.ready ? s : undefined;
      }, 60_000, 250).catch((e) => { throw new Error(`${(e as Error).message}\n${logsOf(hub)}`); });
    }
    const idlePid = (await serverRecord(hub.natsUrl, idle))!.pid;
    // someone uses the busy one: its contents API through the gateway once a second (the admin's token: access:servers)
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
    await use.catch(() => undefined);
    await hub.stop();
    await userProcessesEnd(idle, t);
    await userProcessesEnd(busy, t);
  }
});
