// Spawn bursts wait instead of failing: beyond Hub.concurrent_spawn_limit, starts queue first-come, answer
// 202 at once, hear their place as it moves, and all become ready; past Hub.spawn_queue_limit, 429.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { connect } from 'nats';
import { NATS_ADMIN, startHub, waitFor } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { SERVERS_BUCKET, type ServerRecord } from '../../shared/servers.js';
import { FIXTURE, serverRecord } from './helpers.js';

const ADMIN = randomToken();

test('queue: 3× concurrent_spawn_limit starts at once all become ready, in order of request, with their place on the progress stream and no 429; past spawn_queue_limit a 429', async (t) => {
  const LIMIT = 2;
  const users = Array.from({ length: 3 * LIMIT }, (_, i) => `q${i}`);
  const gate = join(mkdtempSync(join(tmpdir(), 'queue-gate-')), 'open');
  const hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, concurrent_spawn_limit: LIMIT, spawn_queue_limit: 2 * LIMIT },
      Authenticator: { admin_users: ['boss'] },
      // the servers listen only once the gate file exists: the queue stays full until the 429 is checked, however
      // slow the machine (a start that finished early would free a place and the late one would be queued: 202)
      Spawner: { cmd: [process.execPath, FIXTURE], environment: { FIXTURE_DELAY_MS: '400', FIXTURE_GATE_FILE: gate }, slow_spawn_timeout: 0.2 },
    },
  });
  const api = apiClient(hub.url);
  // every change of every record, in the order the spawner wrote them
  const nc = await connect({ servers: hub.natsUrl, ...NATS_ADMIN });
  const changes: ServerRecord[] = [];
  const kv = await nc.jetstream().views.kv(SERVERS_BUCKET, { history: 1 });
  const watch = await kv.watch();
  void (async () => {
    for await (const e of watch) if (e.operation === 'PUT') changes.push(JSON.parse(new TextDecoder().decode(e.value)));
  })();
  try {
    await api('POST', '/users', { token: ADMIN, body: { usernames: [...users, 'late'] } });
    const answers: number[] = [];
    for (const u of users) {
      const t0 = Date.now();
      const r = await api('POST', `/users/${u}/server`, { token: ADMIN });
      answers.push(r.status);
      if (users.indexOf(u) >= LIMIT) t.true(Date.now() - t0 < 1500, `a queued start answers at once (${Date.now() - t0} ms)`);
    }
    t.deepEqual(answers, users.map(() => 202), 'no 429 within the queue');
    const full = await api('POST', '/users/late/server', { token: ADMIN });
    t.is(full.status, 429, 'past spawn_queue_limit');
    t.regex(full.headers.get('retry-after') ?? '', /^\d+$/);
    writeFileSync(gate, '');

    await waitFor('every server to be ready', async () => {
      const all = await Promise.all(users.map(async (u) => (await api('GET', `/users/${u}`, { token: ADMIN })).body.servers['']?.ready));
      return all.every(Boolean) ? true : undefined;
    }, 60_000, 200);
    // turns were taken first come, first served: the order in which starts began spawning is the request order
    const began: string[] = [];
    for (const c of changes) if (c.progress.some((e) => e.message === 'Spawning server...') && !began.includes(c.user)) began.push(c.user);
    t.deepEqual(began, users);
    // a queued start heard its place as it moved, then its turn, then the usual events
    const last = (await api('GET', `/users/${users.at(-1)}`, { token: ADMIN })).body.servers[''];
    t.true(last.ready);
    // the ready event follows the record's `running` once every gateway routes the server (ready means routed)
    const heard = await waitFor('the ready event of the last start', async () => {
      const messages = changes.filter((c) => c.user === users.at(-1)).at(-1)!.progress.map((e) => e.message);
      return messages.at(-1)?.startsWith('Server ready') ? messages : undefined;
    }, 10_000);
    const places = heard.filter((m) => /ahead of yours|Next in line/.test(m));
    t.deepEqual(places, ['3 starts ahead of yours', '2 starts ahead of yours', '1 start ahead of yours', 'Next in line'], heard.join(' | '));
    t.true(heard.indexOf('Your turn: starting') > heard.indexOf('Next in line'));
    t.is(heard.at(-1), 'Server ready at /user/q5/');
  } finally {
    await watch.stop();
    await nc.close();
    await hub.stop();
  }
});

