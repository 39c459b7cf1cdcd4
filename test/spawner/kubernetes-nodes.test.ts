// Two hub nodes (one configuration, each its own data dir, gateway and spawner; node b on node a's NATS) whose
// spawners both run servers as pods on the one real cluster of `npm run cluster`: a server started through either
// node runs once (one pod, on the node placement chose), both nodes' pods carry the hub's one id, a spawner's
// reconcile at its start leaves the other node's pods alone, and kill -9 of one node's spawner leaves the other's
// pods serving (and its own, which it re-attaches to); a server of a node lost for good starts again on the other
// node in place of its stale pod.
import test from 'ava';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { serverRecord, startAndWaitReady } from './helpers.js';
import { ensureCluster, type KubeCluster } from './kube-cluster.js';
import { COOKIE_SECRET, killNode, nodeConfig } from '../scale/helpers.js';

const ADMIN = randomToken();
const NAMESPACE = `hub-nodes-${Date.now().toString(36)}`;
const HUB_ID = 'hub.jupyter.org/hub-id';
let cluster: KubeCluster;
let a: HubUnderTest;
let b: HubUnderTest;

const kube = (method: string, path: string, body: unknown, expect: number) => cluster.want(method, path, body, expect);
/** The server pods of a user in the test's namespace (however named), as the API server has them. */
const podsOf = async (user: string) => (await kube('GET', `/api/v1/namespaces/${NAMESPACE}/pods?labelSelector=${encodeURIComponent(`hub.jupyter.org/username=${user}`)}`, undefined, 200)).items;
const status = async (hubUrl: string, user: string, token: string) => (await fetch(`${hubUrl}/user/${user}/api/status`, { headers: { authorization: `token ${token}` } })).status;

test.before(async () => {
  cluster = await ensureCluster();
  await kube('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } }, 201);
  const [portA, portB] = [await freePort(), await freePort()];
  const shared: Record<string, Record<string, unknown>> = {
    Hub: { spawner_class: 'kubernetes', ip: '0.0.0.0', env_prefix_aliases: ['JUPYTERHUB_'], api_tokens: { [ADMIN]: 'boss' }, cookie_secret: COOKIE_SECRET },
    Authenticator: { admin_users: ['boss'] },
    Spawner: {
      cmd: ['jupyterhub-singleuser'], start_timeout: 120, http_timeout: 60, node_lost_timeout: 15,
      profiles: [{ name: 'on-a', display_name: 'Node a', default: true, overrides: { 'Spawner.node': 'node-a' } }, { name: 'on-b', display_name: 'Node b', overrides: { 'Spawner.node': 'node-b' } }],
    },
    // pods reach the hub through node a's gateway (any node's would do)
    KubeSpawner: { image: cluster.image, image_pull_policy: 'IfNotPresent', namespace: NAMESPACE, hub_connect_url: `http://${cluster.hostIp}:${portA}` },
  };
  const env = { KUBECONFIG: cluster.kubeconfig };
  a = await startHub({ env, reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port: portA, natsPort: await freePort() }, config: nodeConfig(shared, { Hub: { node_name: 'node-a', port: portA } }) });
  b = await startHub({ env, reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port: portB, natsPort: await freePort() },
    config: nodeConfig(shared, { Hub: { node_name: 'node-b', port: portB, nats_url: a.natsUrl }, Supervisor: { actors: ['spawner', 'gateway'] } }) });
});

test.after.always(async () => {
  await b?.stop();
  await a?.stop();
  if (cluster) await cluster.api('DELETE', `/api/v1/namespaces/${NAMESPACE}`).catch(() => undefined);
});

