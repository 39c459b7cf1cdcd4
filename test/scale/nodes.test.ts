// Several nodes, one hub: a node that runs only some actors joins a running hub over its NATS and serves;
// a three-member NATS cluster (each node's own nats-server) loses one member and nothing is lost.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { isAlive, runHubCommand, waitFor, type HubUnderTest } from '../harness.js';
import { FIXTURE } from '../spawner/helpers.js';
import { retryJetStream } from '../../shared/nats.js';
import { AUDIT_STREAM } from '../../shared/subjects.js';
import { clusterPorts, killNode, memberOptions, natsClient, nodeConfig, serverRecords, sharedConfig, startHub } from './helpers.js';

const ADMIN = randomToken();
const SHARED = sharedConfig(ADMIN, FIXTURE);

/** kills what a test's servers left running (they outlive a spawner by design) */
const USERS = Array.from({ length: 10 }, (_, i) => `u${i}`);

function killServers(records: Map<string, any>): void {
  for (const r of records.values()) {
    if (r.pid && isAlive(r.pid)) {
      try {
        process.kill(-r.pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
  }
}

test.serial('nodes: a node running only spawner and gateway joins a running hub, serves its API and servers, and its loss leaves the hub answering', async (t) => {
  const a = await startHub({ config: nodeConfig(SHARED, { Hub: { node_name: 'node-a' } }) });
  let b: HubUnderTest | undefined;
  const nc = await natsClient(a.natsUrl);
  try {
    b = await startHub({
      config: nodeConfig(SHARED, { Hub: { node_name: 'node-b', nats_url: a.natsUrl }, Supervisor: { actors: ['spawner', 'gateway'] } }),
    });
    // node b runs only its two actors; its /hub/health reached the other four over NATS
    t.deepEqual(Object.keys(b.children()).sort(), ['gateway', 'spawner'], 'no NATS and no other actor on node b');
    const health = await fetch(`${b.url}/hub/health`);
    t.is(health.status, 200);
    t.deepEqual(Object.keys((await health.json()).actors).sort(), ['auth', 'gateway', 'oauth', 'proxy-router', 'spawner', 'tokens']);
    const onA = apiClient(a.url);
    const onB = apiClient(b.url);
    // the API on node b: users (auth over NATS), a token made on node a (tokens over NATS)
    t.is((await onB('POST', '/users/ann', { token: ADMIN })).status, 201);
    t.is((await onA('GET', '/users/ann', { token: ADMIN })).body.name, 'ann');
    const made = await onA('POST', '/users/ann/tokens', { token: ADMIN, body: { scopes: ['self'] } });
    t.is(made.status, 201);
    t.is((await onB('GET', '/user', { token: made.body.token })).body.name, 'ann');
    t.is((await onB('GET', '/users/nobody', { token: ADMIN })).status, 404, 'errors travel between nodes as they are');

    // a server started through node b runs under node b's spawner, is recorded with its node, and is routed by both gateways
    const started = await onB('POST', '/users/ann/server', { token: ADMIN });
    t.is(started.status, 201, JSON.stringify(started.body));
    const record = (await serverRecords(nc, ['ann'])).get('ann');
    t.like(record, { state: 'running', node: 'node-b' });
    t.true(record.instance.startsWith('spawner-'));
    for (const url of [a.url, b.url]) {
      const r = await fetch(`${url}/user/ann/`);
      t.is(r.status, 200, url);
      t.is(await r.text(), 'fixture for ann\n');
    }
    // the audit trail names the node that acted
    const audited = await (await nc.jetstreamManager()).streams.getMessage(AUDIT_STREAM, { last_by_subj: 'hub.audit.server.start' });
    t.like(audited.json(), { what: 'ann', node: 'node-b' });

    // `hub status` on node b says which node it is and which actors it runs
    const status = await runHubCommand(['status', '--config', `${b.dataDir}/hub.json`]);
    t.is(status.code, 0, status.stderr);
    t.regex(status.stdout, /node\s+node-b/);
    t.regex(status.stdout, /auth\s.*node-a/, 'the actors of other nodes are listed with their node');

    // the server stops through node b too
    t.is((await onB('DELETE', '/users/ann/server', { token: ADMIN })).status, 204);
    t.false(isAlive(record.pid));

    // a second server on node b, then node b dies (kill -9): node a keeps answering, and its server is left alone
    t.is((await onB('POST', '/users/boss/server', { token: ADMIN })).status, 201);
    await killNode(b);
    for (let i = 0; i < 20; i++) t.is((await onA('GET', '/users/ann', { token: ADMIN })).status, 200);
    t.is((await onA('POST', '/users/cleo', { token: ADMIN })).status, 201, 'writes keep working on node a');
    t.is((await fetch(`${a.url}/hub/health`)).status, 200, 'node a runs every actor itself');
  } finally {
    killServers(await serverRecords(nc, ['ann', 'boss']).catch(() => new Map()));
    await nc.close();
    await b?.stop();
    await a.stop();
  }
});

test.serial('nodes: a three-member NATS cluster (one member per node) loses a member: nothing stored is lost, the API keeps answering and writing', async (t) => {
  const ports = await clusterPorts(3);
  // node a runs every actor, node b spawner and gateway, node c a gateway; each starts its own cluster member
  const own: Record<string, Record<string, unknown>>[] = [
    { Hub: { node_name: 'node-a', ...memberOptions(ports, 0) } },
    { Hub: { node_name: 'node-b', ...memberOptions(ports, 1) }, Supervisor: { actors: ['spawner', 'gateway'] } },
    { Hub: { node_name: 'node-c', ...memberOptions(ports, 2) }, Supervisor: { actors: ['gateway'] } },
  ];
  const nodes = await Promise.all(own.map((o) => startHub({ config: nodeConfig(SHARED, o), healthTimeoutMs: 40_000 })));
  const [a, b, c] = nodes;
  // the test's own view of the store: through node a's member, which stays up
  const nc = await natsClient(`nats://127.0.0.1:${ports.client[0]}`);
  try {
    const onA = apiClient(a.url);
    const onB = apiClient(b.url);
    t.is((await onA('POST', '/users', { token: ADMIN, body: { usernames: USERS } })).status, 201);
    for (const u of USERS.slice(0, 4)) t.is((await onB('POST', `/users/${u}/server`, { token: ADMIN })).status, 201);
    const jsm = await nc.jetstreamManager();
    const before = await jsm.streams.info(AUDIT_STREAM);
    t.is(before.config.num_replicas, 3, 'the audit stream has a copy on every member');
    t.is((await jsm.streams.info('KV_hub_servers')).config.num_replicas, 3);
    t.is((await jsm.streams.info('KV_hub_routes')).config.num_replicas, 3);
    const recordsBefore = await serverRecords(nc, USERS);
    t.is([...recordsBefore.values()].filter((r) => r.state === "running").length, 4, JSON.stringify([...recordsBefore.values()].map((r) => [r.user, r.state, r.node])));

    // kill -9 node c: its supervisor, its NATS member and its gateway
    await killNode(c);
    // the API keeps answering on both remaining nodes, and keeps writing (user store, registry, audit stream)
    for (const api of [onA, onB]) t.is((await api('GET', '/users', { token: ADMIN })).status, 200);
    // a start while JetStream moves its leaders may be refused as "try again shortly" (503, retryable); then it goes through
    const t0 = Date.now();
    let last: unknown;
    await waitFor('a start to be taken with two members of three', async () => {
      const r = await onB('POST', '/users/u4/server', { token: ADMIN });
      last = [r.status, r.body];
      if (r.status === 503) return undefined;
      if (r.status !== 201 && r.status !== 202) throw new Error(`start answered ${r.status}`);
      return true;
    }, 20_000, 250).catch((e) => {
      throw new Error(`${e.message}: last answer ${JSON.stringify(last)}\n--- node b ---\n${b.logs().slice(-3000)}`);
    });
    // the start answered once every gateway confirmed it routes the server (a copy catches up within about a second
    // of a member's loss: test/scale/member-loss.test.ts); the bound is only against a hang
    await waitFor('u4\'s server to be ready', async () => ((await onA('GET', '/users/u4', { token: ADMIN })).body.servers['']?.ready ? true : undefined), 60_000, 100).catch(async (e) => {
      const record = (await serverRecords(nc, ['u4']).catch(() => new Map())).get('u4');
      const viaB = (await onB('GET', '/users/u4', { token: ADMIN })).body.servers;
      throw new Error(`${e.message}; record ${JSON.stringify({ state: record?.state, progress: record?.progress })}; via node b ${JSON.stringify(viaB)}\n--- node b ---\n${b.logs().slice(-4000)}\n--- node a ---\n${a.logs().slice(-3000)}`);
    });
    t.log(`a start went through ${Date.now() - t0} ms after the member was killed`);
    t.is((await onA('POST', '/users/late', { token: ADMIN })).status, 201);
    for (const u of USERS.slice(0, 5)) {
      const r = await fetch(`${a.url}/user/${u}/`);
      t.is(r.status, 200, `${u}'s server is routed`);
    }
    // nothing stored before the loss is gone
    // (the test's own reads wait, bounded, like the hub's, while NATS moves a stream's leader)
    const recordsAfter = await retryJetStream('records', () => serverRecords(nc, USERS), 20_000);
    for (const [key, r] of recordsBefore) t.like(recordsAfter.get(key), { state: r.state, target: r.target });
    // the audit events of what was done since (u4's start, the user "late") are stored too
    // an audit publish is retried for up to 60 s while the stream elects a leader: the wait is as long
    const after = await waitFor('the audit events since the loss to be stored', async () => {
      const info = await jsm.streams.info(AUDIT_STREAM).catch(() => undefined);
      return info && info.state.messages > before.state.messages ? info : undefined;
    }, 60_000, 250).catch((e) => {
      const lost = [a, b].flatMap((n) => n.logs().split('\n').filter((l) => l.includes('audit.publish.failed')));
      throw new Error(`${e.message}; audit publishes given up: ${lost.length}\n${lost.slice(-5).join('\n')}`);
    });
    t.log(`audit events: ${before.state.messages} before the loss, ${after.state.messages} after`);
    t.is(after.state.first_seq, before.state.first_seq);
  } finally {
    killServers(await serverRecords(nc, USERS).catch(() => new Map()));
    await nc.close();
    await Promise.all(nodes.map((n) => n.stop()));
  }
});
