// `npm run bench scale`: what running several gateways costs and buys on this machine.
//   - route propagation: a route change written to the registry (`hub_servers`, which every gateway routes user
//     servers from) until every gateway has applied it (each answers `hub.gateway.servers-applied` once its copy
//     has the revision: what the spawner waits for before it says "ready"), p50 and p99, with 1, 2 and 4
//     gateways; beside it the floor of the design: the same KV write seen by one plain watcher in this process.
//   - API read throughput with 1 and 2 gateways on the shared port (wrk, GET /hub/api/users/<name>).
//   - spawns per second with 1 and 2 spawner nodes: BENCH_SCALE_SPAWNS starts at once (default 40) through node
//     a's API until every one is ready (placement "spread"; node b runs spawner and gateway on node a's NATS).
//   - the API through 1, 2 and 3 nodes on one PostgreSQL (Hub.db_url; every node runs every actor, nodes b and c on
//     node a's NATS), next to SQLite files on one node: every node's gateway loaded at once, the 32 connections
//     shared out, a read (GET /hub/api/users/<name>) and a write to the database (POST /hub/api/users/<name>/tokens).
// BENCH_SECONDS sets each wrk run (default 10); BENCH_ROUTE_CHANGES the samples per propagation row (default 200);
// BENCH_SCALE_ONLY=nodes runs only the API over nodes.
import { RequestStrategy, type KV, type NatsConnection } from 'nats';
import { randomToken } from '../api/client.js';
import { startHub, waitFor } from '../harness.js';
import { natsClient } from '../scale/helpers.js';
import { encodeJson } from '../../shared/nats.js';
import { SERVERS_BUCKET, serverKey, type ServerRecord } from '../../shared/servers.js';
import { natsServiceName, subjects } from '../../shared/subjects.js';
import { nodeConfig } from '../scale/helpers.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HubUnderTest } from '../harness.js';
import { startPostgres } from '../postgres.js';
import { aptInstall, onPath } from './tools.js';
import { failures, wrk, type WrkResult } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CHANGES = Number(process.env.BENCH_ROUTE_CHANGES ?? 200);
const SPAWNS = Number(process.env.BENCH_SCALE_SPAWNS ?? 40);
const TARGET = fileURLToPath(new URL('./spawn-target.mjs', import.meta.url));
const log = (line: string) => console.error(`bench scale: ${line}`);
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

/** A running server's record as the spawner writes it, for a user that exists only in this benchmark. */
function fakeRecord(user: string): ServerRecord {
  const now = new Date().toISOString();
  return {
    user, name: '', state: 'running', url: `/user/${user}/`, target: 'http://127.0.0.1:9', pid: 0, spawner_class: 'simple',
    spawner_state: {}, started: now, last_activity: now, user_options: {}, instance: 'bench', node: 'bench', token_id: '', progress: [],
  };
}

async function countGateways(nc: NatsConnection): Promise<number> {
  let n = 0;
  for await (const m of await nc.requestMany(`$SRV.PING.${natsServiceName('gateway')}`, new Uint8Array(), { strategy: RequestStrategy.JitterTimer, jitter: 200, maxWait: 2000 })) {
    if (m.data.length) n++;
  }
  return n;
}

/** ms from a write until `gateways` gateways confirm they have applied it. */
async function propagation(nc: NatsConnection, kv: KV, gateways: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < CHANGES; i++) {
    const user = `bench-route-${i % 20}`;
    const t0 = performance.now();
    const revision = i % 2 === 0 ? await kv.put(serverKey(user, ''), encodeJson(fakeRecord(user))) : await kv.put(serverKey(user, ''), encodeJson({ ...fakeRecord(user), state: 'stopped', target: '' }));
    let confirmed = 0;
    for await (const m of await nc.requestMany(subjects.command('gateway', 'servers-applied'), encodeJson({ revision, wait_ms: 2000 }), {
      strategy: RequestStrategy.Count, maxMessages: gateways, maxWait: 2500,
    })) if (m.data.length) confirmed++;
    if (confirmed !== gateways) throw new Error(`change ${i}: ${confirmed} of ${gateways} gateways confirmed`);
    times.push(performance.now() - t0);
  }
  for (let i = 0; i < 20; i++) await kv.purge(serverKey(`bench-route-${i}`, ''));
  return times;
}

