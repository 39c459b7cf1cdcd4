// The established hub's own single-user server (Debian's jupyterhub-singleuser, notebook 6) behind this hub,
// unchanged: run as a localprocess user with the JUPYTERHUB_* aliases, reached by a browser through the
// gateway and the hub's OAuth, a kernel started over its REST API and code run over the kernel's WebSocket.
import test from 'ava';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import WebSocket from 'ws';
import { isAlive, sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { Browser } from '../oauth/browser.js';
import { account, serverRecord, systemAccounts } from './helpers.js';

const SINGLEUSER = '/usr/bin/jupyterhub-singleuser';
const ADMIN = randomToken();
const PASSWORD = 'correct horse battery';
const accounts = systemAccounts('h10j');
const USER = accounts.name('u');
let hub: HubUnderTest;
let api: ApiCall;

test.before(async () => {
  if (!existsSync(SINGLEUSER)) throw new Error(`${SINGLEUSER} is missing: run \`node scripts/setup.mjs --for-tests\` (it installs Debian's jupyterhub)`);
  accounts.addUser(USER);
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, spawner_class: 'localprocess', env_prefix_aliases: ['JUPYTERHUB_'], authenticator_class: 'dummy', activity_resolution: 1 },
      Authenticator: { admin_users: ['boss'] },
      DummyAuthenticator: { password: PASSWORD },
      Spawner: { cmd: [SINGLEUSER], start_timeout: 90, http_timeout: 10, slow_spawn_timeout: 1, environment: { JUPYTERHUB_ACTIVITY_INTERVAL: '1' } },
    },
  });
  api = apiClient(hub.url);
  if ((await api('POST', `/users/${USER}`, { token: ADMIN })).status !== 201) throw new Error('setup: user not created');
});

test.after.always(async () => {
  await hub?.stop();
  accounts.removeAll();
});

interface KernelMessage { header: { msg_type: string; msg_id: string }; parent_header: { msg_id?: string }; content: any; channel?: string }

/**
 * One execute_request on the kernel's channels socket; resolves with what it printed and the reply's status
 * once both the shell reply and iopub's "idle" have come (the two channels are not ordered with each other).
 */
function execute(ws: WebSocket, code: string): Promise<{ stdout: string; status: string }> {
  const msgId = randomUUID();
  return new Promise((resolve, reject) => {
    let stdout = '';
    let status = '';
    let idle = false;
    const timer = setTimeout(() => reject(new Error(`no execute_reply within 30 s (stdout so far: ${stdout})`)), 30_000);
    ws.on('message', (data) => {
      const m = JSON.parse(String(data)) as KernelMessage;
      if (m.parent_header?.msg_id !== msgId) return;
      if (m.header.msg_type === 'stream' && m.content.name === 'stdout') stdout += m.content.text;
      if (m.header.msg_type === 'error') stdout += `${m.content.ename}: ${m.content.evalue}`;
      if (m.header.msg_type === 'execute_reply') status = m.content.status;
      if (m.header.msg_type === 'status' && m.content.execution_state === 'idle') idle = true;
      if (status && idle) {
        clearTimeout(timer);
        resolve({ stdout, status });
      }
    });
    ws.send(JSON.stringify({
      header: { msg_id: msgId, msg_type: 'execute_request', username: USER, session: randomUUID(), date: new Date().toISOString(), version: '5.3' },
      parent_header: {}, metadata: {}, channel: 'shell', buffers: [],
      content: { code, silent: false, store_history: true, user_expressions: {}, allow_stdin: false, stop_on_error: true },
    }));
  });
}

