// Each actor's store against both places it may live (Hub.db_url): the statements whose SQL differs between SQLite
// and PostgreSQL (new ids, lists, INSERT OR IGNORE, upserts, the revoked-token trigger, IS DISTINCT FROM, name order,
// the user index's snapshot load) give the same answers; on PostgreSQL several nodes opening one schema at once
// migrate it once, transactions roll back whole, and concurrent ones all land.
import test from 'ava';
import { AuthStore } from '../../services/auth/store.js';
import { SigningKeys, storeKeySource } from '../../services/oauth/signing-keys.js';
import { OAuthStore } from '../../services/oauth/store.js';
import { TokenStore, type NewToken } from '../../services/tokens/store.js';
import { Store, toPostgres, type StoreLocation } from '../../shared/store.js';
import { BACKENDS, storeBackends } from '../store-backends.js';

const stores = storeBackends(test);

const token = (prefix: string, owner: string, extra: Partial<NewToken> = {}): NewToken => ({
  prefix, hashed: `hash-${prefix}`, owner_kind: 'user', owner_name: owner, scopes: '[]', note: '', created: '2026-01-01T00:00:00.000Z',
  expires_at: null, session_id: null, oauth_client: 'hub', source: 'api', ...extra,
});

test('toPostgres: placeholders numbered outside quoted text, INSERT OR IGNORE as ON CONFLICT DO NOTHING', (t) => {
  t.is(toPostgres("SELECT * FROM t WHERE a = ? AND b = '?' AND \"c?\" = ?"), "SELECT * FROM t WHERE a = $1 AND b = '?' AND \"c?\" = $2");
  t.is(toPostgres('INSERT OR IGNORE INTO m (a, b) SELECT ?, id FROM u'), 'INSERT INTO m (a, b) SELECT $1, id FROM u ON CONFLICT DO NOTHING');
});

