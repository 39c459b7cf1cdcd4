// The auth store's in-memory orders of users (id, name, last activity) against the obvious sort of a plain
// list, over random sequences of additions (one by one and in bulk), removals, renames and activity.
import test from 'ava';
import fc from 'fast-check';
import { SORT_KEYS, type UserSort } from '../../shared/lists.js';
import { UserIndex } from '../../services/auth/user-index.js';

type Op =
  | { op: 'add'; names: string[] }
  | { op: 'remove'; pick: number }
  | { op: 'rename'; pick: number; name: string }
  | { op: 'touch'; pick: number; at: number };

const name = fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 4 });
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('add' as const), names: fc.array(name, { minLength: 1, maxLength: 40 }) }),
  fc.record({ op: fc.constant('remove' as const), pick: fc.nat() }),
  fc.record({ op: fc.constant('rename' as const), pick: fc.nat(), name }),
  fc.record({ op: fc.constant('touch' as const), pick: fc.nat(), at: fc.integer({ min: 0, max: 50 }) }),
);

function expected(users: Map<number, { name: string; activity: string }>, sort: UserSort): number[] {
  const key = (id: number) => (sort.key === 'id' ? '' : sort.key === 'name' ? users.get(id)!.name : users.get(id)!.activity);
  const ids = [...users.keys()].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : a - b));
  return sort.desc ? ids.reverse() : ids;
}

test('user index: every order, page and name search matches a plain sort after any sequence of changes', (t) => {
  fc.assert(fc.property(fc.array(op, { maxLength: 60 }), fc.nat({ max: 30 }), fc.integer({ min: 1, max: 20 }), name, (ops, offset, limit, search) => {
    const index = new UserIndex();
    const model = new Map<number, { name: string; activity: string }>();
    let nextId = 1;
    for (const o of ops) {
      const ids = [...model.keys()];
      const target = ids.length ? ids[('pick' in o ? o.pick : 0) % ids.length] : undefined;
      if (o.op === 'add') {
        const batch = o.names.map((n) => ({ id: nextId++, name: n }));
        index.add(batch);
        for (const u of batch) model.set(u.id, { name: u.name, activity: '' });
      } else if (target === undefined) continue;
      else if (o.op === 'remove') {
        index.remove(target);
        model.delete(target);
      } else if (o.op === 'rename') {
        index.rename(target, o.name);
        model.get(target)!.name = o.name;
      } else {
        const at = new Date(Date.UTC(2026, 0, 1, 0, o.at)).toISOString();
        index.touch(target, at);
        if (at > model.get(target)!.activity) model.get(target)!.activity = at;
      }
      index.matching(search, { key: 'name', desc: false }); // a cached search must not outlive a change
    }
    t.is(index.size, model.size);
    for (const key of SORT_KEYS) {
      for (const desc of [false, true]) {
        const all = expected(model, { key, desc });
        const page = index.page({ key, desc }, offset, limit);
        if (JSON.stringify(page) !== JSON.stringify(all.slice(offset, offset + limit))) return false;
        const found = all.filter((id) => model.get(id)!.name.toLowerCase().includes(search.toLowerCase()));
        if (JSON.stringify(Array.from(index.matching(search.toUpperCase(), { key, desc }))) !== JSON.stringify(found)) return false;
        const odd = new Set([...model.keys()].filter((id) => id % 2 === 1));
        const except = all.filter((id) => !odd.has(id));
        if (JSON.stringify(index.pageExcept({ key, desc }, offset, limit, odd)) !== JSON.stringify(except.slice(offset, offset + limit))) return false;
        const some = all.filter((id) => id % 2 === 0);
        if (JSON.stringify(index.sort([...some].reverse(), { key, desc })) !== JSON.stringify(some)) return false;
      }
    }
    return true;
  }), { seed: 16, numRuns: 300 });
  t.pass();
});

test('user index: loaded from rows in id order plus the name order, then changes replayed onto it, equals one built by changes', (t) => {
  fc.assert(fc.property(fc.uniqueArray(name, { minLength: 0, maxLength: 40 }), fc.array(op, { maxLength: 30 }), (names, ops) => {
    const built = new UserIndex();
    const rows = names.map((n, i) => ({ id: i + 1, name: n, last_activity: i % 3 ? null : new Date(Date.UTC(2026, 0, 1, 0, i % 7)).toISOString() }));
    built.add(rows);
    for (const r of rows) if (r.last_activity) built.touch(r.id, r.last_activity);
    const loaded = new UserIndex();
    loaded.loadRows(rows);
    // SQLite's BINARY order is UTF-8 byte order
    loaded.finishLoad(Int32Array.from([...rows].sort((a, b) => Buffer.compare(Buffer.from(a.name), Buffer.from(b.name))).map((r) => r.id)));
    let nextId = rows.length + 1;
    for (const o of ops) {
      const ids = built.page({ key: 'id', desc: false }, 0, 1000);
      const target = ids.length ? ids[('pick' in o ? o.pick : 0) % ids.length] : undefined;
      const apply = (ix: UserIndex) => {
        if (o.op === 'add') ix.add(o.names.map((n, i) => ({ id: nextId + i, name: `${n}#${nextId + i}` })));
        else if (target === undefined) return;
        else if (o.op === 'remove') ix.remove(target);
        else if (o.op === 'rename') ix.rename(target, `${o.name}~${target}`);
        else ix.touch(target, new Date(Date.UTC(2026, 0, 1, 0, o.at)).toISOString());
      };
      apply(built);
      apply(loaded);
      apply(loaded); // a change replayed onto an index that has it already changes nothing
      if (o.op === 'add') nextId += o.names.length;
    }
    for (const key of SORT_KEYS) {
      for (const desc of [false, true]) {
        if (JSON.stringify(built.page({ key, desc }, 0, 1000)) !== JSON.stringify(loaded.page({ key, desc }, 0, 1000))) return false;
      }
    }
    return built.size === loaded.size;
  }), { seed: 27, numRuns: 200 });
  t.pass();
});

test('user index: 300,000 users loaded, added in one batch, searched and paged (no call grows the stack with the number of users)', (t) => {
  const n = 300_000;
  const rows = Array.from({ length: n }, (_, i) => ({ id: i + 1, name: `user-${String((i * 7919) % n).padStart(6, '0')}`, last_activity: null }));
  const loaded = new UserIndex();
  loaded.loadRows(rows);
  loaded.finishLoad(Int32Array.from([...rows].sort((a, b) => (a.name < b.name ? -1 : 1)).map((r) => r.id)));
  const added = new UserIndex();
  added.add(rows);
  added.add(Array.from({ length: n }, (_, i) => ({ id: n + i + 1, name: `more-${i}` })));
  t.is(loaded.size, n);
  t.is(added.size, 2 * n);
  t.deepEqual(loaded.page({ key: 'name', desc: false }, 0, 2), [1, rows.findIndex((r) => r.name === 'user-000001') + 1]);
  t.deepEqual(added.page({ key: 'name', desc: true }, 0, 1), [rows.findIndex((r) => r.name === 'user-299999') + 1]);
  t.is(added.matching('USER-', { key: 'id', desc: false }).length, n);
  t.is(added.matching('more-299999', { key: 'id', desc: false }).length, 1);
  t.true(loaded.bytes < n * 80, `${loaded.bytes} bytes for ${n} users`);
});
