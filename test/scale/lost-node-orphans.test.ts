// A lost node that comes back stops the server processes it still runs that were started again elsewhere
// meanwhile (they would otherwise run on, orphaned), and adopts again those nobody started elsewhere.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { isAlive, waitFor, type HubUnderTest } from '../harness.js';
import { FIXTURE } from '../spawner/helpers.js';
import { killNode, natsClient, nodeConfig, serverRecords, sharedConfig, startHub } from './helpers.js';

const ADMIN = randomToken();

test.serial('a lost node back: its server started again on node a meanwhile is stopped on node b; the one left alone is adopted again', async (t) => {
  const shared = sharedConfig(ADMIN, FIXTURE);
  shared.Spawner = {
    ...shared.Spawner, node_lost_timeout: 2,
    profiles: [{ name: 'plain', display_name: 'Any node', default: true }, { name: 'on-b', display_name: 'On node b', overrides: { 'Spawner.node': 'node-b' } }],
  };
  const a = await startHub({ config: nodeConfig(shared, { Hub: { node_name: 'node-a' } }) });
  const bConfig = nodeConfig(shared, { Hub: { node_name: 'node-b', nats_url: a.natsUrl }, Supervisor: { actors: ['spawner', 'gateway'] } });
  let b: HubUnderTest = await startHub({ config: bConfig });
  const nc = await natsClient(a.natsUrl);
  const pids: number[] = [];
  t.teardown(async () => {
    for (const pid of pids) if (isAlive(pid)) process.kill(-pid, 'SIGKILL');
    await nc.close();
    await b.stop();
    await a.stop();
  });
  const api = apiClient(a.url);
  t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['moved', 'stayed'] } })).status, 201);
  for (const u of ['moved', 'stayed']) t.is((await api('POST', `/users/${u}/server`, { token: ADMIN, body: { profile: 'on-b' } })).status, 201, u);
  const before = await serverRecords(nc, ['moved', 'stayed']);
  for (const u of ['moved', 'stayed']) {
    t.like(before.get(u), { state: 'running', node: 'node-b' });
    pids.push(before.get(u).pid);
  }

  await killNode(b);
  await waitFor('node b\'s servers to be marked stopped', async () => {
    const now = await serverRecords(nc, ['moved', 'stayed']);
    return ['moved', 'stayed'].every((u) => now.get(u)?.state === 'stopped') ? true : undefined;
  }, 20_000, 200);
  // one of them is started again, on node a (the only spawner left)
  t.is((await api('POST', '/users/moved/server', { token: ADMIN, body: { profile: 'plain' } })).status, 201);
  const again = (await serverRecords(nc, ['moved'])).get('moved');
  t.like(again, { state: 'running', node: 'node-a' });
  pids.push(again.pid);
  t.true(isAlive(before.get('moved').pid), 'the first run still runs on node b');

  await b.stop({ keepDataDir: true });
  b = await startHub({ config: bConfig, reuse: { dataDir: b.dataDir, port: b.port, natsPort: b.natsPort } });
  await waitFor('node b to stop its run of the server started again on node a', async () => (isAlive(before.get('moved').pid) ? undefined : true), 20_000, 100);
  await waitFor('node b to adopt the server nobody started elsewhere', async () => ((await serverRecords(nc, ['stayed'])).get('stayed')?.state === 'running' ? true : undefined), 20_000, 100);
  t.like((await serverRecords(nc, ['stayed'])).get('stayed'), { node: 'node-b', pid: before.get('stayed').pid });
  t.like((await serverRecords(nc, ['moved'])).get('moved'), { state: 'running', node: 'node-a', pid: again.pid }, 'the run on node a is untouched');
  t.true(isAlive(again.pid));
  t.is(await (await fetch(`${a.url}/user/moved/`)).text(), 'fixture for moved\n');
});
