// Proxy benchmark: a small GET through our gateway to a backend, against the same backend directly,
// through the floor forwarder (floor-forwarder.mjs: the least a uWS + node:net forwarder can do), through
// nginx (Debian's, one worker, keep-alive upstream) and through configurable-http-proxy (Debian's) in the
// same run, with wrk (32 connections, then 1); the CPU each proxy spent per request; then WebSocket echo
// round trips per second (all but the floor); then the gateway's RSS before and after 1,000,000 proxied
// requests. A second hub with Hub.subdomain_host routes the same service by host (`bench--service.hub.localhost`,
// wrk sending that Host), so a subdomain route is measured beside the path route in the same rounds.
// BENCH_SECONDS sets each wrk run (default 10); BENCH_PROXY_REQUESTS the size of the memory run
// (default 1,000,000); BENCH_ROUNDS the alternating rounds whose median counts (3); BENCH_GATEWAYS our
// gateway processes and nginx's workers (1).
import { spawn, type ChildProcess } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import WebSocket from 'ws';
import { freePort, REPO, sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { failures, wrk, type WrkOptions, type WrkResult } from './wrk.js';
import { aptInstall, baselineCheckout, cpuMs, onPath, withChildren } from './tools.js';
import { proxyTls } from './proxy-tls.js';

export const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const MEMORY_REQUESTS = Number(process.env.BENCH_PROXY_REQUESTS ?? 1_000_000);
export const WRK = { threads: 2, connections: 32, seconds: SECONDS };
export const WS_CONNECTIONS = 32;
/** Each proxy is warmed up (JIT, pools, buffers) before each measured run, the same for all of them. */
export const WARMUP_SECONDS = Math.max(1, Math.round(SECONDS / 4));
/**
 * Rounds of the 32-connection and WebSocket runs, each round going through every proxy in turn; the median
 * round counts. One pass in a fixed order lets the machine's drift favour whoever comes first.
 */
export const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3));
/** Gateway processes of our hub (Supervisor.gateways) and, to compare like with like, nginx's workers. */
const GATEWAYS = Math.max(1, Number(process.env.BENCH_GATEWAYS ?? 1));

/** The round with the median value of `by` (the middle one of an odd count). */
export function medianOf<T>(runs: T[], by: (r: T) => number): T | undefined {
  const sorted = [...runs].sort((a, b) => by(a) - by(b));
  return sorted[Math.floor((sorted.length - 1) / 2)];
}
export const PATH = '/services/bench/hello';
const log = (line: string): void => console.log(`proxy: ${line}`);
export const problems: string[] = [];

// ---- tools ----

const NGINX = '/usr/sbin/nginx';

function ensureTools(): void {
  for (const [bin, pkg] of [['wrk', 'wrk'], ['configurable-http-proxy', 'node-configurable-http-proxy'], ['nginx', 'nginx']]) {
    if (!onPath(bin)) aptInstall(pkg, log);
    if (!onPath(bin)) throw new Error(`${bin} is missing: install it with \`apt-get install -y ${pkg}\``);
  }
}

function rssMb(pid: number | null | undefined): number {
  return pid ? Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024 : 0;
}

/** A child process that prints its port as its first line. */
export async function startChild(label: string, cmd: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ proc: ChildProcess; firstLine: string }> {
  const proc = spawn(cmd, args, { cwd: REPO, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d) => { out += d; });
  proc.stderr!.on('data', (d) => { out += d; });
  const firstLine = await waitFor(`${label} to start`, async () => {
    if (proc.exitCode !== null) throw new Error(`${label} exited: ${out.slice(0, 500)}`);
    return out.includes('\n') ? out.slice(0, out.indexOf('\n')) : undefined;
  }, 15_000);
  return { proc, firstLine };
}

// ---- the backend: node:http answering a small body, plus a `ws` echo server ----

const BACKEND = `
const http = require('node:http');
const { WebSocketServer } = require(process.env.WS_MODULE);
const server = http.createServer((req, res) => { res.writeHead(200, { 'content-type': 'text/plain' }); res.end('hello, world\\n'); });
new WebSocketServer({ server }).on('connection', (ws) => ws.on('message', (d, binary) => ws.send(d, { binary })));
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
`;

