// Server routes through their life: added when the spawner says a server is ready, removed when it
// stops, shared by every gateway, kept when the spawner does not answer, changed under traffic.
import test from 'ava';
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { startExtraGateway } from './helpers.js';

const FIXTURE = fileURLToPath(new URL('./fixture-server.mjs', import.meta.url));
let hub: HubUnderTest;
let api: ApiCall;
let second: { url: string; proc: ChildProcess } | undefined;
const ADMIN = randomToken();

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, allow_named_servers: true },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { cmd: [process.execPath, FIXTURE], start_timeout: 10, slow_spawn_timeout: 8, slow_stop_timeout: 8, stop_signal_timeout: 3 },
    },
  });
  api = apiClient(hub.url);
  const made = await api('POST', '/users', { token: ADMIN, body: { usernames: ['carol', 'dave', 'erin', 'frank', 'gina'] } });
  if (made.status !== 201) throw new Error(`setup: ${made.status} ${JSON.stringify(made.body)}`);
});
test.after.always(async () => {
  second?.proc.kill('SIGKILL');
  await hub?.stop();
});

const status = async (base: string, path: string) => (await fetch(`${base}${path}`, { redirect: 'manual', signal: AbortSignal.timeout(10_000) })).status;

async function start(user: string, server = ''): Promise<void> {
  const r = await api('POST', server ? `/users/${user}/servers/${server}` : `/users/${user}/server`, { token: ADMIN });
  if (r.status !== 201) throw new Error(`start ${user}/${server}: ${r.status} ${JSON.stringify(r.body)}`);
}

async function stop(user: string, server = ''): Promise<void> {
  const r = await api('DELETE', server ? `/users/${user}/servers/${server}` : `/users/${user}/server`, { token: ADMIN });
  if (r.status !== 204) throw new Error(`stop ${user}/${server}: ${r.status} ${JSON.stringify(r.body)}`);
}

/** How long until `path` answers `want` on every gateway, polling each every 10 ms (at most 5 s). */
async function msUntil(bases: string[], path: string, want: number): Promise<number> {
  const t0 = Date.now();
  await Promise.all(bases.map((b) => waitFor(`${b}${path} to answer ${want}`, async () => ((await status(b, path)) === want ? true : undefined), 5000, 10)));
  return Date.now() - t0;
}

test.serial('routes: a ready server is routed on every gateway within a second, and unrouted within a second of its stop', async (t) => {
  second = await startExtraGateway(hub.dataDir);
  const gateways = [hub.url, second.url];
  await start('carol');
  const added = await msUntil(gateways, '/user/carol/tree', 200);
  const body = await (await fetch(`${second.url}/user/carol/tree?x=1`)).json();
  t.like(body, { user: 'carol', server: '', url: '/user/carol/tree?x=1' });
  await start('carol', 'lab');
  await msUntil(gateways, '/user/carol/lab/', 200);
  t.is((await (await fetch(`${hub.url}/user/carol/lab/x`)).json()).server, 'lab', 'a named server has its own, longer route');
  t.is((await (await fetch(`${hub.url}/user/carol/labx`)).json()).server, '', 'prefixes match whole segments only');

  const table = (await api('GET', '/proxy', { token: ADMIN })).body;
  t.like(table['/user/carol/'], { routespec: '/user/carol/', data: { user: 'carol', server_name: '' } });
  t.like(table['/user/carol/lab/'], { data: { user: 'carol', server_name: 'lab' } });
  t.regex(table['/user/carol/'].target, /^http:\/\/127\.0\.0\.1:\d+$/);

  await stop('carol', 'lab');
  const t0 = Date.now();
  // with the named route gone, the default server's route matches its paths
  await Promise.all(gateways.map((g) => waitFor('the named route to go', async () =>
    ((await (await fetch(`${g}/user/carol/lab/x`)).json()).server === '' ? true : undefined), 5000, 10)));
  const removed = Date.now() - t0;
  await stop('carol');
  const gone = await msUntil(gateways, '/user/carol/tree', 302);
  t.log(`route seen on both gateways ${added} ms after the start answered; gone ${gone} ms after the stop answered`);
  t.true(added < 1000 && gone < 1000 && removed < 1000);
  t.is((await api('GET', '/proxy', { token: ADMIN })).body['/user/carol/'], undefined);
});

