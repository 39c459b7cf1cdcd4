// Zero downtime (issue 24): the front door opens only when the hub can serve, a start sent while the spawner
// restarts waits for the new one instead of failing, `hub status` shows what runs since when, and `hub reload`
// applies a new configuration without restarting anything.
import test from 'ava';
import { fileURLToPath } from 'node:url';
import { apiClient, randomToken } from '../api/client.js';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isAlive, NATS_TOKEN, REPO, runHubCommand, sleep, startHub, waitFor } from '../harness.js';
import { apiLoad, echoBackend, echoSocket, pathLoad } from './load.js';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { HUB_VERSION } from '../../shared/build-info.js';
import { cliIdentity } from '../../cli/hub.js';
import { Browser, formLogin, whoami } from '../auth/helpers.js';
import { account, PROBE, serverRecord, startAndWaitReady, systemAccounts } from '../spawner/helpers.js';

const TARGET = fileURLToPath(new URL('../bench/spawn-target.mjs', import.meta.url));
const FIXTURE = fileURLToPath(new URL('../fixtures/server.mjs', import.meta.url));
const ADMIN = randomToken();

/** `hub status`'s row of one process: its pid, start time and code (release and commit). */
async function statusRow(dataDir: string, process: string): Promise<{ pid: number; started: string; code: string }> {
  const r = await runHubCommand(['status', '--config', join(dataDir, 'hub.json')], { env: { HUB_NATS_TOKEN: NATS_TOKEN } });
  if (r.code !== 0) throw new Error(`hub status: ${r.code} ${r.stdout}${r.stderr}`);
  const line = r.stdout.split('\n').find((l) => l.startsWith(`${process} `));
  const m = line && /^\S+\s+(\d+)\s+[\d.]+ MB\s+[\d.]+ MB\s+(\S+)\s+(.+)$/.exec(line);
  if (!m) throw new Error(`hub status has no row for ${process}:\n${r.stdout}`);
  return { pid: Number(m[1]), started: m[2], code: m[3].trim() };
}

/** "<release> (<commit>)" naming this package's release and a commit of this repository (HEAD moves while tests run). */
function isCheckoutCode(code: string): boolean {
  const m = /^(\S+) \(([0-9a-f]{12})\)$/.exec(code);
  if (!m || m[1] !== HUB_VERSION) return false;
  try {
    return execFileSync('git', ['cat-file', '-t', m[2]], { cwd: REPO }).toString().trim() === 'commit';
  } catch {
    return false;
  }
}

const hubConfig = (more: Record<string, Record<string, unknown>> = {}) => ({
  ...more,
  Hub: { api_tokens: { [ADMIN]: 'boss' }, ...more.Hub },
  Authenticator: { admin_users: ['boss'], ...more.Authenticator },
  Spawner: { cmd: [process.execPath, TARGET], slow_spawn_timeout: 5, ...more.Spawner },
});

test.serial('front door: starts sent as soon as the port first answers all succeed (20 users, no 503)', async (t) => {
  const hub = await startHub({ readyWhen: 'answering', config: hubConfig() });
  try {
    const api = apiClient(hub.url);
    const names = Array.from({ length: 20 }, (_, i) => `early${i}`);
    const made = await api('POST', '/users', { token: ADMIN, body: { usernames: names } });
    t.is(made.status, 201, JSON.stringify(made.body));
    const starts = await Promise.all(names.map((n) => api('POST', `/users/${n}/server`, { token: ADMIN })));
    t.deepEqual(starts.map((r, i) => [names[i], r.status]).filter(([, s]) => s !== 201 && s !== 202), []);
    const health = await fetch(`${hub.url}/hub/health`);
    t.is(health.status, 200);
  } finally {
    await hub.stop();
  }
});

