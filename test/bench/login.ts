// Login benchmark: what the hub adds to a password login over the backend that checks the password, for ldap and
// for pam, in the same run. Through the hub: the login form's POST /hub/login with _xsrf (a visitor who already has
// the form), sequential, successful logins (PAM delays only failures; lockouts never count successes). The backend
// alone, interleaved login by login with the hub's so both see the same machine: for ldap a bind of the same person
// with ldapts on a connection of its own (what any LDAP login costs at least) and the hub's ldap backend called
// in-process (that bind plus the read of the person's entry); for pam the hub's pam backend in-process
// (pam_authenticate and pam_acct_mgmt in its worker pool, with a fresh deadline each time). Needs root (a Unix
// account is made and removed) and slapd (`node scripts/setup.mjs --for-tests`). BENCH_LOGINS sets N (default 200).
// Beside the times, the CPU each hub process spent a login (from /proc, after the warm-up): where the added time goes.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'ldapts';
import { validateConfig } from '../../shared/config.js';
import { createLogger } from '../../shared/log.js';
import { freePort, REPO, startHub, type HubUnderTest } from '../harness.js';
import { startSlapd, type Slapd } from '../auth/slapd.js';
import { cpuMs } from './tools.js';
import { createLdapAuthenticator } from '../../services/auth/authenticators/ldap.js';
import { createPamAuthenticator } from '../../services/auth/authenticators/pam.js';
import type { Authenticator } from '../../services/auth/authenticators/contract.js';

const N = Number(process.env.BENCH_LOGINS ?? 200);
const WARMUP = 20;
const TARGET_ADDED_MS = 2;
const log = (line: string): void => console.log(`login: ${line}`);
const quiet = createLogger('bench-login', 'silent');

const percentile = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const fmt = (xs: number[]) => `p50 ${percentile(xs, 50).toFixed(2)} ms, p90 ${percentile(xs, 90).toFixed(2)} ms, p99 ${percentile(xs, 99).toFixed(2)} ms`;

/** A visitor with the login form in hand: one kept-alive connection, the form's XSRF cookie, and timed POSTs. */
async function formPoster(hubUrl: string): Promise<(username: string, password: string) => Promise<number>> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const u = new URL(hubUrl);
  const request = (method: string, path: string, headers: Record<string, string>, body?: string) =>
    new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
      const req = http.request({ host: u.hostname, port: u.port, path, method, headers, agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString() }));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.setTimeout(20_000, () => req.destroy(new Error(`${method} ${path}: no answer in 20 s`)));
      req.end(body);
    });
  const form = await request('GET', '/hub/login', { accept: 'text/html' });
  const xsrf = /name="_xsrf"[^>]*value="([^"]*)"/.exec(form.body)?.[1];
  if (form.status !== 200 || !xsrf) throw new Error(`the login form: ${form.status}`);
  // the anonymous XSRF cookie only: each POST is a visitor's first login, not a logged-in browser's
  const cookie = (form.headers['set-cookie'] ?? []).map((c) => c.split(';')[0]).join('; ');
  return async (username, password) => {
    const body = new URLSearchParams({ _xsrf: xsrf, next: '', username, password }).toString();
    const started = performance.now();
    const r = await request('POST', '/hub/login', {
      accept: 'text/html', cookie, 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(Buffer.byteLength(body)),
    }, body);
    const ms = performance.now() - started;
    if (r.status !== 302 || !String(r.headers.location).endsWith('/hub/home')) {
      throw new Error(`a login through the hub answered ${r.status}: ${/id="login-error">([^<]*)/.exec(r.body)?.[1] ?? r.body.slice(0, 200)}`);
    }
    return ms;
  };
}

/** CPU time (user + system, ms) of each process so far (tools.ts cpuMs, one process at a time). */
function cpuByProcess(pids: Record<string, number | null | undefined>): Record<string, number> {
  return Object.fromEntries(Object.entries(pids).filter((e): e is [string, number] => !!e[1]).map(([id, pid]) => [id, cpuMs([pid])]));
}

/** The hub's processes by name. */
const hubPids = (hub: HubUnderTest): Record<string, number | null | undefined> => ({ ...hub.children(), supervisor: hub.proc.pid });

/**
 * `rounds` of interleaved measurements (after a warm-up of each): label → ms per login; and, when `hub` is given,
 * the CPU each of `pids` spent over the measured rounds (the hub's processes, and the floor's named `floor …`:
 * each runs only for its own measure).
 */
