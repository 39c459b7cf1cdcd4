// API benchmark: our hub against the established one (Debian's jupyterhub) on the same REST calls, with wrk.
// Both hubs get 10,000 users, an admin token from their config and a token for one ordinary user; then
// wrk measures (after a warm-up run) a user lookup, whoami and a page of the user list. For our hub alone it also measures a
// page's latency at 1,000 and at 100,000 users, and the same calls with Hub.internal_ssl (BENCH_API_ONLY=internal-ssl: only
// that comparison). BENCH_SECONDS sets each wrk run's duration (default 10).
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startHub, type HubUnderTest } from '../harness.js';
import { jupyterhubInstalled, startJupyterHub, type JupyterHubUnderTest } from './jupyterhub.js';
import { failures, wrk, type WrkResult } from './wrk.js';
import { aptInstall, baselineCheckout, cpuMs, onPath, waitForQuiet, withChildren } from './tools.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const WRK = { threads: 2, connections: 32, seconds: SECONDS };
const WARMUP_SECONDS = Math.max(1, Math.round(SECONDS / 4));
const USERS = 10_000;
const BIG = 100_000;
const BATCH = 1_000;
const CREATE_LIMIT_MS = 20 * 60_000;
const LOOKUP = 'user05000';
const ORDINARY = 'user00001';
const ADMIN = 'bench-admin';

const userName = (i: number): string => `user${String(i).padStart(5, '0')}`;
const pagePath = (users: number): string => `/hub/api/users?offset=${Math.min(5000, users - 50)}&limit=50`;
const log = (line: string): void => console.log(`api: ${line}`);

/** A hub being measured: where it answers, its tokens, and the media type that asks it for pagination. */
interface Target {
  label: string;
  url: string;
  admin: string;
  user: string;
  paginationType: string;
  /** the processes that answer (our gateway; the established hub and its proxy): CPU per request is the steady figure on a busy machine */
  pids?: () => number[];
}

// ---- tools ----



function ensureTools(): void {
  if (!onPath('wrk')) aptInstall('wrk', log);
  if (!onPath('wrk')) fail('wrk is missing: install it with `apt-get install -y wrk`');
  if (!jupyterhubInstalled()) aptInstall('jupyterhub', log);
  if (!jupyterhubInstalled()) fail("Debian's jupyterhub is missing: install it with `apt-get install -y jupyterhub`");
}

function fail(line: string): never {
  console.error(`api bench: ${line}`);
  process.exit(1);
}

// ---- REST calls ----

