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

test('table: a lookup does the same work at 100 and at 100,000 routes (a probe per path segment, no scan)', (t) => {
  // counted, not timed: the machine is shared and timings drift; the work a lookup does is what must not grow
  const probesPerLookup = (routes: number): number => {
    const table = new RouteTable();
    for (let i = 0; i < routes; i++) table.set(route(`/user/u${i}/`));
    const paths = Array.from({ length: 100 }, (_, i) => normalizePath(`/user/u${(i * 7919) % routes}/api/contents/notebook.ipynb`)!.segments);
    const get = Map.prototype.get;
    const has = Map.prototype.has;
    let probes = 0;
    Map.prototype.get = function (this: Map<unknown, unknown>, k: unknown) { probes++; return get.call(this, k); };
    Map.prototype.has = function (this: Map<unknown, unknown>, k: unknown) { probes++; return has.call(this, k); };
    let found = 0;
    try {
      for (const p of paths) if (table.match(p)) found++;
    } finally {
      Map.prototype.get = get;
      Map.prototype.has = has;
    }
    t.is(found, paths.length, 'every lookup finds its route');
    return probes / paths.length;
  };
  const small = probesPerLookup(100);
  const large = probesPerLookup(100_000);
  t.log(`${small} map probes per lookup at 100 routes, ${large} at 100,000`);
  t.true(small > 0, 'the table is a tree of maps (the count would be 0 for another structure: rewrite this test then)');
  t.is(large, small);
  t.true(large <= 6, 'about one probe per path segment (5 here)');
});