export async function startBackend(): Promise<{ proc: ChildProcess; port: number }> {
  const wsModule = createRequire(join(REPO, 'package.json')).resolve('ws');
  const { proc, firstLine } = await startChild('backend', process.execPath, ['-e', BACKEND], { WS_MODULE: wsModule });
  return { proc, port: Number(firstLine) };
}

/** configurable-http-proxy with one route, set through its REST API as the established hub does. */
async function startChp(backendPort: number): Promise<{ proc: ChildProcess; url: string }> {
  const [port, apiPort] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const proc = spawn('configurable-http-proxy', ['--ip', '127.0.0.1', '--port', String(port), '--api-ip', '127.0.0.1', '--api-port', String(apiPort), '--log-level', 'warn'], {
    env: { ...process.env, NODE_PATH: '/usr/share/nodejs', CONFIGPROXY_AUTH_TOKEN: token }, stdio: 'ignore',
  });
  await waitFor('configurable-http-proxy to add the route', async () => {
    const r = await fetch(`http://127.0.0.1:${apiPort}/api/routes/services/bench`, {
      method: 'POST', headers: { authorization: `token ${token}`, 'content-type': 'application/json' }, body: JSON.stringify({ target: `http://127.0.0.1:${backendPort}` }),
    });
    return r.status === 201 ? true : undefined;
  }, 15_000, 200);
  return { proc, url: `http://127.0.0.1:${port}` };
}

/**
 * nginx as a reference proxy: as many workers as our gateway has processes (BENCH_GATEWAYS, 1), keep-alive
 * connections to the backend, forwarding headers and WebSocket upgrades like ours; its config, logs, pid and
 * temp files in a temp dir; in the foreground.
 */
