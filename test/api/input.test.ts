// A client's mistake is a 400 that names it, never a 500, and changes nothing: token lifetimes no date can
// hold, JSON nested thousands deep, bytes that are not UTF-8. And what a client reports or uses shows at
// once: activity on every gateway, a token's last use, list orders, pages of services.
import test from 'ava';
import { createGrpcClient } from '../../shared/grpc.js';
import { grpcSocketPath } from '../../shared/paths.js';
import { startHub, waitFor, type HubUnderTest } from '../harness.js';
import { rawRequest, startExtraGateway } from '../proxy/helpers.js';
import { apiClient, randomToken, type ApiCall, type ApiResult } from './client.js';

let hub: HubUnderTest;
let second: Awaited<ReturnType<typeof startExtraGateway>>;
let api: ApiCall;
let api2: ApiCall;
const ADMIN = randomToken();
const PAGED = { accept: 'application/hub-pagination+json' };
const DEPTH = 64; // Hub.max_json_depth's default

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: {
        api_tokens: { [ADMIN]: 'boss' }, cache_max_age: 3600,
        services: [{ name: 'svc-a', api_token: randomToken() }, { name: 'svc-b', api_token: randomToken() }, { name: 'svc-c', api_token: randomToken() }],
        load_roles: [{ name: 'crew-lister', scopes: ['list:users!group=crew', 'read:users!group=crew'], users: ['lister'] }],
      },
      Authenticator: { admin_users: ['boss'] },
    },
  });
  second = await startExtraGateway(hub.dataDir);
  api = apiClient(hub.url);
  api2 = apiClient(second.url);
});
test.after.always(async () => {
  second?.proc.kill('SIGTERM');
  await hub?.stop();
});

/** A refusal as the API promises it: the status, and a JSON body {status, message} whose message names `about`. */
function refused(t: any, r: ApiResult, status: number, about: RegExp): void {
  t.is(r.status, status, JSON.stringify(r.body));
  t.is(r.body?.status, status);
  t.regex(String(r.body?.message), about);
}

const deep = (n: number, open = '[', close = ']', inner = '1') => open.repeat(n) + inner + close.repeat(n);

test.serial('tokens: an expires_in no date can hold, negative, fractional or not a number is a 400 naming it; nothing is created', async (t) => {
  await api('POST', '/users/tia', { token: ADMIN });
  const before = (await api('GET', '/users/tia/tokens', { token: ADMIN })).body.api_tokens.length;
  for (const value of [8.7e12, 1e13, 2 ** 53, 1e300, -1, -1e300, 1.5, '3600', true, [], {}]) {
    const r = await api('POST', '/users/tia/tokens', { token: ADMIN, body: { expires_in: value } });
    refused(t, r, 400, /expires_in/);
  }
  // a body where the number is written as such, beyond what a double holds exactly
  refused(t, await api('POST', '/users/tia/tokens', { token: ADMIN, body: '{"expires_in": 1e400}' }), 400, /expires_in/);
  t.is((await api('GET', '/users/tia/tokens', { token: ADMIN })).body.api_tokens.length, before);
  // what is accepted: whole seconds up to the last day a four-digit year has; 0 and null mean never
  const latest = Math.floor((Date.UTC(9999, 11, 31) - Date.now()) / 1000);
  const far = await api('POST', '/users/tia/tokens', { token: ADMIN, body: { expires_in: latest } });
  t.is(far.status, 201);
  t.regex(far.body.expires_at, /^9999-12-3/);
  const hour = await api('POST', '/users/tia/tokens', { token: ADMIN, body: { expires_in: 3600 } });
  t.true(Math.abs(Date.parse(hour.body.expires_at) - Date.now() - 3_600_000) < 60_000);
  for (const never of [0, null]) t.is((await api('POST', '/users/tia/tokens', { token: ADMIN, body: { expires_in: never } })).body.expires_at, null);
});

