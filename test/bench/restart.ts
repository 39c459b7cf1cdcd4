// `npm run bench restart` (issue 24): how long a full rolling restart (`hub restart`) takes, and what fails meanwhile,
// on a one-node hub with one and with two gateways under API, proxy and WebSocket load; and `hub reload` adding a
// service: how soon its token works and what fails meanwhile. BENCH_RESTARTS (3) rolling restarts per hub. The
// slowest API read during the restarts is how long a call waited for an actor being replaced; BENCH_BASELINE=<commit>
// runs the same on that commit's hub too (before overlapping replacements: the gap of each stop-then-start).
import type { HubUnderTest } from '../harness.js';
import { baselineCheckout } from './tools.js';
import { join } from 'node:path';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { randomToken } from '../api/client.js';
import { NATS_TOKEN, runHubCommand, sleep, startHub, waitFor } from '../harness.js';
import { apiLoad, echoBackend, echoSocket, pathLoad } from '../ops/load.js';

const TARGET = fileURLToPath(new URL('./spawn-target.mjs', import.meta.url));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

async function oneHub(gateways: number, restarts: number, repo?: string): Promise<void> {
  const admin = randomToken();
  const backend = await echoBackend();
  const hub: HubUnderTest = await startHub({ repo, config: {
    Hub: { api_tokens: { [admin]: 'boss' }, services: [{ name: 'echo', url: `http://127.0.0.1:${backend.port}` }] },
    Authenticator: { admin_users: ['boss'] },
    Spawner: { cmd: [process.execPath, TARGET] },
    // the WebSocket outlives every restart of a run (three took more than the default 60 s at load 15-20)
    Supervisor: { gateways, drain_timeout: 300 },
  } });
  const env = { HUB_NATS_TOKEN: NATS_TOKEN };
  const file = join(hub.dataDir, 'hub.json');
  try {
    const auth = { authorization: `token ${admin}` };
    await fetch(`${hub.url}/hub/api/users`, { method: 'POST', headers: auth, body: JSON.stringify({ usernames: ['alice'] }) });
    await fetch(`${hub.url}/hub/api/users/alice/server`, { method: 'POST', headers: auth });
    await waitFor('alice\'s server', async () => ((await fetch(`${hub.url}/user/alice/`, { headers: auth })).status === 200 ? true : undefined), 30_000);
    await waitFor('the echo route', async () => ((await fetch(`${hub.url}/services/echo/`)).status === 200 ? true : undefined));
    const socket = await echoSocket(`${hub.url.replace('http', 'ws')}/services/echo/echo`);
    const loads = [apiLoad(hub.url, admin, 2), pathLoad(`${hub.url}/services/echo/`, 2), pathLoad(`${hub.url}/user/alice/`, 1, admin)];
    let wsFailed = 0;
    let wsRounds = 0;
    let talking = true;
    const talk = (async () => { while (talking) { if (!(await socket.roundTrip())) wsFailed++; wsRounds++; await sleep(100); } })();

    const walls: number[] = [];
    const perProcess: Record<string, number[]> = {};
    const slowestReads: number[] = [];
    for (let i = 0; i < restarts; i++) {
      const t0 = performance.now();
      const reads = apiLoad(hub.url, admin, 1); // its own loop: the slowest read of this restart
      const r = await runHubCommand(['restart', '--config', file], { env, killAfterMs: 300_000 });
      walls.push(performance.now() - t0);
      const measured = await reads.stop();
      slowestReads.push(measured.slowest.ms);
      if (measured.failures.length) console.log(`  restart ${i + 1}: ${measured.failures.length} reads failed: ${measured.failures.slice(0, 3).join('; ')}`);
      if (r.code !== 0) console.log(`  restart ${i + 1} failed: ${r.stdout}${r.stderr}`);
      for (const m of r.stdout.matchAll(/^(\S+)\s+pid \d+ -> \d+\s+([\d.]+) s$/gm)) (perProcess[m[1]] ??= []).push(Number(m[2]));
      await sleep(1000);
    }

    // hub reload adding a service: from the command's start to its token's first 200
    const token = randomToken();
    const original = JSON.parse(readFileSync(file, 'utf8'));
    writeFileSync(file, JSON.stringify({ ...original, Hub: { ...original.Hub, services: [...original.Hub.services, { name: 'added', api_token: token }] } }));
    const t0 = performance.now();
    const reloadRun = runHubCommand(['reload', '--config', file], { env });
    const firstOk = await waitFor('the added service\'s token', async () =>
      ((await fetch(`${hub.url}/hub/api/user`, { headers: { authorization: `token ${token}` } })).status === 200 ? performance.now() - t0 : undefined), 30_000, 20);
    const reloaded = await reloadRun;

    talking = false;
    await talk;
    const results = await Promise.all(loads.map((l) => l.stop()));
    const done = results.reduce((n, x) => n + x.done, 0);
    const failed = results.flatMap((x) => x.failures);
    console.log(`  ${repo ? `BENCH_BASELINE ${process.env.BENCH_BASELINE}: ` : ''}${gateways} gateway(s), ${restarts} rolling restarts of ${Object.keys(perProcess).length} processes: wall median ${(median(walls) / 1000).toFixed(1)} s (${walls.map((w) => (w / 1000).toFixed(1)).join(', ')})`);
    console.log(`    per process (median s): ${Object.entries(perProcess).map(([id, xs]) => `${id} ${median(xs).toFixed(1)}`).join(', ')}`);
    console.log(`    slowest API read (GET /hub/api/users) during each restart: ${slowestReads.map((ms) => `${ms.toFixed(0)} ms`).join(', ')}`);
    console.log(`    hub reload adding a service: its token answered 200 after ${firstOk.toFixed(0)} ms (command exit ${reloaded.code})`);
    console.log(`    under load: ${failed.length} of ${done} requests failed (${((100 * failed.length) / Math.max(1, done)).toFixed(3)} %), ${wsFailed} of ${wsRounds} WebSocket round trips failed, the WebSocket ${socket.closed === null ? 'still open' : `closed (${socket.closed})`}`);
    if (failed.length) console.log(`    failures: ${[...new Set(failed)].slice(0, 5).join('; ')}`);
    socket.close();
  } finally {
    await hub.stop();
    backend.server.close();
  }
}

export async function restartBench(): Promise<void> {
  const restarts = Number(process.env.BENCH_RESTARTS) || 3;
  console.log('restart: `hub restart` and `hub reload` under API, proxy, user-server and WebSocket load');
  const baseline = process.env.BENCH_BASELINE ? baselineCheckout(process.env.BENCH_BASELINE, (line) => console.log(`  ${line}`)) : undefined;
  for (const gateways of [1, 2]) {
    await oneHub(gateways, restarts);
    if (baseline) await oneHub(gateways, restarts, baseline);
  }
}