export async function startNginx(backendPort: number, tls?: { cert: string; key: string; answers: (url: string) => Promise<boolean> }): Promise<{ proc: ChildProcess; url: string; dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-nginx-'));
  for (const d of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(dir, d));
  const port = await freePort();
  writeFileSync(join(dir, 'nginx.conf'), `
worker_processes ${GATEWAYS};
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream backend { server 127.0.0.1:${backendPort}; keepalive 64; }
  map $http_upgrade $connection_upgrade { default upgrade; '' ''; }
  server {
    listen 127.0.0.1:${port}${tls ? ` ssl;
    ssl_certificate ${tls.cert};
    ssl_certificate_key ${tls.key};
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_tickets off` : ''};
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $http_host;
      proxy_read_timeout 300s;
    }
  }
}
`);
  const proc = spawn(NGINX, ['-p', dir, '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr!.on('data', (d) => { err += d; });
  const url = `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  await waitFor('nginx to answer', async () => {
    if (proc.exitCode !== null) throw new Error(`nginx exited: ${err.slice(0, 500)}`);
    return (tls ? await tls.answers(url + PATH) : (await fetch(url + PATH)).status === 200) ? true : undefined;
  }, 15_000, 100);
  return { proc, url, dir };
}

// ---- measurements ----

export interface HttpResult extends WrkResult {
  /** CPU the proxy's processes spent per request, in µs (undefined for the backend alone) */
  cpuUs?: number;
}

/** The answer a measured URL must give first (status, body): fetch by default; the HTTPS part passes its own (its CA). */
export type Check = (url: string, headers?: Record<string, string>) => Promise<{ status: number; body: string }>;
const fetchCheck: Check = async (url, headers) => {
  const r = await fetch(url, { headers, signal: AbortSignal.timeout(10_000) }); // a stuck proxy fails its row, not the bench
  return { status: r.status, body: await r.text() };
};

/** The check for a route by host: one GET with the Host wrk sends (fetch cannot set it), bounded. */
const hostCheck: Check = (url, headers = {}) => new Promise((resolve, reject) => {
  const req = httpRequest(url, { headers: { host: headers.Host }, timeout: 10_000 }, (res) => {
    let body = '';
    res.setEncoding('utf8');
    res.on('data', (d) => { body += d; });
    res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
  });
  req.on('timeout', () => req.destroy(new Error('no answer in 10 s')));
  req.on('error', reject);
  req.end();
});

export async function measureHttp(label: string, base: string, options: WrkOptions = WRK, pids?: () => number[],
  { path = PATH, check = fetchCheck, body = 'hello, world\n' }: { path?: string; check?: Check; body?: string | null } = {}): Promise<HttpResult> {
  const first = await check(base + path, options.headers);
  if (first.status !== 200 || (body !== null && first.body !== body)) throw new Error(`${label}: ${path} answered ${first.status}: ${first.body.slice(0, 200)}`);
  await wrk(base + path, { ...options, seconds: WARMUP_SECONDS });
  const cpu0 = pids ? cpuMs(pids()) : 0;
  const r: HttpResult = await wrk(base + path, options);
  if (pids && r.requests) r.cpuUs = ((cpuMs(pids()) - cpu0) * 1000) / r.requests;
  if (failures(r) > 0) {
    const line = `${label}: ${r.non2xx} error responses and ${failures(r) - r.non2xx} socket errors out of ${r.requests}: THESE FIGURES ARE MEANINGLESS`;
    console.log(`!!!!! ${line}`);
    problems.push(line);
  }
  log(`${label.padEnd(24)} ${options.connections} conn ${fmt(r)}`);
  return r;
}

export const fmt = (r: HttpResult): string =>
  `${r.reqPerSec.toFixed(0).padStart(7)} req/s  p50 ${r.p50.toFixed(3).padStart(7)} ms  p99 ${r.p99.toFixed(2).padStart(6)} ms${r.cpuUs === undefined ? '' : `  proxy CPU ${r.cpuUs.toFixed(0).padStart(4)} µs/req`}`;

/** WS_CONNECTIONS clients, each sending a message and waiting for its echo, for SECONDS (after a warm-up); round trips per second. */
async function measureWs(label: string, url: string, pids?: () => number[]): Promise<number> {
  await echoes(url, WARMUP_SECONDS);
  const cpu0 = pids ? cpuMs(pids()) : 0;
  const trips = await echoes(url, SECONDS);
  const cpu = pids && trips ? `  proxy CPU ${(((cpuMs(pids()) - cpu0) * 1000) / trips).toFixed(0).padStart(4)} µs/round trip` : '';
  const perSecond = trips / SECONDS;
  log(`${label.padEnd(24)} ${perSecond.toFixed(0).padStart(7)} WebSocket echo round trips/s (${WS_CONNECTIONS} connections)${cpu}`);
  return perSecond;
}

export async function echoes(url: string, seconds: number, options: WebSocket.ClientOptions = {}, payload: string | Buffer = 'x'.repeat(64)): Promise<number> {
  const clients = await Promise.all(Array.from({ length: WS_CONNECTIONS }, () => new Promise<WebSocket>((resolve, reject) => {
    const ws = new WebSocket(url, { handshakeTimeout: 10_000, ...options });
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  })));
  const deadline = Date.now() + seconds * 1000;
  let trips = 0;
  let stuck: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      Promise.all(clients.map((ws) => new Promise<void>((resolve) => {
        ws.on('message', () => {
          trips++;
          if (Date.now() < deadline) ws.send(payload);
          else resolve();
        });
        ws.send(payload);
      }))),
      new Promise<never>((_, reject) => { stuck = setTimeout(() => reject(new Error('an echo did not come back within 10 s of the end')), seconds * 1000 + 10_000); }),
    ]);
  } finally {
    clearTimeout(stuck);
    for (const ws of clients) ws.terminate();
  }
  return trips;
}

/** wrk against the gateway until `total` requests were proxied; RSS before (after a warm-up) and after. */
async function measureMemory(hub: HubUnderTest, total: number): Promise<{ before: number; after: number; settled: number; requests: number }> {
  const gateway = hub.children().gateway;
  await wrk(hub.url + PATH, { ...WRK, seconds: 10 }); // warm-up: the heap settles at its working size
  const before = rssMb(gateway);
  let requests = 0;
  while (requests < total) {
    const r = await wrk(hub.url + PATH, { ...WRK, seconds: Math.min(30, Math.max(2, Math.ceil((total - requests) / 9000))) });
    if (failures(r) > 0) problems.push(`memory run: ${failures(r)} failed requests`);
    requests += r.requests;
    log(`memory run: ${requests} requests so far, gateway RSS ${rssMb(gateway).toFixed(1)} MB`);
  }
  const after = rssMb(gateway);
  await sleep(3000);
  return { before, after, settled: rssMb(gateway), requests };
}

export async function attempt<T>(what: string, f: () => Promise<T>): Promise<T | undefined> {
  try {
    return await f();
  } catch (e) {
    const line = `${what} failed: ${(e as Error).message.split('\n').slice(0, 10).join(' | ')}`;
    console.log(`!!!!! ${line}`);
    problems.push(line);
    return undefined;
  }
}

/** Every gateway process of a hub (`gateway`, `gateway-2`, ...). */
export const gatewayPids = (hub: HubUnderTest): number[] =>
  Object.entries(hub.children()).filter(([id, pid]) => /^gateway(-\d+)?$/.test(id) && pid).flatMap(([, pid]) => withChildren(pid!));

type Who = 'direct' | 'floor' | 'ours' | 'ours+token' | 'subdomain' | 'nginx' | 'chp' | 'baseline' | 'baseline+token';
const BASELINE = process.env.BENCH_BASELINE;
const LABELS: Record<Who, string> = {
  direct: 'backend directly', floor: 'floor forwarder', ours: 'our gateway', 'ours+token': 'our gateway, hub token', subdomain: 'our gateway, by host', nginx: 'nginx', chp: 'configurable-http-proxy',
  baseline: `our gateway at ${BASELINE}`, 'baseline+token': `our gateway at ${BASELINE}, hub token`,
};
/**
 * The `+token` rows send a valid hub token (Authorization: token …, a config token of the bench's hubs) on every
 * request: what the gateway's check of tokens at the front door costs (proxy/token-gate.ts), against the same
 * gateway without one and, with BENCH_BASELINE, against a gateway that does not check.
 */
const BENCH_TOKEN = randomBytes(16).toString('hex');
const optionsOf = (k: Who, options: WrkOptions): WrkOptions => (k.endsWith('+token') ? { ...options, headers: { authorization: `token ${BENCH_TOKEN}` } } : options);
export const ratio = (a: number | undefined, b: number | undefined, digits = 2): string => (a !== undefined && b ? `${(a / b).toFixed(digits)}x` : 'n/a');

export async function proxy(): Promise<void> {
  ensureTools();
  // BENCH_TLS: "only" runs just the HTTPS part (proxy-tls.ts), "0" skips it; by default it follows the plain part
  if (process.env.BENCH_TLS === 'only') return proxyTls();
  await proxyPlain();
  if (process.env.BENCH_TLS !== '0') await proxyTls();
}

async function proxyPlain(): Promise<void> {
  const backend = await startBackend();
  let hub: HubUnderTest | undefined;
  let then: HubUnderTest | undefined; // this hub at BENCH_BASELINE
  let sub: HubUnderTest | undefined; // this hub with Hub.subdomain_host: the service routed by host
  let chp: { proc: ChildProcess; url: string } | undefined;
  let nginx: { proc: ChildProcess; url: string; dir: string } | undefined;
  let floor: ChildProcess | undefined;
  const cleanup = async () => {
    chp?.proc.kill('SIGKILL');
    floor?.kill('SIGKILL');
    nginx?.proc.kill('SIGQUIT');
    backend.proc.kill('SIGKILL');
    await hub?.stop();
    await then?.stop();
    await sub?.stop();
    if (nginx) {
      await sleep(300);
      for (const pid of withChildren(nginx.proc.pid)) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
      rmSync(nginx.dir, { recursive: true, force: true });
    }
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => void cleanup().then(() => process.exit(130)));
  try {
    const benchConfig = { Hub: { services: [{ name: 'bench', url: `http://127.0.0.1:${backend.port}` }], api_tokens: { [BENCH_TOKEN]: 'bench-user' } }, Supervisor: { gateways: GATEWAYS } };
    hub = await startHub({ config: benchConfig, healthTimeoutMs: 30_000 });
    await waitFor('the bench route', async () => ((await fetch(hub!.url + PATH)).status === 200 ? true : undefined), 10_000);
    const subPort = await freePort();
    const serviceHost = `bench--service.hub.localhost:${subPort}`;
    sub = await startHub({
      config: { ...benchConfig, Hub: { ...benchConfig.Hub, subdomain_host: `http://hub.localhost:${subPort}` } }, healthTimeoutMs: 30_000,
      reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port: subPort, natsPort: await freePort() },
    });
    await waitFor('the bench route by host', async () => ((await hostCheck(sub!.url + PATH, { Host: serviceHost })).status === 200 ? true : undefined), 10_000);
    if (BASELINE) {
      then = await startHub({ config: benchConfig, healthTimeoutMs: 30_000, repo: baselineCheckout(BASELINE, log) });
      await waitFor('the bench route of the baseline', async () => ((await fetch(then!.url + PATH)).status === 200 ? true : undefined), 10_000);
    }
    chp = await startChp(backend.port);
    nginx = await startNginx(backend.port);
    const floorStarted = await startChild('floor forwarder', process.execPath, [join(REPO, 'test', 'bench', 'floor-forwarder.mjs'), String(backend.port)]);
    floor = floorStarted.proc;
    const urls: Record<Who, string> = {
      direct: `http://127.0.0.1:${backend.port}`, floor: `http://127.0.0.1:${floorStarted.firstLine}`, ours: hub.url, 'ours+token': hub.url, subdomain: sub.url, nginx: nginx.url, chp: chp.url,
      baseline: then?.url ?? '', 'baseline+token': then?.url ?? '',
    };
    const pids: Record<Who, (() => number[]) | undefined> = {
      direct: undefined, floor: () => withChildren(floor!.pid), ours: () => gatewayPids(hub!), 'ours+token': () => gatewayPids(hub!), subdomain: () => gatewayPids(sub!), nginx: () => withChildren(nginx!.proc.pid),
      chp: () => withChildren(chp!.proc.pid), baseline: () => gatewayPids(then!), 'baseline+token': () => gatewayPids(then!),
    };
    const order: Who[] = ['direct', 'floor', 'ours', 'ours+token', 'subdomain', ...(then ? ['baseline' as const, 'baseline+token' as const] : []), 'nginx', 'chp'];
    // the floor forwarder relays no WebSocket; ws sends no Host of ours; the token rows measure HTTP only
    const webSockets = order.filter((k) => k !== 'floor' && k !== 'subdomain' && !k.endsWith('+token'));
    /** what wrk sends besides: a hub token for the +token rows, the service's Host for the subdomain hub */
    // `Host` as wrk spells it: another spelling would be a second Host header beside wrk's own (and the hub's host then)
    const withHeaders = (k: Who, options: WrkOptions): WrkOptions => (k === 'subdomain' ? { ...options, headers: { Host: serviceHost } } : optionsOf(k, options));
    const checkOf = (k: Who) => (k === 'subdomain' ? { check: hostCheck } : {});
    log(`wrk ${WRK.threads} threads, ${WRK.connections} connections, ${SECONDS} s per run, GET ${PATH} (13-byte body); ${GATEWAYS} gateway process(es), nginx ${GATEWAYS} worker(s)`);
    /** ROUNDS rounds, each through every proxy in `order`; per proxy the round with the median `by`. */
    const inRounds = async <T>(what: string, measure: (k: Who) => Promise<T>, by: (r: T) => number, who = order): Promise<Partial<Record<Who, T>>> => {
      const runs: Partial<Record<Who, T[]>> = {};
      for (let round = 1; round <= ROUNDS; round++) {
        if (ROUNDS > 1) log(`${what}: round ${round} of ${ROUNDS}`);
        for (const k of who) {
          const r = await attempt(`${what} ${k}`, () => measure(k));
          if (r !== undefined) (runs[k] ??= []).push(r);
        }
      }
      const out: Partial<Record<Who, T>> = {};
      for (const k of who) out[k] = medianOf(runs[k] ?? [], by);
      return out;
    };
    const http = await inRounds('32 connections', (k) => measureHttp(`through ${LABELS[k]}`, urls[k], withHeaders(k, WRK), pids[k], checkOf(k)), (r) => r.reqPerSec);
    // unloaded: one connection, one request at a time, so latency is the proxy's own cost, not queueing
    const one = { threads: 1, connections: 1, seconds: Math.max(2, Math.ceil(SECONDS / 2)) };
    const idle = await inRounds('1 connection', (k) => measureHttp(`through ${LABELS[k]}`, urls[k], withHeaders(k, one), pids[k], checkOf(k)), (r) => r.p50);
    const ws = await inRounds('ws', (k) => measureWs(`through ${LABELS[k]}`, `${urls[k].replace('http', 'ws')}/services/bench/ws`, pids[k]), (r) => r, webSockets);
    const memory = await attempt('memory run', () => measureMemory(hub!, MEMORY_REQUESTS));

    console.log(`\nproxy summary (wrk ${WRK.threads} threads, ${WRK.connections} connections, ${SECONDS} s each; small GET; every row the median of ${ROUNDS} alternating rounds)`);
    for (const k of order) console.log(`  ${LABELS[k].padEnd(26)} ${http[k] ? fmt(http[k]!) : 'n/a'}   ws ${ws[k]?.toFixed(0) ?? 'n/a'} round trips/s`);
    for (const k of order) console.log(`  1 connection: ${LABELS[k].padEnd(26)} ${idle[k] ? fmt(idle[k]!) : 'n/a'}`);
    const o = http.ours;
    console.log(`  by host/by path: ${ratio(http.subdomain?.reqPerSec, o?.reqPerSec)} req/s, proxy CPU ${http.subdomain?.cpuUs?.toFixed(0) ?? 'n/a'} vs ${o?.cpuUs?.toFixed(0) ?? 'n/a'} µs/req (goal: a subdomain route costs no more than a path route)`);
    console.log(`  ours/nginx: ${ratio(o?.reqPerSec, http.nginx?.reqPerSec)} req/s (goal >= 0.8x), p99 ${ratio(o?.p99, http.nginx?.p99)} of nginx's (goal <= 1.5x)`);
    console.log(`  ours/chp:   ${ratio(o?.reqPerSec, http.chp?.reqPerSec, 1)} req/s (goal >= 5x), p99 ${ratio(o?.p99, http.chp?.p99)} of chp's`);
    if (idle.ours && idle.direct) console.log(`  added p50 over direct at 1 connection: ${(idle.ours.p50 - idle.direct.p50).toFixed(3)} ms (goal <= 0.1 ms); nginx ${idle.nginx ? (idle.nginx.p50 - idle.direct.p50).toFixed(3) : 'n/a'} ms, chp ${idle.chp ? (idle.chp.p50 - idle.direct.p50).toFixed(3) : 'n/a'} ms`);
    console.log(`  floor forwarder (uWS in, net out, nothing checked or forwarded but method, path, Host, status and body): ` +
      `floor/nginx ${ratio(http.floor?.reqPerSec, http.nginx?.reqPerSec)} req/s, ours/floor ${ratio(o?.reqPerSec, http.floor?.reqPerSec)}; ` +
      `1 connection added p50 ${idle.floor && idle.direct ? (idle.floor.p50 - idle.direct.p50).toFixed(3) : 'n/a'} ms`);
    console.log(`  ws ours/chp: ${ratio(ws.ours, ws.chp)} (goal >= 2x); ours/nginx ${ratio(ws.ours, ws.nginx)}; ` +
      `no proxy at all (backend directly)/chp ${ratio(ws.direct, ws.chp)}, nginx/chp ${ratio(ws.nginx, ws.chp)}`);
    console.log(`  a hub token on every request (checked at the front door): ${ratio(http['ours+token']?.reqPerSec, o?.reqPerSec)} of the rate without` +
      `${then ? `; at ${BASELINE} (not checked) ${ratio(http['baseline+token']?.reqPerSec, http.baseline?.reqPerSec)}; now/then with the token ${ratio(http['ours+token']?.reqPerSec, http['baseline+token']?.reqPerSec)}` : ''}`);
    if (then) {
      console.log(`  now/then (${BASELINE}): ${ratio(o?.reqPerSec, http.baseline?.reqPerSec)} req/s, p99 ${ratio(o?.p99, http.baseline?.p99)}; ` +
        `1 connection p50 ${ratio(idle.ours?.p50, idle.baseline?.p50)}; ws ${ratio(ws.ours, ws.baseline)}`);
    }
    if (memory) {
      console.log(`  gateway RSS: ${memory.before.toFixed(1)} MB after warm-up, ${memory.after.toFixed(1)} MB after ${memory.requests} proxied requests, ${memory.settled.toFixed(1)} MB 3 s later`);
    }
  } finally {
    await cleanup();
  }
  if (problems.length) {
    console.log(`  PROBLEMS (${problems.length}):`);
    for (const p of problems) console.log(`    ${p}`);
    process.exitCode = 1;
  }
}
