// The auth store's pages of users against a plain list: id pages are read as id ranges, so they must stay
// exact with gaps left by deleted users, in both directions, and each row must carry its own groups only (one statement: the groups come from a correlated subquery).
import test from 'ava';
import { AuthStore } from '../../services/auth/store.js';
import { BACKENDS, storeBackends } from '../store-backends.js';

const stores = storeBackends(test);

for (const backend of BACKENDS) test(`auth store (${backend}): id pages are exact around deleted users, both ways, and carry each user's own groups`, async (t) => {
  const store = await AuthStore.open(await stores.location(t, backend, 'auth'));
  t.teardown(() => store.close());
  const names = Array.from({ length: 120 }, (_, i) => `u${String(i).padStart(3, '0')}`);
  await store.transaction(() => store.insertUsers(names, false, new Date().toISOString()));
  // gaps: every seventh user and a run in the middle are gone
  const gone = new Set(names.filter((_, i) => i % 7 === 3 || (i >= 50 && i < 58)));
  await store.transaction(async () => { for (const n of gone) await store.deleteUser(n); });
  const odd = await store.transaction(() => store.insertGroup('odd'));
  const tens = await store.transaction(() => store.insertGroup('tens'));
  const left = names.filter((n) => !gone.has(n));
  await store.transaction(() => store.addMembers(odd, left.filter((_, i) => i % 2 === 1)));
  await store.transaction(() => store.addMembers(tens, left.filter((n) => n.endsWith('0'))));

  for (const desc of [false, true]) {
    const all = desc ? [...left].reverse() : left;
    for (const [offset, limit] of [[0, 50], [13, 50], [40, 7], [100, 50], [all.length - 1, 5], [all.length, 5], [0, 1]]) {
      const { rows, total } = await store.listUsers(offset, limit, { sort: { key: 'id', desc } });
      t.is(total, left.length);
      t.deepEqual(rows.map((r) => r.name), all.slice(offset, offset + limit), `desc=${desc} offset=${offset} limit=${limit}`);
      for (const r of rows) {
        const i = left.indexOf(r.name);
        const want = [...(i % 2 === 1 ? ['odd'] : []), ...(r.name.endsWith('0') ? ['tens'] : [])];
        t.deepEqual(JSON.parse(r.groups_json), want, r.name);
      }
    }
  }
  // users read by name carry their own groups too, in group order
  const [first, last] = [left[1], left[left.length - 2]];
  const byName = new Map((await store.getUsers([first, last])).map((r) => [r.name, JSON.parse(r.groups_json)]));
  t.deepEqual(byName.get(first), ['odd']);
  t.deepEqual(byName.get(last), left.indexOf(last) % 2 === 1 ? ['odd'] : []);
});
