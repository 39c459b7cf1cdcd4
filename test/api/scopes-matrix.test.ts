// Every endpoint × every kind of caller → the status the established hub's clients expect.
import test from 'ava';
import { startHub, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from './client.js';

let hub: HubUnderTest;
let api: ApiCall;
const ADMIN = randomToken();
const SERVICE = randomToken();
const SHARER = randomToken();
const callers: Record<string, string | null> = {};

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: {
        api_tokens: { [ADMIN]: 'boss' },
        services: [{ name: 'culler', api_token: SERVICE }, { name: 'sharer', api_token: SHARER }],
        load_roles: [
          { name: 'culler-role', scopes: ['list:users', 'read:users:activity', 'users:activity'], services: ['culler'] },
          // manages sharing of every server and may name people and groups, nothing else
          { name: 'share-manager', scopes: ['shares', 'read:users:name', 'read:groups:name'], services: ['sharer'] },
        ],
      },
      Authenticator: { admin_users: ['boss'] },
    },
  });
  api = apiClient(hub.url);
  const created = await api('POST', '/users', { token: ADMIN, body: { usernames: ['alice', 'bob', 'victim', 'carol'] } });
  if (created.status !== 201) throw new Error(`setup: ${created.status}`);
  await api('POST', '/groups/staff', { token: ADMIN, body: { users: ['alice'] } });
  const tokenOf = async (user: string, body: unknown) => (await api('POST', `/users/${user}/tokens`, { token: ADMIN, body })).body.token as string;
  callers.admin = ADMIN;
  callers.self = await tokenOf('alice', {});
  callers.other = await tokenOf('bob', {});
  callers.service = SERVICE;
  callers.reduced = await tokenOf('alice', { scopes: ['read:users:name!user=alice'] });
  const revoked = await api('POST', '/users/alice/tokens', { token: ADMIN, body: {} });
  await api('DELETE', `/users/alice/tokens/${revoked.body.id}`, { token: ADMIN });
  callers.revoked = revoked.body.token;
  callers.none = null;
  // carol was given a share of alice's default server
  const shared = await api('POST', '/shares/alice/', { token: ADMIN, body: { user: 'carol', scopes: ['access:servers', 'read:servers'] } });
  if (shared.status !== 200) throw new Error(`setup share: ${shared.status} ${JSON.stringify(shared.body)}`);
  callers.grantee = await tokenOf('carol', {});
  callers.sharer = SHARER;
});
test.after.always(async () => {
  await hub?.stop();
});

const WHO = ['admin', 'self', 'other', 'service', 'reduced', 'revoked', 'none', 'grantee', 'sharer'] as const;
type Row = [method: string, path: string, body: unknown, expected: Record<(typeof WHO)[number], number>];
const row = (admin: number, self: number, other: number, service: number, reduced: number, revoked: number, none: number, grantee: number, sharer: number) =>
  ({ admin, self, other, service, reduced, revoked, none, grantee, sharer });