for (const backend of BACKENDS) {
  test(`tokens store (${backend}): ids, a deleted token remembered by the trigger, shares for a user's groups, next expiry`, async (t) => {
    const store = await TokenStore.open(await stores.location(t, backend, 'tokens'));
    t.teardown(() => store.close());
    const a = await store.insert(token('pa', 'ann'));
    const b = await store.insert(token('pb', 'ann', { expires_at: '2026-01-02T00:00:00.000Z' }));
    t.deepEqual([a, b], [1, 2]);
    t.deepEqual((await store.byOwner('user', 'ann')).map((r) => r.id), [1, 2]);
    const before = new Date(Date.now() - 1000).toISOString();
    t.true(await store.delete(a));
    t.deepEqual(await store.goneByPrefix('pa', before, '2026-01-01T12:00:00.000Z'), ['hash-pa']);
    t.deepEqual(await store.goneByPrefix('pb', before, '2026-01-03T00:00:00.000Z'), ['hash-pb'], 'an expired row still here counts as gone');
    t.deepEqual(await store.deleteExpired('2026-01-03T00:00:00.000Z'), [b]);

    const share = (grantee_kind: 'user' | 'group', grantee: string, expires_at: string | null) => store.upsertShare({
      owner: 'bob', server_name: '', grantee_kind, grantee, scopes: ['access:servers'], created_at: '2026-01-01T00:00:00.000Z', created_by: 'bob', expires_at,
    });
    await share('group', 'g1', '2026-06-01T00:00:00.000Z');
    await share('group', 'g2', null);
    await share('user', 'cat', '2026-03-01T00:00:00.000Z');
    const granted = await store.sharesFor('cat', ['g2', 'g3'], '2026-02-01T00:00:00.000Z');
    t.deepEqual(granted.map((s) => `${s.grantee_kind}:${s.grantee}`), ['group:g2', 'user:cat']);
    t.is(await store.nextExpiry('2026-02-01T00:00:00.000Z'), '2026-03-01T00:00:00.000Z');
    t.deepEqual((await store.deleteExpiredShares('2026-04-01T00:00:00.000Z')).map((s) => s.grantee), ['cat']);
  });

  test(`auth store (${backend}): user_info written only when it changes, members added twice once, names in byte order, the index loaded from a snapshot`, async (t) => {
    const location = await stores.location(t, backend, 'auth');
    const store = await AuthStore.open(location);
    const names = ['Zed', 'ann', 'Émile', 'bob', 'émile', 'b_1', 'B'];
    await store.transaction(() => store.insertUsers(names, false, '2026-01-01T00:00:00.000Z'));
    t.true(await store.setUserInfo('ann', '{"name":"Ann"}'));
    t.false(await store.setUserInfo('ann', '{"name":"Ann"}'));
    const g = await store.transaction(() => store.insertGroup('team'));
    await store.transaction(() => store.addMembers(g, ['ann', 'bob']));
    await store.transaction(() => store.addMembers(g, ['bob', 'Zed']));
    t.deepEqual((await store.membersPage(g, 0, 10)).map((m) => m.name), ['Zed', 'ann', 'bob'].sort((x, y) => names.indexOf(x) - names.indexOf(y)));
    await store.recordFailure(['user:ann', 'addr:1'], 1000);
    await store.recordFailure(['user:ann'], 2000);
    t.deepEqual([...await store.failuresSince(['user:ann', 'addr:1', 'addr:2'], 1500)], [['user:ann', { n: 1, last: 2000 }]]);
    await store.indexLoaded;
    await store.close();

    // a second open loads its index from one snapshot: name order is the code-unit order the index uses
    const again = await AuthStore.open(location);
    t.teardown(() => again.close());
    await again.indexLoaded;
    const byName = (await again.listUsers(0, 50, { sort: { key: 'name', desc: false } })).rows.map((r) => r.name);
    t.deepEqual(byName, [...names].sort());
    const filtered = await again.listUsers(0, 50, { only: { names: ['bob'], groups: ['team'] }, sort: { key: 'id', desc: false } });
    t.deepEqual(filtered.rows.map((r) => r.name), ['Zed', 'ann', 'bob']);
    t.is(filtered.total, 3);
    t.deepEqual(JSON.parse((await again.getUser('ann'))!.groups_json), ['team']);
  });

  test(`oauth store (${backend}): a grant written twice for one token keeps the second`, async (t) => {
    const store = await OAuthStore.open(await stores.location(t, backend, 'oauth'));
    t.teardown(() => store.close());
    const grant = { token_id: 'a1', client_id: 'c', user_name: 'ann', oidc_scopes: '["openid"]', session_id: 's', expires_at: 1_000 };
    await store.insertGrant(grant);
    await store.insertGrant({ ...grant, oidc_scopes: '["openid","profile"]', expires_at: 9_999_999_999_999 });
    t.like(await store.grant('a1'), { oidc_scopes: '["openid","profile"]', expires_at: 9_999_999_999_999 });
  });
}

for (const backend of BACKENDS) {
  test(`oidc signing keys in a shared oauth store (${backend}): two actors starting at once make one set; a rotation by one is what the other signs with`, async (t) => {
    const location = await stores.location(t, backend, 'oauth');
    // (SQLite: one actor per file migrates it; the second opens it after)
    const [s1, s2] = backend === 'postgres' ? await Promise.all([OAuthStore.open(location), OAuthStore.open(location)]) : [await OAuthStore.open(location), await OAuthStore.open(location)];
    t.teardown(() => Promise.all([s1.close(), s2.close()]).then(() => undefined));
    const [k1, k2] = await Promise.all([SigningKeys.open(storeKeySource(s1)), SigningKeys.open(storeKeySource(s2))]);
    const kids = async (k: SigningKeys) => (await k.jwks()).keys.map((j) => j.kid);
    t.deepEqual(await kids(k1), await kids(k2));
    t.is((await kids(k1)).length, 2);
    const header = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[0], 'base64url').toString()) as { kid: string };
    const before = header(await k2.sign({ sub: 'ann' })).kid;
    const rotated = await k1.rotate();
    t.is(rotated.previous_kid, before);
    t.is(header(await k2.sign({ sub: 'ann' })).kid, rotated.kid, 'the other actor signs with the new key at its next use');
    t.deepEqual(await kids(k2), await kids(k1));
    t.true((await kids(k2)).includes(before), 'the previous key stays published');
  });
}

