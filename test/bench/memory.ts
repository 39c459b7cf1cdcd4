// Memory benchmark: every process of our hub against the established hub (jupyterhub 6.1.1 from the bench's venv)
// and its configurable-http-proxy, in the same run on the same machine: PSS and private memory (USS) per process
// from /proc/<pid>/smaps_rollup, idle, after the same API load (wrk: the bare route, a user lookup, whoami, a page of
// users), after the same proxy load (wrk through each front door to one shared backend service, then WebSocket
// echoes), and after a settle pause (the same pause comes before the idle figure). Both hubs hold BENCH_USERS users (default 1,000), an admin token from their
// config and one user's token, and route one service, `bench`, to the same backend (test/bench/proxy.ts's): the
// load reaches no single-user server, so none runs on either side; the shared backend is counted on neither.
// BENCH_SECONDS sets each wrk/WebSocket run (default 5); BENCH_SETTLE_SECONDS the pause (default 15); BENCH_MEMORY_ONLY=ours
// measures our hub alone (a quick look at a change; no ratio).
// The goal (issue 25): ours ≤ 1.3× theirs, idle and after load.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { startHub, sleep, waitFor, type HubUnderTest } from '../harness.js';
import { processTree } from '../../shared/processes.js';
import { createToken, createUsers } from './api.js';
import { jupyterhubDescription, jupyterhubInstalled, JUPYTERHUB_VERSION, startJupyterHub, type JupyterHubUnderTest } from './jupyterhub.js';
import { echoes, PATH, startBackend } from './proxy.js';
import { aptInstall, onPath, waitForQuiet } from './tools.js';
import { failures, wrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const SETTLE_SECONDS = Number(process.env.BENCH_SETTLE_SECONDS ?? 15);
const USERS = Number(process.env.BENCH_USERS ?? 1000);
const WRK = { threads: 2, connections: 32, seconds: SECONDS };
const GOAL = 1.3;
const OURS_ONLY = process.env.BENCH_MEMORY_ONLY === 'ours';
const ADMIN = 'bench-admin';
const ORDINARY = 'user00001';
const LOOKUP = `user${String(Math.floor(USERS / 2)).padStart(5, '0')}`;
const log = (line: string): void => console.log(`memory: ${line}`);
const problems: string[] = [];

/** Memory of one process in MB: proportional (shared pages split among their users) and private (USS). */
interface Mem { pss: number; uss: number; rss: number }
const PHASES = ['idle', 'after API load', 'after proxy load', 'settled'] as const;
type Phase = (typeof PHASES)[number];

function memoryOf(pid: number): Mem | undefined {
  try {
    const r = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(r)?.[1] ?? 0);
    return { pss: kb('Pss') / 1024, uss: (kb('Private_Clean') + kb('Private_Dirty')) / 1024, rss: kb('Rss') / 1024 };
  } catch {
    return undefined; // gone
  }
}

/** One side: its processes by name (read afresh at each phase: a restarted actor is a new pid) and its load's targets. */
interface Side {
  label: string;
  url: string;
  admin: string;
  user: string;
  paginationType: string;
  rootPid: number;
  processes(): Record<string, number>;
  phases: Partial<Record<Phase, Record<string, Mem>>>;
}

function snapshot(side: Side, phase: Phase): void {
  const out: Record<string, Mem> = {};
  for (const [name, pid] of Object.entries(side.processes())) {
    const m = memoryOf(pid);
    if (m) out[name] = m;
    else problems.push(`${side.label}: ${name} (pid ${pid}) gone at "${phase}"`);
  }
  side.phases[phase] = out;
  const total = Object.values(out).reduce((s, m) => s + m.pss, 0);
  log(`${side.label.padEnd(10)} ${phase.padEnd(17)} PSS ${total.toFixed(1)} MB over ${Object.keys(out).length} processes`);
}

/** Our supervisor and every child it records (NATS, each actor, each gateway); anything else under it (a server) is named and left out. */
function ourProcesses(hub: HubUnderTest): Record<string, number> {
  const out: Record<string, number> = { supervisor: hub.proc.pid! };
  for (const [id, pid] of Object.entries(hub.children())) if (pid) out[id] = pid;
  return out;
}

/** The established hub and its proxy (which runs in its own session, found by its pid file). */
function theirProcesses(hub: JupyterHubUnderTest): Record<string, number> {
  const out: Record<string, number> = { jupyterhub: hub.pid };
  const proxy = hub.proxyPid();
  if (proxy) out['configurable-http-proxy'] = proxy;
  return out;
}

