// Two spawner nodes, one hub: starts are placed over both (Spawner.placement "spread", or a profile's
// Spawner.node), a request reaching the node that does not run the server goes to the one that does, and a
// node gone longer than Spawner.node_lost_timeout has its servers marked stopped (adopted again if it comes back
// with them running). Node b's kill -9 takes its supervisor and actors, never its servers' process groups.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { isAlive, waitFor, type HubUnderTest } from '../harness.js';
import { FIXTURE } from '../spawner/helpers.js';
import { AUDIT_STREAM } from '../../shared/subjects.js';
import { killNode, natsClient, nodeConfig, serverRecords, sharedConfig, startHub } from './helpers.js';

const ADMIN = randomToken();

function killServers(records: Map<string, any>): void {
  for (const r of records.values()) {
    const pid = r.pid || 0;
    if (pid && isAlive(pid)) {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
  }
}

/** node a runs every actor, node b spawner and gateway, both on node a's NATS */
async function twoNodes(spawner: Record<string, unknown>): Promise<{ a: HubUnderTest; bConfig: Record<string, Record<string, unknown>>; b: HubUnderTest }> {
  const shared = sharedConfig(ADMIN, FIXTURE);
  shared.Spawner = { ...shared.Spawner, ...spawner };
  const a = await startHub({ config: nodeConfig(shared, { Hub: { node_name: 'node-a' } }) });
  const bConfig = nodeConfig(shared, { Hub: { node_name: 'node-b', nats_url: a.natsUrl }, Supervisor: { actors: ['spawner', 'gateway'] } });
  try {
    return { a, bConfig, b: await startHub({ config: bConfig }) };
  } catch (e) {
    await a.stop();
    throw e;
  }
}

const USERS = Array.from({ length: 20 }, (_, i) => `s${i}`);

test.serial('spawners: 20 starts spread over two nodes, a stop of node b\'s server through node a, node b lost → its servers marked stopped, then adopted again when it returns', async (t) => {
  const { a, bConfig, b: firstB } = await twoNodes({ node_lost_timeout: 3 });
  let b: HubUnderTest = firstB;
  const nc = await natsClient(a.natsUrl);
  try {
    const onA = apiClient(a.url);
    t.is((await onA('POST', '/users', { token: ADMIN, body: { usernames: USERS } })).status, 201);
    const t0 = Date.now();
    for (const u of USERS) {
      const r = await onA('POST', `/users/${u}/server`, { token: ADMIN });
      t.is(r.status, 201, `${u}: ${JSON.stringify(r.body)}`);
    }
    t.log(`20 starts through node a's API, one after the other: ${Date.now() - t0} ms`);
    const records = await serverRecords(nc, USERS);
    const onNode = (n: string) => USERS.filter((u) => records.get(u)?.node === n);
    t.log(`placed: node-a ${onNode('node-a').length}, node-b ${onNode('node-b').length}`);
    t.is(onNode('node-a').length + onNode('node-b').length, 20);
    // spread: each start goes to the node with fewer active servers (ties to each in turn), so 10 and 10
    t.is(onNode('node-a').length, 10);
    t.is(onNode('node-b').length, 10);
    for (const u of USERS) t.like(records.get(u), { state: 'running' });
    // both gateways route every server, whichever node runs it
    for (const url of [a.url, b.url]) {
      for (const u of [onNode('node-a')[0], onNode('node-b')[0]]) t.is(await (await fetch(`${url}/user/${u}/`)).text(), `fixture for ${u}\n`);
    }

    // a stop through node a of a server node b runs: node b's spawner stops it
    const [stopped, ...bUsers] = onNode('node-b');
    t.is((await onA('DELETE', `/users/${stopped}/server`, { token: ADMIN })).status, 204);
    t.like((await serverRecords(nc, [stopped])).get(stopped), { state: 'stopped', node: 'node-b' });
    t.false(isAlive(records.get(stopped).pid), 'the process on node b is gone');
    // reading and the server list from node a see node b's servers
    t.true((await onA('GET', `/users/${bUsers[0]}`, { token: ADMIN })).body.servers['']?.ready);

    // kill -9 of node b's supervisor and actors (its servers' process groups are left running)
    await killNode(b);
    const killedAt = Date.now();
    for (const u of bUsers) t.true(isAlive(records.get(u).pid), `${u}'s server outlives node b's actors`);
    // node a answers meanwhile, and its own servers too
    for (let i = 0; i < 10; i++) t.is((await onA('GET', '/users/s0', { token: ADMIN })).status, 200);
    for (const u of onNode('node-a')) t.is((await fetch(`${a.url}/user/${u}/`)).status, 200, `${u} on node a keeps answering`);

    // after Spawner.node_lost_timeout (3 s here): node b's servers are marked stopped, with the reason, unrouted
    await waitFor('node b\'s servers to be marked stopped', async () => {
      const now = await serverRecords(nc, bUsers);
      return bUsers.every((u) => now.get(u)?.state === 'stopped') ? true : undefined;
    }, 20_000, 200);
    t.log(`node b's servers marked stopped ${Date.now() - killedAt} ms after its kill`);
    t.true(Date.now() - killedAt >= 3000, 'not before the timeout');
    const lost = await serverRecords(nc, bUsers);
    for (const u of bUsers) {
      t.like(lost.get(u), { state: 'stopped', node: 'node-b', target: '', lost: { state: 'running' } }, u);
      t.true(Object.keys(lost.get(u).spawner_state).length > 0, 'enough kept to adopt it again');
    }
    const model = (await onA('GET', `/users/${bUsers[0]}`, { token: ADMIN })).body;
    t.is(model.servers[''], undefined, 'the API shows it stopped');
    await waitFor('node b\'s servers to be unrouted on node a\'s gateway', async () =>
      ((await fetch(`${a.url}/user/${bUsers[0]}/`, { redirect: 'manual' })).status !== 200 ? true : undefined), 5000, 100);
    const audited = await (await nc.jetstreamManager()).streams.getMessage(AUDIT_STREAM, { last_by_subj: 'hub.audit.server.stop' });
    t.like(audited.json(), { who: 'actor:spawner', outcome: 'ok', reason: 'node node-b lost' });
    for (const u of onNode('node-a')) t.like((await serverRecords(nc, [u])).get(u), { state: 'running' }, `${u} on node a untouched`);

    // node b comes back (same data dir and ports) with its servers still running: they are adopted again
    await b.stop({ keepDataDir: true });
    b = await startHub({ config: bConfig, reuse: { dataDir: b.dataDir, port: b.port, natsPort: b.natsPort } });
    await waitFor('node b\'s servers to be running again', async () => {
      const now = await serverRecords(nc, bUsers);
      return bUsers.every((u) => now.get(u)?.state === 'running') ? true : undefined;
    }, 20_000, 200);
    const back = await serverRecords(nc, bUsers);
    for (const u of bUsers) {
      t.like(back.get(u), { state: 'running', node: 'node-b', pid: records.get(u).pid }, u);
      t.is(back.get(u).lost, undefined);
    }
    t.is(await (await fetch(`${a.url}/user/${bUsers[0]}/`)).text(), `fixture for ${bUsers[0]}\n`, 'routed again');

    // deleting a user through node a stops their server on node b first
    t.is((await onA('DELETE', `/users/${bUsers[1]}`, { token: ADMIN })).status, 204);
    t.false(isAlive(records.get(bUsers[1]).pid), 'node b stopped it');
    t.is((await serverRecords(nc, [bUsers[1]])).get(bUsers[1]), undefined);
  } finally {
    killServers(await serverRecords(nc, USERS).catch(() => new Map()));
    await nc.close();
    await b.stop();
    await a.stop();
  }
});

test.serial('spawners: a profile names the node, "pack" fills the busiest; node b killed and back within Spawner.node_lost_timeout: its servers stay running and are adopted', async (t) => {
  const { a, bConfig, b: firstB } = await twoNodes({
    node_lost_timeout: 60, placement: 'pack',
    profiles: [
      { name: 'plain', display_name: 'Any node', default: true },
      { name: 'on-b', display_name: 'On node b', overrides: { 'Spawner.node': 'node-b' } },
    ],
  });
  let b: HubUnderTest = firstB;
  const nc = await natsClient(a.natsUrl);
  const users = ['p0', 'p1', 'p2'];
  try {
    const onA = apiClient(a.url);
    t.is((await onA('POST', '/users', { token: ADMIN, body: { usernames: users } })).status, 201);
    for (const u of users.slice(0, 2)) t.is((await onA('POST', `/users/${u}/server`, { token: ADMIN, body: { profile: 'on-b' } })).status, 201);
    // without a node in the profile, "pack" places it on the node that runs the most (node b, not node a that took it)
    t.is((await onA('POST', `/users/p2/server`, { token: ADMIN })).status, 201);
    const records = await serverRecords(nc, users);
    for (const u of users) t.like(records.get(u), { state: 'running', node: 'node-b' }, u);

    await killNode(b);
    await b.stop({ keepDataDir: true });
    b = await startHub({ config: bConfig, reuse: { dataDir: b.dataDir, port: b.port, natsPort: b.natsPort } });
    const after = await serverRecords(nc, users);
    for (const u of users) {
      t.like(after.get(u), { state: 'running', node: 'node-b', pid: records.get(u).pid }, `${u} adopted by node b's new spawner`);
      t.is(after.get(u).lost, undefined);
      t.is(await (await fetch(`${a.url}/user/${u}/`)).text(), `fixture for ${u}\n`);
    }
    // and a stop through node a reaches the new spawner of node b
    t.is((await onA('DELETE', `/users/${users[0]}/server`, { token: ADMIN })).status, 204);
    t.false(isAlive(records.get(users[0]).pid));
  } finally {
    killServers(await serverRecords(nc, users).catch(() => new Map()));
    await nc.close();
    await b.stop();
    await a.stop();
  }
});
