// Reliability figures of a hub on three nodes: each node runs every actor and one member of a three-member NATS
// cluster, all on one PostgreSQL (Hub.db_url). Clients load the API through node b's and node c's gateways; node a
// dies whole (kill -9 of its supervisor, every actor, its NATS member and the servers it ran). Under 1 % of the
// requests fail and none later than 5 s after the kill; then a login, a new user, a token and a new start through
// node b work, a user made through node b is read through node c at once, and node b's and c's servers never stop.
// Meanwhile more clients go through nginx in front of all three gateways, configured by the README's example:
// the same bounds hold for them (nginx sends what node a cannot answer to the others).
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, formLogin, whoami } from '../auth/helpers.js';
import { isAlive, sleep, waitFor, type HubUnderTest } from '../harness.js';
import { startPostgres, type PostgresUnderTest } from '../postgres.js';
import { FIXTURE } from '../spawner/helpers.js';
import { clusterPorts, killNode, load, memberOptions, natsClient, nodeConfig, serverRecords, sharedConfig, startHub, startReadmeNginx, type LoadResult } from './helpers.js';

const ADMIN = randomToken();
const NODES = ['node-a', 'node-b', 'node-c'];
/** one user per node, each with a server pinned there by a profile */
const OWNERS = ['ann', 'bob', 'cat'];
/** closed-loop clients per loaded front (node b, node c, nginx), and how long they run (the kill comes LOAD_BEFORE_KILL_S in) */
const WORKERS = 8;
const LOAD_S = 14;
const LOAD_BEFORE_KILL_S = 3;
/** what the issue asks */
const MAX_FAILED = 0.01;
/** requests a front must have carried for "under 1 %" to mean a handful at most (a busy machine carries fewer) */
const MIN_REQUESTS = 500;
const CLEAN_AFTER_MS = 5000;

let postgres: PostgresUnderTest | undefined;
const nodes: HubUnderTest[] = [];
test.after.always(async () => {
  for (const n of nodes.reverse()) await n.stop();
  await postgres?.stop();
});

