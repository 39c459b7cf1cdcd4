// Placement counts what each node is starting, not only what runs, and breaks ties in turn: a burst of starts
// through one node's gateway spreads over every spawner node ("spread"); "pack" fills a node up to
// Spawner.node_limit and spills over past it.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { isAlive, type HubUnderTest } from '../harness.js';
import { FIXTURE } from '../spawner/helpers.js';
import { natsClient, nodeConfig, serverRecords, sharedConfig, startHub } from './helpers.js';

const ADMIN = randomToken();

/** node-a runs every actor; the others spawner and gateway only, on node-a's NATS */
async function startNodes(count: number, spawner: Record<string, unknown>): Promise<HubUnderTest[]> {
  const shared = sharedConfig(ADMIN, FIXTURE);
  shared.Spawner = { ...shared.Spawner, ...spawner };
  const nodes: HubUnderTest[] = [];
  try {
    nodes.push(await startHub({ config: nodeConfig(shared, { Hub: { node_name: 'node-a' } }) }));
    for (const name of ['node-b', 'node-c'].slice(0, count - 1)) {
      nodes.push(await startHub({ config: nodeConfig(shared, { Hub: { node_name: name, nats_url: nodes[0].natsUrl }, Supervisor: { actors: ['spawner', 'gateway'] } }) }));
    }
    return nodes;
  } catch (e) {
    for (const n of nodes.reverse()) await n.stop();
    throw e;
  }
}

async function stopAll(nodes: HubUnderTest[], records: Map<string, any>): Promise<void> {
  for (const n of [...nodes].reverse()) await n.stop();
  for (const r of records.values()) if (r.pid && isAlive(r.pid)) process.kill(-r.pid, 'SIGKILL');
}

test.serial('placement spread: 12 starts at once through node a\'s gateway, three healthy nodes: at least 2 on each', async (t) => {
  const nodes = await startNodes(3, { placement: 'spread' });
  const nc = await natsClient(nodes[0].natsUrl);
  const users = Array.from({ length: 12 }, (_, i) => `burst${i}`);
  let records = new Map<string, any>();
  try {
    const api = apiClient(nodes[0].url);
    t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: users } })).status, 201);
    const answers = await Promise.all(users.map((u) => api('POST', `/users/${u}/server`, { token: ADMIN })));
    for (const [i, r] of answers.entries()) t.true(r.status === 201 || r.status === 202, `${users[i]}: ${r.status} ${JSON.stringify(r.body)}`);
    records = await serverRecords(nc, users);
    const perNode = new Map<string, number>();
    for (const r of records.values()) perNode.set(r.node, (perNode.get(r.node) ?? 0) + 1);
    t.log(`placed: ${[...perNode].map(([n, c]) => `${n} ${c}`).join(', ')}`);
    t.is(records.size, 12);
    for (const node of ['node-a', 'node-b', 'node-c']) t.true((perNode.get(node) ?? 0) >= 2, `${node}: ${perNode.get(node) ?? 0}`);
  } finally {
    await nc.close();
    await stopAll(nodes, records);
  }
});

test.serial('placement pack: Spawner.node_limit fills one node to the limit, then the next, then spills over', async (t) => {
  const nodes = await startNodes(2, { placement: 'pack', node_limit: 2 });
  const nc = await natsClient(nodes[0].natsUrl);
  const users = ['pk0', 'pk1', 'pk2', 'pk3', 'pk4'];
  let records = new Map<string, any>();
  try {
    const api = apiClient(nodes[0].url);
    t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: users } })).status, 201);
    const nodeOf = async (u: string) => ((await serverRecords(nc, [u])).get(u))?.node as string;
    const placedOn: string[] = [];
    for (const u of users) {
      t.is((await api('POST', `/users/${u}/server`, { token: ADMIN })).status, 201, u);
      placedOn.push(await nodeOf(u));
    }
    records = await serverRecords(nc, users);
    // the first two fill one node, the next two the other; the fifth goes past the limit somewhere
    t.is(placedOn[0], placedOn[1]);
    t.not(placedOn[2], placedOn[0]);
    t.is(placedOn[3], placedOn[2]);
    const count = (n: string) => placedOn.filter((p) => p === n).length;
    t.deepEqual([count('node-a'), count('node-b')].sort(), [2, 3]);
  } finally {
    await nc.close();
    await stopAll(nodes, records);
  }
});
