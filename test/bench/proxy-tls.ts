// The proxy bench's HTTPS part (run by `npm run bench proxy` after the plain one; BENCH_TLS=only runs just this):
// HTTPS at the front door against nginx terminating TLS with the same certificate (one worker, keep-alive upstream)
// and a bare uWS SSLApp forwarder (floor-forwarder.mjs with the certificate: the floor), in the same run and in
// alternating rounds: a small GET over kept-alive TLS connections (wrk, 32 connections), WebSocket echo round trips
// over wss (ours and nginx), a new TLS connection's handshake (p50 of 400 sequential full TLS 1.3 handshakes, no
// resumption, by a node:tls client), and the hub's API over TLS against the same gateway's plain loopback port
// (Hub.hub_port: same process, so the difference is TLS). One P-256 certificate from a CA of the run's own.
import type { ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { join } from 'node:path';
import tls from 'node:tls';
import { REPO, sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { makeCa, makeLeaf } from '../tls/certs.js';
import {
  attempt, echoes, fmt, gatewayPids, measureHttp, medianOf, PATH, problems, ratio, ROUNDS, SECONDS, startBackend, startChild, startNginx,
  WARMUP_SECONDS, WRK, WS_CONNECTIONS, type Check, type HttpResult,
} from './proxy.js';
import { cpuMs, withChildren } from './tools.js';

const log = (line: string): void => console.log(`proxy tls: ${line}`);
const HANDSHAKES = Number(process.env.BENCH_TLS_HANDSHAKES ?? 400);
const ADMIN_TOKEN = 'bench-tls-admin-token-0123456789';
const API_PATH = '/hub/api/users/bench';

/** GET trusting the run's CA (the bench's first look at each URL). */
function get(url: string, ca: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = (url.startsWith('https:') ? https.get : http.get)(url, { ca, headers, servername: 'localhost', timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`${url} timed out`)));
    req.on('error', reject);
  });
}

/** p50 and p90 of `n` sequential new TLS connections (full handshakes: the client keeps no session), in ms. */
async function handshakes(port: number, ca: string, n: number, pids: () => number[]): Promise<{ p50: number; p90: number; cpuMs: number }> {
  const times: number[] = [];
  const cpu0 = cpuMs(pids());
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await new Promise<void>((resolve, reject) => {
      const s = tls.connect({ host: '127.0.0.1', port, ca, servername: 'localhost' }, () => {
        times.push(performance.now() - t0);
        s.destroy();
        resolve();
      });
      s.on('error', reject);
      s.setTimeout(5000, () => s.destroy(new Error('handshake timed out')));
    });
  }
  const cpu = (cpuMs(pids()) - cpu0) / n; // the server's CPU per handshake: steadier than the time on a busy machine
  times.sort((a, b) => a - b);
  return { p50: times[Math.floor(n * 0.5)], p90: times[Math.floor(n * 0.9)], cpuMs: cpu };
}

type Who = 'floor' | 'ours' | 'nginx';
const LABELS: Record<Who, string> = { floor: 'bare uWS SSLApp forwarder', ours: 'our gateway (HTTPS)', nginx: 'nginx (TLS)' };