/** Processes under a side's root that are not counted (single-user servers, if any ran): named so a reader sees them. */
function uncounted(side: Side): number[] {
  const counted = new Set(Object.values(side.processes()));
  return processTree(side.rootPid).filter((pid) => !counted.has(pid));
}

async function checked(label: string, url: string, headers: Record<string, string>, check: (body: string) => boolean): Promise<void> {
  const r = await fetch(url, { headers, signal: AbortSignal.timeout(30_000) });
  const body = await r.text();
  if (r.status !== 200 || !check(body)) throw new Error(`${label}: ${url} answered ${r.status}: ${body.slice(0, 300)}`);
}

async function load(label: string, url: string, headers: Record<string, string>, check: (body: string) => boolean): Promise<number> {
  await checked(label, url, headers, check);
  const r = await wrk(url, { ...WRK, headers });
  if (failures(r) > 0) problems.push(`${label}: ${failures(r)} of ${r.requests} requests failed`);
  return r.requests;
}

const json = (f: (j: any) => boolean) => (body: string): boolean => {
  try { return f(JSON.parse(body)); } catch { return false; }
};

/** The API bench's calls, each for SECONDS: the bare route, a user lookup, whoami (a user's token), a page of users. */
async function apiLoad(side: Side): Promise<void> {
  const admin = { Authorization: `token ${side.admin}` };
  let requests = 0;
  requests += await load(`${side.label} bare`, `${side.url}/hub/api`, admin, json((j) => typeof j?.version === 'string'));
  requests += await load(`${side.label} lookup`, `${side.url}/hub/api/users/${LOOKUP}`, admin, json((j) => j?.name === LOOKUP));
  requests += await load(`${side.label} whoami`, `${side.url}/hub/api/user`, { Authorization: `token ${side.user}` }, json((j) => j?.name === ORDINARY));
  requests += await load(`${side.label} page`, `${side.url}/hub/api/users?offset=${Math.max(0, Math.min(5000, USERS - 50))}&limit=50`,
    { ...admin, Accept: side.paginationType }, json((j) => Array.isArray(j?.items) && j.items.length === 50));
  log(`${side.label}: API load done, ${requests} requests`);
}

/** The proxy bench's load: GETs through the front door to the backend service, then 32 WebSocket echo clients. */
async function proxyLoad(side: Side): Promise<void> {
  const requests = await load(`${side.label} proxied GET`, side.url + PATH, {}, (b) => b === 'hello, world\n');
  const trips = await echoes(`${side.url.replace('http', 'ws')}/services/bench/ws`, SECONDS);
  log(`${side.label}: proxy load done, ${requests} proxied requests, ${trips} WebSocket round trips`);
}

async function populate(side: Side): Promise<void> {
  log(`${side.label}: creating ${USERS} users`);
  const rate = await createUsers(side.url, side.admin, 0, USERS);
  side.user = await createToken(side.url, side.admin, ORDINARY);
  log(`${side.label}: ${rate.toFixed(0)} users/s created`);
}

const mb = (x: number | undefined): string => (x === undefined ? 'n/a' : x.toFixed(1)).padStart(7);
const sum = (ms: Record<string, Mem> | undefined, k: keyof Mem): number | undefined => (ms ? Object.values(ms).reduce((s, m) => s + m[k], 0) : undefined);

function report(ours: Side, theirs?: Side): void {
  const date = new Date().toISOString().replace('T', ' ').slice(0, 16);
  console.log(`\nmemory summary (${date} UTC; ${USERS} users; wrk ${WRK.threads} threads, ${WRK.connections} connections, ${SECONDS} s a run; settle ${SETTLE_SECONDS} s)`);
  if (theirs) console.log(`  established hub: ${jupyterhubDescription()} + configurable-http-proxy; no single-user server runs on either side`);
  console.log('  PSS / USS in MB per process:');
  console.log(`  ${'process'.padEnd(26)} ${PHASES.map((p) => p.padStart(17)).join(' ')}`);
  for (const side of theirs ? [ours, theirs] : [ours]) {
    const names = [...new Set(PHASES.flatMap((p) => Object.keys(side.phases[p] ?? {})))];
    for (const name of names) {
      console.log(`  ${`${side.label} ${name}`.padEnd(26)} ${PHASES.map((p) => { const m = side.phases[p]?.[name]; return `${mb(m?.pss)} /${mb(m?.uss)}`; }).join(' ')}`);
    }
    console.log(`  ${`${side.label} TOTAL`.padEnd(26)} ${PHASES.map((p) => `${mb(sum(side.phases[p], 'pss'))} /${mb(sum(side.phases[p], 'uss'))}`).join(' ')}`);
  }
  if (!theirs) return;
  console.log(`  ours/theirs PSS (goal <= ${GOAL}x):`);
  for (const p of PHASES) {
    const [a, b] = [sum(ours.phases[p], 'pss'), sum(theirs.phases[p], 'pss')];
    const r = a !== undefined && b ? a / b : undefined;
    console.log(`    ${p.padEnd(17)} ${mb(a)} MB vs ${mb(b)} MB  ${r === undefined ? 'n/a' : `${r.toFixed(2)}x`}${r !== undefined && r > GOAL ? '  OVER THE GOAL' : ''}`);
    if (r !== undefined && r > GOAL) problems.push(`${p}: ours ${r.toFixed(2)}x theirs (goal ${GOAL}x)`);
  }
  const [ua, ub] = [sum(ours.phases['after proxy load'], 'uss'), sum(theirs.phases['after proxy load'], 'uss')];
  if (ua !== undefined && ub) console.log(`    private memory (USS) after load: ${(ua / ub).toFixed(2)}x (PSS splits shared pages, e.g. node's own code, with every other process mapping them)`);
}

