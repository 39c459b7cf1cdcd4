// The gateway's path normalisation and route trie, in process: what matches what, and how lookups
// scale to 100,000 routes.
import test from 'ava';
import { normalizePath } from '../../services/gateway/proxy/path.js';
import { RouteTable } from '../../services/gateway/proxy/table.js';

const route = (routespec: string, target = 'http://127.0.0.1:9') => ({ routespec, target, data: {} });

test('path: normalised once: dot segments (plain or encoded) resolved, encodings canonical, controls refused', (t) => {
  const cases: [string, string | null][] = [
    ['/user/alice/tree', '/user/alice/tree'],
    ['/user/alice/../bob/x', '/user/bob/x'],
    ['/user/alice/%2e%2e/bob/', '/user/bob/'],
    ['/user/alice/.%2E/.%2e/../x', '/x'],
    ['/a/b/..', '/a/'],
    ['/a/./b/.', '/a/b/'],
    ['/../../etc/passwd', '/etc/passwd'],
    ['/user/alice/a%2Fb', '/user/alice/a%2Fb'],
    ['/user/alice/..%2F..%2Fbob', '/user/alice/..%2F..%2Fbob'],
    ['/user/al%69ce/x', '/user/alice/x'],
    ['/user/%C3%BCber/x%20y', '/user/%C3%BCber/x%20y'],
    ['/files/a:b@c;d=e,f+g$h&i', '/files/a:b@c;d=e,f+g$h&i'],
    ['/files/100%25', '/files/100%25'],
    ['/a\\..\\b', '/a%5C..%5Cb'],
    ['/a/%00', null],
    ['/a/%0d%0aX', null],
    ['/a/%zz', null],
    ['relative', null],
  ];
  for (const [raw, want] of cases) t.is(normalizePath(raw)?.path ?? null, want, raw);
});

test('table: longest prefix wins, on whole segments; the request path need not end in a slash', (t) => {
  const table = new RouteTable();
  for (const spec of ['/', '/user/alice/', '/user/alice/lab/', '/services/x/']) t.true(table.set(route(spec)));
  const match = (p: string) => table.match(normalizePath(p)!.segments)?.route.routespec ?? null;
  t.is(match('/user/alice/lab/tree'), '/user/alice/lab/');
  t.is(match('/user/alice/lab'), '/user/alice/lab/');
  t.is(match('/user/alice/labx'), '/user/alice/');
  t.is(match('/user/alice'), '/user/alice/');
  t.is(match('/user/alicex/'), '/');
  t.is(match('/user/alice/../bob/'), '/');
  t.is(match('/services/x/%2e%2e/y'), '/', 'an encoded dot segment leaves the route');
  t.is(match('/user/%61lice/'), '/user/alice/');
  t.false(table.set(route('/user/bad/', 'ftp://127.0.0.1/')), 'only http(s) targets');
  t.false(table.set(route('/user/bad/', 'http://u:p@127.0.0.1/')), 'no credentials in targets');
});

test('table: deleting routes prunes the trie; the same path spelled differently is one route', (t) => {
  const table = new RouteTable();
  table.set(route('/user/alice/'));
  table.set(route('/user/alice/lab/'));
  table.delete('/user/alice/');
  t.is(table.match(['user', 'alice', 'lab', 'x'])?.route.routespec, '/user/alice/lab/');
  t.is(table.match(['user', 'alice', 'x']), null);
  table.delete('/user/alice/lab/');
  t.is(table.size, 0);
  t.is((table as unknown as { root: { children?: Map<string, unknown> } }).root.children?.size ?? 0, 0, 'no empty branches left');
  table.set(route('/user/%C3%BCber/', 'http://127.0.0.1:1'));
  table.set(route('/user/über/', 'http://127.0.0.1:2'));
  t.is(table.size, 1);
  table.delete('/user/%C3%BCber/');
  t.is(table.size, 1, 'a delete by another spelling does not remove the newer route');
});

test('table: lookups stay flat from 100 to 100,000 routes', (t) => {
  const timePerLookup = (routes: number): number => {
    const table = new RouteTable();
    for (let i = 0; i < routes; i++) table.set(route(`/user/u${i}/`));
    const paths = Array.from({ length: 1000 }, (_, i) => normalizePath(`/user/u${(i * 7919) % routes}/api/contents/notebook.ipynb`)!.segments);
    for (let i = 0; i < 200_000; i++) table.match(paths[i % 1000]); // warm up the JIT
    const t0 = process.hrtime.bigint();
    let found = 0;
    for (let i = 0; i < 1_000_000; i++) if (table.match(paths[i % 1000])) found++;
    const ns = Number(process.hrtime.bigint() - t0) / 1_000_000;
    if (found !== 1_000_000) throw new Error('a lookup missed');
    return ns;
  };
  const small = timePerLookup(100);
  const large = timePerLookup(100_000);
  t.log(`${small.toFixed(0)} ns per lookup at 100 routes, ${large.toFixed(0)} ns at 100,000`);
  // bounds loose enough for a shared 2-core machine running the rest of the suite; a linear scan would be ~1000x
  t.true(large < 5000, 'under 5 µs per lookup');
  t.true(large < small * 10 + 500, 'no growth with the number of routes beyond cache effects');
});