test.serial('json: nesting past the limit is a 400 wherever a body is read; the hub stays up and nothing changes', async (t) => {
  await api('POST', '/groups/deep', { token: ADMIN });
  await api('PUT', '/groups/deep/properties', { token: ADMIN, body: { kept: true } });
  await api('POST', '/users/dana', { token: ADMIN });
  const bodies = [
    deep(5000), // 10 KB of [[[[...]]]]
    deep(3000, '{"a":', '}'),
    `{"user_options": ${deep(DEPTH)}}`,
    `{"usernames": ["x"], "admin": ${deep(DEPTH + 1)}}`,
  ];
  const targets: [string, string][] = [
    ['PUT', '/groups/deep/properties'], ['POST', '/users/dana/server'], ['POST', '/users/dana/servers/'], ['POST', '/users'],
    ['POST', '/users/dana/activity'], ['POST', '/users/dana/tokens'], ['PATCH', '/users/dana'], ['POST', '/groups/deep/users'],
    ['PATCH', '/proxy'], ['PUT', '/users/dana/password'],
  ];
  for (const body of bodies) {
    for (const [method, path] of targets) refused(t, await api(method, path, { token: ADMIN, body }), 400, /deeper than the limit of 64/);
  }
  t.is((await fetch(`${hub.url}/hub/health`)).status, 200);
  t.deepEqual((await api('GET', '/groups/deep', { token: ADMIN })).body.properties, { kept: true });
  const dana = await api('GET', '/users/dana', { token: ADMIN });
  t.deepEqual(dana.body.servers, {});
  t.is((await api('GET', '/users/x', { token: ADMIN })).status, 404);
  // at the limit it is an ordinary body
  const atLimit = await api('PUT', '/groups/deep/properties', { token: ADMIN, body: `{"p": ${deep(DEPTH - 1)}}` });
  t.is(atLimit.status, 200);
  t.is(JSON.stringify(atLimit.body.properties), `{"p":${deep(DEPTH - 1)}}`);
});

test.serial('json: the auth and spawner actors bound what they are sent too, whoever sends it', async (t) => {
  const auth = createGrpcClient('auth', grpcSocketPath(hub.dataDir, 'auth'), 5000);
  const spawner = createGrpcClient('spawner', grpcSocketPath(hub.dataDir, 'spawner'), 5000);
  try {
    const props = await t.throwsAsync(auth.setGroupProperties({ name: 'deep', properties_json: deep(100_000), by: 'test' }));
    t.is((props as any).status, 400);
    t.regex(props!.message, /Group properties nests .* deeper than the limit/);
    const options = await t.throwsAsync(spawner.startServer({ user: 'dana', name: '', user_options_json: `{"a": ${deep(100_000)}}`, by: 'test' }));
    t.is((options as any).status, 400);
    t.regex(options!.message, /user_options nests/);
    t.deepEqual((await api('GET', '/users/dana', { token: ADMIN })).body.servers, {});
  } finally {
    auth.close();
    spawner.close();
  }
});

test.serial('utf-8: a body, path or query that is not UTF-8 is a 400, never altered into U+FFFD', async (t) => {
  const names = async () => (await api('GET', '/users', { token: ADMIN })).body.map((u: any) => u.name).sort();
  const before = await names();
  const auth = { authorization: `token ${ADMIN}`, 'content-type': 'application/json' };
  const badBody = Buffer.concat([Buffer.from('{"usernames": ["'), Buffer.from([0xff, 0xfe]), Buffer.from('"]}')]);
  const r1 = await rawRequest(hub.port, 'POST', '/hub/api/users', { ...auth, 'content-length': String(badBody.length) }, badBody);
  t.is(r1.status, 400);
  t.deepEqual(JSON.parse(r1.body.toString()), { status: 400, message: 'Request body is not valid UTF-8', code: 'HUB_ERR_REQUEST_ENCODING' });
  // an overlong encoding and a lone surrogate are not UTF-8 either
  for (const bytes of [[0xc0, 0xaf], [0xed, 0xa0, 0x80]]) {
    const b = Buffer.concat([Buffer.from('{"usernames": ["a'), Buffer.from(bytes), Buffer.from('"]}')]);
    t.is((await rawRequest(hub.port, 'POST', '/hub/api/users', { ...auth, 'content-length': String(b.length) }, b)).status, 400);
  }
  for (const path of ['/hub/api/users/%FF%FE', '/hub/api/users/%C3', '/hub/api/users/a%zz', '/hub/api/users/\xff\xfe', '/hub/api/users?sort=%FF', '/hub/api/users?x=\xff']) {
    const r = await rawRequest(hub.port, 'POST', path, auth);
    t.is(r.status, 400, path);
    t.regex(JSON.parse(r.body.toString()).message, /(path|Query string).*(UTF-8|percent)/, path);
  }
  t.deepEqual(await names(), before);
  // UTF-8 itself is welcome, percent-encoded or not
  t.is((await rawRequest(hub.port, 'POST', '/hub/api/users/%C3%A9mile', auth)).status, 201);
  const raw = Buffer.from('{"usernames": ["zoë"]}');
  t.is((await rawRequest(hub.port, 'POST', '/hub/api/users', { ...auth, 'content-length': String(raw.length) }, raw)).status, 201);
  t.deepEqual(await names(), [...before, 'zoë', 'émile'].sort());
  // the login form too: a page, not a changed name
  const form = Buffer.concat([Buffer.from('username=a'), Buffer.from([0xff]), Buffer.from('&password=x')]);
  const page = await rawRequest(hub.port, 'POST', '/hub/login', { 'content-type': 'application/x-www-form-urlencoded', accept: 'text/html', 'content-length': String(form.length) }, form);
  t.is(page.status, 400);
  t.regex(page.body.toString(), /not valid UTF-8/);
});

