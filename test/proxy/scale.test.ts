// A hub with 10,000 routes: the proxy-router writes them all, the gateway loads them all, every one
// forwards to the right place, and requests are as quick as with a handful of routes.
import test from 'ava';
import http from 'node:http';
import { startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { listen } from './helpers.js';

const ROUTES = 10_000;
const name = (i: number) => `svc${String(i).padStart(5, '0')}`;
let hub: HubUnderTest;
let api: ApiCall;
let backend: http.Server;
const ADMIN = randomToken();

test.before(async () => {
  backend = http.createServer((req, res) => res.end(req.url));
  const port = await listen(backend);
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, services: Array.from({ length: ROUTES }, (_, i) => ({ name: name(i), url: `http://127.0.0.1:${port}` })) },
      Authenticator: { admin_users: ['boss'] },
    },
    healthTimeoutMs: 60_000,
  });
  api = apiClient(hub.url);
});
test.after.always(async () => {
  await hub?.stop();
  backend?.closeAllConnections();
  backend?.close();
});

/** Latency percentiles (ms) of `n` sequential GETs of `path`. */
async function latency(path: string, n: number): Promise<{ p50: number; p99: number }> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await (await fetch(`${hub.url}${path}`)).arrayBuffer();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return { p50: times[Math.floor(n / 2)], p99: times[Math.floor(n * 0.99)] };
}

test('scale: 10,000 service routes are in the table, each forwards to its own path, lookups stay fast', async (t) => {
  const t0 = Date.now();
  const total = await waitFor('every route in the table', async () => {
    const r = await api('GET', '/proxy?limit=1', { token: ADMIN, headers: { accept: 'application/hub-pagination+json' } });
    return r.body?._pagination?.total === ROUTES + 1 ? r.body._pagination.total : undefined;
  }, 60_000, 200);
  t.is(total, ROUTES + 1);
  await waitFor('the last route on the gateway', async () => ((await fetch(`${hub.url}/services/${name(ROUTES - 1)}/`)).status === 200 ? true : undefined), 30_000);
  t.log(`table complete ${Date.now() - t0} ms after the hub was healthy`);

  // every route, 32 at a time
  const wrong: string[] = [];
  for (let i = 0; i < ROUTES; i += 32) {
    await Promise.all(Array.from({ length: Math.min(32, ROUTES - i) }, async (_, k) => {
      const path = `/services/${name(i + k)}/x`;
      const r = await fetch(`${hub.url}${path}`);
      const body = await r.text();
      if (r.status !== 200 || body !== path) wrong.push(`${path}: ${r.status} ${body.slice(0, 60)}`);
    }));
  }
  t.deepEqual(wrong, []);

  const first = await latency(`/services/${name(0)}/a`, 300);
  const last = await latency(`/services/${name(ROUTES - 1)}/a/b/c/d/e/f`, 300);
  t.log(`latency through the gateway: first route p50 ${first.p50.toFixed(2)} ms, last route p50 ${last.p50.toFixed(2)} ms (p99 ${last.p99.toFixed(2)})`);
  t.true(last.p50 < 5, 'a proxied request stays a matter of a millisecond or so');
});