test('postgres: four nodes opening one schema at once migrate it once; every store answers', async (t) => {
  const location = await stores.location(t, 'postgres', 'tokens') as Extract<StoreLocation, { kind: 'postgres' }>;
  const opened = await Promise.all(Array.from({ length: 4 }, () => TokenStore.open(location)));
  t.teardown(() => Promise.all(opened.map((s) => s.close())).then(() => undefined));
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: location.url });
  await client.connect();
  t.teardown(() => client.end());
  const versions = (await client.query('SELECT version FROM hub_tokens.store_migrations ORDER BY version')).rows.map((r) => Number(r.version));
  t.deepEqual(versions, [1, 2, 3]);
  const ids = await Promise.all(opened.map((s, i) => s.insert(token(`p${i}`, 'ann'))));
  t.deepEqual(new Set(ids).size, 4);
  for (const s of opened) t.is((await s.byOwner('user', 'ann')).length, 4);
  // the actors never share tables: each schema holds only its own
  const schemas = (await client.query("SELECT DISTINCT table_schema FROM information_schema.tables WHERE table_schema LIKE 'hub_%'")).rows.map((r) => r.table_schema);
  t.deepEqual(schemas, ['hub_tokens']);
});

test('postgres: a transaction that throws leaves nothing; 30 concurrent ones all land', async (t) => {
  const store = await AuthStore.open(await stores.location(t, 'postgres', 'auth'));
  t.teardown(() => store.close());
  await t.throwsAsync(store.transaction(async () => {
    await store.insertUser('half', false, '2026-01-01T00:00:00.000Z');
    await store.insertUser('half', false, '2026-01-01T00:00:00.000Z');
  }), { message: /duplicate key/ });
  t.is(await store.getUser('half'), undefined);
  await Promise.all(Array.from({ length: 30 }, (_, i) => store.transaction(() => store.insertUser(`u${i}`, false, '2026-01-01T00:00:00.000Z'))));
  t.is((await store.userCounts([])).total, 30);
  await store.indexLoaded;
  t.is((await store.listUsers(0, 100)).total, 30);
});

for (const backend of BACKENDS) {
  test(`a query that fails (${backend}): a bad one fails with the database's reason, also twice at once, a refused write rolls its transaction back, and the store answers on`, async (t) => {
    // SQLite keeps a prepared statement per query text: one that cannot be prepared, or that failed mid-way, is made again
    const location = await stores.location(t, backend, 'auth');
    const store = await Store.open(location, ['CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)']);
    t.teardown(() => store.close());
    await store.run('INSERT INTO t (v) VALUES (?)', ['a']);
    await t.throwsAsync(store.run('INSERT INTO t (v) VALUES (?)', ['a']), { message: /unique/i });
    await store.run('INSERT INTO t (v) VALUES (?)', ['b']);
    const bad = await Promise.allSettled([store.all('SELECT nope FROM t', []), store.all('SELECT nope FROM t', [])]);
    t.deepEqual(bad.map((r) => r.status), ['rejected', 'rejected']);
    for (const r of bad) t.regex(String((r as PromiseRejectedResult).reason?.message), /nope/);
    await t.throwsAsync(store.all('SELECT nope FROM t', []), { message: /nope/ }, 'and again after');
    await t.throwsAsync(store.transaction(async () => {
      await store.run('INSERT INTO t (v) VALUES (?)', ['c']);
      await store.run('INSERT INTO t (v) VALUES (?)', ['a']);
    }), { message: /unique/i });
    const rows = await Promise.all(Array.from({ length: 40 }, (_, i) => store.get<{ v: string }>('SELECT v FROM t WHERE v = ?', [i % 2 ? 'a' : 'b'])));
    t.deepEqual(rows.map((r) => r?.v).join(''), 'ba'.repeat(20), 'forty reads of one query at once each get their own answer');
    t.deepEqual((await store.all<{ v: string }>('SELECT v FROM t ORDER BY v', [])).map((r) => r.v), ['a', 'b']);
  });
}
