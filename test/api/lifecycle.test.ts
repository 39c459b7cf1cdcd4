// Users, groups and tokens over their life: pagination, names, expiry, revocation, role changes, restarts.
import test from 'ava';
import { runHubCommand, sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from './client.js';

let hub: HubUnderTest;
let api: ApiCall;
const ADMIN = randomToken();
const PAGED = { accept: 'application/hub-pagination+json' };

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: {
        api_tokens: { [ADMIN]: 'boss' },
        services: [{ name: 'usermaker', api_token: randomToken() }],
        load_roles: [
          { name: 'staff-readers', scopes: ['read:users', 'list:users'], groups: ['staff'] },
          { name: 'user-admins', scopes: ['admin:users', 'list:users'], users: ['helper'] },
        ],
      },
      Authenticator: { admin_users: ['boss'] },
    },
  });
  api = apiClient(hub.url);
});
test.after.always(async () => {
  await hub?.stop();
});

const tokenFor = async (user: string, body: unknown = {}) => {
  const r = await api('POST', `/users/${user}/tokens`, { token: ADMIN, body });
  if (r.status !== 201) throw new Error(`token for ${user}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.token as string;
};

test.serial('users: a walk over 1,000 users by next.url visits each exactly once', async (t) => {
  const names = Array.from({ length: 1000 }, (_, i) => `walker${String(i).padStart(4, '0')}`);
  for (let i = 0; i < names.length; i += 250) {
    const r = await api('POST', '/users', { token: ADMIN, body: { usernames: names.slice(i, i + 250) } });
    t.is(r.status, 201);
  }
  const seen = new Map<string, number>();
  let url: string | null = `${hub.url}/hub/api/users?limit=37`;
  let pages = 0;
  while (url && pages < 100) {
    const r = await fetch(url, { headers: { ...PAGED, authorization: `token ${ADMIN}` } });
    t.is(r.status, 200);
    const body = await r.json();
    for (const u of body.items) seen.set(u.name, (seen.get(u.name) ?? 0) + 1);
    t.true(body._pagination.total >= 1000);
    url = body._pagination.next?.url ?? null;
    pages++;
  }
  for (const n of names) t.is(seen.get(n), 1, n);
  t.is(pages, Math.ceil(seen.size / 37));
  // without the Accept header: a plain array, at most the maximum page
  const plain = await api('GET', '/users', { token: ADMIN });
  t.true(Array.isArray(plain.body));
  t.is(plain.body.length, 200);
});

test.serial('users: name_filter finds names by a case-insensitive substring, pages the matches, follows renames', async (t) => {
  const list = async (q: string) => {
    const r = await api('GET', `/users?${q}`, { token: ADMIN, headers: PAGED });
    t.is(r.status, 200, q);
    return { names: r.body.items.map((u: { name: string }) => u.name) as string[], total: r.body._pagination.total as number, next: r.body._pagination.next };
  };
  t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['émile-filter', "o'brien-filter"] } })).status, 201);
  const hundred = await list('name_filter=walker00&limit=30');
  t.is(hundred.total, 100);
  t.deepEqual(hundred.names, Array.from({ length: 30 }, (_, i) => `walker${String(i).padStart(4, '0')}`));
  t.true(hundred.next.url.includes('name_filter=walker00'));
  const last = await list('name_filter=WALKER00&offset=90&limit=30');
  t.deepEqual(last.names, Array.from({ length: 10 }, (_, i) => `walker00${90 + i}`));
  t.is(last.next, null);
  t.deepEqual((await list(`name_filter=${encodeURIComponent('ÉMILE')}`)).names, ['émile-filter']);
  t.deepEqual((await list(`name_filter=${encodeURIComponent("o'b")}`)).names, ["o'brien-filter"]);
  t.deepEqual((await list('name_filter=%25')).names, [], '% is a character, not a wildcard');
  // with the state filter the match goes through SQL (inactive: nobody here has a server)
  const inactive = await list('name_filter=walker099&state=inactive');
  t.is(inactive.total, 10);
  // a rename and a delete show up in the next search (the cached match is dropped)
  t.is((await api('PATCH', '/users/walker0991', { token: ADMIN, body: { name: 'renamed-walker' } })).status, 200);
  t.is((await api('DELETE', '/users/walker0992', { token: ADMIN })).status, 204);
  const after = await list('name_filter=walker099');
  t.is(after.total, 8);
  t.false(after.names.includes('walker0991'));
  t.deepEqual((await list('name_filter=renamed-walk')).names, ['renamed-walker']);
  t.deepEqual((await list('name_filter=')).total, (await list('')).total, 'an empty filter is no filter');
});

test.serial('users: nonsense offset and limit are 400, never 500; limits are clamped', async (t) => {
  for (const q of ['offset=abc', 'limit=1.5', 'limit=ten', 'offset=1e3']) {
    const r = await api('GET', `/users?${q}`, { token: ADMIN, headers: PAGED });
    t.is(r.status, 400, q);
  }
  const big = await api('GET', '/users?limit=100000', { token: ADMIN, headers: PAGED });
  t.is(big.body._pagination.limit, 200);
  const zero = await api('GET', '/users?limit=0', { token: ADMIN, headers: PAGED });
  t.is(zero.body._pagination.limit, 1);
  const past = await api('GET', '/users?offset=999999', { token: ADMIN, headers: PAGED });
  t.deepEqual(past.body.items, []);
  t.is(past.body._pagination.next, null);
  t.is((await api('GET', '/users?state=bogus', { token: ADMIN })).status, 400);
});

test.serial('users: bad names are refused with the reason', async (t) => {
  for (const name of ['a%2Fb', '%01ctl', '%20lead', 'x'.repeat(300)]) {
    const r = await api('POST', `/users/${name}`, { token: ADMIN });
    t.is(r.status, 400, name);
    t.regex(r.body.message, /Invalid user name/);
  }
  const bulk = await api('POST', '/users', { token: ADMIN, body: { usernames: ['fine', 'bad/name'] } });
  t.is(bulk.status, 400);
  t.is((await api('GET', '/users/fine', { token: ADMIN })).status, 404, 'nothing was created');
  t.is((await api('POST', '/groups/bad%2Fgroup', { token: ADMIN })).status, 400);
});

test.serial('users: create, repeat, bulk conflict, rename, delete, and not deleting yourself', async (t) => {
  t.is((await api('POST', '/users/carol', { token: ADMIN })).status, 201);
  t.is((await api('POST', '/users/carol', { token: ADMIN })).status, 409);
  t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['carol'] } })).status, 409);
  const bulk = await api('POST', '/users', { token: ADMIN, body: { usernames: ['carol', 'dan'] } });
  t.is(bulk.status, 201);
  t.deepEqual(bulk.body.map((u: { name: string }) => u.name), ['dan']);
  const renamed = await api('PATCH', '/users/dan', { token: ADMIN, body: { name: 'daniel' } });
  t.is(renamed.status, 200);
  t.is(renamed.body.name, 'daniel');
  t.is((await api('GET', '/users/dan', { token: ADMIN })).status, 404);
  t.is((await api('PATCH', '/users/daniel', { token: ADMIN, body: { name: 'carol' } })).status, 400);
  t.is((await api('PATCH', '/users/daniel', { token: ADMIN, body: { groups: ['x'] } })).status, 400);
  t.is((await api('DELETE', '/users/boss', { token: ADMIN })).status, 400);
  t.is((await api('DELETE', '/users/daniel', { token: ADMIN })).status, 204);
  t.is((await api('DELETE', '/users/daniel', { token: ADMIN })).status, 404);
});

test.serial('tokens: the secret appears only at creation; the model has the documented fields', async (t) => {
  await api('POST', '/users/erin', { token: ADMIN });
  const created = await api('POST', '/users/erin/tokens', { token: ADMIN, body: { note: 'for a test', expires_in: 3600 } });
  t.is(created.status, 201);
  t.regex(created.body.token, /^[0-9a-f]{32}$/);
  for (const key of ['id', 'kind', 'note', 'scopes', 'created', 'last_activity', 'expires_at', 'session_id', 'oauth_client', 'user']) t.true(key in created.body, key);
  const listed = await api('GET', '/users/erin/tokens', { token: ADMIN });
  t.is(listed.body.api_tokens.length, 1);
  t.false('token' in listed.body.api_tokens[0]);
  const one = await api('GET', `/users/erin/tokens/${created.body.id}`, { token: ADMIN });
  t.is(one.body.note, 'for a test');
  t.false(JSON.stringify(one.body).includes(created.body.token));
  t.is((await api('GET', '/users/erin/tokens/zzz', { token: ADMIN })).status, 404);
});

test.serial('tokens: header forms and ?token= all authenticate; revocation is immediate', async (t) => {
  await api('POST', '/users/frank', { token: ADMIN });
  const secret = await tokenFor('frank');
  for (const headers of [{ authorization: `token ${secret}` }, { authorization: `Bearer ${secret}` }, { authorization: `TOKEN   ${secret}` }]) {
    t.is((await fetch(`${hub.url}/hub/api/user`, { headers })).status, 200, JSON.stringify(headers).slice(0, 20));
  }
  t.is((await fetch(`${hub.url}/hub/api/user?token=${secret}`)).status, 200);
  t.is((await fetch(`${hub.url}/hub/api/user`, { headers: { authorization: `token ${secret}x` } })).status, 403);
  const id = (await api('GET', '/user', { token: secret })).body.token_id;
  t.is((await api('DELETE', `/users/frank/tokens/${id}`, { token: secret })).status, 204, 'a token may revoke itself');
  t.is((await api('GET', '/user', { token: secret })).status, 403, 'revoked at once');
});

test.serial('tokens: expiry is honoured', async (t) => {
  await api('POST', '/users/gina', { token: ADMIN });
  const secret = await tokenFor('gina', { expires_in: 1 });
  t.is((await api('GET', '/user', { token: secret })).status, 200);
  await sleep(1300);
  t.is((await api('GET', '/user', { token: secret })).status, 403);
});

test.serial('tokens: asking for a scope the owner lacks is a 400 naming it; a requester cannot mint beyond itself', async (t) => {
  await api('POST', '/users/hank', { token: ADMIN });
  const hank = await tokenFor('hank');
  const r = await api('POST', '/users/hank/tokens', { token: hank, body: { scopes: ['read:users!user=hank', 'admin:users'] } });
  t.is(r.status, 400);
  t.regex(r.body.message, /admin:users/);
  t.is((await api('POST', '/users/hank/tokens', { token: hank, body: { scopes: ['no-such-scope'] } })).status, 400);
  t.is((await api('POST', '/users/hank/tokens', { token: hank, body: { scopes: [], roles: [] } })).status, 400);
  const narrow = await api('POST', '/users/hank/tokens', { token: hank, body: { scopes: ['read:users:name!user=hank'] } });
  t.is(narrow.status, 201);
  t.is((await api('POST', '/users/hank/tokens', { token: narrow.body.token, body: {} })).status, 403, 'a token without `tokens` cannot make tokens');
});

test.serial('scopes: admin:users cannot raise anyone to admin, itself included', async (t) => {
  await api('POST', '/users', { token: ADMIN, body: { usernames: ['helper', 'ivy'] } });
  const helper = await tokenFor('helper');
  const made = await api('POST', '/users', { token: helper, body: { usernames: ['made-by-helper'] } });
  t.is(made.status, 201, 'admin:users may create users');
  t.is((await api('POST', '/users', { token: helper, body: { usernames: ['would-be-admin'], admin: true } })).status, 403);
  t.is((await api('PATCH', '/users/helper', { token: helper, body: { admin: true } })).status, 403);
  t.is((await api('PATCH', '/users/ivy', { token: helper, body: { admin: true } })).status, 403);
  t.is((await api('PATCH', '/users/boss', { token: helper, body: { name: 'boss2' } })).status, 403, 'cannot modify an admin');
  t.is((await api('GET', '/users/helper', { token: ADMIN })).body.admin, false);
});

test.serial('scopes: a token follows its owner\'s group roles as they change', async (t) => {
  await api('POST', '/users', { token: ADMIN, body: { usernames: ['jill', 'kim'] } });
  const jill = await tokenFor('jill');
  t.is((await api('GET', '/users/kim', { token: jill })).status, 404);
  t.is((await api('POST', '/groups/staff', { token: ADMIN, body: { users: ['jill'] } })).status, 201);
  await waitFor('jill to gain read:users via staff', async () => ((await api('GET', '/users/kim', { token: jill })).status === 200 ? true : undefined), 2000);
  const listed = await api('GET', '/users', { token: jill });
  t.is(listed.status, 200);
  t.is((await api('DELETE', '/groups/staff/users', { token: ADMIN, body: { users: ['jill'] } })).status, 200);
  await waitFor('jill to lose it again', async () => ((await api('GET', '/users/kim', { token: jill })).status === 404 ? true : undefined), 2000);
  t.pass();
});

test.serial('groups: members, properties, delete', async (t) => {
  await api('POST', '/users', { token: ADMIN, body: { usernames: ['lea', 'max'] } });
  const g = await api('POST', '/groups', { token: ADMIN, body: { groups: ['course-a', 'course-b'], users: ['lea'] } });
  t.is(g.status, 201);
  t.deepEqual(g.body.map((x: { name: string }) => x.name), ['course-a', 'course-b']);
  t.is((await api('POST', '/groups/course-a', { token: ADMIN })).status, 409);
  t.is((await api('POST', '/groups/course-a/users', { token: ADMIN, body: { name: 'course-a', users: ['nobody-here'] } })).status, 400);
  const added = await api('POST', '/groups/course-a/users', { token: ADMIN, body: { name: 'course-a', users: ['max'] } });
  t.deepEqual(added.body.users, ['lea', 'max']);
  t.deepEqual((await api('GET', '/users/max', { token: ADMIN })).body.groups, ['course-a']);
  const props = await api('PUT', '/groups/course-a/properties', { token: ADMIN, body: { term: 'autumn' } });
  t.deepEqual(props.body.properties, { term: 'autumn' });
  t.is((await api('PUT', '/groups/course-a/properties', { token: ADMIN, body: '[1]' })).status, 400);
  const paged = await api('GET', '/groups?limit=1', { token: ADMIN, headers: PAGED });
  t.is(paged.body.items.length, 1);
  t.truthy(paged.body._pagination.next);
  t.is((await api('DELETE', '/groups/course-a', { token: ADMIN })).status, 204);
  t.deepEqual((await api('GET', '/users/max', { token: ADMIN })).body.groups, []);
  t.is((await api('GET', '/groups/course-a', { token: ADMIN })).status, 404);
});

test.serial('cli: hub token prints a token usable at once; an unknown user is an error', async (t) => {
  await api('POST', '/users/nora', { token: ADMIN });
  const r = await runHubCommand(['token', 'nora', '--config', `${hub.dataDir}/hub.json`]);
  t.is(r.code, 0, r.stderr);
  const secret = r.stdout.trim();
  const me = await api('GET', '/user', { token: secret });
  t.is(me.status, 200);
  t.is(me.body.name, 'nora');
  const bad = await runHubCommand(['token', 'nobody-at-all', '--config', `${hub.dataDir}/hub.json`]);
  t.is(bad.code, 1);
  t.regex(bad.stderr, /No such user: nobody-at-all/);
});

test.serial('restart: kill -9 of the tokens and auth actors loses no user, group, token or role', async (t) => {
  await api('POST', '/users/olga', { token: ADMIN });
  await api('POST', '/groups/staff/users', { token: ADMIN, body: { users: ['olga'] } });
  const olga = await tokenFor('olga');
  const before = await api('GET', '/users/olga', { token: ADMIN });
  for (const actor of ['tokens', 'auth']) {
    const pid = hub.children()[actor]!;
    process.kill(pid, 'SIGKILL');
    await waitFor(`${actor} to come back`, async () => (hub.children()[actor] !== pid ? true : undefined), 15_000);
  }
  await waitFor('health', async () => ((await fetch(`${hub.url}/hub/health`)).status === 200 ? true : undefined), 15_000);
  const after = await api('GET', '/users/olga', { token: ADMIN });
  t.deepEqual(after.body, before.body);
  t.deepEqual(after.body.roles.sort(), ['staff-readers', 'user']);
  const me = await api('GET', '/user', { token: olga });
  t.is(me.status, 200);
  t.true(me.body.scopes.includes('read:users'), 'the group role still applies to the token');
  t.is((await api('GET', '/user', { token: ADMIN })).status, 200, 'the configured token still works');
});

test('config: a service token of 8 characters or a duplicate one stops the hub, naming the service', async (t) => {
  const short = await runHubCommand(['--Hub.services=[{"name":"tiny","api_token":"12345678"}]']);
  t.is(short.code, 2);
  t.regex(short.stderr, /Hub\.services "tiny"\.api_token: must be longer than 8 characters/);
  const twice = await runHubCommand(['--Hub.services=[{"name":"a","api_token":"samesame-123"},{"name":"b","api_token":"samesame-123"}]']);
  t.is(twice.code, 2);
  t.regex(twice.stderr, /Hub\.services "b"\.api_token: the same token as service "a"/);
});