async function interleaved(rounds: number, measures: Record<string, () => Promise<number>>, pids: Record<string, number | null | undefined>): Promise<{ ms: Record<string, number[]>; cpuUsPerLogin: Record<string, number> }> {
  for (let i = 0; i < WARMUP; i++) for (const m of Object.values(measures)) await m();
  const before = cpuByProcess(pids);
  const out: Record<string, number[]> = Object.fromEntries(Object.keys(measures).map((k) => [k, []]));
  // this process's CPU during each measure: the backend's own (in-process), or the HTTP client's (through the hub)
  const own: Record<string, number> = Object.fromEntries(Object.keys(measures).map((k) => [k, 0]));
  for (let i = 0; i < rounds; i++) {
    for (const [k, m] of Object.entries(measures)) {
      const cpu = process.cpuUsage();
      out[k].push(await m());
      const spent = process.cpuUsage(cpu);
      own[k] += spent.user + spent.system;
    }
  }
  const after = cpuByProcess(pids);
  const cpuUsPerLogin = Object.fromEntries(Object.keys(after).filter((k) => k in before).map((k) => [k, ((after[k] - before[k]) * 1000) / rounds]));
  for (const [k, us] of Object.entries(own)) cpuUsPerLogin[`this process: ${k}`] = us / rounds;
  return { ms: out, cpuUsPerLogin };
}

/** Linux's USER_HZ, what /proc/<pid>/stat counts in (100 on every architecture Node runs on). */
const CLOCK_TICKS_PER_SECOND = 100;

function reportCpu(kind: string, cpu: Record<string, number>): void {
  const hubs = Object.entries(cpu).filter(([k]) => !k.startsWith('this process: ') && !k.startsWith('floor '));
  const total = hubs.reduce((a, [, us]) => a + us, 0);
  const each = hubs.sort((a, b) => b[1] - a[1]).map(([k, us]) => `${k} ${Math.round(us)}`).join(', ');
  log(`  ${kind}: CPU a login through the hub ${Math.round(total)} µs (${each}; ±${Math.round(1e6 / CLOCK_TICKS_PER_SECOND / N)} µs each: /proc counts in ${1000 / CLOCK_TICKS_PER_SECOND} ms ticks)`);
  const mine = Object.entries(cpu).filter(([k]) => k.startsWith('this process: ')).map(([k, us]) => `${k.slice('this process: '.length)} ${Math.round(us)}`).join(', ');
  log(`  ${kind}: CPU of the bench process a measure: ${mine} µs`);
  const floor = Object.entries(cpu).filter(([k]) => k.startsWith('floor '));
  if (floor.length) log(`  ${kind}: CPU a login through the floor ${Math.round(floor.reduce((a, [, us]) => a + us, 0))} µs (${floor.map(([k, us]) => `${k.slice('floor '.length)} ${Math.round(us)}`).join(', ')})`);
}

/** A process of the login floor (login-floor.mjs), once it says it listens (at most 15 s). */
async function floorProcess(args: string[]): Promise<ChildProcess> {
  const child = spawn(process.execPath, [join(REPO, 'test', 'bench', 'login-floor.mjs'), ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`login floor ${args[0]}: not listening after 15 s`)), 15_000);
    child.stdout!.on('data', (c: Buffer) => { if (c.toString().includes('listening')) { clearTimeout(timer); resolve(); } });
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`login floor ${args[0]} exited (${code})`)); });
  });
  return child;
}

function report(kind: string, results: Record<string, number[]>, hubKey: string, backendKey: string): void {
  for (const [k, xs] of Object.entries(results)) log(`  ${kind} ${k.padEnd(28)} ${fmt(xs)}`);
  const added = percentile(results[hubKey], 50) - percentile(results[backendKey], 50);
  log(`  ${kind}: the hub adds ${added.toFixed(2)} ms p50 over ${backendKey} (target ≤ ${TARGET_ADDED_MS} ms): ${added <= TARGET_ADDED_MS ? 'met' : 'NOT met'}`);
}

