// Services: hub-managed ones are started with the seed's environment and restarted; the idle culler
// stops idle servers with a role of least privilege; a service with admin:users manages users.
import test from 'ava';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';

let hub: HubUnderTest;
let api: ApiCall;
const ADMIN = randomToken();
const MAKER = randomToken();
const work = mkdtempSync(join(tmpdir(), 'hub-svc-'));
const dump = join(work, 'env.json');

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: {
        api_tokens: { [ADMIN]: 'boss' },
        env_prefix_aliases: ['JUPYTERHUB_'],
        services: [
          { name: 'idle-culler', command: [process.execPath, join(REPO, 'dist/hub-services/idle-culler.js'), '--timeout=2', '--every=0.5'] },
          { name: 'envdump', command: [process.execPath, join(REPO, 'test/fixtures/env-service.mjs')], environment: { ENV_DUMP_FILE: dump, EXTRA: 'yes' }, cwd: work, url: 'http://127.0.0.1:1',
            timeout: 3600 }, // it never listens (it only writes its environment): the hub would stop once the wait for it ends
          { name: 'usermaker', api_token: MAKER },
        ],
        load_roles: [
          { name: 'idle-culler', scopes: ['list:users', 'read:users:activity', 'read:servers', 'delete:servers'], services: ['idle-culler'] },
          { name: 'user-maker', scopes: ['admin:users'], services: ['usermaker'] },
        ],
      },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { environment: { HUB_ACTIVITY_INTERVAL: '3600' } },
    },
  });
  api = apiClient(hub.url);
});
test.after.always(async () => {
  await hub?.stop();
  rmSync(work, { recursive: true, force: true });
});

test.serial('services: a hub-managed service gets the seed\'s environment, its cwd, and a working token', async (t) => {
  await waitFor('the service to start', async () => (existsSync(dump) ? true : undefined), 10_000);
  const { env, cwd } = JSON.parse(readFileSync(dump, 'utf8'));
  t.is(cwd, work);
  t.like(env, {
    HUB_SERVICE_NAME: 'envdump', HUB_API_URL: `http://127.0.0.1:${hub.port}/hub/api`, HUB_BASE_URL: '/', HUB_SERVICE_PREFIX: '/services/envdump/',
    HUB_SERVICE_URL: 'http://127.0.0.1:1', HUB_CLIENT_ID: 'service-envdump', HUB_OAUTH_CALLBACK_URL: '/services/envdump/oauth_callback', EXTRA: 'yes',
  });
  t.deepEqual(JSON.parse(env.HUB_OAUTH_ACCESS_SCOPES), ['access:services!service=envdump']);
  t.deepEqual(JSON.parse(env.HUB_OAUTH_SCOPES), ['access:services!service=envdump']);
  t.deepEqual(JSON.parse(env.HUB_OAUTH_CLIENT_ALLOWED_SCOPES), []);
  // Hub.env_prefix_aliases: programs written for the established hub find their variables
  for (const [name, value] of Object.entries(env).filter(([k]) => k.startsWith('HUB_'))) t.is(env[`JUPYTERHUB_${name.slice(4)}`], value, name);
  const me = await api('GET', '/user', { token: env.HUB_API_TOKEN });
  t.is(me.status, 200);
  t.like(me.body, { kind: 'service', name: 'envdump' });
});

test.serial('services: a hub-managed service that dies is started again', async (t) => {
  const before = JSON.parse(readFileSync(dump, 'utf8')).pid;
  t.is(hub.children()['service:envdump'], before);
  rmSync(dump);
  process.kill(before, 'SIGKILL');
  await waitFor('the service to be restarted', async () => (existsSync(dump) ? true : undefined), 10_000);
  t.not(JSON.parse(readFileSync(dump, 'utf8')).pid, before);
});

test.serial('services: a service with admin:users manages users and is not one itself', async (t) => {
  t.is((await api('POST', '/users', { token: MAKER, body: { usernames: ['made-by-service'] } })).status, 201);
  const names = (await api('GET', '/users', { token: ADMIN })).body.map((u: { name: string }) => u.name);
  t.true(names.includes('made-by-service'));
  t.false(names.includes('usermaker'));
  t.is((await api('GET', '/users/usermaker', { token: ADMIN })).status, 404);
  t.is((await api('POST', '/users/usermaker/server', { token: ADMIN })).status, 404, 'a service has no server');
});

test.serial('services: the idle culler stops a server idle past its timeout', async (t) => {
  await api('POST', '/users/sleepy', { token: ADMIN });
  t.is((await api('POST', '/users/sleepy/server', { token: ADMIN })).status, 201);
  await waitFor('the idle server to be culled', async () => {
    const servers = (await api('GET', '/users/sleepy', { token: ADMIN })).body.servers;
    return Object.keys(servers).length === 0 ? true : undefined;
  }, 15_000, 200);
  // the culler logs once its DELETE has answered, which can be just after the server is seen gone
  await waitFor('the culler to log it', async () => (/"event":"cull","user":"sleepy"/.test(hub.logs()) ? true : undefined), 5000);
});