test.serial('kubernetes on two nodes: starts through either node run once, with the hub\'s one id; a restarted spawner\'s reconcile and kill -9 of either spawner leave the other node\'s pods running', async (t) => {
  const viaA = apiClient(a.url);
  const viaB = apiClient(b.url);
  t.is((await viaA('POST', '/users', { token: ADMIN, body: { usernames: ['alice', 'bob', 'carol'] } })).status, 201);
  // asked of one node, run by the other
  await startAndWaitReady(a.url, ADMIN, 'alice', { profile: 'on-b' });
  await startAndWaitReady(b.url, ADMIN, 'bob', { profile: 'on-a' });
  // the same server asked of both nodes at once
  const both = await Promise.all([viaA('POST', '/users/carol/server', { token: ADMIN, body: { profile: 'on-b' } }), viaB('POST', '/users/carol/server', { token: ADMIN, body: { profile: 'on-b' } })]);
  t.true(both.some((r) => r.status === 201 || r.status === 202), `one start taken: ${JSON.stringify(both.map((r) => [r.status, r.body]))}`);
  for (const r of both) t.true([201, 202, 400].includes(r.status), `${r.status} ${JSON.stringify(r.body)}`);
  await waitFor('carol\'s server ready', async () => ((await viaA('GET', '/users/carol', { token: ADMIN })).body.servers['']?.ready ? true : undefined), 120_000, 250);
  // asked again through either node while it runs: the established hub's 400, no second pod
  for (const api of [viaA, viaB]) {
    const again = await api('POST', '/users/alice/server', { token: ADMIN });
    t.is(again.status, 400);
    t.regex(again.body.message, /already running/);
  }

  const records = Object.fromEntries(await Promise.all(['alice', 'bob', 'carol'].map(async (u) => [u, (await serverRecord(a.natsUrl, u))!] as const)));
  t.like(records, { alice: { node: 'node-b' }, bob: { node: 'node-a' }, carol: { node: 'node-b' } });
  const pods: Record<string, any> = {};
  for (const u of ['alice', 'bob', 'carol']) {
    const mine = await podsOf(u);
    t.is(mine.length, 1, `one pod for ${u}`);
    pods[u] = mine[0];
    t.is(pods[u].metadata.uid, (records[u].spawner_state as { uid: string }).uid);
  }
  t.is(pods.alice.metadata.labels[HUB_ID], pods.bob.metadata.labels[HUB_ID], 'both nodes label their pods with the hub\'s one id');
  const tokens = Object.fromEntries(await Promise.all(['alice', 'bob', 'carol'].map(async (u) => [u, (await viaA('POST', `/users/${u}/tokens`, { token: ADMIN, body: {} })).body.token] as const)));

  // kill -9 of node b's spawner: its successor reconciles at its start; node a's pod (bob's) is left running
  for (const [node, own, other] of [[b, ['alice', 'carol'], ['bob']], [a, ['bob'], ['alice', 'carol']]] as const) {
    // a pod of the hub no server names: the new spawner's reconcile deletes it (so it has run when it is gone)
    await kube('POST', `/api/v1/namespaces/${NAMESPACE}/pods`, {
      apiVersion: 'v1', kind: 'Pod', metadata: { name: 'jupyter-ghost', labels: { component: 'singleuser-server', [HUB_ID]: pods.alice.metadata.labels[HUB_ID] } },
      spec: { terminationGracePeriodSeconds: 0, containers: [{ name: 'main', image: 'localhost/hub-cluster/pause:3.10', imagePullPolicy: 'IfNotPresent' }] },
    }, 201);
    const spawner = node.children().spawner!;
    const before = await serverRecord(a.natsUrl, own[0]);
    process.kill(spawner, 'SIGKILL');
    for (const u of other) t.is(await status(a.url, u, tokens[u]), 200, `${u} served while ${node === a ? 'node a' : 'node b'}'s spawner is down`);
    await waitFor('a new spawner', async () => (node.children().spawner !== spawner ? true : undefined), 20_000);
    await waitFor(`${own[0]} re-adopted`, async () => ((await serverRecord(a.natsUrl, own[0]))?.instance !== before!.instance ? true : undefined), 60_000);
    await waitFor('the new spawner\'s reconcile to delete the pod no server names', async () =>
      ((await cluster.api('GET', `/api/v1/namespaces/${NAMESPACE}/pods/jupyter-ghost`)).status === 404 ? true : undefined), 60_000, 100);
    for (const u of ['alice', 'bob', 'carol']) {
      const now = await podsOf(u);
      t.deepEqual(now.map((p: any) => [p.metadata.uid, Boolean(p.metadata.deletionTimestamp)]), [[pods[u].metadata.uid, false]], `${u}'s pod untouched`);
      t.is(await status(b.url, u, tokens[u]), 200);
    }
  }

  // node b lost for good (kill -9 of the whole node): its servers are marked stopped, their pods still run; alice
  // started again on node a takes her pod's name: the stale pod is the hub's own (the same id), deleted and made anew
  await killNode(b);
  await waitFor('node b\'s servers marked stopped', async () => ((await serverRecord(a.natsUrl, 'alice'))?.state === 'stopped' ? true : undefined), 60_000, 250);
  await startAndWaitReady(a.url, ADMIN, 'alice', { profile: 'on-a' });
  const again = await podsOf('alice');
  t.is(again.length, 1);
  t.not(again[0].metadata.uid, pods.alice.metadata.uid, 'a new pod');
  t.like(await serverRecord(a.natsUrl, 'alice'), { node: 'node-a', spawner_state: { uid: again[0].metadata.uid } });
  t.is(await status(a.url, 'alice', tokens.alice), 200);
  for (const u of ['alice', 'bob']) t.is((await viaA('DELETE', `/users/${u}/server`, { token: ADMIN })).status, 204, u);
  for (const u of ['alice', 'bob']) t.deepEqual(await podsOf(u), []);
});