async function ldapBench(): Promise<void> {
  const password = `bench-${randomBytes(9).toString('base64url')}`;
  let dir: Slapd | undefined;
  let hub: HubUnderTest | undefined;
  const floor: ChildProcess[] = [];
  const floorDir = mkdtempSync(join(tmpdir(), 'login-floor-'));
  try {
    dir = await startSlapd({ people: [{ uid: 'bencher', password, mail: 'bencher@hub.test' }] });
    const template = `uid={username},ou=people,${dir.base}`;
    const ldap = { server_address: dir.host, server_port: dir.port, tls_strategy: 'insecure', bind_dn_template: [template] };
    hub = await startHub({ config: { Hub: { authenticator_class: 'ldap' }, Authenticator: { allow_all: true }, LDAPAuthenticator: ldap } });
    const post = await formPoster(hub.url);
    const socket = join(floorDir, 'auth.sock');
    floor.push(await floorProcess(['auth', socket, `ldap://${dir.host}:${dir.port}`, template]));
    const floorPort = await freePort();
    floor.push(await floorProcess(['front', String(floorPort), socket]));
    const postFloor = await formPoster(`http://127.0.0.1:${floorPort}`);
    const floorPids = { 'floor front door': floor[1].pid, 'floor auth': floor[0].pid };
    const backend = createLdapAuthenticator({ config: validateConfig({ Hub: { authenticator_class: 'ldap' }, Authenticator: { allow_all: true }, LDAPAuthenticator: ldap }), log: quiet, passwordOf: async () => undefined });
    const dn = dir.personDn('bencher');
    const url = `ldap://${dir.host}:${dir.port}`;
    const { ms: results, cpuUsPerLogin } = await interleaved(N, {
      'through the hub': () => post('bencher', password),
      'floor: front door + a process': () => postFloor('bencher', password),
      'ldap backend in-process': async () => backendLogin(backend, 'bencher', password),
      'ldapts bind alone': async () => {
        const started = performance.now();
        const client = new Client({ url, timeout: 5000, connectTimeout: 5000 });
        await client.bind(dn, password);
        await client.unbind();
        return performance.now() - started;
      },
    }, { ...hubPids(hub), ...floorPids });
    log(`ldap (slapd on 127.0.0.1, plain LDAP, bind_dn_template), ${N} successful logins each, interleaved:`);
    report('ldap', results, 'through the hub', 'ldapts bind alone');
    const overBackend = percentile(results['through the hub'], 50) - percentile(results['ldap backend in-process'], 50);
    log(`  ldap: the hub adds ${overBackend.toFixed(2)} ms p50 over its own ldap backend called in-process`);
    const floorAdds = percentile(results['floor: front door + a process'], 50) - percentile(results['ldap backend in-process'], 50);
    log(`  ldap: the floor (login-floor.mjs: a uWS front door, the same LDAP exchanges in a second process, nothing else) adds ${floorAdds.toFixed(2)} ms p50 over the backend in-process; the hub ${(overBackend - floorAdds).toFixed(2)} ms above the floor`);
    reportCpu('ldap', cpuUsPerLogin);
  } finally {
    for (const p of floor) p.kill();
    rmSync(floorDir, { recursive: true, force: true });
    await hub?.stop();
    await dir?.stop();
  }
}

async function backendLogin(backend: Authenticator, username: string, password: string): Promise<number> {
  const started = performance.now();
  const v = await backend.authenticate!({ username, hubName: username.toLowerCase(), password }, { deadline: Date.now() + 5000, log: quiet });
  const ms = performance.now() - started;
  if (!v.ok) throw new Error(`the backend refused the bench login: ${v.reason}`);
  return ms;
}

async function pamBench(): Promise<void> {
  if (process.geteuid?.() !== 0) throw new Error('the pam login bench needs root: it makes a Unix account, and PAM reads /etc/shadow');
  const name = `hb${randomBytes(3).toString('hex')}`;
  const password = `bench-${randomBytes(9).toString('base64url')}`;
  const run = (cmd: string, args: string[], input?: string) => execFileSync(cmd, args, { input, stdio: ['pipe', 'pipe', 'pipe'] });
  let hub: HubUnderTest | undefined;
  let backend: Authenticator | undefined;
  let made = false;
  try {
    run('useradd', ['-M', '-s', '/usr/sbin/nologin', name]);
    made = true;
    run('chpasswd', [], `${name}:${password}\n`);
    hub = await startHub({ config: { Hub: { authenticator_class: 'pam' }, Authenticator: { allow_all: true } } });
    const post = await formPoster(hub.url);
    backend = createPamAuthenticator({ config: validateConfig({ Hub: { authenticator_class: 'pam' }, Authenticator: { allow_all: true } }), log: quiet, passwordOf: async () => undefined });
    const b = backend;
    const { ms: results, cpuUsPerLogin } = await interleaved(N, {
      'through the hub': () => post(name, password),
      'pam backend in-process': () => backendLogin(b, name, password),
    }, hubPids(hub));
    const hash = String(run('getent', ['shadow', name])).split(':')[1]?.split('$')[1];
    log(`pam (service "login", pam_unix, password hash $${hash}$), ${N} successful logins each, interleaved:`);
    report('pam', results, 'through the hub', 'pam backend in-process');
    reportCpu('pam', cpuUsPerLogin);
  } finally {
    await backend?.close?.();
    await hub?.stop();
    if (made) run('userdel', [name]);
  }
}

export async function loginBench(): Promise<void> {
  await ldapBench();
  if (!process.env.BENCH_LDAP_ONLY) await pamBench();
}
