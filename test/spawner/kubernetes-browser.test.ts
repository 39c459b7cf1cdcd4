// A person's view of the `kubernetes` backend (Chromium, Playwright): logged in at the hub, the home page's start
// button, the spawn-pending page, then JupyterLab from the established hub's 6.1 single-user server in a pod on the
// real cluster (test/spawner/kube-cluster.ts), reached through the front door after the server's OAuth login at the
// hub; a notebook cell runs in the pod's kernel; the home page's stop button deletes the pod.
import test from 'ava';
import { type HubUnderTest } from '../harness.js';
import { randomToken } from '../api/client.js';
import { launchBrowser, login, newPage, type Browser } from '../web/browser.js';
import { newNotebook } from '../web/jupyter-venv.js';
import { serverRecord } from './helpers.js';
import { ensureCluster, startKubeHub, type KubeCluster } from './kube-cluster.js';

const ADMIN = randomToken();
const PASSWORD = 'correct horse battery';
const NAMESPACE = `hub-browser-${Date.now().toString(36)}`;
let cluster: KubeCluster;
let hub: HubUnderTest;
let browser: Browser;

test.before(async () => {
  cluster = await ensureCluster();
  await cluster.want('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } }, 201);
  browser = await launchBrowser();
  hub = await startKubeHub(cluster, {
    Hub: { api_tokens: { [ADMIN]: 'boss' }, authenticator_class: 'dummy' },
    DummyAuthenticator: { password: PASSWORD },
    Spawner: { default_url: '/lab', slow_spawn_timeout: 1 },
    KubeSpawner: { namespace: NAMESPACE },
  });
});

test.after.always(async () => {
  await browser?.close();
  await hub?.stop();
  await cluster?.api('DELETE', `/api/v1/namespaces/${NAMESPACE}`).catch(() => undefined);
});

test('kubernetes in a browser: the start button, JupyterLab from a pod through the hub\'s OAuth, a cell run in the pod, the stop button', async (t) => {
  const { context, page } = await newPage(browser);
  try {
    await login(page, hub.url, 'nora', PASSWORD);
    t.is(new URL(page.url()).pathname, '/hub/home');
    await Promise.all([page.waitForURL((u) => u.pathname.startsWith('/hub/spawn-pending/'), { timeout: 15_000 }), page.click('#default-server button[data-action=start]')]);
    // within ava's own timeout (120 s), so a failed start shows what the page said
    await page.waitForURL((u) => u.pathname === '/user/nora/lab', { timeout: 90_000 });
    await page.locator('#jp-main-dock-panel').waitFor({ state: 'visible', timeout: 60_000 });
    const pod = await cluster.want('GET', `/api/v1/namespaces/${NAMESPACE}/pods/jupyter-nora`, undefined, 200);
    const notebook = await newNotebook(page);
    // the kernel runs in the pod: its host name is the pod's name, its user the image's jovyan
    t.is(await notebook.run('import socket, getpass; print(socket.gethostname(), getpass.getuser())'), `jupyter-nora jovyan`);
    t.is((await serverRecord(hub.natsUrl, 'nora'))!.target, `http://${pod.status.podIP}:8888`);

    page.on('dialog', (d) => void (d.type() === 'beforeunload' ? d.accept() : d.dismiss()));
    await page.goto(`${hub.url}/hub/home`);
    await page.click('#default-server button[data-action=stop]');
    await page.locator('#default-server .state[data-state=stopped]').waitFor({ timeout: 60_000 });
    t.is((await cluster.api('GET', `/api/v1/namespaces/${NAMESPACE}/pods/jupyter-nora`)).status, 404, 'the pod is gone');
  } catch (e) {
    // what the person saw when it went wrong
    throw new Error(`${(e as Error).message}\nat ${page.url()}: ${(await page.locator('body').innerText().catch(() => '')).slice(0, 800)}\n--- hub log ---\n${hub.logs().slice(-2000)}`);
  } finally {
    await context.close();
  }
});