test.serial('front door: a start sent while the spawner restarts waits for the new spawner (no 503)', async (t) => {
  const hub = await startHub({ config: hubConfig({ Hub: { rpc_timeout: 10 } }) });
  try {
    const api = apiClient(hub.url);
    t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['late'] } })).status, 201);
    const old = hub.children().spawner!;
    // hub status: every process with its start time and the code it runs
    const before = await statusRow(hub.dataDir, 'spawner');
    t.is(before.pid, old);
    t.true(isCheckoutCode(before.code), before.code);
    t.true(Date.parse(before.started) <= Date.now());
    t.true(isCheckoutCode((await statusRow(hub.dataDir, 'supervisor')).code));
    process.kill(old, 'SIGKILL');
    await waitFor('the spawner to be gone', async () => (isAlive(old) ? undefined : true), 5000, 10);
    const start = await api('POST', '/users/late/server', { token: ADMIN });
    t.true(start.status === 201 || start.status === 202, `${start.status} ${JSON.stringify(start.body)}`);
    const fresh = hub.children().spawner;
    t.truthy(fresh);
    t.not(fresh, old);
    const ready = await waitFor('the server to be ready', async () => {
      const r = await api('GET', '/users/late', { token: ADMIN });
      return r.body?.servers?.['']?.ready ? true : undefined;
    }, 15_000);
    t.true(ready);
    const after = await statusRow(hub.dataDir, 'spawner');
    t.is(after.pid, fresh);
    t.true(Date.parse(after.started) > Date.parse(before.started), `${after.started} after ${before.started}`);
    t.true(isCheckoutCode(after.code), after.code);
  } finally {
    await hub.stop();
  }
});

