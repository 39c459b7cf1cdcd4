// Single-user servers: start, progress, stop, limits and failures, through the API.
import test from 'ava';
import { isAlive, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { Browser, formLogin } from '../auth/helpers.js';
import { FIXTURE, readProgress, serverRecord } from './helpers.js';

let hub: HubUnderTest;
let api: ApiCall;
const ADMIN = randomToken();

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, allow_named_servers: true, named_server_limit_per_user: 2, activity_resolution: 1, authenticator_class: 'dummy' },
      Authenticator: { admin_users: ['boss'] },
      DummyAuthenticator: { password: 'pw' },
      // One hub-wide command; the fixture's behaviour is chosen per user by this wrapper (crasher, silent, stubborn, slowpoke).
      Spawner: {
        cmd: [process.execPath, '-e', `process.env.FIXTURE_MODE = ({ crasher: 'exit', silent: 'never', stubborn: 'stubborn' })[process.env.HUB_USER] ?? ''; process.env.FIXTURE_DELAY_MS = process.env.HUB_USER === 'slowpoke' ? '4000' : '0'; await import(${JSON.stringify(FIXTURE)});`, '--input-type=module'],
        // a quick start must answer 201 on a machine loaded by the rest of the suite (2.5 s), a slow one 202 (4 s)
        start_timeout: 6, slow_spawn_timeout: 2.5, slow_stop_timeout: 3, stop_signal_timeout: 0.5,
      },
    },
  });
  api = apiClient(hub.url);
  const made = await api('POST', '/users', { token: ADMIN, body: { usernames: ['alice', 'slowpoke', 'crasher', 'silent', 'stubborn', 'envy', 'gone', 'victim'] } });
  if (made.status !== 201) throw new Error(`setup ${made.status}`);
});
test.after.always(async () => {
  await hub?.stop();
});

const servers = async (user: string) => (await api('GET', `/users/${user}`, { token: ADMIN })).body.servers;

test.serial('servers: a quick start is 201 and ready; the model is the seed\'s; a second start is 400; stop is 204 and the server is gone', async (t) => {
  const r = await api('POST', '/users/alice/server', { token: ADMIN });
  t.is(r.status, 201);
  const s = (await servers('alice'))[''];
  t.like(s, { name: '', ready: true, pending: null, url: '/user/alice/', progress_url: '/hub/api/users/alice/server/progress', user_options: {} });
  t.regex(s.started, /^\d{4}-\d\d-\d\dT/);
  t.regex(s.last_activity, /^\d{4}-\d\d-\d\dT/);
  const user = (await api('GET', '/users/alice', { token: ADMIN })).body;
  t.is(user.server, '/user/alice/');
  t.is(user.pending, null);
  const again = await api('POST', '/users/alice/servers/', { token: ADMIN });
  t.is(again.status, 400);
  t.regex(again.body.message, /already running/);
  const progress = await readProgress(`${hub.url}/hub/api/users/alice/servers//progress`, ADMIN);
  t.is(progress.contentType, 'text/event-stream');
  t.true(progress.ended);
  t.is(progress.events.length, 1, 'a ready server gets exactly one event');
  t.like(progress.events[0], { progress: 100, ready: true, url: '/user/alice/' });
  t.truthy(progress.events[0].html_message);
  t.is((await api('DELETE', '/users/alice/server', { token: ADMIN })).status, 204);
  t.deepEqual(await servers('alice'), {});
  t.is((await api('DELETE', '/users/alice/server', { token: ADMIN })).status, 204, 'stopping a stopped server is fine');
  t.is((await api('GET', '/users/alice/server/progress', { token: ADMIN })).status, 400);
});

test.serial('servers: a slow start is 202 pending spawn; progress goes 0, 50, ready, never backwards, also for a late subscriber', async (t) => {
  const started = await api('POST', '/users/slowpoke/servers/lab', { token: ADMIN, body: { user_options: { size: 'small' } } });
  t.is(started.status, 202);
  const s = (await servers('slowpoke')).lab;
  t.like(s, { name: 'lab', ready: false, pending: 'spawn', url: '/user/slowpoke/lab/', user_options: { size: 'small' } });
  t.is((await api('POST', '/users/slowpoke/servers/lab', { token: ADMIN })).status, 202, 'already starting → 202');
  const live = readProgress(`${hub.url}/hub/api/users/slowpoke/servers/lab/progress`, ADMIN);
  const p = await live;
  t.true(p.ended);
  t.deepEqual(p.events.map((e) => e.progress), [0, 50, 100]);
  t.true(p.events.every((e) => typeof e.message === 'string'));
  t.like(p.events.at(-1), { ready: true, url: '/user/slowpoke/lab/' });
  const late = await readProgress(`${hub.url}/hub/api/users/slowpoke/servers/lab/progress`, ADMIN);
  t.is(late.events.length, 1);
  t.is((await servers('slowpoke')).lab.ready, true);
  t.is((await api('DELETE', '/users/slowpoke/servers/lab', { token: ADMIN })).status, 204);
});