test.serial('activity: a report shows in the user model at once on this gateway and within a moment on another', async (t) => {
  await api('POST', '/users/ada', { token: ADMIN });
  // both gateways hold ada's model in their caches (cache_max_age is an hour)
  t.is((await api('GET', '/users/ada', { token: ADMIN })).body.last_activity, null);
  t.is((await api2('GET', '/users/ada', { token: ADMIN })).body.last_activity, null);
  const at = new Date(Date.now() - 5000).toISOString();
  t.is((await api('POST', '/users/ada/activity', { token: ADMIN, body: { last_activity: at } })).status, 200);
  t.is((await api('GET', '/users/ada', { token: ADMIN })).body.last_activity, at);
  const t0 = Date.now();
  await waitFor('the other gateway to show the activity', async () => ((await api2('GET', '/users/ada', { token: ADMIN })).body.last_activity === at ? true : undefined), 2000, 20);
  t.log(`seen on the other gateway after ${Date.now() - t0} ms`);
  // older reports do not move it back
  await api('POST', '/users/ada/activity', { token: ADMIN, body: { last_activity: new Date(Date.now() - 60_000).toISOString() } });
  t.is((await api('GET', '/users/ada', { token: ADMIN })).body.last_activity, at);
  // and the list order knows it at once
  const first = await api('GET', '/users?sort=-last_activity&limit=1', { token: ADMIN });
  t.is(first.body[0].name, 'ada');
});

test.serial('tokens: a used token shows its last_activity within seconds', async (t) => {
  await api('POST', '/users/ty', { token: ADMIN });
  const created = await api('POST', '/users/ty/tokens', { token: ADMIN, body: { note: 'watched' } });
  t.is(created.body.last_activity, null);
  const usedAt = Date.now();
  t.is((await api2('GET', '/user', { token: created.body.token })).status, 200);
  const t0 = Date.now();
  const seen = await waitFor('the token to show its use', async () => {
    const m = await api('GET', `/users/ty/tokens/${created.body.id}`, { token: ADMIN });
    return m.body.last_activity ?? undefined;
  }, 5000, 100);
  t.log(`last_activity visible after ${Date.now() - t0} ms`);
  t.true(Math.abs(Date.parse(seen) - usedAt) < 2000, seen);
  const listed = (await api('GET', '/users/ty/tokens', { token: ADMIN })).body.api_tokens.find((x: any) => x.id === created.body.id);
  t.is(listed.last_activity, seen);
});