export async function memory(): Promise<void> {
  if (!onPath('wrk')) aptInstall('wrk', log);
  if (!onPath('wrk')) throw new Error('wrk is missing: install it with `apt-get install -y wrk`');
  if (!OURS_ONLY && (!jupyterhubInstalled() || !jupyterhubDescription().startsWith(`jupyterhub ${JUPYTERHUB_VERSION} `))) {
    throw new Error(`the memory bench compares against jupyterhub ${JUPYTERHUB_VERSION} only: run \`node scripts/setup.mjs --for-bench\``);
  }
  const backend = await startBackend();
  const serviceUrl = `http://127.0.0.1:${backend.port}`;
  const admin = randomBytes(16).toString('hex');
  let hub: HubUnderTest | undefined;
  let jh: JupyterHubUnderTest | undefined;
  const cleanup = async () => {
    backend.proc.kill('SIGKILL');
    await hub?.stop();
    await jh?.stop();
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => void cleanup().then(() => process.exit(130)));
  try {
    hub = await startHub({
      config: { Hub: { services: [{ name: 'bench', url: serviceUrl }], api_tokens: { [admin]: ADMIN } }, Authenticator: { admin_users: [ADMIN] } },
      healthTimeoutMs: 60_000,
    });
    if (!OURS_ONLY) jh = await startJupyterHub({ apiTokens: { [admin]: ADMIN }, adminUsers: [ADMIN], extraConfig: [`c.JupyterHub.services = [{'name': 'bench', 'url': ${JSON.stringify(serviceUrl)}}]`] });
    const [h, j] = [hub, jh];
    const ours: Side = { label: 'ours', url: h.url, admin, user: '', paginationType: 'application/hub-pagination+json', rootPid: h.proc.pid!, processes: () => ourProcesses(h), phases: {} };
    const theirs: Side | undefined = j && { label: 'theirs', url: j.url, admin, user: '', paginationType: 'application/jupyterhub-pagination+json', rootPid: j.pid, processes: () => theirProcesses(j), phases: {} };
    const sides = theirs ? [ours, theirs] : [ours];
    for (const side of sides) {
      await waitFor(`${side.label}: the bench service's route`, async () => ((await fetch(side.url + PATH)).status === 200 ? true : undefined), 20_000, 200);
      await populate(side);
    }
    for (const side of sides) await waitForQuiet(side.rootPid, log);
    // idle means idle for both: the same pause as the settled phase, whoever finished creating its users first
    await sleep(SETTLE_SECONDS * 1000);
    for (const side of sides) snapshot(side, 'idle');
    // each side measured right after its own load, so neither gets the other's load time to settle in
    for (const side of sides) {
      await apiLoad(side);
      snapshot(side, 'after API load');
    }
    for (const side of sides) {
      await proxyLoad(side);
      snapshot(side, 'after proxy load');
    }
    await sleep(SETTLE_SECONDS * 1000);
    for (const side of sides) snapshot(side, 'settled');
    for (const side of sides) {
      const extra = uncounted(side);
      if (extra.length) log(`${side.label}: not counted, under its root: ${extra.map((pid) => `${pid} (${readFileSync(`/proc/${pid}/comm`, 'utf8').trim()})`).join(', ')}`);
    }
    report(ours, theirs);
  } finally {
    await cleanup();
  }
  if (problems.length) {
    console.log(`  PROBLEMS (${problems.length}):`);
    for (const p of problems) console.log(`    ${p}`);
    process.exitCode = 1;
  }
}