test('queue: a start stopped while it waits leaves the queue, and those behind it move up', async (t) => {
  const hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, concurrent_spawn_limit: 1 },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { cmd: [process.execPath, FIXTURE], environment: { FIXTURE_DELAY_MS: '1500' }, slow_spawn_timeout: 0.1 },
    },
  });
  const api = apiClient(hub.url);
  try {
    await api('POST', '/users', { token: ADMIN, body: { usernames: ['w0', 'w1', 'w2'] } });
    for (const u of ['w0', 'w1', 'w2']) t.is((await api('POST', `/users/${u}/server`, { token: ADMIN })).status, 202);
    t.is((await api('DELETE', '/users/w1/server', { token: ADMIN })).status, 204, 'a waiting start stops at once');
    t.deepEqual((await api('GET', '/users/w1', { token: ADMIN })).body.servers, {});
    await waitFor('w0 and w2 ready', async () => {
      const ready = await Promise.all(['w0', 'w2'].map(async (u) => (await api('GET', `/users/${u}`, { token: ADMIN })).body.servers['']?.ready));
      return ready.every(Boolean) ? true : undefined;
    }, 30_000, 200);
    const heard = (await serverRecord(hub.natsUrl, 'w2'))!.progress.map((e) => e.message);
    t.deepEqual(heard.filter((m) => /ahead of yours|Next in line/.test(m)), ['1 start ahead of yours', 'Next in line'], heard.join(' | '));
  } finally {
    await hub.stop();
  }
});

test('queue: kill -9 of the spawner with starts waiting in the queue: after its restart every one of them still becomes ready, and says why it took longer', async (t) => {
  const gate = join(mkdtempSync(join(tmpdir(), 'queue-gate-')), 'open');
  const hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, concurrent_spawn_limit: 1 },
      Authenticator: { admin_users: ['boss'] },
      // r0's server listens only once the gate opens, after the kill: r1 and r2 are still waiting then, however slow the machine
      Spawner: { cmd: [process.execPath, FIXTURE], environment: { FIXTURE_GATE_FILE: gate }, slow_spawn_timeout: 0.1, poll_interval: 0.5 },
    },
  });
  const api = apiClient(hub.url);
  const users = ['r0', 'r1', 'r2'];
  try {
    await api('POST', '/users', { token: ADMIN, body: { usernames: users } });
    for (const u of users) t.is((await api('POST', `/users/${u}/server`, { token: ADMIN })).status, 202);
    const spawner = hub.children().spawner!;
    process.kill(spawner, 'SIGKILL');
    await waitFor('a new spawner', async () => (hub.children().spawner && hub.children().spawner !== spawner ? true : undefined), 10_000);
    writeFileSync(gate, '');
    await waitFor('every queued start to be ready', async () => {
      const ready = await Promise.all(users.map(async (u) => (await api('GET', `/users/${u}`, { token: ADMIN })).body.servers['']?.ready));
      return ready.every(Boolean) ? true : undefined;
    }, 40_000, 250).catch(async (e) => {
      // what each start heard, and the hub's last lines: enough to find why one never became ready
      const heard = await Promise.all(users.map(async (u) => `${u}: ${JSON.stringify((await serverRecord(hub.natsUrl, u))?.progress.map((p) => p.message))}`));
      throw new Error(`${(e as Error).message}\n${heard.join('\n')}\n--- hub log (end) ---\n${hub.logs().slice(-6000)}`);
    });
    // `ready` shows as soon as the record says running; the "ready" line follows once every gateway confirmed the route
    await waitFor('the ready lines', async () => {
      const last = await Promise.all(['r1', 'r2'].map(async (u) => (await serverRecord(hub.natsUrl, u))?.progress.at(-1)?.ready));
      return last.every(Boolean) ? true : undefined;
    }, 10_000, 100);
    for (const u of ['r1', 'r2']) {
      const heard = (await serverRecord(hub.natsUrl, u))!.progress.map((e) => e.message);
      t.true(heard.includes('The hub restarted; your start goes on'), `${u}: ${heard.join(' | ')}`);
      t.is(heard.at(-1), `Server ready at /user/${u}/`);
    }
  } finally {
    await hub.stop();
  }
});
