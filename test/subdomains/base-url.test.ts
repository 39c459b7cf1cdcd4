// Per-user subdomains under Hub.base_url, as the established hub combines them: the hub at
// `http://hub.localhost:<port>/jupyter/hub/`, alice's server at `http://alice.hub.localhost:<port>/jupyter/user/alice/`.
import test from 'ava';
import { request } from 'node:http';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { randomToken } from '../api/client.js';
import { FIXTURE, serverRecord } from '../spawner/helpers.js';

const ADMIN = randomToken();
let hub: HubUnderTest;
let port: number;

/** GET `http://<host>:<port><path>` with that Host (the name resolves to the gateway). */
function get(host: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; location?: string; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host: `${host}:${port}`, ...headers }, timeout: 15_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, location: res.headers.location, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${host}${path}: no answer in 15 s`)));
    req.on('error', reject);
    req.end();
  });
}

test.before(async () => {
  port = await freePort();
  hub = await startHub({
    reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port, natsPort: await freePort() },
    config: {
      Hub: { subdomain_host: `http://hub.localhost:${port}`, base_url: '/jupyter/', env_prefix_aliases: ['JUPYTERHUB_'], api_tokens: { [ADMIN]: 'boss' } },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { cmd: [process.execPath, FIXTURE] },
    },
  });
  const api = (method: string, path: string) => fetch(`${hub.url}/jupyter/hub/api${path}`, { method, headers: { authorization: `token ${ADMIN}` } });
  if ((await api('POST', '/users/alice')).status !== 201) throw new Error('alice not created');
  const started = await api('POST', '/users/alice/server');
  if (started.status !== 201 && started.status !== 202) throw new Error(`start: ${started.status}`);
  await waitFor('alice to run', async () => ((await serverRecord(hub.natsUrl, 'alice'))?.state === 'running' ? true : undefined), 20_000, 100);
});

test.after.always(async () => {
  await hub?.stop();
});

test('subdomains under base_url: a server at its user\'s host under the prefix; redirects keep the prefix', async (t) => {
  const origin = (host: string) => `http://${host}:${port}`;
  t.is((await get('alice.hub.localhost', '/jupyter/user/alice/')).body.trim(), 'fixture for alice');
  const env = JSON.parse((await get('alice.hub.localhost', '/jupyter/user/alice/env')).body);
  t.like(env.jupyterhub, {
    JUPYTERHUB_HOST: origin('hub.localhost'), JUPYTERHUB_BASE_URL: '/jupyter/', JUPYTERHUB_SERVICE_PREFIX: '/jupyter/user/alice/',
    JUPYTERHUB_PUBLIC_URL: `${origin('alice.hub.localhost')}/jupyter/user/alice/`, JUPYTERHUB_PUBLIC_HUB_URL: `${origin('hub.localhost')}/jupyter/hub/`,
    JUPYTERHUB_OAUTH_CALLBACK_URL: `${origin('alice.hub.localhost')}/jupyter/user/alice/oauth_callback`,
  });
  const toAlice = await get('hub.localhost', '/jupyter/user/alice/tree?x=1');
  t.is(toAlice.status, 302);
  t.is(toAlice.location, `${origin('alice.hub.localhost')}/jupyter/user/alice/tree?x=1`);
  const toHub = await get('alice.hub.localhost', '/jupyter/hub/home');
  t.is(toHub.status, 302);
  t.is(toHub.location, `${origin('hub.localhost')}/jupyter/hub/home`);
  const notRunning = await get('bob.hub.localhost', '/jupyter/user/bob/');
  t.is(notRunning.status, 302);
  t.is(notRunning.location, `${origin('hub.localhost')}/jupyter/hub/user/bob/`);
  // outside the prefix on a user's host: nothing there
  t.is((await get('alice.hub.localhost', '/user/alice/')).status, 404);
  const model = await fetch(`${hub.url}/jupyter/hub/api/users/alice`, { headers: { authorization: `token ${ADMIN}` } }).then((r) => r.json()) as { servers: Record<string, { url: string }> };
  t.is(model.servers[''].url, `${origin('alice.hub.localhost')}/jupyter/user/alice/`);
});
