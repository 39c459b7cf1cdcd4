// `hub restart` with overlapping replacements (issue 24 item 1): every actor's fresh process serves beside the old
// one before the old one stops taking work, so under API (reads and writes), proxy and WebSocket load no request
// fails and no call waits for a missing actor; every server keeps running; a server's start under way in the
// spawner being replaced completes (finished by the old spawner, or handed over to the new one once the old one's
// drain is over), never started twice; a stop asked of the new spawner while the old one still starts that server
// waits for the start and then stops it.
import test from 'ava';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { apiClient, randomToken } from '../api/client.js';
import { isAlive, NATS_TOKEN, runHubCommand, sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiLoad, echoBackend, echoSocket, pathLoad } from './load.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/server.mjs', import.meta.url));
const ADMIN = randomToken();
const ENV = { HUB_NATS_TOKEN: NATS_TOKEN };

/** Single-user servers (the fixture) of `user` running on this machine: pids whose environment names the user. */
/** `user`'s server processes of this hub (other test files run hubs with users of the same names at the same time). */
function serverProcesses(hub: HubUnderTest, user: string): number[] {
  const ofThisHub = `:${new URL(hub.internalUrl).port}/`;
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const env = readFileSync(`/proc/${entry}/environ`, 'latin1').split('\0');
      if (env.includes(`HUB_USER=${user}`) && env.some((e) => e.startsWith('HUB_API_URL=') && e.includes(ofThisHub))
        && readFileSync(`/proc/${entry}/cmdline`, 'latin1').includes('server.mjs')) pids.push(Number(entry));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return pids;
}

/** A hub whose servers listen only once `gate` exists (test/fixtures/server.mjs FIXTURE_GATE_FILE). */
async function gatedHub(gate: string, more: { Hub?: Record<string, unknown>; Supervisor?: Record<string, unknown> } = {}): Promise<HubUnderTest> {
  return startHub({ config: {
    Hub: { api_tokens: { [ADMIN]: 'boss' }, rpc_timeout: 10, ...more.Hub },
    Authenticator: { admin_users: ['boss'] },
    Spawner: { cmd: [process.execPath, FIXTURE], environment: { FIXTURE_GATE_FILE: gate }, slow_spawn_timeout: 1, start_timeout: 60, poll_interval: 1 },
    Supervisor: { ...more.Supervisor },
  } });
}

const api = (hub: HubUnderTest) => apiClient(hub.url);

async function untilReady(hub: HubUnderTest, user: string, timeoutMs = 30_000): Promise<Record<string, unknown>> {
  return waitFor(`${user}'s server to be ready`, async () => {
    const server = (await api(hub)('GET', `/users/${user}`, { token: ADMIN })).body?.servers?.[''];
    return server?.ready ? server : undefined;
  }, timeoutMs, 100);
}

/** `hub restart`'s lines "<id> pid A -> B  S s": how long each replacement took. */
const replacementTimes = (stdout: string) => [...stdout.matchAll(/^(\S+)\s+pid \d+ -> \d+\s+([\d.]+) s$/gm)].map((m) => `${m[1]} ${m[2]} s`).join(', ');

