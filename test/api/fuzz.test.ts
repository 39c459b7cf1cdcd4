// Property-based: every route of the gateway's /hub/api table, as an admin and as a low-privilege user,
// with generated path segments (unicode, percent-encodings good and bad, '..', control characters, raw
// bytes), query strings and bodies (any JSON, the fields routes read with wrong types and huge numbers,
// nesting thousands deep, bytes that are not UTF-8). Whatever comes, the hub answers below 500; an error
// is JSON {status, message} naming the problem; a refused request changes no user, group, token or server.
// A fixed seed and run count keep it bounded (FUZZ_SEED / FUZZ_RUNS override them); a failure prints both.
// FUZZ_TRACE=1 prints every request and answer.
import test from 'ava';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { HubConfig } from '../../shared/config.js';
import { roleBook } from '../../shared/roles.js';
import { apiRoutes } from '../../services/gateway/api/index.js';
import type { ApiDeps } from '../../services/gateway/api/deps.js';
import { startHub, waitFor, type HubUnderTest } from '../harness.js';
import { rawRequest } from '../proxy/helpers.js';
import { apiClient, randomToken, type ApiCall } from './client.js';

const SEED = Number(process.env.FUZZ_SEED ?? 0x16);
const RUNS = Number(process.env.FUZZ_RUNS ?? 200);
const ADMIN = randomToken();
const LOW = randomToken();

let hub: HubUnderTest;
let api: ApiCall;

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: {
        api_tokens: { [ADMIN]: 'boss', [LOW]: 'low' }, allow_named_servers: true, active_server_limit: 1,
        services: [{ name: 'svc', api_token: randomToken() }],
      },
      Authenticator: { admin_users: ['boss'] },
    },
  });
  api = apiClient(hub.url);
  await api('POST', '/users', { token: ADMIN, body: { usernames: ['ann', 'bob'] } });
  await api('POST', '/groups/g1', { token: ADMIN, body: { users: ['ann'] } });
  await api('PUT', '/groups/g1/properties', { token: ADMIN, body: { color: 'blue' } });
  for (const u of ['ann', 'bob', 'low']) await api('POST', `/users/${u}/tokens`, { token: ADMIN, body: { note: 'fuzz' } });
});
test.after.always(async () => {
  await hub?.stop();
});

/** The route table itself, from the gateway's own code: a route added later is fuzzed too. */
function routeTable(): { method: string; path: string }[] {
  const config = JSON.parse(readFileSync(join(hub.dataDir, 'run', 'config.json'), 'utf8')) as HubConfig;
  return apiRoutes({ config, book: roleBook(config), services: new Map() } as unknown as ApiDeps).map((r) => ({ method: r.method, path: r.path }));
}

// ---- generators -----------------------------------------------------------------------------------
// Most requests are well-formed at the door (UTF-8, good percent-encodings) so they reach the routes' own
// checks; one in four carries exactly one encoding fault, in the path, the query or the body.

/** text with any code point but lone surrogates (encodeURIComponent refuses those), control characters included */
const anyText = (maxLength: number) => fc.oneof(
  fc.string({ unit: 'grapheme', maxLength }),
  fc.string({ unit: fc.integer({ min: 0, max: 0x10ffff }).filter((c) => c < 0xd800 || c > 0xdfff).map((c) => String.fromCodePoint(c)), maxLength }),
);

/** A path segment as it goes on the wire: well encoded (percent-encoded unicode, '..', control characters). */
const segment = (pool: string[]) => fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...pool).map(encodeURIComponent) },
  { weight: 3, arbitrary: anyText(12).map(encodeURIComponent) },
  { weight: 2, arbitrary: fc.constantFrom('..', '.', '', '%00', '%0A', '%7F', '%2F', '%2e%2e', '%20x', 'a%2Fb', '~', '%E2%80%AE', '%EF%BF%BD', 'a'.repeat(300), `a${'%C3%A9'.repeat(100)}`) },
);
/** What is not UTF-8 once percent-decoded, or not a percent-encoding at all; raw bytes (node:http sends the path as latin1). */
const badSegment = fc.oneof(
  fc.constantFrom('%', '%zz', '%FF%FE', '%C3', '%ED%A0%80', '%C0%AF', 'a%2'),
  // raw bytes led by one that never starts a UTF-8 sequence (a continuation byte, or 0xF8..0xFF)
  fc.tuple(fc.constantFrom(0x80, 0xbf, 0xf8, 0xff), fc.uint8Array({ maxLength: 3 })).map(([lead, b]) => String.fromCharCode(lead, ...b.map((x) => x | 0x80))),
);