test.serial('hub reload: a service added to the file works at once, 0 API requests fail meanwhile; an invalid file changes nothing; SIGHUP removes it again', async (t) => {
  const hub = await startHub({ config: hubConfig() });
  const file = join(hub.dataDir, 'hub.json');
  const original = JSON.parse(readFileSync(file, 'utf8'));
  const env = { HUB_NATS_TOKEN: NATS_TOKEN };
  const svcToken = randomToken();
  const asService = () => fetch(`${hub.url}/hub/api/user`, { headers: { authorization: `token ${svcToken}` } });
  try {
    t.is((await asService()).status, 403);
    const load = apiLoad(hub.url, ADMIN);
    writeFileSync(file, JSON.stringify({
      ...original,
      Hub: { ...original.Hub, services: [{ name: 'reloaded', api_token: svcToken }], extra_headers: { 'X-Reloaded': 'yes' } },
      Spawner: { ...original.Spawner, cmd: [process.execPath, FIXTURE], environment: { HUB_RELOAD_MARK: 'reloaded' } },
      Authenticator: { ...original.Authenticator, admin_users: ['boss', 'promoted'] },
      Proxy: { connect_timeout: 7 },
    }));
    const r = await runHubCommand(['reload', '--config', file], { env });
    t.is(r.code, 0, r.stderr);
    t.regex(r.stdout, /applied Authenticator\.admin_users, Hub\.extra_headers, Hub\.services, Spawner\.cmd, Spawner\.environment/);
    t.regex(r.stdout, /needs `hub restart`: Proxy\.connect_timeout/);
    // the command returns once every actor has applied it: the token works on the first try
    const who = await asService();
    t.is(who.status, 200);
    t.like(await who.json(), { kind: 'service', name: 'reloaded' });
    t.is(who.headers.get('x-reloaded'), 'yes');
    // a new admin in Authenticator.admin_users is made one at once
    const api = apiClient(hub.url);
    t.like((await api('GET', '/users/promoted', { token: ADMIN })).body, { name: 'promoted', admin: true });
    // the next start takes the reloaded Spawner section: its command and environment
    t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['reloader'] } })).status, 201);
    t.true([201, 202].includes((await api('POST', '/users/reloader/server', { token: ADMIN })).status));
    const started = await waitFor('the server started after the reload', async () => {
      const e = await fetch(`${hub.url}/user/reloader/env`, { headers: { authorization: `token ${ADMIN}` } });
      return e.status === 200 ? ((await e.json()) as { hub: Record<string, string> }) : undefined;
    }, 20_000);
    t.is(started.hub.HUB_RELOAD_MARK, 'reloaded');

    // an invalid file: refused with why, nothing changes
    writeFileSync(file, JSON.stringify({ ...original, Hub: { ...original.Hub, services: [{ name: 'reloaded', api_token: 'short' }] } }));
    const bad = await runHubCommand(['reload', '--config', file], { env });
    t.is(bad.code, 1);
    t.regex(bad.stderr, /not reloaded \(nothing changed\)[\s\S]*api_token/);
    const still = await asService();
    t.is(still.status, 200);
    t.is(still.headers.get('x-reloaded'), 'yes');
    const { failures, done } = await load.stop();
    t.deepEqual(failures, [], `${failures.length} of ${done} failed`);
    t.true(done > 0);

    // SIGHUP to the supervisor does the same: the service leaves with the file, its token stops working
    writeFileSync(file, JSON.stringify(original));
    const resultFile = join(hub.dataDir, 'run', 'reload.json');
    const seen = readFileSync(resultFile, 'utf8');
    process.kill(hub.proc.pid!, 'SIGHUP');
    const result = await waitFor('the reload result', async () => {
      const text = readFileSync(resultFile, 'utf8');
      return text !== seen ? JSON.parse(text) : undefined;
    }, 20_000);
    t.like(result, { ok: true, by: 'SIGHUP' });
    t.deepEqual(result.changed, ['Authenticator.admin_users', 'Hub.extra_headers', 'Hub.services', 'Spawner.cmd', 'Spawner.environment']);
    t.is((await asService()).status, 403);
    t.is((await fetch(`${hub.url}/hub/api/`)).headers.get('x-reloaded'), null);

    // --all-nodes: asked over NATS, relayed by each node's actors to its supervisor; one answer per node
    writeFileSync(file, JSON.stringify({ ...original, Hub: { ...original.Hub, services: [{ name: 'reloaded', api_token: svcToken }] } }));
    const everyNode = await runHubCommand(['reload', '--all-nodes', '--config', file], { env });
    t.is(everyNode.code, 0, everyNode.stderr);
    t.is(everyNode.stdout.trim().split('\n').length, 1, everyNode.stdout);
    t.regex(everyNode.stdout.trim(), /^\S+: configuration reloaded: applied Hub\.services$/);
    t.is((await asService()).status, 200);

    // each reload that changed something is in the audit trail with what it changed
    const audit = await runHubCommand(['audit', '--config', file, '--type', 'config.reload', '--json'], { env });
    t.is(audit.code, 0, audit.stderr);
    const events = audit.stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));
    t.is(events.length, 3, audit.stdout);
    const changed = ['Authenticator.admin_users', 'Hub.extra_headers', 'Hub.services', 'Spawner.cmd', 'Spawner.environment'];
    t.like(events[0], { who: `${cliIdentity()} (hub reload)`, details: { changed, needs_restart: ['Proxy.connect_timeout'] } });
    t.like(events[1], { who: 'SIGHUP', details: { changed, needs_restart: [] } });
    t.like(events[2], { who: `${cliIdentity()} (hub reload --all-nodes)`, details: { changed: ['Hub.services'] } });
  } finally {
    await hub.stop();
  }
});