test.serial('servers: a server that exits at once fails cleanly: error, failed progress event, no server left', async (t) => {
  const r = await api('POST', '/users/crasher/server', { token: ADMIN });
  // the failure is the answer, unless a loaded machine took longer than slow_spawn_timeout to see it: then
  // the start answered 202 and the progress stream says it
  if (r.status !== 202) {
    t.is(r.status, 500);
    t.regex(r.body.message, /Spawn failed/);
  }
  const p = await readProgress(`${hub.url}/hub/api/users/crasher/server/progress`, ADMIN);
  t.like(p.events.at(-1), { failed: true });
  t.regex(p.events.at(-1).message, /Spawn failed/);
  t.true(p.ended);
  t.deepEqual(await servers('crasher'), {});
});

test.serial('servers: a server that never answers fails after start_timeout and its process is gone', async (t) => {
  const r = await api('POST', '/users/silent/server', { token: ADMIN });
  t.is(r.status, 202);
  const rec = await serverRecord(hub.natsUrl, 'silent');
  t.truthy(rec?.pid);
  const p = await readProgress(`${hub.url}/hub/api/users/silent/server/progress`, ADMIN);
  t.like(p.events.at(-1), { progress: 100, failed: true });
  t.regex(p.events.at(-1).message, /did not answer/);
  t.deepEqual(await servers('silent'), {});
  await waitFor('the silent process to be gone', async () => (isAlive(rec!.pid) ? undefined : true), 5000);
});

test.serial('servers: a server killed from outside stops in the hub; its progress stream and the home page say why until a start or a stop clears it', async (t) => {
  const b = new Browser();
  t.is((await formLogin(b, hub.url, 'victim', 'pw')).status, 302);
  const outcome = async () => /<p class="error" data-outcome>([^]*?)<\/p>/.exec((await b.get(`${hub.url}/hub/home`)).body)?.[1];
  const progress = () => readProgress(`${hub.url}/hub/api/users/victim/server/progress`, ADMIN);
  const killed = async () => {
    t.is((await api('POST', '/users/victim/server', { token: ADMIN })).status, 201);
    const rec = (await serverRecord(hub.natsUrl, 'victim'))!;
    process.kill(rec.pid, 'SIGKILL');
    await waitFor('the server to stop in the hub', async () => (Object.keys(await servers('victim')).length === 0 ? true : undefined), 5000);
  };
  await killed();
  const p = await progress();
  t.is(p.status, 200);
  t.true(p.ended);
  t.is(p.events.length, 1, 'one event: how it ended');
  t.like(p.events[0], { progress: 100, failed: true });
  t.regex(p.events[0].message, /stopped: the server was killed by SIGKILL/);
  t.regex((await outcome()) ?? '', /^Your server stopped: the server was killed by SIGKILL <span class="muted">\(just now\)<\/span>$/);
  t.is((await b.get(`${hub.url}/hub/home`)).body.match(/data-state="(\w+)"/)?.[1], 'stopped');

  // a new start forgets it; a stop someone asked for leaves nothing to tell: 400 as before
  t.is((await api('POST', '/users/victim/server', { token: ADMIN })).status, 201);
  t.is(await outcome(), undefined);
  t.is((await api('DELETE', '/users/victim/server', { token: ADMIN })).status, 204);
  t.is((await progress()).status, 400);
  t.is(await outcome(), undefined);

  // a stop asked for after it ended by itself: the person knows, so it is forgotten too
  await killed();
  t.is((await progress()).status, 200);
  t.is((await api('DELETE', '/users/victim/server', { token: ADMIN })).status, 204);
  const after = await api('GET', '/users/victim/server/progress', { token: ADMIN });
  t.is(after.status, 400);
  t.is(after.body.code, 'HUB_ERR_SERVER_NOT_STARTING');
  t.is(await outcome(), undefined);
});

test.serial('servers: stop escalates to SIGKILL for a server that ignores SIGINT and SIGTERM', async (t) => {
  t.is((await api('POST', '/users/stubborn/server', { token: ADMIN })).status, 201);
  const rec = await serverRecord(hub.natsUrl, 'stubborn');
  const r = await api('DELETE', '/users/stubborn/server', { token: ADMIN });
  t.is(r.status, 204);
  t.false(isAlive(rec!.pid), 'the stop answered only once the process was gone');
});