/**
 * Path parameters mostly name what exists, so requests get past "not found" to the checks behind it. The
 * fuzzing identities themselves ('boss', and 'low' as admin) are left out of the admin's pools, so they are
 * never deleted.
 */
const POOLS: Record<'admin' | 'low', Record<string, string[]>> = {
  admin: { users: ['ann', 'bob', 'nobody'], groups: ['g1', 'nope'], services: ['svc', 'nope'], server: ['', 'x1', 'bad name', 'UPPER'], id: ['a3', 'a4', 'a5', 'a99', 'b1', 'a0'] },
  low: { users: ['low', 'ann'], groups: ['g1'], services: ['svc'], server: ['', 'x1', 'bad name'], id: ['a5', 'a3', 'a99'] },
};
/** the pool of a `:param`: `:name` by the collection before it (users, groups, services), others by their own name */
const poolOf = (who: 'admin' | 'low', parts: string[], i: number): string[] => {
  const param = parts[i].slice(1);
  return POOLS[who][param === 'name' ? parts[i - 1] : param] ?? ['x'];
};

const hugeNumbers = fc.constantFrom(8.7e12, 1e13, 2 ** 53, 1e300, -1, -1e300, 0.5, 1e-300, 2 ** 31, -(2 ** 31) - 1, 0, 1);
/** shallow, around the limit, or thousands deep (JSON.stringify overflows the stack from about 5,000 levels) */
const depth = fc.oneof(fc.integer({ min: 1, max: 100 }), fc.integer({ min: 3000, max: 20_000 }));
const deepJson = fc.tuple(depth, fc.constantFrom(['[', ']'], ['{"a":', '}'])).map(([n, [o, c]]) => `${o.repeat(n)}1${c.repeat(n)}`);
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 2, arbitrary: hugeNumbers },
  { weight: 1, arbitrary: anyText(20) },
  { weight: 1, arbitrary: fc.array(anyText(8), { maxLength: 4 }) },
  { weight: 1, arbitrary: fc.constantFrom('2024-01-01T00:00:00Z', new Date().toISOString(), '9999-12-31T23:59:59Z', '0000-01-01', 'yesterday', '') },
);
/** The keys routes read, so generated bodies get past "unknown key" and reach the type and range checks. */
const KEYS = ['usernames', 'admin', 'name', 'users', 'groups', 'expires_in', 'note', 'scopes', 'roles', 'last_activity', 'servers',
  'user_options', 'display_name', 'password', 'proxy', 'api_url', 'auth_token', 'color'];
const shapedBody = fc.dictionary(fc.constantFrom(...KEYS), anyValue, { maxKeys: 4 }).map((o) => JSON.stringify(o));
const deepBody: fc.Arbitrary<string> = fc.oneof(
  deepJson,
  fc.tuple(fc.constantFrom(...KEYS), deepJson).map(([k, d]) => `{"${k}": ${d}}`),
  // one deep value under several keys a route might read, past whatever key checks come first
  fc.tuple(fc.subarray(KEYS, { minLength: 1, maxLength: 4 }), deepJson).map(([ks, d]) => `{${ks.map((k) => `"${k}": ${d}`).join(', ')}}`),
);
const body: fc.Arbitrary<Buffer | undefined> = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 5, arbitrary: shapedBody.map((s) => Buffer.from(s)) },
  { weight: 2, arbitrary: fc.jsonValue().map((v) => Buffer.from(JSON.stringify(v) ?? 'null')) },
  { weight: 4, arbitrary: deepBody.map((s) => Buffer.from(s)) },
  { weight: 1, arbitrary: anyText(40).map((s) => Buffer.from(s)) },
);
const badBody: fc.Arbitrary<Buffer> = fc.oneof(
  fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from([0xff, ...b])),
  // JSON whose string holds bytes that are not UTF-8
  fc.tuple(fc.constantFrom(...KEYS), fc.uint8Array({ minLength: 1, maxLength: 6 })).map(([k, b]) => Buffer.concat([Buffer.from(`{"${k}": ["`), Buffer.from([0xff, ...b]), Buffer.from('"]}')])),
);

