// Hub.extra_user_scopes (the established hub 6.0's): scopes every user holds besides `self`, through the `user` role.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { freePort, runHubCommand, startHub } from '../harness.js';
import { apiClient, randomToken } from './client.js';

test('extra_user_scopes: every user may list users and read one group; nothing more', async (t) => {
  const ADMIN = randomToken();
  const hub = await startHub({ config: { Hub: { api_tokens: { [ADMIN]: 'boss' }, extra_user_scopes: ['list:users', 'read:groups!group=class'] }, Authenticator: { admin_users: ['boss'] } } });
  try {
    const api = apiClient(hub.url);
    t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['ann', 'ben'] } })).status, 201);
    t.is((await api('POST', '/groups/class', { token: ADMIN, body: { users: ['ben'] } })).status, 201);
    t.is((await api('POST', '/groups/staff', { token: ADMIN })).status, 201);
    const made = await api('POST', '/users/ann/tokens', { token: ADMIN, body: {} });
    t.is(made.status, 201);
    const ann = made.body.token as string;

    const me = await api('GET', '/user', { token: ann });
    t.true(me.body.scopes.includes('list:users'), JSON.stringify(me.body.scopes));
    const list = await api('GET', '/users', { token: ann });
    t.is(list.status, 200);
    t.deepEqual(list.body.map((u: { name: string }) => u.name).sort(), ['ann', 'ben', 'boss']);
    t.is((await api('GET', '/groups/class', { token: ann })).status, 200);
    t.is((await api('GET', '/groups/staff', { token: ann })).status, 404, 'only the group the scope names');
    t.is((await api('GET', '/users/ben', { token: ann })).status, 200, 'list:users shows the name of another user');
    t.is((await api('DELETE', '/users/ben', { token: ann })).status, 403);
    const roles = await api('GET', '/users/ann', { token: ADMIN });
    t.deepEqual(roles.body.roles, ['user']);
  } finally {
    await hub.stop();
  }
});

test('extra_user_scopes: a scope that does not exist stops the start, naming it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-extra-scopes-'));
  try {
    const file = join(dir, 'hub.json');
    writeFileSync(file, JSON.stringify({ Hub: { data_dir: join(dir, 'data'), port: await freePort(), nats_port: await freePort(), extra_user_scopes: ['read:nothing'] } }));
    const r = await runHubCommand(['--config', file]);
    t.is(r.code, 2, r.stderr);
    t.regex(r.stderr, /Hub\.extra_user_scopes: "read:nothing"/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