test.serial('routes: a gateway that starts serves the whole table from its first request', async (t) => {
  await start('frank');
  await msUntil([hub.url], '/user/frank/', 200);
  const third = await startExtraGateway(hub.dataDir);
  try {
    t.is(await status(third.url, '/user/frank/'), 200);
  } finally {
    third.proc.kill('SIGKILL');
    await stop('frank');
  }
});

test.serial('routes: while requests flow, a route appears without errors, and on removal requests in flight finish', async (t) => {
  const statuses: number[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      statuses.push(await status(hub.url, '/user/dave/x'));
      await sleep(5);
    }
  })();
  await sleep(100);
  await start('dave');
  await msUntil([hub.url], '/user/dave/x', 200);
  await sleep(100);
  const firstOk = statuses.indexOf(200);
  t.true(firstOk > 0);
  t.true(statuses.slice(firstOk).every((s) => s === 200), `after the first 200: ${statuses.slice(firstOk).join(',')}`);
  t.true(statuses.slice(0, firstOk).every((s) => s === 302), 'before it: the hub page');

  // a response in flight when the route goes away is finished by the server, not cut by the gateway
  const inFlight = fetch(`${hub.url}/user/dave/slow`).then((r) => r.text());
  await sleep(150);
  const mark = statuses.length;
  await stop('dave');
  t.is((await inFlight).split('\n').filter(Boolean).length, 10, 'the stream in flight completed');
  await msUntil([hub.url], '/user/dave/x', 302);
  await sleep(100);
  running = false;
  await loop;
  const after = statuses.slice(mark);
  const firstRedirect = after.indexOf(302);
  t.true(after.slice(firstRedirect).every((s) => s === 302), `after the first 302: ${after.slice(firstRedirect).join(',')}`);
  // between the server's stop signal and the route's removal a request can still meet a closing server
  t.true(after.every((s) => s === 200 || s === 302 || s === 503), after.join(','));
  t.log(`${statuses.length} requests; around the stop: ${after.filter((s) => s === 503).length} answered 503`);
});

test.serial('routes: server routes stay while the spawner does not answer, and a forced reconciliation keeps them', async (t) => {
  await start('erin');
  await msUntil([hub.url], '/user/erin/', 200);
  const spawner = hub.children().spawner!;
  process.kill(spawner, 'SIGSTOP');
  try {
    const r = await api('POST', '/proxy', { token: ADMIN });
    t.is(r.status, 200);
    t.truthy((await api('GET', '/proxy', { token: ADMIN })).body['/user/erin/'], 'the route is still in the table');
    t.is(await status(hub.url, '/user/erin/'), 200, 'and still forwarded');
  } finally {
    process.kill(spawner, 'SIGCONT');
  }
  await stop('erin');
  await msUntil([hub.url], '/user/erin/', 302);
});

test.serial('routes: while NATS restarts the gateway keeps forwarding from its table, and changes flow again after', async (t) => {
  await start('gina');
  await msUntil([hub.url], '/user/gina/', 200);
  process.kill(hub.children().nats!, 'SIGKILL');
  for (let i = 0; i < 5; i++) {
    t.is(await status(hub.url, '/user/gina/'), 200, 'forwarded while NATS is down');
    await sleep(50);
  }
  await waitFor('the hub to be healthy again', async () => ((await fetch(`${hub.url}/hub/health`)).status === 200 ? true : undefined), 30_000, 200);
  await stop('gina');
  await msUntil([hub.url], '/user/gina/', 302);
  t.is((await api('GET', '/proxy', { token: ADMIN })).body['/user/gina/'], undefined);
});