/** The floor: the same writes, seen by one KV watcher in this process (an event may come before the put's answer). */
async function watcherFloor(kv: KV): Promise<number[]> {
  const arrived = new Map<number, number>();
  const waiting = new Map<number, () => void>();
  const watch = await kv.watch({ key: serverKey('bench-floor', '') });
  void (async () => {
    for await (const e of watch) {
      arrived.set(e.revision, performance.now());
      waiting.get(e.revision)?.();
    }
  })();
  const times: number[] = [];
  for (let i = 0; i < CHANGES; i++) {
    const t0 = performance.now();
    const revision = await kv.put(serverKey('bench-floor', ''), encodeJson(fakeRecord('bench-floor')));
    if (!arrived.has(revision)) {
      await Promise.race([new Promise<void>((r) => waiting.set(revision, r)), new Promise((r) => setTimeout(r, 2000))]);
      waiting.delete(revision);
    }
    times.push((arrived.get(revision) ?? performance.now()) - t0);
  }
  watch.stop();
  await kv.purge(serverKey('bench-floor', ''));
  return times;
}

/** SPAWNS starts at once through node a's API (each answered when ready), with `nodes` spawner nodes: spawns per second. */
async function spawnRate(nodes: 1 | 2): Promise<{ perSecond: number; placed: Record<string, number> }> {
  const admin = randomToken();
  const shared = {
    Hub: { api_tokens: { [admin]: 'boss' }, concurrent_spawn_limit: 0, rpc_timeout: 120 },
    Authenticator: { admin_users: ['boss'] },
    Spawner: { cmd: [process.execPath, TARGET], slow_spawn_timeout: 100, start_timeout: 100 },
  };
  const a = await startHub({ config: nodeConfig(shared, { Hub: { node_name: 'node-a' } }) });
  const b = nodes === 2
    ? await startHub({ config: nodeConfig(shared, { Hub: { node_name: 'node-b', nats_url: a.natsUrl }, Supervisor: { actors: ['spawner', 'gateway'] } }) }).catch(async (e) => {
      await a.stop();
      throw e;
    })
    : undefined;
  const users = Array.from({ length: SPAWNS }, (_, i) => `bench-spawn-${i}`);
  const call = (method: string, path: string, body?: unknown) => fetch(`${a.url}/hub/api${path}`, {
    method, headers: { authorization: `token ${admin}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  try {
    const made = await call('POST', '/users', { usernames: users });
    if (made.status !== 201) throw new Error(`users not made: ${made.status}`);
    const t0 = performance.now();
    await Promise.all(users.map(async (u) => {
      const r = await call('POST', `/users/${u}/server`);
      if (r.status !== 201) throw new Error(`start ${u}: ${r.status} ${await r.text()}`);
    }));
    const perSecond = SPAWNS / ((performance.now() - t0) / 1000);
    const nc = await natsClient(a.natsUrl);
    const placed: Record<string, number> = {};
    try {
      const kv = await nc.jetstream().views.kv(SERVERS_BUCKET);
      for (const u of users) {
        const e = await kv.get(serverKey(u, ''));
        const node = e ? (JSON.parse(new TextDecoder().decode(e.value)) as ServerRecord).node ?? '?' : '?';
        placed[node] = (placed[node] ?? 0) + 1;
      }
    } finally {
      await nc.close();
    }
    await Promise.all(users.map((u) => call('DELETE', `/users/${u}/server`)));
    return { perSecond, placed };
  } finally {
    await b?.stop();
    await a.stop();
  }
}

/** wrk on every node's gateway at once, its 32 connections shared out: summed req/s, the worst p99, all failures. */
async function loadNodes(hubs: HubUnderTest[], path: string, admin: string, seconds: number, script?: string) {
  const each = Math.max(1, Math.floor(32 / hubs.length));
  const results: WrkResult[] = await Promise.all(hubs.map((h) => wrk(`${h.url}${path}`, {
    threads: hubs.length === 1 ? 2 : 1, connections: each, seconds, headers: { Authorization: `token ${admin}` }, script,
  })));
  return {
    reqPerSec: results.reduce((n, r) => n + r.reqPerSec, 0),
    p50: Math.max(...results.map((r) => r.p50)), p99: Math.max(...results.map((r) => r.p99)),
    failed: results.reduce((n, r) => n + failures(r), 0),
  };
}

/** The API through 1, 2 and 3 nodes on one PostgreSQL, and on SQLite files with one node: one line each. */
async function apiOverNodes(): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-scale-'));
  const script = join(dir, 'token.lua');
  writeFileSync(script, 'wrk.method = "POST"\nwrk.body = \'{"note": "bench", "expires_in": 3600}\'\nwrk.headers["Content-Type"] = "application/json"\n');
  const postgres = await startPostgres();
  const lines: string[] = [];
  try {
    for (const [db, nodes] of [['sqlite', 1], ['postgresql', 1], ['postgresql', 2], ['postgresql', 3]] as const) {
      log(`API through ${nodes} node(s), ${db}`);
      const admin = randomToken();
      let dbUrl = '';
      if (db === 'postgresql') {
        await postgres.createDatabase(`bench_scale_${nodes}`);
        dbUrl = postgres.url(`bench_scale_${nodes}`);
      }
      const shared = {
        Hub: { api_tokens: { [admin]: 'boss' }, ...(dbUrl ? { db_url: dbUrl, db_kwargs: { max: 4 } } : {}) },
        Authenticator: { admin_users: ['boss'] },
      };
      const hubs: HubUnderTest[] = [];
      try {
        hubs.push(await startHub({ config: nodeConfig(shared, { Hub: { node_name: 'node-a' } }) }));
        for (let i = 1; i < nodes; i++) hubs.push(await startHub({ config: nodeConfig(shared, { Hub: { node_name: `node-${'abc'[i]}`, nats_url: hubs[0].natsUrl } }) }));
        await loadNodes(hubs, '/hub/api/users/boss', admin, 2); // warm-up: every gateway has read the user and the token
        const read = await loadNodes(hubs, '/hub/api/users/boss', admin, SECONDS);
        const write = await loadNodes(hubs, '/hub/api/users/boss/tokens', admin, SECONDS, script);
        const row = (what: string, r: typeof read) => `${what} ${r.reqPerSec.toFixed(0).padStart(6)} req/s p50 ${r.p50.toFixed(2).padStart(6)} ms p99 ${r.p99.toFixed(2).padStart(7)} ms failed ${r.failed}`;
        lines.push(`  API through ${nodes} node${nodes > 1 ? 's' : ' '}, ${db.padEnd(10)}  ${row('GET user', read)}   ${row('POST token', write)}`);
      } finally {
        for (const h of hubs.reverse()) await h.stop();
      }
    }
  } finally {
    await postgres.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return lines;
}

export async function scale(): Promise<void> {
  if (!onPath('wrk')) aptInstall('wrk', log);
  if (!onPath('wrk')) throw new Error('wrk is missing: install it with `apt-get install -y wrk`');
  if (process.env.BENCH_SCALE_ONLY === 'nodes') {
    const lines = await apiOverNodes();
    console.log(`\nscale: the API over nodes (wrk, 32 connections shared out over the nodes' gateways, ${SECONDS} s; this machine: 2 shared cores)`);
    for (const line of lines) console.log(line);
    return;
  }
  const admin = randomToken();
  const rows: string[] = [];
  const api: string[] = [];
  for (const gateways of [1, 2, 4]) {
    log(`${gateways} gateway(s)`);
    const hub = await startHub({ config: { Hub: { api_tokens: { [admin]: 'boss' } }, Authenticator: { admin_users: ['boss'] }, Supervisor: { gateways } } });
    const nc = await natsClient(hub.natsUrl);
    try {
      await waitFor(`${gateways} gateways to be found`, async () => ((await countGateways(nc)) === gateways ? true : undefined), 20_000, 200);
      const kv = await nc.jetstream().views.kv(SERVERS_BUCKET);
      const times = await propagation(nc, kv, gateways);
      rows.push(`  route change → every gateway (${String(gateways).padStart(1)} gateway${gateways > 1 ? 's' : ' '})   p50 ${pct(times, 50).toFixed(2).padStart(6)} ms   p99 ${pct(times, 99).toFixed(2).padStart(6)} ms`);
      if (gateways === 1) {
        const floor = await watcherFloor(kv);
        rows.push(`  floor: the same KV write → one plain watcher     p50 ${pct(floor, 50).toFixed(2).padStart(6)} ms   p99 ${pct(floor, 99).toFixed(2).padStart(6)} ms`);
      }
      if (gateways <= 2) {
        const r = await wrk(`${hub.url}/hub/api/users/boss`, { threads: 2, connections: 32, seconds: SECONDS, headers: { Authorization: `token ${admin}` } });
        api.push(`  GET /hub/api/users/<name>, ${gateways} gateway${gateways > 1 ? 's' : ' '}   ${r.reqPerSec.toFixed(0).padStart(7)} req/s   p50 ${r.p50.toFixed(2).padStart(6)} ms   p99 ${r.p99.toFixed(2).padStart(6)} ms   failed ${failures(r)}`);
      }
    } finally {
      await nc.close();
      await hub.stop();
    }
  }
  const spawns: string[] = [];
  for (const nodes of [1, 2] as const) {
    log(`${SPAWNS} spawns at once, ${nodes} spawner node(s)`);
    const r = await spawnRate(nodes);
    spawns.push(`  spawns at once (${SPAWNS}), ${nodes} spawner node${nodes > 1 ? 's' : ' '}   ${r.perSecond.toFixed(1).padStart(6)} spawns/s   placed ${Object.entries(r.placed).map(([n, c]) => `${n} ${c}`).join(', ')}`);
  }
  const overNodes = await apiOverNodes();
  console.log(`\nscale (${CHANGES} route changes per row; wrk 2 threads, 32 connections, ${SECONDS} s (over nodes: shared out); this machine: 2 shared cores)`);
  for (const line of [...rows, ...api, ...spawns, ...overNodes]) console.log(line);
}
