// Named (and default) servers as the established hub keeps them: stopped ones stay with their options until
// removed, PUT creates without starting, PATCH renames or changes a stopped one; the spawner's state is shown
// only to admin:server_state.
import test from 'ava';
import { startHub, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { FIXTURE } from './helpers.js';

const ADMIN = randomToken();
let hub: HubUnderTest;
let api: ApiCall;

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, allow_named_servers: true, named_server_limit_per_user: 2 },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { cmd: [process.execPath, FIXTURE] },
    },
  });
  api = apiClient(hub.url);
  await api('POST', '/users', { token: ADMIN, body: { usernames: ['nina', 'otto'] } });
});
test.after.always(async () => {
  await hub?.stop();
});

const user = async (name: string, query = '') => (await api('GET', `/users/${name}${query}`, { token: ADMIN })).body;

test.serial('named: a stopped server stays (stopped, with its options) until removed; include_stopped_servers shows it; a restart without a body reuses the options', async (t) => {
  t.is((await api('POST', '/users/nina/servers/lab', { token: ADMIN, body: { user_options: { size: 's' }, display_name: 'My lab' } })).status, 201);
  t.like((await user('nina')).servers.lab, { name: 'lab', display_name: 'My lab', ready: true, stopped: false });
  t.is((await api('DELETE', '/users/nina/servers/lab', { token: ADMIN })).status, 204);
  t.deepEqual((await user('nina')).servers, {}, 'active servers only, by default');
  const stopped = (await user('nina', '?include_stopped_servers')).servers.lab;
  t.like(stopped, { name: 'lab', display_name: 'My lab', ready: false, pending: null, stopped: true, url: '/user/nina/lab/', user_options: { size: 's' } });
  const listed = (await api('GET', '/users?include_stopped_servers', { token: ADMIN })).body.find((u: { name: string }) => u.name === 'nina');
  t.true(listed.servers.lab.stopped, 'the users list too');
  t.false('lab' in (await api('GET', '/users', { token: ADMIN })).body.find((u: { name: string }) => u.name === 'nina').servers);
  t.like((await api('GET', '/users/nina/servers/lab', { token: ADMIN })).body, { stopped: true });
  t.is((await api('DELETE', '/users/nina/servers/lab', { token: ADMIN })).status, 204, 'stopping a stopped server is fine');
  t.is((await api('GET', '/users/nina/servers/lab/progress', { token: ADMIN })).status, 400, 'a stopped server is not starting');

  t.is((await api('POST', '/users/nina/servers/lab', { token: ADMIN })).status, 201, 'restart without a body');
  t.like((await user('nina')).servers.lab, { ready: true, user_options: { size: 's' }, display_name: 'My lab' });
  const removed = await api('DELETE', '/users/nina/servers/lab', { token: ADMIN, body: { remove: true } });
  t.is(removed.status, 204);
  t.false('lab' in (await user('nina', '?include_stopped_servers')).servers);
  t.is((await api('GET', '/users/nina/servers/lab', { token: ADMIN })).status, 404);
  t.is((await api('DELETE', '/users/nina/servers/lab', { token: ADMIN })).status, 404, 'removed: no such server');

  // the default server keeps its options the same way, and cannot be removed
  t.is((await api('POST', '/users/otto/server', { token: ADMIN, body: { user_options: { x: 1 } } })).status, 201);
  t.is((await api('DELETE', '/users/otto/server', { token: ADMIN })).status, 204);
  t.is((await api('POST', '/users/otto/server', { token: ADMIN })).status, 201);
  t.deepEqual((await user('otto')).servers[''].user_options, { x: 1 });
  t.is((await api('DELETE', '/users/otto/server', { token: ADMIN, body: { remove: true } })).status, 400);
  t.is((await api('DELETE', '/users/otto/server', { token: ADMIN, body: { remove: 'yes' } })).status, 400);
  t.is((await api('DELETE', '/users/otto/server', { token: ADMIN })).status, 204);
});