test.serial('hub restart overlaps every actor under API reads and writes, proxy and WebSocket load: 0 failures, every user and token made meanwhile kept, servers kept, a start under way completes once', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-overlap-'));
  const gate = join(dir, 'gate');
  writeFileSync(gate, '');
  const backend = await echoBackend();
  const hub = await gatedHub(gate, { Hub: { services: [{ name: 'echo', url: `http://127.0.0.1:${backend.port}` }] } });
  const file = join(hub.dataDir, 'hub.json');
  try {
    const call = api(hub);
    t.is((await call('POST', '/users', { token: ADMIN, body: { usernames: ['alice', 'bob'] } })).status, 201);
    t.true([201, 202].includes((await call('POST', '/users/alice/server', { token: ADMIN })).status));
    const aliceBefore = await untilReady(hub, 'alice');
    await waitFor('the echo route', async () => ((await fetch(`${hub.url}/services/echo/`)).status === 200 ? true : undefined));
    const socket = await echoSocket(`${hub.url.replace('http', 'ws')}/services/echo/echo`);
    t.true(await socket.roundTrip());

    // bob's start is under way (his server waits for the gate) when the restart begins
    rmSync(gate);
    t.is((await call('POST', '/users/bob/server', { token: ADMIN })).status, 202);
    const before = hub.children();

    // reads through auth, the proxy-router and the spawner; a proxied service; a user's server; writes (users and
    // tokens made one after another, each timed); the open WebSocket, used all along
    const loads = [apiLoad(hub.url, ADMIN, 2), pathLoad(`${hub.url}/hub/api/proxy`, 1, ADMIN), pathLoad(`${hub.url}/hub/api/users/alice`, 1, ADMIN),
      pathLoad(`${hub.url}/services/echo/`, 1), pathLoad(`${hub.url}/user/alice/`, 1, ADMIN)];
    const made: { user: string; token: string }[] = [];
    const writeFailures: string[] = [];
    let slowestWrite = 0;
    let writing = true;
    const writer = (async () => {
      for (let i = 0; writing; i++) {
        const user = `w${i}`;
        const began = performance.now();
        const u = await call('POST', `/users/${user}`, { token: ADMIN }).catch((e: Error) => ({ status: 0, body: e.message }));
        const k = u.status === 201 ? await call('POST', `/users/${user}/tokens`, { token: ADMIN, body: { note: 'overlap' } }).catch((e: Error) => ({ status: 0, body: e.message })) : null;
        slowestWrite = Math.max(slowestWrite, performance.now() - began);
        if (u.status !== 201 || k?.status !== 201) writeFailures.push(`${user}: ${u.status} ${k?.status} ${JSON.stringify(k?.body ?? u.body).slice(0, 200)}`);
        else made.push({ user, token: k.body.token });
      }
    })();
    let wsFailures = 0;
    let wsRounds = 0;
    let talking = true;
    const talk = (async () => { while (talking) { if (!(await socket.roundTrip())) wsFailures++; wsRounds++; await sleep(100); } })();

    const startedAt = Date.now();
    const r = await runHubCommand(['restart', '--config', file], { env: ENV, killAfterMs: 110_000 });
    const restartMs = Date.now() - startedAt;
    t.is(r.code, 0, `${r.stdout}${r.stderr}`);
    const after = hub.children();
    for (const id of ['tokens', 'auth', 'oauth', 'spawner', 'proxy-router', 'gateway']) t.not(after[id], before[id], `${id} replaced`);

    // the old spawner still has bob's start: it finishes it once the server listens
    t.true(isAlive(before.spawner!), 'the replaced spawner waits for the start it began');
    writeFileSync(gate, '');
    const bob = await untilReady(hub, 'bob');
    await waitFor('the replaced spawner to exit', async () => (isAlive(before.spawner!) ? undefined : true), 20_000);
    await sleep(1000); // a little more load on the new processes
    writing = false;
    talking = false;
    await Promise.all([writer, talk]);
    const results = await Promise.all(loads.map((l) => l.stop()));

    const failures = [...results.flatMap((x) => x.failures), ...writeFailures];
    const errorLines = hub.logs().split('\n').filter((l) => /"level":(50|60)/.test(l)).join('\n').slice(-3000);
    t.deepEqual(failures, [], `${failures.length} failed\n${errorLines}`);
    for (const x of results) t.true(x.done > 0);
    t.true(made.length > 0);
    t.is(wsFailures, 0, `${wsFailures} of ${wsRounds} WebSocket round trips failed`);
    t.is(socket.closed, null);
    const slowest = results.reduce((m, x) => Math.max(m, x.slowest.ms), 0);
    t.log(`hub restart took ${(restartMs / 1000).toFixed(1)} s (${replacementTimes(r.stdout)}); ${results.reduce((n, x) => n + x.done, 0)} reads, `
      + `${made.length} users with a token made, ${wsRounds} WebSocket round trips, 0 failed; the slowest read took ${slowest.toFixed(0)} ms, the slowest user + token ${slowestWrite.toFixed(0)} ms`);

    // everything the old and the new auth and tokens actors wrote is there: each user listed, each token works
    const listed = new Set(((await call('GET', '/users?limit=10000', { token: ADMIN })).body as { name: string }[]).map((u) => u.name));
    t.deepEqual(made.filter((m) => !listed.has(m.user)).map((m) => m.user), [], 'users made during the restart are listed');
    for (const m of [made[0], made[Math.floor(made.length / 2)], made.at(-1)!]) {
      const who = await fetch(`${hub.url}/hub/api/user`, { headers: { authorization: `token ${m.token}` } });
      t.is(who.status, 200, m.user);
      t.is((await who.json()).name, m.user);
    }
    // alice's server never stopped; bob's start completed once: one process, the one the hub names
    const alice = (await call('GET', '/users/alice', { token: ADMIN })).body.servers[''];
    t.true(alice.ready);
    t.is(alice.started, aliceBefore.started);
    t.is((await fetch(`${hub.url}/user/alice/`, { headers: { authorization: `token ${ADMIN}` } })).status, 200);
    t.is((await fetch(`${hub.url}/user/bob/`, { headers: { authorization: `token ${ADMIN}` } })).status, 200);
    t.truthy(bob.started);
    t.is(serverProcesses(hub, 'bob').length, 1, `bob's server processes: ${serverProcesses(hub, 'bob')}`);
    t.is(serverProcesses(hub, 'alice').length, 1);
    // the routing table has one writer again: a reconcile asked through the API is done
    t.is((await call('POST', '/proxy', { token: ADMIN })).status, 200);
    socket.close();
  } finally {
    await hub.stop();
    backend.server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.serial('hub restart spawner: a start still under way when the old spawner\'s drain ends is handed over and completes once; a stop asked meanwhile waits for the old spawner, then stops it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-overlap-'));
  const gate = join(dir, 'gate');
  const hub = await gatedHub(gate, { Supervisor: { drain_timeout: 3 } });
  const file = join(hub.dataDir, 'hub.json');
  try {
    const call = api(hub);
    t.is((await call('POST', '/users', { token: ADMIN, body: { usernames: ['carol', 'dave'] } })).status, 201);
    t.is((await call('POST', '/users/carol/server', { token: ADMIN })).status, 202);
    t.is((await call('POST', '/users/dave/server', { token: ADMIN })).status, 202);
    const old = hub.children().spawner!;
    const r = await runHubCommand(['restart', 'spawner', '--config', file], { env: ENV, killAfterMs: 60_000 });
    t.is(r.code, 0, `${r.stdout}${r.stderr}`);
    t.true(isAlive(old), 'the old spawner drains: its starts are under way');
    // asked of the new spawner while the old one still starts dave's server: it waits until the old one is done
    // with it (here: gone, the start handed over), then stops it
    const stop = await call('DELETE', '/users/dave/server', { token: ADMIN });
    t.true([202, 204].includes(stop.status), `${stop.status} ${JSON.stringify(stop.body)}`);
    t.false(isAlive(old), 'the stop was done by the new spawner once the old one had left');
    // the old one's drain (3 s) ends with both starts still waiting for the gate: the new spawner takes them over
    await waitFor('the old spawner to exit', async () => (isAlive(old) ? undefined : true), 30_000);
    t.is(serverProcesses(hub, 'carol').length, 1, 'carol\'s server process is still the one begun');
    writeFileSync(gate, '');
    await untilReady(hub, 'carol');
    t.is((await fetch(`${hub.url}/user/carol/`, { headers: { authorization: `token ${ADMIN}` } })).status, 200);
    t.is(serverProcesses(hub, 'carol').length, 1, `carol's server processes: ${serverProcesses(hub, 'carol')}`);
    // dave's server: started, then stopped as asked
    await waitFor('dave\'s server to be stopped', async () => {
      const d = (await call('GET', '/users/dave', { token: ADMIN })).body;
      return d && !d.servers?.[''] && serverProcesses(hub, 'dave').length === 0 ? true : undefined;
    }, 30_000, 100);
    t.deepEqual(serverProcesses(hub, 'dave'), []);
    t.false(existsSync(join(hub.dataDir, 'run', `spawner.sock.${old}`)), 'no socket of the old spawner left behind');
  } finally {
    await hub.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
