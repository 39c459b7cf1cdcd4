import test from 'ava';
import { connect, StringCodec } from 'nats';
import { createLogger } from '../../shared/log.js';
import { SupervisedChild } from '../../shared/supervision.js';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, isAlive, NATS_ADMIN, runHubCommand, sleep, startHub, waitFor } from '../harness.js';

const ACTORS = ['tokens', 'auth', 'oauth', 'spawner', 'proxy-router', 'gateway'];

async function health(url: string): Promise<number> {
  try {
    return (await fetch(`${url}/hub/health`, { signal: AbortSignal.timeout(2000) })).status;
  } catch {
    return 0;
  }
}

test('supervision: kill -9 of each actor in turn, health is back to 200 within 10 s', async (t) => {
  const hub = await startHub();
  try {
    for (const actor of ACTORS) {
      const pid = hub.children()[actor];
      t.truthy(pid, `${actor} has a pid`);
      process.kill(pid!, 'SIGKILL');
      const killedAt = Date.now();
      await waitFor(`${actor} to be replaced`, async () => (hub.children()[actor] !== pid ? true : undefined), 10_000, 20);
      await waitFor(`health after killing ${actor}`, async () => ((await health(hub.url)) === 200 ? true : undefined), 10_000 - (Date.now() - killedAt), 50);
      t.pass(`${actor} back in ${Date.now() - killedAt} ms`);
    }
    t.regex(hub.logs(), /"event":"child.exit","child":"gateway".*"signal":"SIGKILL"/, 'the exit is logged with its signal');
  } finally {
    const r = await hub.stop();
    t.deepEqual(r.leftovers, []);
  }
});

test('supervision: a stopped actor makes health 503 naming it; SIGTERM stops every child and exits 0', async (t) => {
  const hub = await startHub();
  const pids = Object.values(hub.children()).filter((p): p is number => p !== null);
  t.is(pids.length, 7, 'nats and six actors');
  const spawner = hub.children().spawner!;
  process.kill(spawner, 'SIGSTOP'); // alive but not answering
  try {
    const r = await fetch(`${hub.url}/hub/health`);
    t.is(r.status, 503);
    const body = await r.json();
    t.deepEqual(body.missing, ['spawner']);
    t.regex(body.message, /spawner/);
  } finally {
    process.kill(spawner, 'SIGCONT');
  }
  const result = await hub.stop();
  t.is(result.code, 0);
  t.deepEqual(result.leftovers, [], 'no child outlives the supervisor');
  t.false(pids.some(isAlive));
});

test('supervision: two hubs differing only in ports and data dir run side by side; actors answer on NATS and audit is retained; a third on a taken port refuses to start', async (t) => {
  const [a, b] = await Promise.all([startHub(), startHub()]);
  try {
    t.is(await health(a.url), 200);
    t.is(await health(b.url), 200);
    const nc = await connect({ servers: a.natsUrl, ...NATS_ADMIN });
    const sc = StringCodec();
    const reply = JSON.parse(sc.decode((await nc.request('$SRV.PING.hub-tokens', undefined, { timeout: 2000 })).data));
    t.is(reply.metadata.actor, 'tokens');
    t.is(Number(reply.metadata.pid), a.children().tokens);
    // every actor recorded its start in the retained audit stream
    const jsm = await nc.jetstreamManager();
    const starts = new Set<string>();
    const info = await jsm.streams.info('HUB_AUDIT');
    for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
      const m = await jsm.streams.getMessage('HUB_AUDIT', { seq });
      if (m.subject === 'hub.audit.actor.start') starts.add(JSON.parse(sc.decode(m.data)).actor);
    }
    t.deepEqual([...starts].sort(), [...ACTORS].sort());
    await nc.close();
    // a third hub wrongly given a's port refuses to start (its gateway would otherwise share the port and take
    // half of a's requests), and a is untouched
    const dataDir = mkdtempSync(join(tmpdir(), 'hub-same-port-'));
    try {
      const third = await runHubCommand([`--Hub.port=${a.port}`, `--Hub.data_dir=${dataDir}`, `--Hub.nats_port=${await freePort()}`]);
      t.is(third.code, 2, third.stderr);
      t.regex(third.stderr, new RegExp(`Hub\\.port: 127\\.0\\.0\\.1:${a.port} cannot be listened on \\(in use by another process`));
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
    t.is(await health(a.url), 200);
  } finally {
    await Promise.all([a.stop(), b.stop()]);
  }
});

test('supervision: a port taken after the start-up check stops the hub with the reason, instead of restarting a gateway that cannot listen', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hub-port-taken-'));
  const port = await freePort();
  // (the hub's own health check reaches it too and may reset its connection)
  const squatter = createServer((c) => c.on('error', () => undefined).end('not the hub\n'));
  try {
    const run = runHubCommand([`--Hub.port=${port}`, `--Hub.data_dir=${dataDir}`, `--Hub.nats_port=${await freePort()}`, '--Supervisor.startup_timeout=5'], { killAfterMs: 60_000 });
    // the gateway opens its front door once the tokens actor answers (or Supervisor.startup_timeout passes):
    // holding tokens still keeps the port free for the squatter, after the supervisor has checked it
    const file = join(dataDir, 'run', 'processes.json');
    const tokens = await waitFor('the tokens actor to be started', async () =>
      (existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')).children.tokens as number | null) ?? undefined : undefined), 20_000, 5);
    process.kill(tokens, 'SIGSTOP');
    try {
      await new Promise<void>((resolve, reject) => {
        squatter.once('error', reject);
        squatter.listen({ host: '127.0.0.1', port, exclusive: true }, resolve);
      });
    } finally {
      process.kill(tokens, 'SIGCONT');
    }
    const result = await run;
    t.is(result.code, 1, result.stderr);
    t.regex(result.stdout + result.stderr, new RegExp(`gateway cannot listen on 127\\.0\\.0\\.1:${port}.*another process took it after the hub checked it at start; the hub stops`));
    t.false(isAlive(tokens), 'no actor left behind');
  } finally {
    squatter.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('supervision: a child that keeps dying is restarted with backoff, then marked failed', async (t) => {
  const log = createLogger('test', 'silent');
  const starts: number[] = [];
  const child = new SupervisedChild(
    { id: 'crasher', command: process.execPath, args: ['-e', 'process.exit(3)'], env: {}, ipc: false },
    { backoffInitialMs: 200, backoffMaxMs: 2000, stableUptimeMs: 10_000, intensity: 3, periodMs: 60_000, shutdownMs: 1000 },
    log, () => { if (child.pid) starts.push(Date.now()); },
  );
  child.start();
  await waitFor('the child to be marked failed', async () => (child.failed ? true : undefined), 10_000);
  await sleep(300);
  t.is(starts.length, 4, 'first start plus three restarts, then no more');
  const gaps = starts.slice(1).map((s, i) => s - starts[i]);
  // delays are 200, 400, 800 ms × (0.5 to 1.5 jitter), plus start-up noise: the third is at least 400 ms,
  // more than the first could ever be (300 ms)
  t.true(gaps[2] >= 400, `backoff grows: ${gaps.join(', ')} ms`);
  await child.stop();
});