const queryValue = fc.oneof(
  anyText(10).map(encodeURIComponent),
  fc.constantFrom('1', '-1', '0', '99999999999999', '4294967297', '1e3', 'name', '-name', '--id', 'last_activity', '-last_activity', 'ready', 'active', 'inactive', '', '%', '%zz'),
);
const queryKey = fc.constantFrom('offset', 'limit', 'sort', 'state', 'include_stopped_servers', 'name_filter', 'x');
const query = fc.array(fc.tuple(queryKey, queryValue), { maxLength: 3 }).map((pairs) => pairs.map(([k, v]) => `${k}=${v}`));
const badQueryPair = fc.tuple(queryKey, fc.constantFrom('%FF', '%C3', '%ED%A0%80', '\xff', 'a\xe9')).map(([k, v]) => `${k}=${v}`);

// ---- what must hold ---------------------------------------------------------------------------------

/** Users, groups, tokens and servers as an admin sees them; what changes by itself (token use, timestamps) left out. */
async function snapshot(): Promise<string> {
  const owners = ['ann', 'bob', 'low', 'boss'];
  const [users, groups, ...tokenLists] = await Promise.all([
    api('GET', '/users', { token: ADMIN }), api('GET', '/groups', { token: ADMIN }),
    ...owners.map((u) => api('GET', `/users/${u}/tokens`, { token: ADMIN })),
  ]);
  const tokens = Object.fromEntries(owners.map((u, i) => {
    const r = tokenLists[i];
    // in id order: the API's order follows last use, which requests change without changing a token
    return [u, r.status === 200 ? r.body.api_tokens.map(({ last_activity: _a, ...t }: any) => t).sort((a: any, b: any) => a.id.localeCompare(b.id)) : r.status];
  }));
  const servers = (s: Record<string, any>) => Object.fromEntries(Object.entries(s ?? {}).map(([k, v]) => [k, { ready: v.ready, pending: v.pending, url: v.url, user_options: v.user_options }]));
  return JSON.stringify({
    users: (users.body as any[]).map((u) => ({ ...u, servers: servers(u.servers) })).sort((a, b) => (a.name < b.name ? -1 : 1)),
    groups: (groups.body as any[]).sort((a, b) => (a.name < b.name ? -1 : 1)),
    tokens,
  });
}

/** The users and group the pools name, created again when a request deleted or renamed them (outside the property). */
async function replenish(): Promise<void> {
  const users = new Set(((await api('GET', '/users', { token: ADMIN })).body as any[]).map((u) => u.name));
  const missing = ['ann', 'bob'].filter((n) => !users.has(n));
  if (missing.length) await api('POST', '/users', { token: ADMIN, body: { usernames: missing } });
  if ((await api('GET', '/groups/g1', { token: ADMIN })).status === 404) await api('POST', '/groups/g1', { token: ADMIN, body: { users: ['ann'] } });
}

/** Until no server is starting or stopping (bounded). */
async function settled(): Promise<void> {
  await waitFor('servers to settle', async () => {
    const users = (await api('GET', '/users', { token: ADMIN })).body as any[];
    return users.every((u) => Object.values(u.servers ?? {}).every((s: any) => s.pending === null)) ? true : undefined;
  }, 30_000, 100);
}

/** POST /shutdown that an admin may send and the hub would obey: skipped, it would end the test. */
function wouldShutDown(who: string, route: { path: string }, b: Buffer | undefined): boolean {
  if (who !== 'admin' || route.path !== '/shutdown') return false;
  try {
    const v = b?.length ? JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(b)) : {};
    return typeof v === 'object' && v !== null && !Array.isArray(v) && Object.entries(v).every(([k, x]) => ['servers', 'proxy'].includes(k) && typeof x === 'boolean');
  } catch {
    return false;
  }
}