export async function proxyTls(): Promise<void> {
  const earlier = problems.length; // the plain part's, already reported
  const ca = makeCa('Bench CA');
  const leaf = makeLeaf(ca, 'bench');
  const backend = await startBackend();
  let hub: HubUnderTest | undefined;
  let nginx: { proc: ChildProcess; url: string; dir: string } | undefined;
  let floor: ChildProcess | undefined;
  const cleanup = async () => {
    floor?.kill('SIGKILL');
    nginx?.proc.kill('SIGQUIT');
    backend.proc.kill('SIGKILL');
    await hub?.stop();
    if (nginx) {
      await sleep(300);
      for (const pid of withChildren(nginx.proc.pid)) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
      rmSync(nginx.dir, { recursive: true, force: true });
    }
    rmSync(ca.dir, { recursive: true, force: true });
  };
  const check: Check = (url, headers) => get(url, ca.pem, headers);
  try {
    hub = await startHub({
      config: {
        Hub: { ssl_cert: leaf.cert, ssl_key: leaf.key, services: [{ name: 'bench', url: `http://127.0.0.1:${backend.port}` }], api_tokens: { [ADMIN_TOKEN]: 'bench' } },
        Authenticator: { admin_users: ['bench'] },
      },
      healthTimeoutMs: 30_000,
    });
    await waitFor('the bench route over https', async () => ((await check(hub!.url + PATH).catch(() => ({ status: 0 }))).status === 200 ? true : undefined), 10_000);
    nginx = await startNginx(backend.port, { cert: leaf.cert, key: leaf.key, answers: async (url) => (await check(url).catch(() => ({ status: 0 }))).status === 200 });
    const floorStarted = await startChild('floor forwarder (TLS)', process.execPath, [join(REPO, 'test', 'bench', 'floor-forwarder.mjs'), String(backend.port), leaf.cert, leaf.key]);
    floor = floorStarted.proc;
    const urls: Record<Who, string> = { floor: `https://127.0.0.1:${floorStarted.firstLine}`, ours: hub.url, nginx: nginx.url };
    const ports: Record<Who, number> = { floor: Number(floorStarted.firstLine), ours: hub.port, nginx: Number(new URL(nginx.url).port) };
    const pids: Record<Who, () => number[]> = { floor: () => withChildren(floor!.pid), ours: () => gatewayPids(hub!), nginx: () => withChildren(nginx!.proc.pid) };
    const order: Who[] = ['floor', 'ours', 'nginx'];
    log(`wrk ${WRK.threads} threads, ${WRK.connections} connections over kept-alive TLS, ${SECONDS} s per run, GET ${PATH}; ${ROUNDS} alternating rounds, the median counts; 1 gateway process, nginx 1 worker`);

    const runs: { http: Partial<Record<Who, HttpResult[]>>; ws: Partial<Record<Who, number[]>>; hs: Partial<Record<Who, { p50: number; p90: number; cpuMs: number }[]>>; apiTls: HttpResult[]; apiPlain: HttpResult[] } = { http: {}, ws: {}, hs: {}, apiTls: [], apiPlain: [] };
    const apiOptions = { ...WRK, headers: { Authorization: `token ${ADMIN_TOKEN}` } };
    for (let round = 1; round <= ROUNDS; round++) {
      log(`round ${round} of ${ROUNDS}`);
      for (const k of order) {
        const r = await attempt(`https ${k}`, () => measureHttp(`through ${LABELS[k]}`, urls[k], WRK, pids[k], { check }));
        if (r) (runs.http[k] ??= []).push(r);
      }
      for (const k of ['ours', 'nginx'] as const) {
        const trips = await attempt(`wss ${k}`, async () => {
          await echoes(`${urls[k].replace('https', 'wss')}/services/bench/ws`, WARMUP_SECONDS, { ca: ca.pem, servername: 'localhost' });
          const cpu0 = cpuMs(pids[k]());
          const n = await echoes(`${urls[k].replace('https', 'wss')}/services/bench/ws`, SECONDS, { ca: ca.pem, servername: 'localhost' });
          log(`through ${LABELS[k].padEnd(28)} ${(n / SECONDS).toFixed(0).padStart(7)} wss echo round trips/s (${WS_CONNECTIONS} connections)  proxy CPU ${(((cpuMs(pids[k]()) - cpu0) * 1000) / n).toFixed(0)} µs/round trip`);
          return n / SECONDS;
        });
        if (trips !== undefined) (runs.ws[k] ??= []).push(trips);
      }
      for (const k of order) {
        const h = await attempt(`handshakes ${k}`, () => handshakes(ports[k], ca.pem, HANDSHAKES, pids[k]));
        if (h) {
          (runs.hs[k] ??= []).push(h);
          log(`handshake ${LABELS[k].padEnd(28)} p50 ${h.p50.toFixed(3)} ms  p90 ${h.p90.toFixed(3)} ms, server CPU ${(h.cpuMs * 1000).toFixed(0)} µs each (${HANDSHAKES} new TLS connections, one at a time)`);
        }
      }
      const tlsApi = await attempt('api over TLS', () => measureHttp(`API ${API_PATH} over TLS`, hub!.url, apiOptions, pids.ours, { check, path: API_PATH, body: null }));
      if (tlsApi) runs.apiTls.push(tlsApi);
      const plainApi = await attempt('api plain', () => measureHttp(`API ${API_PATH} plain (hub_port)`, hub!.internalUrl, apiOptions, pids.ours, { check, path: API_PATH, body: null }));
      if (plainApi) runs.apiPlain.push(plainApi);
    }
    const http = Object.fromEntries(order.map((k) => [k, medianOf(runs.http[k] ?? [], (r) => r.reqPerSec)])) as Partial<Record<Who, HttpResult>>;
    const ws = Object.fromEntries(order.map((k) => [k, medianOf(runs.ws[k] ?? [], (r) => r)])) as Partial<Record<Who, number>>;
    const hs = Object.fromEntries(order.map((k) => [k, medianOf(runs.hs[k] ?? [], (r) => r.p50)])) as Partial<Record<Who, { p50: number; p90: number; cpuMs: number }>>;
    const apiTls = medianOf(runs.apiTls, (r) => r.reqPerSec);
    const apiPlain = medianOf(runs.apiPlain, (r) => r.reqPerSec);

    console.log(`\nproxy tls summary (wrk ${WRK.threads} threads, ${WRK.connections} connections, ${SECONDS} s each; small GET over kept-alive TLS; every row the median of ${ROUNDS} alternating rounds)`);
    for (const k of order) console.log(`  ${LABELS[k].padEnd(28)} ${http[k] ? fmt(http[k]!) : 'n/a'}   wss ${ws[k]?.toFixed(0) ?? 'n/a'} round trips/s   handshake p50 ${hs[k]?.p50.toFixed(3) ?? 'n/a'} ms`);
    console.log(`  https ours/nginx: ${ratio(http.ours?.reqPerSec, http.nginx?.reqPerSec)} req/s (goal >= 0.85x); CPU per request ours/floor ${ratio(http.ours?.cpuUs, http.floor?.cpuUs)} (goal <= 1.05x), ours ${http.ours?.cpuUs?.toFixed(0) ?? 'n/a'} µs, floor ${http.floor?.cpuUs?.toFixed(0) ?? 'n/a'} µs, nginx ${http.nginx?.cpuUs?.toFixed(0) ?? 'n/a'} µs; req/s ours/floor ${ratio(http.ours?.reqPerSec, http.floor?.reqPerSec)}`);
    console.log(`  wss ours/nginx: ${ratio(ws.ours, ws.nginx)} round trips/s (goal >= 0.85x)`);
    console.log(`  handshake p50 ours/nginx: ${ratio(hs.ours?.p50, hs.nginx?.p50)} (goal <= 1.2x); floor ${hs.floor?.p50.toFixed(3) ?? 'n/a'} ms; server CPU per handshake floor / ours / nginx ${order.map((k) => `${((hs[k]?.cpuMs ?? NaN) * 1000).toFixed(0)}`).join(' / ')} µs`);
    console.log(`  API over TLS / plain (same gateway, Hub.hub_port): ${ratio(apiTls?.reqPerSec, apiPlain?.reqPerSec)} req/s (goal >= 0.85x), p99 ${apiTls?.p99.toFixed(2) ?? 'n/a'} vs ${apiPlain?.p99.toFixed(2) ?? 'n/a'} ms`);
  } finally {
    await cleanup();
  }
  if (problems.length > earlier) {
    console.log(`  PROBLEMS (${problems.length - earlier}):`);
    for (const p of problems.slice(earlier)) console.log(`    ${p}`);
    process.exitCode = 1;
  }
}