test.serial('hub reload: username_map maps the next login, auth_refresh_age and LocalProcessSpawner options apply at once (same processes, a running server keeps its own); a restart-only option is named with why', async (t) => {
  const accounts = systemAccounts('h24');
  const ANN = accounts.name('a');
  const BEN = accounts.name('b');
  accounts.addUser(ANN);
  accounts.addUser(BEN);
  const hub = await startHub({ config: {
    Hub: { api_tokens: { [ADMIN]: 'boss' }, spawner_class: 'localprocess', authenticator_class: 'dummy' },
    Authenticator: { admin_users: ['boss'] },
    DummyAuthenticator: { password: 'open-sesame' },
    Spawner: { cmd: [process.execPath, PROBE] },
  } });
  const file = join(hub.dataDir, 'hub.json');
  const original = JSON.parse(readFileSync(file, 'utf8'));
  const env = { HUB_NATS_TOKEN: NATS_TOKEN };
  const api = apiClient(hub.url);
  const reload = async (config: Record<string, unknown>) => {
    writeFileSync(file, JSON.stringify(config));
    const r = await runHubCommand(['reload', '--config', file], { env });
    t.is(r.code, 0, `${r.stdout}${r.stderr}`);
    return r.stdout;
  };
  try {
    t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: [ANN, BEN] } })).status, 201);
    await startAndWaitReady(hub.url, ADMIN, ANN, {}, 20_000);
    const annServer = (await serverRecord(hub.natsUrl, ANN))!;
    const carol = new Browser();
    t.is((await formLogin(carol, hub.url, 'carol', 'open-sesame')).status, 302);
    t.is((await whoami(carol, hub.url)).body.name, 'carol');
    t.is((await formLogin(new Browser(), hub.url, 'Dave.Smith', 'open-sesame')).status, 302);
    t.is((await api('GET', '/users/dave.smith', { token: ADMIN })).status, 200, 'before the map, the login name is the user');
    const processes = hub.children();

    // one reload: a name map, carol blocked (her login stands until it is refreshed), accounts below a uid refused,
    // and an option only a restart applies
    const minUid = account(BEN).uid + 1;
    const first = await reload({
      ...original,
      Authenticator: { ...original.Authenticator, username_map: { 'dave.smith': 'dave' }, blocked_users: ['carol'], enable_auth_state: true },
      LocalProcessSpawner: { min_uid: minUid },
      Spawner: { ...original.Spawner, poll_interval: 7 },
    });
    // this hub started without auth state: its auth actor has no key, so turning it on cannot be live
    t.regex(first, /needs the hub stopped and started: Authenticator\.enable_auth_state \(the supervisor gives the auth state key \(HUB_CRYPT_KEY\) to the auth actor only when the hub starts with auth state on/);
    t.regex(first, /applied Authenticator\.blocked_users, Authenticator\.username_map, LocalProcessSpawner\.min_uid\n/);
    t.regex(first, /needs `hub restart`: Spawner\.poll_interval \(the spawner's poll of running servers is set up once, at its start\)/);
    // username_map: the next login of that name is the mapped user (the one made before keeps its name)
    const dave = new Browser();
    t.is((await formLogin(dave, hub.url, 'Dave.Smith', 'open-sesame')).status, 302);
    t.is((await whoami(dave, hub.url)).body.name, 'dave');
    t.is((await api('GET', '/users/dave.smith', { token: ADMIN })).status, 200, 'the user made before the change keeps its name');
    t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['DAVE.SMITH'] } })).status, 409, 'the API maps the name to dave too');
    // carol's login is younger than Authenticator.auth_refresh_age (300 s): not asked again yet
    t.is((await whoami(carol, hub.url)).body.name, 'carol');
    // LocalProcessSpawner.min_uid: the next start is refused; ann's server, started before, runs on as it was
    const refused = await api('POST', `/users/${BEN}/server`, { token: ADMIN });
    t.is(refused.status, 500);
    t.true(refused.body.message.includes(`below LocalProcessSpawner.min_uid ${minUid}`), refused.body.message);
    const annNow = await api('GET', `/users/${ANN}`, { token: ADMIN });
    t.true(annNow.body.servers[''].ready);
    t.is((await serverRecord(hub.natsUrl, ANN))!.pid, annServer.pid);
    t.true(isAlive(annServer.pid));
    t.is((await fetch(`${hub.url}/user/${ANN}/whoami`, { headers: { authorization: `token ${ADMIN}` } })).status, 200);

    // auth_refresh_age 0: the next request of carol's browser refreshes her login, which now finds her blocked
    const second = await reload({
      ...original,
      Authenticator: { ...original.Authenticator, username_map: { 'dave.smith': 'dave' }, blocked_users: ['carol'], enable_auth_state: true, auth_refresh_age: 0 },
      LocalProcessSpawner: { min_uid: minUid },
      Spawner: { ...original.Spawner, poll_interval: 7 },
    });
    t.regex(second, /applied Authenticator\.auth_refresh_age\n/);
    t.is((await whoami(carol, hub.url)).status, 403);
    t.like(await whoami(dave, hub.url), { status: 200, body: { name: 'dave' } }, 'refreshed too, and still admitted');
    // nothing was restarted: the supervisor's processes are the ones before
    t.deepEqual(hub.children(), processes);
  } finally {
    await hub.stop();
    accounts.removeAll();
  }
});