test.serial('fuzz: every API route, any input, as admin and as a low-privilege user: no 5xx, a JSON error naming the problem, nothing changed by a refusal', async (t) => {
  const routes = routeTable();
  t.true(routes.length >= 30, `the route table has ${routes.length} routes`);
  t.log(`fast-check seed ${SEED}, ${RUNS} runs over ${routes.length} routes`);
  const hit = new Map<string, number>();
  const statuses = new Map<number, number>();
  // per route: who asks, a segment for each of its `:params` (from that identity's pool), a query, a body
  const requestTo = (route: { method: string; path: string }) => fc.tuple(
    fc.constantFrom<'admin' | 'low'>('admin', 'admin', 'low'),
    fc.constantFrom<'none' | 'path' | 'query' | 'body'>('none', 'none', 'none', 'none', 'none', 'none', 'path', 'query', 'body'),
  ).chain(([who, fault]) => {
    const parts = route.path.split('/').filter(Boolean);
    const params = parts.flatMap((s, i) => (s.startsWith(':') ? [i] : []));
    const segs = parts.map((s, i) => (s.startsWith(':') ? segment(poolOf(who, parts, i)) : fc.constant(s)));
    return fc.record({
      who: fc.constant(who),
      fault: fc.constant(fault),
      // a fault in the path goes into one of the parameters, or after the path when it has none
      segs: fault === 'path'
        ? fc.tuple(fc.tuple(...segs), badSegment, fc.nat()).map(([ss, bad, n]) => (params.length ? ss.map((x, i) => (i === params[n % params.length] ? bad : x)) : [...ss, bad]))
        : fc.tuple(...segs),
      q: fault === 'query' ? fc.tuple(query, badQueryPair).map(([ps, bad]) => `?${[...ps, bad].join('&')}`) : query.map((ps) => (ps.length ? `?${ps.join('&')}` : '')),
      b: fault === 'body' ? badBody : body,
    });
  });
  // The state as it stands: read once at the start and again after each request that succeeded, so a
  // refusal costs one read (compared with this) and a success one read (the new state).
  let current = await snapshot();
  const property = (route: { method: string; path: string }) => fc.asyncProperty(requestTo(route), async ({ who, fault, segs, q, b }) => {
    fc.pre(!wouldShutDown(who, route, b));
    const path = `/hub/api${segs.length ? `/${segs.join('/')}` : ''}${q}`;
    const headers: Record<string, string> = { authorization: `token ${who === 'admin' ? ADMIN : LOW}` };
    if (b) Object.assign(headers, { 'content-type': 'application/json', 'content-length': String(b.length) });
    const r = await rawRequest(hub.port, route.method, path, headers, b);
    const key = `${route.method} ${route.path}`;
    hit.set(key, (hit.get(key) ?? 0) + 1);
    statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
    const text = r.body.toString('utf8');
    const where = `${route.method} ${JSON.stringify(path)} as ${who} with ${b ? JSON.stringify(b.toString('latin1').slice(0, 200)) : 'no body'} → ${r.status} ${text.slice(0, 300)}`;
    if (process.env.FUZZ_TRACE) console.error(where.slice(0, 250));
    if (r.status >= 500) throw new Error(`5xx: ${where}`);
    // what is not UTF-8 (or not a percent-encoding) is refused at the door, whatever the route and whoever asks
    if (fault !== 'none' && !(r.status === 400 && /UTF-8|percent-encoding/.test(text))) throw new Error(`an encoding fault in the ${fault} was not refused: ${where}`);
    if (r.status < 400) {
      if (r.status === 202) await settled(); // a start or stop still under way finishes before the next comparison
      await replenish();
      current = await snapshot();
      return;
    }
    let err: any;
    try {
      err = JSON.parse(text);
    } catch {
      throw new Error(`error is not JSON: ${where}`);
    }
    if (err?.status !== r.status || typeof err.message !== 'string' || !err.message.trim()) throw new Error(`error body is not {status, message}: ${where}`);
    const after = await snapshot();
    if (after !== current) throw new Error(`a refused request changed state: ${where}\nbefore ${current}\nafter  ${after}`);
  });

  // every route gets its share of the runs (and its own seed), so none is left undriven by chance
  const perRoute = Math.max(2, Math.ceil(RUNS / routes.length));
  const started = Date.now();
  for (const [i, route] of routes.entries()) {
    const seed = SEED + i;
    const out = await fc.check(property(route), { seed, numRuns: perRoute, endOnFailure: true, maxSkipsPerRun: 100 });
    if (out.failed) {
      const why = out.errorInstance instanceof Error ? out.errorInstance.message : String(out.errorInstance);
      t.fail(`fuzz failed on ${route.method} ${route.path}: seed ${seed}, path ${out.counterexamplePath} (replay: FUZZ_SEED=${SEED} FUZZ_RUNS=${RUNS})\n${why.slice(0, 6000)}`);
      return;
    }
  }
  t.log(`${perRoute} runs per route in ${Date.now() - started} ms; statuses ${JSON.stringify(Object.fromEntries(statuses))}`);
  t.deepEqual(routes.map((r) => `${r.method} ${r.path}`).filter((k) => !hit.has(k)), [], 'routes never driven');
  t.is((await fetch(`${hub.url}/hub/health`)).status, 200);
});
