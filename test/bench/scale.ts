// `npm run bench scale`: what running several gateways costs and buys on this machine.
//   - route propagation: a route change written to the registry (`hub_servers`, which every gateway routes user
//     servers from) until every gateway has applied it (each answers `hub.gateway.servers-applied` once its copy
//     has the revision: what the spawner waits for before it says "ready"), p50 and p99, with 1, 2 and 4
//     gateways; beside it the floor of the design: the same KV write seen by one plain watcher in this process.
//   - API read throughput with 1 and 2 gateways on the shared port (wrk, GET /hub/api/users/<name>).
// BENCH_SECONDS sets each wrk run (default 10); BENCH_ROUTE_CHANGES the samples per propagation row (default 200).
import { RequestStrategy, type KV, type NatsConnection } from 'nats';
import { randomToken } from '../api/client.js';
import { startHub, waitFor } from '../harness.js';
import { natsClient } from '../scale/helpers.js';
import { encodeJson } from '../../shared/nats.js';
import { SERVERS_BUCKET, serverKey, type ServerRecord } from '../../shared/servers.js';
import { natsServiceName, subjects } from '../../shared/subjects.js';
import { aptInstall, onPath } from './tools.js';
import { failures, wrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CHANGES = Number(process.env.BENCH_ROUTE_CHANGES ?? 200);
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

export async function scale(): Promise<void> {
  if (!onPath('wrk')) aptInstall('wrk', log);
  if (!onPath('wrk')) throw new Error('wrk is missing: install it with `apt-get install -y wrk`');
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
  console.log(`\nscale (${CHANGES} route changes per row; wrk 2 threads, 32 connections, ${SECONDS} s; this machine: 2 shared cores)`);
  for (const line of [...rows, ...api]) console.log(line);
}