// "self" is alice acting on her own resources, "other" is bob acting on alice's; "grantee" is carol, with a share of
// alice's default server (access:servers, read:servers), and "sharer" a service with `shares`, `read:users:name`, `read:groups:name`.
const MATRIX: Row[] = [
  ['GET', '/', undefined, row(200, 200, 200, 200, 200, 200, 200, 200, 200)],
  ['GET', '/info', undefined, row(200, 403, 403, 403, 403, 403, 403, 403, 403)],
  ['GET', '/user', undefined, row(200, 200, 200, 200, 200, 403, 403, 200, 200)],
  ['GET', '/users', undefined, row(200, 403, 403, 200, 403, 403, 403, 403, 403)],
  ['GET', '/users/alice', undefined, row(200, 200, 404, 200, 200, 403, 403, 404, 200)],
  ['GET', '/users/nosuchuser', undefined, row(404, 404, 404, 404, 404, 403, 403, 404, 404)],
  ['POST', '/users/newbie-{who}', {}, row(201, 403, 403, 403, 403, 403, 403, 403, 403)],
  ['POST', '/users', { usernames: ['bulk-{who}'] }, row(201, 403, 403, 403, 403, 403, 403, 403, 403)],
  ['PATCH', '/users/alice', { admin: false }, row(200, 403, 403, 403, 403, 403, 403, 403, 403)],
  ['POST', '/users/alice/activity', { last_activity: new Date().toISOString() }, row(200, 200, 404, 200, 403, 403, 403, 404, 403)],
  ['GET', '/users/alice/tokens', undefined, row(200, 200, 404, 403, 403, 403, 403, 404, 403)],
  ['POST', '/users/alice/tokens', {}, row(201, 201, 403, 403, 403, 403, 403, 403, 403)],
  ['GET', '/users/alice/tokens/a999999', undefined, row(404, 404, 404, 403, 403, 403, 403, 404, 403)],
  ['DELETE', '/users/alice/tokens/a999999', undefined, row(404, 404, 404, 403, 403, 403, 403, 404, 403)],
  ['GET', '/groups', undefined, row(200, 403, 403, 403, 403, 403, 403, 403, 403)],
  ['GET', '/groups/staff', undefined, row(200, 403, 403, 403, 403, 403, 403, 403, 200)],
  ['POST', '/groups/g-{who}', {}, row(201, 403, 403, 403, 403, 403, 403, 403, 403)],
  ['POST', '/groups/staff/users', { users: ['bob'] }, row(200, 403, 403, 403, 403, 403, 403, 403, 403)],
  ['PUT', '/groups/staff/properties', { course: 'x' }, row(200, 403, 403, 403, 403, 403, 403, 403, 403)],
  ['GET', '/services', undefined, row(200, 403, 403, 403, 403, 403, 403, 403, 403)],
  ['GET', '/services/culler', undefined, row(200, 403, 403, 403, 403, 403, 403, 403, 403)],
  ['PUT', '/users/alice/password', { password: 'long-enough-1' }, row(204, 403, 403, 403, 403, 403, 403, 403, 403)],
  ['DELETE', '/users/victim', undefined, row(204, 403, 403, 403, 403, 403, 403, 403, 403)],
  // sharing (alice/ is alice's default server); a plain user may read but not manage shares of her servers
  ['GET', '/shares/alice', undefined, row(200, 200, 404, 403, 403, 403, 403, 404, 200)],
  ['GET', '/shares/alice/', undefined, row(200, 200, 404, 403, 403, 403, 403, 404, 200)],
  ['GET', '/shares/nosuchuser', undefined, row(404, 404, 404, 403, 403, 403, 403, 404, 404)],
  ['POST', '/shares/alice/', { user: 'bob' }, row(200, 403, 403, 403, 403, 403, 403, 403, 200)],
  ['POST', '/shares/alice/', { group: 'staff' }, row(200, 403, 403, 403, 403, 403, 403, 403, 200)],
  ['POST', '/shares/nosuchuser/', { user: 'bob' }, row(404, 403, 403, 403, 403, 403, 403, 403, 404)],
  ['PATCH', '/shares/alice/', { user: 'bob', scopes: ['read:servers'] }, row(200, 403, 403, 403, 403, 403, 403, 403, 200)],
  ['POST', '/shares/alice', { user: 'bob' }, row(405, 405, 405, 405, 405, 405, 405, 405, 405)],
  ['PATCH', '/shares/alice', { user: 'bob' }, row(405, 405, 405, 405, 405, 405, 405, 405, 405)],
  ['DELETE', '/shares/alice', undefined, row(405, 405, 405, 405, 405, 405, 405, 405, 405)],
  ['GET', '/users/alice/shared', undefined, row(200, 200, 404, 403, 403, 403, 403, 404, 200)],
  ['GET', '/users/carol/shared', undefined, row(200, 404, 404, 403, 403, 403, 403, 200, 200)],
  ['GET', '/users/carol/shared/alice/', undefined, row(200, 404, 404, 403, 403, 403, 403, 200, 200)],
  ['GET', '/users/carol/shared/bob/', undefined, row(404, 404, 404, 403, 403, 403, 403, 404, 404)],
  ['GET', '/groups/staff/shared', undefined, row(200, 403, 403, 403, 403, 403, 403, 403, 200)],
  ['GET', '/groups/staff/shared/alice/', undefined, row(200, 403, 403, 403, 403, 403, 403, 403, 200)],
  ['GET', '/share-codes/alice', undefined, row(200, 200, 404, 403, 403, 403, 403, 404, 200)],
  ['GET', '/share-codes/alice/', undefined, row(200, 200, 404, 403, 403, 403, 403, 404, 200)],
  ['POST', '/share-codes/alice/', { expires_in: 3600 }, row(200, 403, 403, 403, 403, 403, 403, 403, 200)],
  ['POST', '/share-codes/alice', {}, row(405, 405, 405, 405, 405, 405, 405, 405, 405)],
  ['DELETE', '/share-codes/alice/?id=sc_999999', undefined, row(404, 403, 403, 403, 403, 403, 403, 403, 404)],
  ['DELETE', '/groups/staff/shared/alice/', undefined, row(404, 403, 403, 403, 403, 403, 403, 403, 204)],
  ['DELETE', '/shares/alice/', undefined, row(204, 403, 403, 403, 403, 403, 403, 403, 204)],
];

for (const [method, path, body, expected] of MATRIX) {
  test.serial(`scopes: ${method} ${path.replace('{who}', '*')}${body && typeof body === 'object' && 'group' in body ? ' (group)' : ''}`, async (t) => {
    // the admin goes last, so a destructive call does not change what the others see
    for (const who of [...WHO.filter((w) => w !== 'admin'), 'admin' as const]) {
      const p = path.replace('{who}', who);
      const b = body === undefined ? undefined : JSON.parse(JSON.stringify(body).replace('{who}', who));
      const r = await api(method, p, { token: callers[who], body: b });
      t.is(r.status, expected[who], `${who}: ${method} ${p} → ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`);
      if (r.status >= 400) t.deepEqual(Object.keys(r.body).sort(), ['code', 'message', 'status'], `${who}: error body shape`);
    }
  });
}

test.serial('scopes: the reduced token sees only the fields its scope (and its identify scopes) reveal', async (t) => {
  const r = await api('GET', '/users/alice', { token: callers.reduced });
  t.deepEqual(Object.keys(r.body).sort(), ['admin', 'groups', 'kind', 'name', 'user_info']);
  const full = await api('GET', '/users/alice', { token: callers.self });
  t.true('created' in full.body && 'servers' in full.body && 'last_activity' in full.body);
});

test.serial('scopes: a service is not a user', async (t) => {
  const r = await api('GET', '/users', { token: ADMIN });
  t.false(r.body.some((u: { name: string }) => u.name === 'culler'));
  const me = await api('GET', '/user', { token: SERVICE });
  t.is(me.body.kind, 'service');
  t.is(me.body.name, 'culler');
  t.true(me.body.scopes.includes('list:users'));
});

test.serial('scopes: a share shows in the grantee\'s scopes at once, and leaving it takes it away at once', async (t) => {
  const has = async () => ((await api('GET', '/user', { token: callers.grantee })).body.scopes as string[]).includes('access:servers!server=alice/');
  t.is((await api('POST', '/shares/alice/', { token: callers.sharer, body: { user: 'carol' } })).status, 200);
  t.true(await has());
  t.is((await api('DELETE', '/users/carol/shared/alice/', { token: callers.grantee })).status, 204);
  t.false(await has());
});
