// The proxy in front of a real Jupyter notebook server (Debian's python3-notebook, notebook 6), started
// by the hub's spawner as a user's server: its tree page, its REST API (a kernel), the kernel's
// WebSocket (code runs, the reply comes back) and a large file up and down through the contents API.
import test from 'ava';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';

const PYTHON = '/usr/bin/python3';
const ADMIN = randomToken();
/** The notebook server's own token (its auth, not the hub's): every request through the proxy carries it. */
const NB_TOKEN = randomToken();
const BIG = 24 * 1024 * 1024;
let hub: HubUnderTest;
let api: ApiCall;
let dir: string;
const base = () => `${hub.url}/user/nbuser/`;
const auth = { authorization: `token ${NB_TOKEN}` };

test.before(async () => {
  // installed by `node scripts/setup.mjs --for-tests`; without it this test fails, naming the fix
  if (!existsSync('/usr/lib/python3/dist-packages/notebook/__init__.py')) {
    throw new Error('python3-notebook is not installed: run `node scripts/setup.mjs --for-tests` (as root) or `apt-get install -y python3-notebook`');
  }
  dir = mkdtempSync(join(tmpdir(), 'hub-jupyter-'));
  // the server's port and URL prefix come from the spawner's environment
  const script = [
    'port=$(echo "$HUB_SERVICE_URL" | cut -d: -f3 | cut -d/ -f1);',
    `exec ${PYTHON} -m notebook --no-browser --allow-root --ip 127.0.0.1 --port "$port" --port-retries 0`,
    `--NotebookApp.token=${NB_TOKEN} --NotebookApp.base_url="$HUB_SERVICE_PREFIX" --notebook-dir=${dir}`,
  ].join(' ');
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' } },
      Authenticator: { admin_users: ['boss'] },
      Spawner: {
        cmd: ['/bin/sh', '-c', script], start_timeout: 90, http_timeout: 10, stop_signal_timeout: 3,
        environment: { JUPYTER_CONFIG_DIR: join(dir, '.config'), JUPYTER_DATA_DIR: join(dir, '.data'), JUPYTER_RUNTIME_DIR: join(dir, '.runtime'), IPYTHONDIR: join(dir, '.ipython') },
      },
    },
  });
  api = apiClient(hub.url);
  const made = await api('POST', '/users/nbuser', { token: ADMIN });
  if (made.status !== 201) throw new Error(`setup: ${made.status} ${JSON.stringify(made.body)}`);
  const started = await api('POST', '/users/nbuser/server', { token: ADMIN });
  if (started.status !== 201 && started.status !== 202) throw new Error(`start: ${started.status} ${JSON.stringify(started.body)}; server log: ${serverLog()}`);
  await waitFor('the notebook server behind the gateway', async () => ((await fetch(`${base()}api/status`, { headers: auth })).status === 200 ? true : undefined), 90_000, 250);
});
function serverLog(): string {
  const logs = join(hub.dataDir, 'servers');
  return existsSync(logs) ? readdirSync(logs).map((f) => readFileSync(join(logs, f), 'utf8').slice(-1500)).join('\n') : '(none)';
}

test.after.always(async () => {
  await hub?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test.serial('jupyter: the tree page and the REST API answer through the gateway, with the server\'s own auth', async (t) => {
  const tree = await fetch(`${base()}tree`, { headers: auth });
  t.is(tree.status, 200);
  t.regex(tree.headers.get('content-type') ?? '', /text\/html/);
  t.regex(await tree.text(), /<title>Home Page - Select or create a notebook<\/title>|Jupyter Notebook/);
  const refused = await fetch(`${base()}api/contents`);
  t.is(refused.status, 403, 'the notebook server refuses a request without its token, through the proxy');
  const status = await fetch(`${base()}api/status`, { headers: auth });
  t.like(await status.json(), { kernels: 0 });
});

test.serial('jupyter: a kernel started over REST runs code sent over its WebSocket and replies', async (t) => {
  const made = await fetch(`${base()}api/kernels`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'python3' }) });
  t.is(made.status, 201);
  const kernel = (await made.json()) as { id: string; name: string };
  t.is(kernel.name, 'python3');
  const ws = new WebSocket(`${base().replace('http', 'ws')}api/kernels/${kernel.id}/channels?session_id=${randomToken()}`, { headers: auth });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
    ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade answered ${res.statusCode}`)));
  });
  const msgId = randomToken();
  const outputs: string[] = [];
  const reply = new Promise<{ status: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no execute_reply within 60 s (outputs: ${outputs.join('')})`)), 60_000);
    ws.on('message', (data) => {
      const m = JSON.parse(data.toString());
      if (m.parent_header?.msg_id !== msgId) return;
      if (m.msg_type === 'stream') outputs.push(m.content.text);
      if (m.msg_type === 'execute_reply') {
        clearTimeout(timer);
        resolve(m.content);
      }
    });
  });
  ws.send(JSON.stringify({
    header: { msg_id: msgId, username: 'nbuser', session: randomToken(), msg_type: 'execute_request', version: '5.3', date: new Date().toISOString() },
    parent_header: {}, metadata: {}, channel: 'shell', buffers: [],
    content: { code: 'print(6 * 7)', silent: false, store_history: false, user_expressions: {}, allow_stdin: false, stop_on_error: true },
  }));
  t.is((await reply).status, 'ok');
  // the stream message may trail the reply on its own channel
  await waitFor('the printed output', async () => (outputs.join('').includes('42') ? true : undefined), 10_000);
  t.is(outputs.join(''), '42\n');
  ws.close();
  t.is((await fetch(`${base()}api/kernels/${kernel.id}`, { method: 'DELETE', headers: auth })).status, 204);
});

test.serial(`jupyter: a ${BIG / 1024 / 1024} MiB file goes up and comes back down through the contents API intact`, async (t) => {
  const data = randomBytes(BIG);
  const digest = createHash('sha256').update(data).digest('hex');
  const put = await fetch(`${base()}api/contents/big.bin`, {
    method: 'PUT', headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ type: 'file', format: 'base64', content: data.toString('base64') }),
  });
  t.true(put.status === 201 || put.status === 200, `PUT answered ${put.status}`);
  t.like(await put.json(), { name: 'big.bin', type: 'file', size: BIG });
  const raw = await fetch(`${base()}files/big.bin`, { headers: auth });
  t.is(raw.status, 200);
  const back = Buffer.from(await raw.arrayBuffer());
  t.is(back.length, BIG);
  t.is(createHash('sha256').update(back).digest('hex'), digest);
  const model = await fetch(`${base()}api/contents/big.bin?content=1&format=base64&type=file`, { headers: auth });
  t.is(model.status, 200);
  const json = (await model.json()) as { content: string };
  t.is(createHash('sha256').update(Buffer.from(json.content, 'base64')).digest('hex'), digest, 'the JSON model carries the same bytes');
});