test.serial('named: PUT creates a stopped server (409 when taken); PATCH renames or changes a stopped one (400 while running, 409 onto a taken name); stopped servers count toward the limit', async (t) => {
  const made = await api('PUT', '/users/nina/servers/one', { token: ADMIN, body: { display_name: 'One', user_options: { a: 1 } } });
  t.is(made.status, 201);
  t.like(made.body, { name: 'one', display_name: 'One', ready: false, pending: null, stopped: true, started: null, user_options: { a: 1 } });
  t.is((await api('PUT', '/users/nina/servers/one', { token: ADMIN })).status, 409);
  t.is((await api('PUT', '/users/nina/servers/Bad_Name', { token: ADMIN })).status, 400);

  const renamed = await api('PATCH', '/users/nina/servers/one', { token: ADMIN, body: { name: 'uno', display_name: 'Uno' } });
  t.is(renamed.status, 200);
  t.like(renamed.body, { name: 'uno', display_name: 'Uno', url: '/user/nina/uno/', user_options: { a: 1 } });
  t.is((await api('GET', '/users/nina/servers/one', { token: ADMIN })).status, 404);
  t.is((await api('PUT', '/users/nina/servers/two', { token: ADMIN })).status, 201);
  const third = await api('PUT', '/users/nina/servers/three', { token: ADMIN });
  t.is(third.status, 400);
  t.regex(third.body.message, /maximum of 2 named servers/);

  t.is((await api('POST', '/users/nina/servers/uno', { token: ADMIN })).status, 201);
  t.like((await user('nina')).servers.uno, { ready: true, user_options: { a: 1 }, display_name: 'Uno' });
  const busy = await api('PATCH', '/users/nina/servers/uno', { token: ADMIN, body: { display_name: 'x' } });
  t.is(busy.status, 400);
  t.regex(busy.body.message, /must be stopped/);
  t.is((await api('DELETE', '/users/nina/servers/uno', { token: ADMIN })).status, 204);
  t.is((await api('PATCH', '/users/nina/servers/uno', { token: ADMIN, body: { name: 'two' } })).status, 409);
  t.is((await api('PATCH', '/users/nina/servers/uno', { token: ADMIN, body: {} })).status, 400);
  t.is((await api('PATCH', '/users/nina/servers/uno', { token: ADMIN, body: { colour: 'red' } })).status, 400);
  t.is((await api('PATCH', '/users/nina/servers/uno', { token: ADMIN, body: { user_options: { a: 2 } } })).body.user_options.a, 2);
  t.is((await api('PATCH', '/users/nina/servers/nope', { token: ADMIN, body: { display_name: 'x' } })).status, 404);
  for (const n of ['uno', 'two']) t.is((await api('DELETE', `/users/nina/servers/${n}`, { token: ADMIN, body: { remove: true } })).status, 204);
  t.deepEqual((await user('nina', '?include_stopped_servers')).servers, {});
});

test.serial('named: the spawner\'s state is in the server model only for admin:server_state', async (t) => {
  const own = (await api('POST', '/users/nina/tokens', { token: ADMIN, body: {} })).body.token;
  t.is((await api('POST', '/users/nina/servers/st', { token: ADMIN })).status, 201);
  const asAdmin = (await api('GET', '/users/nina/servers/st', { token: ADMIN })).body;
  t.is(typeof asAdmin.state.pid, 'number', JSON.stringify(asAdmin));
  t.true((await user('nina')).servers.st.state.pid > 0);
  const asOwner = (await api('GET', '/users/nina/servers/st', { token: own })).body;
  t.is(asOwner.name, 'st');
  t.false('state' in asOwner);
  t.false('state' in (await api('GET', '/users/nina', { token: own })).body.servers.st);
  t.is((await api('DELETE', '/users/nina/servers/st', { token: ADMIN, body: { remove: true } })).status, 204);
});