async function call(url: string, token: string, method: string, path: string, body?: unknown, timeoutMs = 30_000): Promise<{ status: number; json: any }> {
  const r = await fetch(url + path, {
    method,
    headers: { Authorization: `token ${token}`, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await r.text();
  let json: any;
  try { json = JSON.parse(text); } catch { json = text.slice(0, 300); }
  return { status: r.status, json };
}

/** Creates users with indices [from, to) in batches; returns users created per second. */
export async function createUsers(url: string, admin: string, from: number, to: number): Promise<number> {
  const t0 = performance.now();
  for (let i = from; i < to; i += BATCH) {
    if (performance.now() - t0 > CREATE_LIMIT_MS) throw new Error(`creating users took more than ${CREATE_LIMIT_MS / 60_000} minutes`);
    const usernames = Array.from({ length: Math.min(BATCH, to - i) }, (_, k) => userName(i + k));
    const r = await call(url, admin, 'POST', '/hub/api/users', { usernames }, 180_000);
    if (r.status !== 201) throw new Error(`POST /hub/api/users (${usernames[0]}…) answered ${r.status}: ${JSON.stringify(r.json).slice(0, 300)}`);
  }
  return (to - from) / ((performance.now() - t0) / 1000);
}

export async function createToken(url: string, admin: string, name: string): Promise<string> {
  const r = await call(url, admin, 'POST', `/hub/api/users/${name}/tokens`, {});
  if (r.status !== 201 || typeof r.json?.token !== 'string') throw new Error(`POST /hub/api/users/${name}/tokens answered ${r.status}`);
  return r.json.token;
}

// ---- measurements ----

interface Case {
  key: 'bare' | 'lookup' | 'whoami' | 'page';
  title: string;
  path: string;
  asUser?: boolean;
  paginated?: boolean;
  /** checks the answer of one request before wrk repeats it */
  check(json: any): boolean;
}

const pageCase = (users: number): Case => ({
  key: 'page', title: `GET ${pagePath(users)}`, path: pagePath(users), paginated: true,
  check: (j) => Array.isArray(j?.items) && j.items.length === 50 && typeof j._pagination === 'object',
});

const CASES: Case[] = [
  // the floor every answer stands on (dispatch, token check, metrics, log line, headers) without a model to build
  { key: 'bare', title: 'GET /hub/api (the bare route)', path: '/hub/api', check: (j) => typeof j?.version === 'string' },
  { key: 'lookup', title: `GET /hub/api/users/${LOOKUP}`, path: `/hub/api/users/${LOOKUP}`, check: (j) => j?.name === LOOKUP },
  { key: 'whoami', title: 'GET /hub/api/user (user token)', path: '/hub/api/user', asUser: true, check: (j) => j?.name === ORDINARY },
  pageCase(USERS),
];

const problems: string[] = [];

/** One wrk run of one case, after checking that a single request gets the right 200 answer. */
async function measure(t: Target, c: Case): Promise<WrkResult & { cpuUs?: number }> {
  const headers: Record<string, string> = { Authorization: `token ${c.asUser ? t.user : t.admin}` };
  if (c.paginated) headers.Accept = t.paginationType;
  const r = await fetch(t.url + c.path, { headers, signal: AbortSignal.timeout(30_000) });
  const text = await r.text();
  let ok = r.status === 200;
  try { ok &&= c.check(JSON.parse(text)); } catch { ok = false; }
  if (!ok) throw new Error(`${t.label}: ${c.title} answered ${r.status} with an unexpected body: ${text.slice(0, 300)}`);
  // warmed up first, as the proxy bench is: a fresh process's first seconds are its JIT's, not its steady state
  await wrk(t.url + c.path, { ...WRK, seconds: WARMUP_SECONDS, headers });
  const cpu0 = t.pids ? cpuMs(t.pids()) : 0;
  const res: WrkResult & { cpuUs?: number } = await wrk(t.url + c.path, { ...WRK, headers });
  if (t.pids && res.requests) res.cpuUs = ((cpuMs(t.pids()) - cpu0) * 1000) / res.requests;
  const bad = failures(res);
  if (bad > 0) {
    const line = `${t.label}: ${c.title}: ${res.non2xx} error responses and ${bad - res.non2xx} socket errors out of ${res.requests}: THESE FIGURES ARE MEANINGLESS`;
    console.log(`!!!!! ${line}`);
    problems.push(line);
  }
  log(`${t.label.padEnd(10)} ${c.title.padEnd(44)} ${fmt(res)}`);
  return res;
}

const fmt = (r: WrkResult & { cpuUs?: number }): string =>
  `${r.reqPerSec.toFixed(0).padStart(7)} req/s  p50 ${r.p50.toFixed(2).padStart(7)} ms  p99 ${r.p99.toFixed(2).padStart(7)} ms${r.cpuUs === undefined ? '' : `  CPU ${r.cpuUs.toFixed(0).padStart(4)} µs/req`}`;

function rssMB(pid: number | null | undefined): number | undefined {
  if (!pid) return undefined;
  try {
    return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024;
  } catch {
    return undefined;
  }
}

const newAdminToken = (): string => randomBytes(16).toString('hex');
const ourConfig = (admin: string, hub: Record<string, unknown> = {}) => ({ Hub: { api_tokens: { [admin]: ADMIN }, ...hub }, Authenticator: { admin_users: [ADMIN] } });

// Anything started is stopped on Ctrl-C too.
const running = new Set<() => Promise<unknown>>();
async function withServer<S extends { stop(): Promise<unknown> }, T>(start: () => Promise<S>, use: (s: S) => Promise<T>): Promise<T> {
  const server = await start();
  const stop = () => server.stop();
  running.add(stop);
  try {
    return await use(server);
  } finally {
    running.delete(stop);
    await stop();
  }
}

interface HubFigures { created: number; results: Partial<Record<Case['key'], WrkResult>>; rssBefore?: number; rssAfter?: number }

/** Populates a hub (10,000 users, a user token) and runs every case against it. */
async function benchTarget(label: string, url: string, admin: string, paginationType: string, rootPid: number, rss?: () => number | undefined, pids?: () => number[]): Promise<HubFigures> {
  log(`${label}: creating ${USERS} users`);
  const created = await createUsers(url, admin, 0, USERS);
  log(`${label}: ${created.toFixed(0)} users/s created`);
  await waitForQuiet(rootPid, log);
  const t: Target = { label, url, admin, user: await createToken(url, admin, ORDINARY), paginationType, pids };
  const figures: HubFigures = { created, results: {}, rssBefore: rss?.() };
  for (const c of CASES) figures.results[c.key] = await measure(t, c);
  figures.rssAfter = rss?.();
  return figures;
}

/**
 * Our hub, and the same hub with Hub.internal_ssl (every NATS connection TLS with client certificates), side by side:
 * both populated, then each case measured on one and at once on the other, so the machine's drift hits both alike.
 */
async function benchOurs(): Promise<{ plain: HubFigures; tls?: HubFigures }> {
  const admin = newAdminToken();
  const start = (hub: Record<string, unknown>) => () => startHub({ config: ourConfig(admin, hub), healthTimeoutMs: 30_000 });
  return withServer<HubUnderTest, { plain: HubFigures; tls?: HubFigures }>(start({}), (plain) =>
    withServer<HubUnderTest, { plain: HubFigures; tls?: HubFigures }>(start({ internal_ssl: true }), async (tls) => {
      const hubs = [{ label: 'ours', hub: plain }, { label: 'ours+tls', hub: tls }];
      const figures: HubFigures[] = [];
      const targets: Target[] = [];
      for (const { label, hub } of hubs) {
        log(`${label}: creating ${USERS} users`);
        const created = await createUsers(hub.url, admin, 0, USERS);
        log(`${label}: ${created.toFixed(0)} users/s created`);
        targets.push({ label, url: hub.url, admin, user: await createToken(hub.url, admin, ORDINARY), paginationType: 'application/hub-pagination+json', pids: () => withChildren(hub.children().gateway!) });
        figures.push({ created, results: {} });
      }
      for (const { hub } of hubs) await waitForQuiet(hub.proc.pid!, log);
      figures[0].rssBefore = rssMB(plain.children().gateway);
      // which hub goes first alternates from case to case, so neither always meets a machine just warmed by the other
      for (const [k, c] of CASES.entries()) {
        for (const i of k % 2 ? [1, 0] : [0, 1]) figures[i].results[c.key] = await measure(targets[i], c);
      }
      figures[0].rssAfter = rssMB(plain.children().gateway);
      return { plain: figures[0], tls: figures[1] };
    }));
}

/** The same hub at an earlier commit (BENCH_BASELINE), with the same configuration, in the same run. */
async function benchBaseline(rev: string): Promise<HubFigures> {
  const repo = baselineCheckout(rev, log);
  const admin = newAdminToken();
  return withServer<HubUnderTest, HubFigures>(() => startHub({ config: ourConfig(admin), healthTimeoutMs: 30_000, repo }), (hub) =>
    benchTarget(`baseline ${rev}`, hub.url, admin, 'application/hub-pagination+json', hub.proc.pid!, () => rssMB(hub.children().gateway), () => withChildren(hub.children().gateway!)));
}

async function benchTheirs(): Promise<HubFigures> {
  const admin = newAdminToken();
  return withServer<JupyterHubUnderTest, HubFigures>(() => startJupyterHub({ apiTokens: { [admin]: ADMIN }, adminUsers: [ADMIN] }), (hub) =>
    benchTarget('jupyterhub', hub.url, admin, 'application/jupyterhub-pagination+json', hub.pid, undefined, () => withChildren(hub.pid)));
}

/** Our hub alone: a page's latency with 1,000 users, then with 100,000. */
async function benchTableSize(): Promise<{ small: WrkResult; big: WrkResult }> {
  const admin = newAdminToken();
  return withServer<HubUnderTest, { small: WrkResult; big: WrkResult }>(() => startHub({ config: ourConfig(admin), healthTimeoutMs: 30_000 }), async (hub) => {
    const t: Target = { label: 'ours', url: hub.url, admin, user: '', paginationType: 'application/hub-pagination+json' };
    await createUsers(hub.url, admin, 0, BATCH);
    await waitForQuiet(hub.proc.pid!, log);
    const small = await measure(t, pageCase(BATCH));
    log(`ours: creating users up to ${BIG}`);
    log(`ours: ${(await createUsers(hub.url, admin, BATCH, BIG)).toFixed(0)} users/s created`);
    await waitForQuiet(hub.proc.pid!, log);
    const big = await measure(t, pageCase(BIG));
    return { small, big };
  });
}

async function attempt<T>(what: string, f: () => Promise<T>): Promise<T | undefined> {
  try {
    return await f();
  } catch (e) {
    const lines = (e as Error).message.split('\n');
    const line = `${what} failed: ${lines[0]}`;
    console.log(`!!!!! ${[line, ...lines.slice(1, 30)].join('\n      ')}`);
    problems.push(line);
    return undefined;
  }
}

export async function api(): Promise<void> {
  ensureTools();
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      void Promise.allSettled([...running].map((s) => s())).then(() => process.exit(130));
    });
  }
  log(`wrk ${WRK.threads} threads, ${WRK.connections} connections, ${SECONDS} s per run`);
  // BENCH_API_ONLY=internal-ssl: only our hub with and without Hub.internal_ssl (the goal: TLS costs at most 10 %)
  const onlyInternalSsl = process.env.BENCH_API_ONLY === 'internal-ssl';
  const pair = await attempt('our hub, without and with Hub.internal_ssl', benchOurs);
  const [ours, oursTls] = [pair?.plain, pair?.tls];
  const baselineRev = onlyInternalSsl ? undefined : process.env.BENCH_BASELINE;
  const baseline = baselineRev ? await attempt(`baseline ${baselineRev}`, () => benchBaseline(baselineRev)) : undefined;
  const theirs = onlyInternalSsl ? undefined : await attempt('jupyterhub', benchTheirs);
  const sizes = onlyInternalSsl ? undefined : await attempt('our hub at 1,000 and 100,000 users', benchTableSize);

  const cell = (r?: WrkResult): string => (r ? fmt(r) : 'n/a'.padStart(48));
  console.log(`\napi summary (wrk ${WRK.threads} threads, ${WRK.connections} connections, ${SECONDS} s each; ${USERS} users)`);
  console.log(`  ${''.padEnd(44)} ${'ours'.padEnd(48)}   ${'jupyterhub'.padEnd(48)}   req/s ours/theirs`);
  for (const c of CASES) {
    const [a, b] = [ours?.results[c.key], theirs?.results[c.key]];
    const ratio = a && b ? `${(a.reqPerSec / b.reqPerSec).toFixed(1)}x` : 'n/a';
    console.log(`  ${c.title.padEnd(44)} ${cell(a)}   ${cell(b)}   ${ratio}`);
  }
  if (baselineRev) {
    console.log(`  ${'same calls, this hub at ' + baselineRev}`);
    for (const c of CASES) {
      const [a, b] = [ours?.results[c.key], baseline?.results[c.key]];
      console.log(`  ${c.title.padEnd(44)} ${cell(b)}   now/then ${a && b ? `${(a.reqPerSec / b.reqPerSec).toFixed(2)}x req/s, p99 ${(a.p99 / b.p99).toFixed(2)}x` : 'n/a'}`);
    }
  }
  console.log('  same calls, our hub with Hub.internal_ssl (goal: at least 0.90x the req/s without it)');
  for (const c of CASES) {
    const [a, b] = [ours?.results[c.key], oursTls?.results[c.key]];
    const ratio = a && b ? b.reqPerSec / a.reqPerSec : undefined;
    console.log(`  ${c.title.padEnd(44)} ${cell(b)}   tls/plain ${ratio === undefined ? 'n/a' : `${ratio.toFixed(2)}x req/s, p99 ${(b!.p99 / a!.p99).toFixed(2)}x`}`);
    if (ratio !== undefined && ratio < 0.9) problems.push(`internal TLS: ${c.title} at ${ratio.toFixed(2)}x the req/s without it (goal 0.90x)`);
  }
  console.log(`  users created with Hub.internal_ssl: ${oursTls ? oursTls.created.toFixed(0) : 'n/a'}/s (without: ${ours ? ours.created.toFixed(0) : 'n/a'}/s)`);
  const mb = (x?: number): string => (x === undefined ? 'n/a' : `${x.toFixed(1)} MB`);
  console.log(`  our gateway RSS: before the runs ${mb(ours?.rssBefore)}, after ${mb(ours?.rssAfter)}`);
  console.log(`  users created: ours ${ours ? ours.created.toFixed(0) : 'n/a'}/s, jupyterhub ${theirs ? theirs.created.toFixed(0) : 'n/a'}/s`);
  if (sizes) {
    console.log(`  our page p50: ${sizes.small.p50.toFixed(2)} ms at ${BATCH} users (${pagePath(BATCH)}), ` +
      `${sizes.big.p50.toFixed(2)} ms at ${BIG} users (${pagePath(BIG)}); ratio ${(sizes.big.p50 / sizes.small.p50).toFixed(2)}`);
  } else {
    console.log('  our page p50 at 1,000 / 100,000 users: n/a');
  }
  if (problems.length) {
    console.log(`  PROBLEMS (${problems.length}):`);
    for (const p of problems) console.log(`    ${p}`);
    process.exitCode = 1;
  }
}