test.serial('jupyter: the established hub\'s single-user server runs unchanged as the user; a browser reaches it through OAuth without consent, runs code in a kernel over WebSocket, and activity reaches the hub', async (t) => {
  const browser = new Browser(hub.url);
  t.is((await browser.login(USER, PASSWORD)).status, 302);
  const started = await api('POST', `/users/${USER}/server`, { token: ADMIN });
  t.true(started.status === 201 || started.status === 202, `start: ${started.status} ${JSON.stringify(started.body)}`);
  await waitFor('the notebook server to be ready', async () => {
    const s = (await api('GET', `/users/${USER}`, { token: ADMIN })).body.servers[''];
    if (!s) throw new Error(`the server failed to start:\n${hub.logs().slice(-3000)}`);
    return s.ready ? true : undefined;
  }, 90_000, 250);
  const rec = (await serverRecord(hub.natsUrl, USER))!;
  const startedAt = (await api('GET', `/users/${USER}`, { token: ADMIN })).body.servers[''].last_activity;

  // the notebook page: server → hub authorize → (own server: no consent page) → server callback → the page
  const prefix = `/user/${USER}/`;
  const hops = await browser.follow(`${prefix}tree`);
  const where = hops.map((h) => `${h.status} ${h.location ?? ''}`).join(' | ');
  const toAuthorize = hops.findIndex((h) => h.location?.startsWith('/hub/api/oauth2/authorize'));
  t.true(toAuthorize >= 0, where);
  // the hub's answer to the authorize request: straight back to the server with a code, no consent page
  t.is(hops[toAuthorize + 1]?.status, 302, where);
  t.true(hops[toAuthorize + 1]?.location?.startsWith(`${prefix}oauth_callback?code=`), where);
  const page = hops.at(-1)!;
  t.is(page.status, 200, where);
  t.regex(page.body, /jupyter/i);
  const xsrf = browser.cookie('_xsrf', '/'); // the notebook's (tornado's default path), not the hub's on /hub/
  t.truthy(xsrf, `notebook sets its XSRF cookie: ${[...browser.jar.values()].map((c) => `${c.name}@${c.path}`).join(', ')}`);

  // a kernel through the notebook's REST API, through the gateway, with the OAuth cookie
  const kernel = await browser.request('POST', `${prefix}api/kernels`, {
    body: JSON.stringify({ name: 'python3' }), headers: { 'content-type': 'application/json', accept: 'application/json', 'x-xsrftoken': xsrf!.value },
  });
  t.is(kernel.status, 201, kernel.body);
  const { id } = JSON.parse(kernel.body);
  const cookieHeader = [...browser.jar.values()].filter((c) => prefix.startsWith(c.path) || c.path === '/').map((c) => `${c.name}=${c.value}`).join('; ');
  // the notebook answers the handshake only once the kernel is up: on a loaded machine that can outlast the
  // gateway's connect timeout (503), and the notebook's page reconnects; so does this client, a bounded few times
  let ws!: WebSocket;
  for (let attempt = 1; ; attempt++) {
    ws = new WebSocket(`${hub.url.replace('http', 'ws')}${prefix}api/kernels/${id}/channels?session_id=${randomUUID()}`, { headers: { cookie: cookieHeader } });
    const status = await new Promise<number>((resolve, reject) => {
      ws.once('open', () => resolve(101));
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
    });
    if (status === 101) break;
    if (status !== 503 || attempt === 6) throw new Error(`WebSocket refused: ${status} (attempt ${attempt})`);
    await sleep(2000);
  }
  try {
    const a = account(USER);
    const out = await execute(ws, 'import os, getpass\nprint(6 * 7, os.getuid(), getpass.getuser(), os.getcwd())');
    t.is(out.status, 'ok', out.stdout);
    t.is(out.stdout.trim(), `42 ${a.uid} ${USER} ${a.home}`, 'the kernel runs as the user, in their home');
  } finally {
    ws.close();
  }

  // activity (the server's own reports and proxied traffic) reaches the hub
  await waitFor('activity to reach the hub', async () => {
    const s = (await api('GET', `/users/${USER}`, { token: ADMIN })).body.servers[''];
    return s.last_activity > startedAt ? true : undefined;
  }, 15_000, 250);
  t.is((await api('DELETE', `/users/${USER}/server`, { token: ADMIN })).status, 204);
  t.false(isAlive(rec.pid), 'the notebook server is gone');
});