test.serial('users: sort by id, name and last_activity, either way, is consistent across offset/limit pages; a bad sort is a 400', async (t) => {
  const crew = ['sx-carl', 'sx-anna', 'sx-dora', 'sx-bert', 'sx-emil'];
  t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: crew } })).status, 201);
  await api('POST', '/groups/crew', { token: ADMIN, body: { users: crew } });
  const base = Date.now() - 100_000;
  // activity: dora oldest, then anna, then carl; bert and emil never active
  for (const [name, ms] of [['sx-dora', 1000], ['sx-anna', 2000], ['sx-carl', 3000]] as const) {
    await api('POST', `/users/${name}/activity`, { token: ADMIN, body: { last_activity: new Date(base + ms).toISOString() } });
  }
  await api('POST', '/users/lister', { token: ADMIN });
  const lister = (await api('POST', '/users/lister/tokens', { token: ADMIN, body: {} })).body.token;
  const all = async (sort: string, token: string): Promise<string[]> => {
    const out: string[] = [];
    for (let offset = 0; offset < 1000; offset += 2) {
      const r = await api('GET', `/users?sort=${encodeURIComponent(sort)}&offset=${offset}&limit=2`, { token, headers: PAGED });
      t.is(r.status, 200);
      out.push(...r.body.items.map((u: any) => u.name));
      if (!r.body._pagination.next) break;
    }
    return out.filter((n) => n.startsWith('sx-'));
  };
  const expected: Record<string, string[]> = {
    'id': crew, '-id': [...crew].reverse(),
    'name': ['sx-anna', 'sx-bert', 'sx-carl', 'sx-dora', 'sx-emil'], '-name': ['sx-emil', 'sx-dora', 'sx-carl', 'sx-bert', 'sx-anna'],
    // never active first ascending, last descending
    'last_activity': ['sx-bert', 'sx-emil', 'sx-dora', 'sx-anna', 'sx-carl'], '-last_activity': ['sx-carl', 'sx-anna', 'sx-dora', 'sx-emil', 'sx-bert'],
  };
  for (const [sort, names] of Object.entries(expected)) {
    t.deepEqual(await all(sort, ADMIN), names, `${sort} (all users, index pages)`);
    t.deepEqual(await all(sort, lister), names, `${sort} (filtered list)`);
  }
  // a rename moves a user in the name order
  await api('PATCH', '/users/sx-anna', { token: ADMIN, body: { name: 'sx-zora' } });
  t.deepEqual((await all('-name', ADMIN)).slice(0, 2), ['sx-zora', 'sx-emil']);
  for (const bad of ['created', '--id', 'Name', 'name ']) {
    refused(t, await api('GET', `/users?sort=${encodeURIComponent(bad)}`, { token: ADMIN }), 400, /sort must be 'id', 'name', or 'last_activity'/);
  }
  t.is((await api('GET', '/users?sort=', { token: ADMIN })).status, 400); // as the established hub: '' is not a sort
});

test.serial('services: offset and limit page the object of services, with the envelope on request', async (t) => {
  const plain = await api('GET', '/services', { token: ADMIN });
  t.deepEqual(Object.keys(plain.body), ['svc-a', 'svc-b', 'svc-c']);
  t.deepEqual(Object.keys((await api('GET', '/services?limit=2', { token: ADMIN })).body), ['svc-a', 'svc-b']);
  t.deepEqual(Object.keys((await api('GET', '/services?offset=1&limit=1', { token: ADMIN })).body), ['svc-b']);
  t.deepEqual(Object.keys((await api('GET', '/services?offset=5', { token: ADMIN })).body), []);
  const page = await api('GET', '/services?limit=2', { token: ADMIN, headers: PAGED });
  t.deepEqual(Object.keys(page.body.items), ['svc-a', 'svc-b']);
  t.like(page.body._pagination, { offset: 0, limit: 2, total: 3, next: { offset: 2, limit: 2 } });
  const last = await fetch(page.body._pagination.next.url, { headers: { ...PAGED, authorization: `token ${ADMIN}` } }).then((r) => r.json());
  t.deepEqual(Object.keys(last.items), ['svc-c']);
  t.is(last._pagination.next, null);
  refused(t, await api('GET', '/services?limit=x', { token: ADMIN }), 400, /offset and limit must be integers/);
});

test.serial('pagination: an offset past what int32 holds is an empty page, not one wrapped around to the start', async (t) => {
  for (const path of ['/users', '/groups', '/proxy', '/services']) {
    const r = await api('GET', `${path}?offset=4294967297&limit=1`, { token: ADMIN, headers: PAGED });
    t.is(r.status, 200, path);
    t.deepEqual(Object.keys(r.body.items), [], path);
    t.is(r.body._pagination.next, null, path);
  }
});