test.serial('servers: named servers are validated and limited; the user model follows', async (t) => {
  for (const bad of ['Lab', 'a--b', '-x', 'x'.repeat(31), '.x', 'a%2Fb', 'a%00b']) {
    const r = await api('POST', `/users/alice/servers/${bad}`, { token: ADMIN });
    t.is(r.status, 400, bad);
  }
  t.is((await api('POST', '/users/alice/servers/one', { token: ADMIN })).status, 201);
  t.is((await api('POST', '/users/alice/servers/two', { token: ADMIN })).status, 201);
  const third = await api('POST', '/users/alice/servers/three', { token: ADMIN });
  t.is(third.status, 400);
  t.regex(third.body.message, /maximum of 2 named servers/);
  t.deepEqual(Object.keys(await servers('alice')).sort(), ['one', 'two']);
  t.is((await api('GET', '/users/alice/servers/one', { token: ADMIN })).body.url, '/user/alice/one/');
  t.is((await api('DELETE', '/users/alice/servers/nope', { token: ADMIN })).status, 404);
  for (const n of ['one', 'two']) t.is((await api('DELETE', `/users/alice/servers/${n}`, { token: ADMIN })).status, 204);
});

test.serial('servers: the environment has what a server needs and no hub secrets', async (t) => {
  t.is((await api('POST', '/users/envy/server', { token: ADMIN })).status, 201);
  const rec = (await serverRecord(hub.natsUrl, 'envy'))!;
  const env = await (await fetch(`${rec.target}/user/envy/env`)).json();
  t.like(env.hub, {
    HUB_USER: 'envy', HUB_SERVER_NAME: '', HUB_CLIENT_ID: 'hub-user-envy', HUB_SERVICE_PREFIX: '/user/envy/', HUB_BASE_URL: '/',
    HUB_SERVICE_URL: `${rec.target}/user/envy/`, HUB_API_URL: `http://127.0.0.1:${hub.port}/hub/api`,
    HUB_ACTIVITY_URL: `http://127.0.0.1:${hub.port}/hub/api/users/envy/activity`, HUB_OAUTH_CALLBACK_URL: '/user/envy/oauth_callback',
  });
  t.deepEqual(JSON.parse(env.hub.HUB_OAUTH_ACCESS_SCOPES), ['access:servers!server=envy/', 'access:servers!user=envy']);
  t.false(env.names.includes('HUB_RESOLVED_CONFIG'), 'no path to the hub config');
  // the server's own token: post activity for itself, nothing else
  const token = env.hub.HUB_API_TOKEN;
  const me = await api('GET', '/user', { token });
  t.is(me.body.name, 'envy');
  t.true(me.body.scopes.includes('access:servers!server=envy/'));
  t.is((await api('GET', '/users', { token })).status, 403);
  t.is((await api('POST', '/users/alice/activity', { token, body: { last_activity: new Date().toISOString() } })).status, 404);
  const at = new Date().toISOString();
  t.is((await api('POST', '/users/envy/activity', { token, body: { last_activity: at, servers: { '': { last_activity: at } } } })).status, 200);
  t.is((await api('POST', '/users/envy/activity', { token, body: { servers: { nope: { last_activity: at } } } })).status, 400);
  await waitFor('server activity to be written', async () => ((await servers('envy'))[''].last_activity === at ? true : undefined), 4000);
  // the user's own activity is written by the auth actor on its own schedule
  await waitFor('user activity to be written', async () => ((await api('GET', '/users/envy', { token: ADMIN })).body.last_activity === at ? true : undefined), 4000);
  t.pass();
});

test.serial('servers: deleting a user stops their servers first', async (t) => {
  t.is((await api('POST', '/users/gone/server', { token: ADMIN })).status, 201);
  const rec = (await serverRecord(hub.natsUrl, 'gone'))!;
  t.is((await api('DELETE', '/users/gone', { token: ADMIN })).status, 204);
  t.false(isAlive(rec.pid));
  t.is(await serverRecord(hub.natsUrl, 'gone'), null);
});

test.serial('servers: state filters list users by their servers', async (t) => {
  t.true((await api('GET', '/users?state=ready', { token: ADMIN })).body.some((u: { name: string }) => u.name === 'envy'));
  t.false((await api('GET', '/users?state=ready', { token: ADMIN })).body.some((u: { name: string }) => u.name === 'alice'));
  t.false((await api('GET', '/users?state=inactive', { token: ADMIN })).body.some((u: { name: string }) => u.name === 'envy'));
  t.true((await api('GET', '/users?state=inactive', { token: ADMIN })).body.some((u: { name: string }) => u.name === 'alice'));
});