test.serial('hub reload: auth state turned off and on again live in a hub started with it (its key kept): new auth state refused meanwhile, the kept one back after', async (t) => {
  const hub = await startHub({ config: hubConfig({ Authenticator: { enable_auth_state: true } }), env: { HUB_CRYPT_KEY: randomBytes(32).toString('hex') } });
  const file = join(hub.dataDir, 'hub.json');
  const original = JSON.parse(readFileSync(file, 'utf8'));
  const env = { HUB_NATS_TOKEN: NATS_TOKEN };
  const api = apiClient(hub.url);
  const withAuthState = async (on: boolean) => {
    writeFileSync(file, JSON.stringify({ ...original, Authenticator: { ...original.Authenticator, enable_auth_state: on } }));
    const r = await runHubCommand(['reload', '--config', file], { env });
    t.is(r.code, 0, `${r.stdout}${r.stderr}`);
    t.is(r.stdout.trim(), 'configuration reloaded: applied Authenticator.enable_auth_state');
  };
  try {
    t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['erin'] } })).status, 201);
    t.is((await api('PATCH', '/users/erin', { token: ADMIN, body: { auth_state: { token: 'first' } } })).status, 200);
    t.deepEqual((await api('GET', '/users/erin', { token: ADMIN })).body.auth_state, { token: 'first' });
    const processes = hub.children();

    await withAuthState(false);
    const refused = await api('PATCH', '/users/erin', { token: ADMIN, body: { auth_state: { token: 'second' } } });
    t.is(refused.status, 400);
    t.regex(refused.body.message, /Auth state is not enabled/);
    t.is((await api('GET', '/users/erin', { token: ADMIN })).body.auth_state, null, 'shown as in a hub without auth state');

    await withAuthState(true);
    t.deepEqual((await api('GET', '/users/erin', { token: ADMIN })).body.auth_state, { token: 'first' }, 'what was kept is there again, unchanged');
    t.deepEqual(hub.children(), processes);
  } finally {
    await hub.stop();
  }
});