test.serial('node loss: three nodes on one PostgreSQL and a three-member NATS cluster; node a killed whole under load through b and c', async (t) => {
  postgres = await startPostgres();
  await postgres.createDatabase('hub');
  const ports = await clusterPorts(3);
  const shared = nodeConfig(sharedConfig(ADMIN, FIXTURE), {
    Hub: { db_url: postgres.url('hub'), db_kwargs: { max: 3 }, authenticator_class: 'dummy' },
    DummyAuthenticator: { password: 'pw' },
    Spawner: {
      node_lost_timeout: 3,
      profiles: [
        { name: 'any', display_name: 'Any node', default: true },
        ...NODES.map((node) => ({ name: node, display_name: `On ${node}`, overrides: { 'Spawner.node': node } })),
      ],
    },
  });
  // started together: JetStream answers once two members of three are up
  nodes.push(...await Promise.all(NODES.map((node, i) => startHub({ config: nodeConfig(shared, { Hub: { node_name: node, ...memberOptions(ports, i) } }), healthTimeoutMs: 60_000 }))));
  const [a, b, c] = nodes;
  for (const n of nodes) t.deepEqual(Object.keys(n.children()).sort(), ['auth', 'gateway', 'nats', 'oauth', 'proxy-router', 'spawner', 'tokens']);
  const nc = await natsClient(`nats://127.0.0.1:${ports.client[1]}`);
  t.teardown(async () => {
    for (const r of (await serverRecords(nc, [...OWNERS, 'newbie']).catch(() => new Map())).values()) if (r.pid && isAlive(r.pid)) process.kill(-r.pid, 'SIGKILL');
    await nc.close();
  });
  const [onA, onB, onC] = nodes.map((n) => apiClient(n.url));

  // one server on each node
  t.is((await onA('POST', '/users', { token: ADMIN, body: { usernames: OWNERS } })).status, 201);
  for (const [i, user] of OWNERS.entries()) t.is((await onA('POST', `/users/${user}/server`, { token: ADMIN, body: { profile: NODES[i] } })).status, 201, user);
  const before = await serverRecords(nc, OWNERS);
  for (const [i, user] of OWNERS.entries()) t.like(before.get(user), { state: 'running', node: NODES[i] });
  // node b's and c's gateways have read what they are loaded with once (so the load measures the node loss, not a first read)
  t.is((await onB('GET', '/users/bob', { token: ADMIN })).status, 200);
  t.is((await onC('GET', '/users', { token: ADMIN })).status, 200);

  const nginx = await startReadmeNginx(nodes.map((n) => n.port));
  t.teardown(() => nginx.stop());
  t.is((await apiClient(nginx.url)('GET', '/users/cat', { token: ADMIN })).status, 200);

  // load through node b (a user's model), node c (the user list) and nginx (a user's model), then node a dies whole
  const traffic = [
    load(`${b.url}/hub/api/users/bob`, ADMIN, WORKERS, LOAD_S), load(`${c.url}/hub/api/users`, ADMIN, WORKERS, LOAD_S),
    load(`${nginx.url}/hub/api/users/cat`, ADMIN, WORKERS, LOAD_S),
  ];
  await sleep(LOAD_BEFORE_KILL_S * 1000);
  const killedAt = Date.now();
  await killNode(a);
  process.kill(-before.get('ann').pid, 'SIGKILL'); // the servers node a ran die with it
  const [viaB, viaC, viaNginx] = await Promise.all(traffic);

  const judge = (what: string, results: LoadResult[]) => {
    const total = results.reduce((n, r) => n + r.total, 0);
    const failures = results.flatMap((r) => r.failures);
    const lastFailure = failures.length ? Math.max(...failures.map((f) => f.at)) - killedAt : null;
    const reasons = [...new Set(failures.map((f) => f.why))].join(', ');
    t.log(`node loss under load, ${what}: ${total} requests (${results.map((r) => r.total).join(' + ')}), ${failures.length} failed `
      + `(${((100 * failures.length) / total).toFixed(2)} %${reasons ? `: ${reasons}` : ''}), last failure ${lastFailure === null ? 'none' : `${lastFailure} ms after the kill`}`);
    t.true(total >= MIN_REQUESTS, `${what}: enough load to mean something (${total})`);
    t.true(failures.length / total < MAX_FAILED, `${what}: under 1 % failed: ${JSON.stringify(failures.slice(0, 5))}`);
    t.deepEqual(failures.filter((f) => f.at > killedAt + CLEAN_AFTER_MS), [], `${what}: no failure later than 5 s after the kill`);
  };
  judge('through node b and c', [viaB, viaC]);
  judge('through nginx in front of a, b and c', [viaNginx]);

  // through node b: a login, a new user, a token, a new start
  const browser = new Browser();
  t.is((await formLogin(browser, b.url, 'bob', 'pw')).status, 302);
  t.like((await whoami(browser, b.url)).body, { name: 'bob' });
  t.is((await onB('POST', '/users/newbie', { token: ADMIN })).status, 201);
  // a user made through node b is read through node c at once (one database)
  t.is((await onC('GET', '/users/newbie', { token: ADMIN })).body.name, 'newbie');
  const made = await onB('POST', '/users/newbie/tokens', { token: ADMIN, body: { scopes: ['self'] } });
  t.is(made.status, 201);
  t.is((await onC('GET', '/user', { token: made.body.token })).body.name, 'newbie');
  // a start with the new token, placed by the spawners left (node b's or c's), routed by both gateways
  const started = await onB('POST', '/users/newbie/server', { token: made.body.token });
  t.is(started.status, 201, JSON.stringify(started.body));
  t.log(`after the load: a login, a user, a token and a start through node b done ${Date.now() - killedAt} ms after the kill`);
  t.true(['node-b', 'node-c'].includes((await serverRecords(nc, ['newbie'])).get('newbie')?.node));
  for (const url of [b.url, c.url]) t.is(await (await fetch(`${url}/user/newbie/`)).text(), 'fixture for newbie\n');

  // node b's and c's servers never stopped: same process, still running, still routed
  const after = await serverRecords(nc, OWNERS);
  for (const user of ['bob', 'cat']) {
    t.like(after.get(user), { state: 'running', node: before.get(user).node, pid: before.get(user).pid }, user);
    t.true(isAlive(before.get(user).pid), `${user}'s server process runs`);
  }
  for (const url of [b.url, c.url]) t.is(await (await fetch(`${url}/user/cat/`)).text(), 'fixture for cat\n');
  // node a's server is marked stopped by the nodes left (Spawner.node_lost_timeout)
  await waitFor('ann\'s server on the lost node to be marked stopped', async () => ((await serverRecords(nc, ['ann'])).get('ann')?.state === 'stopped' ? true : undefined), 20_000, 200);
});
