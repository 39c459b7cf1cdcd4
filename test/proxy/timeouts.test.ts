// The proxy's bounded waits, in process with short timeouts: a target that goes silent before or
// during its answer is given up on, and unreachable targets are reported to the proxy-router once.
// (The hub's own timeouts are minutes long; here the proxy is built with half a second.)
import test from 'ava';
import http from 'node:http';
import type { NatsConnection } from 'nats';
import uWS from 'uWebSockets.js';
import { createLogger } from '../../shared/log.js';
import { createActivityRecorder } from '../../services/gateway/proxy/activity.js';
import { createProxy } from '../../services/gateway/proxy/index.js';
import { RouteTable } from '../../services/gateway/proxy/table.js';
import { freePort } from '../harness.js';
import { listen } from './helpers.js';

const TIMEOUT_MS = 500;
const published: { subject: string; body: any }[] = [];
let gateway: string;
let listenSocket: uWS.us_listen_socket;
const backends: http.Server[] = [];

test.before(async () => {
  // the target accepts requests and then says nothing, or starts answering and then stalls
  const silent = http.createServer((req, res) => {
    if (req.url!.endsWith('/stall')) {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('a first chunk, then nothing\n');
    }
  });
  backends.push(silent);
  const table = new RouteTable();
  table.set({ routespec: '/services/silent/', target: `http://127.0.0.1:${await listen(silent)}`, data: { service: 'silent' } });
  table.set({ routespec: '/services/gone/', target: `http://127.0.0.1:${await freePort()}`, data: { service: 'gone' } });
  // NATS is the edge here: what the proxy publishes is recorded
  const nc = { publish: (subject: string, data: Uint8Array) => void published.push({ subject, body: JSON.parse(new TextDecoder().decode(data)) }) } as unknown as NatsConnection;
  const log = createLogger('test', 'silent');
  const proxy = createProxy({ routes: () => table, activity: createActivityRecorder(nc, 60_000, log), nc, log, connectTimeoutMs: TIMEOUT_MS, idleTimeoutMs: TIMEOUT_MS, keepAliveTimeoutMs: 4000 });
  const app = uWS.App().ws('/*', proxy.websocket).any('/*', (res, req) => {
    if (!proxy.handle(res, req)) res.writeStatus('404 Not Found').end();
  });
  listenSocket = await new Promise((resolve, reject) => app.listen('127.0.0.1', 0, (s) => (s ? resolve(s) : reject(new Error('no listen')))));
  gateway = `http://127.0.0.1:${uWS.us_socket_local_port(listenSocket as unknown as uWS.us_socket)}`;
});
test.after.always(() => {
  if (listenSocket) uWS.us_listen_socket_close(listenSocket);
  for (const b of backends) b.closeAllConnections(), b.close();
});

test('timeouts: a target that never answers is a 504 after the idle timeout', async (t) => {
  const t0 = Date.now();
  const r = await fetch(`${gateway}/services/silent/x`, { signal: AbortSignal.timeout(5000) });
  const waited = Date.now() - t0;
  t.is(r.status, 504);
  t.is((await r.json()).status, 504);
  t.true(waited >= TIMEOUT_MS - 50 && waited < TIMEOUT_MS * 4, `answered after ${waited} ms`);
});

test('timeouts: a target that stalls mid-answer is given up on, and the client sees a broken response', async (t) => {
  const r = await fetch(`${gateway}/services/silent/stall`, { signal: AbortSignal.timeout(5000) });
  t.is(r.status, 200);
  const t0 = Date.now();
  const err = await t.throwsAsync(r.text());
  t.not(err?.name, 'TimeoutError', 'cut by the gateway, not by the test\'s own deadline');
  t.true(Date.now() - t0 < TIMEOUT_MS * 4);
});

test('timeouts: an unreachable target is a 503 and is reported to the proxy-router once per interval', async (t) => {
  for (let i = 0; i < 3; i++) t.is((await fetch(`${gateway}/services/gone/x`)).status, 503);
  const reports = published.filter((p) => p.subject === 'hub.evt.route.unreachable');
  t.deepEqual(reports.map((r) => r.body.routespec), ['/services/gone/']);
});