test.serial('hub restart: every actor and both gateways replaced under HTTP, proxy and WebSocket load: no request fails, the server keeps running, an open WebSocket stays usable', async (t) => {
  const backend = await echoBackend();
  const hub = await startHub({ config: hubConfig({
    Hub: { services: [{ name: 'echo', url: `http://127.0.0.1:${backend.port}` }] },
    Supervisor: { gateways: 2, drain_timeout: 30 },
  }) });
  const env = { HUB_NATS_TOKEN: NATS_TOKEN };
  const file = join(hub.dataDir, 'hub.json');
  try {
    const api = apiClient(hub.url);
    t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['alice'] } })).status, 201);
    t.true([201, 202].includes((await api('POST', '/users/alice/server', { token: ADMIN })).status));
    await waitFor('alice\'s server', async () => ((await api('GET', '/users/alice', { token: ADMIN })).body?.servers?.['']?.ready ? true : undefined), 20_000);
    const aliceBefore = (await api('GET', '/users/alice', { token: ADMIN })).body;
    await waitFor('the echo route', async () => ((await fetch(`${hub.url}/services/echo/`)).status === 200 ? true : undefined));
    const before = hub.children();
    const socket = await echoSocket(`${hub.url.replace('http', 'ws')}/services/echo/echo`);
    t.true(await socket.roundTrip());

    // load: the API, a proxied service, the user's server; and the open WebSocket, used all along
    const loads = [apiLoad(hub.url, ADMIN, 2), pathLoad(`${hub.url}/services/echo/`, 2), pathLoad(`${hub.url}/user/alice/`, 1, ADMIN)];
    let wsFailures = 0;
    let wsRounds = 0;
    let talking = true;
    const talk = (async () => { while (talking) { if (!(await socket.roundTrip())) wsFailures++; wsRounds++; await sleep(100); } })();

    const r = await runHubCommand(['restart', '--config', file], { env, killAfterMs: 110_000 });
    t.is(r.code, 0, `${r.stdout}${r.stderr}`);
    t.regex(r.stdout, /restarted 7 processes/);
    const after = hub.children();
    for (const id of ['tokens', 'auth', 'oauth', 'spawner', 'proxy-router', 'gateway', 'gateway-2']) t.not(after[id], before[id], `${id} replaced`);
    t.is(after.nats, before.nats);
    // a little more load on the new processes, then the figures
    await sleep(1000);
    talking = false;
    await talk;
    const results = await Promise.all(loads.map((l) => l.stop()));
    const failures = results.flatMap((x) => x.failures);
    t.deepEqual(failures, [], `${failures.length} of ${results.reduce((n, x) => n + x.done, 0)} requests failed\n${hub.logs().split('\n').filter((l) => /"level":(50|60)/.test(l)).join('\n').slice(-3000)}`);
    for (const x of results) t.true(x.done > 0);
    t.log(r.stdout.trim(), `\n${results.reduce((n, x) => n + x.done, 0)} requests, ${wsRounds} WebSocket round trips`);
    t.is(wsFailures, 0, `${wsFailures} of ${wsRounds} WebSocket round trips failed`);
    t.is(socket.closed, null);
    // the server was never stopped: it still answers through the new gateways, its record unchanged
    const alice = await api('GET', '/users/alice', { token: ADMIN });
    t.true(alice.body.servers[''].ready);
    t.is(alice.body.servers[''].started, aliceBefore.servers[''].started);
    t.is((await fetch(`${hub.url}/user/alice/`, { headers: { authorization: `token ${ADMIN}` } })).status, 200);
    // new WebSockets reach the new gateways; once the old one's WebSocket closes, the old gateways leave
    const fresh = await echoSocket(`${hub.url.replace('http', 'ws')}/services/echo/echo`);
    t.true(await fresh.roundTrip());
    fresh.close();
    socket.close();
    // (after 11 s without a request: by then uWS has closed every idle keep-alive connection itself)
    await waitFor('the old gateways to leave', async () => (isAlive(before.gateway!) || isAlive(before['gateway-2']!) ? undefined : true), 25_000);
  } finally {
    await hub.stop();
    backend.server.close();
  }
});

test('hub reload and hub restart never signal a supervisor that does not say it answers (an older one would die of it)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-old-supervisor-'));
  try {
    // a live "supervisor" (this test's process) whose record lists no signals, as one from before these verbs
    mkdirSync(join(dir, 'run'));
    writeFileSync(join(dir, 'run', 'processes.json'), JSON.stringify({ supervisor: process.pid, children: {} }));
    for (const verb of ['reload', 'restart']) {
      const r = await runHubCommand([verb, `--Hub.data_dir=${dir}`]);
      t.is(r.code, 1, verb);
      t.regex(r.stderr, new RegExp(`predates \`hub ${verb}\`: stop and start it once`), verb);
    }
    t.false(existsSync(join(dir, 'run', 'restart-request.json')));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.serial('hub restart ACTOR: only that actor\'s process is replaced, its servers keep running; an unknown actor is a usage error', async (t) => {
  const hub = await startHub({ config: hubConfig() });
  const env = { HUB_NATS_TOKEN: NATS_TOKEN };
  const file = join(hub.dataDir, 'hub.json');
  try {
    const api = apiClient(hub.url);
    t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['kept'] } })).status, 201);
    t.true([201, 202].includes((await api('POST', '/users/kept/server', { token: ADMIN })).status));
    await waitFor('kept\'s server', async () => ((await api('GET', '/users/kept', { token: ADMIN })).body?.servers?.['']?.ready ? true : undefined), 20_000);
    const before = hub.children();
    const r = await runHubCommand(['restart', 'spawner', '--config', file], { env, killAfterMs: 60_000 });
    t.is(r.code, 0, `${r.stdout}${r.stderr}`);
    t.regex(r.stdout, /^spawner +pid \d+ -> \d+ /m);
    t.regex(r.stdout, /restarted 1 processes/);
    const after = hub.children();
    for (const [id, pid] of Object.entries(before)) {
      if (id === 'spawner') t.not(after[id], pid);
      else t.is(after[id], pid, id);
    }
    // the new spawner adopted the server: still ready, and it stops through it
    t.true((await api('GET', '/users/kept', { token: ADMIN })).body.servers[''].ready);
    t.is((await fetch(`${hub.url}/user/kept/`, { headers: { authorization: `token ${ADMIN}` } })).status, 200);
    t.true([202, 204].includes((await api('DELETE', '/users/kept/server', { token: ADMIN })).status));
    const bad = await runHubCommand(['restart', 'nosuch', '--config', file], { env });
    t.is(bad.code, 2);
    t.regex(bad.stderr, /restart: no actor "nosuch"/);
  } finally {
    await hub.stop();
  }
});

test.serial('hub restart applies what hub reload named "needs hub restart" (the file read again, checked); what only a stop and start applies is kept and named; an invalid file stops the restart and changes nothing', async (t) => {
  const hub = await startHub({ config: hubConfig({ Hub: { authenticator_class: 'dummy', cookie_max_age_days: 14 }, Authenticator: { allowed_users: ['ann'] } }) });
  const env = { HUB_NATS_TOKEN: NATS_TOKEN };
  const file = join(hub.dataDir, 'hub.json');
  const original = JSON.parse(readFileSync(file, 'utf8'));
  // the login cookie's lifetime (Hub.cookie_max_age_days: read by the gateways when they start)
  const loginMaxAge = async () => {
    const page = await formLogin(new Browser(), hub.url, 'ann', '');
    t.is(page.status, 302);
    const cookie = [page.headers['set-cookie'] ?? []].flat().find((c) => /^(__Host-)?hub-hub-login=/.test(c)) ?? '';
    return Number(/Max-Age=(\d+)/i.exec(cookie)?.[1]);
  };
  try {
    t.is(await loginMaxAge(), 14 * 86_400);
    const otherPort = original.Hub.port + 1;
    writeFileSync(file, JSON.stringify({ ...original, Hub: { ...original.Hub, cookie_max_age_days: 3, port: otherPort } }));
    const reloaded = await runHubCommand(['reload', '--config', file], { env });
    t.is(reloaded.code, 0, reloaded.stderr);
    t.regex(reloaded.stdout, /needs `hub restart`: Hub\.cookie_max_age_days/);
    t.regex(reloaded.stdout, /needs the hub stopped and started: Hub\.port/);
    t.is(await loginMaxAge(), 14 * 86_400, 'a reload leaves it');

    // an invalid file: the restart stops before replacing anything
    writeFileSync(file, JSON.stringify({ ...original, Hub: { ...original.Hub, cookie_max_age_days: 'soon' } }));
    const before = hub.children();
    const refused = await runHubCommand(['restart', '--config', join(hub.dataDir, 'run', 'config.json')], { env, killAfterMs: 60_000 });
    t.is(refused.code, 1, refused.stdout);
    t.regex(refused.stderr, /restart stopped:\n\s+the configuration file: .*cookie_max_age_days/);
    t.deepEqual(hub.children(), before, 'nothing replaced');

    writeFileSync(file, JSON.stringify({ ...original, Hub: { ...original.Hub, cookie_max_age_days: 3, port: otherPort } }));
    const restarted = await runHubCommand(['restart', '--config', join(hub.dataDir, 'run', 'config.json')], { env, killAfterMs: 180_000 });
    t.is(restarted.code, 0, `${restarted.stdout}${restarted.stderr}`);
    t.regex(restarted.stdout, /configuration applied: Hub\.cookie_max_age_days/);
    t.regex(restarted.stdout, /needs the hub stopped and started: Hub\.port \(/);
    t.is(await loginMaxAge(), 3 * 86_400, 'the fresh gateways run the file as it is now');
    // the front door stayed where it was (the login above went through it)
  } finally {
    await hub.stop();
  }
});
