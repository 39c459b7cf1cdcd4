// The `kubernetes` backend with per-user namespaces on the real cluster (test/spawner/kube-cluster.ts): each user's
// pod in a namespace made at their first start, the hub watching pods in all namespaces, a KubeSpawner.profile_list
// profile asking for a GPU-shaped extended resource the node advertises (one fits, three do not: the scheduler's
// words end that start), and kill -9 of the spawner re-attaching to a pod in a user's namespace.
import test from 'ava';
import { NODE_NAME } from '../../scripts/cluster.js';
import { waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { serverRecord, startAndWaitReady } from './helpers.js';
import { ensureCluster, startKubeHub, type KubeCluster } from './kube-cluster.js';

const ADMIN = randomToken();
const SUFFIX = Date.now().toString(36);
const BASE = `hub-ns-${SUFFIX}`;
/** an extended resource as a GPU is one (device plugins advertise theirs the same way): 2 on the node for this file */
const GPU = `hub-test-${SUFFIX}.example/gpu`;
const GPU_PATH = `/status/capacity/${GPU.replace('/', '~1')}`;
let cluster: KubeCluster;
let hub: HubUnderTest;

const kube = (method: string, path: string, body: unknown, expect: number) => cluster.want(method, path, body, expect);
const patchNode = (ops: unknown[]) => cluster.jsonPatch(`/api/v1/nodes/${NODE_NAME}/status`, ops);
const startServer = (user: string, body: Record<string, unknown> = {}) => startAndWaitReady(hub.url, ADMIN, user, body);

test.before(async () => {
  cluster = await ensureCluster();
  await patchNode([{ op: 'add', path: GPU_PATH, value: '2' }]);
  await waitFor('the node to offer the extended resource', async () =>
    ((await kube('GET', `/api/v1/nodes/${NODE_NAME}`, undefined, 200)).status.allocatable?.[GPU] === '2' ? true : undefined), 30_000, 200);
  hub = await startKubeHub(cluster, {
    Hub: { api_tokens: { [ADMIN]: 'boss' } },
    Authenticator: { admin_users: ['boss'] },
    Spawner: { poll_interval: 1 },
    KubeSpawner: {
      namespace: BASE, enable_user_namespaces: true,
      profile_list: [
        { slug: 'gpu', display_name: 'One GPU', default: true, kubespawner_override: { extra_resource_limits: { [GPU]: '1' } } },
        { slug: 'gpus', display_name: 'Three GPUs', kubespawner_override: { extra_resource_limits: { [GPU]: '3' } } },
      ],
    },
  });
});

test.after.always(async () => {
  await hub?.stop();
  if (!cluster) return;
  for (const ns of [`${BASE}-dana`, `${BASE}-erin`]) await cluster.api('DELETE', `/api/v1/namespaces/${ns}`).catch(() => undefined);
  await patchNode([{ op: 'remove', path: GPU_PATH }]).catch(() => undefined);
});

test.serial('kubernetes: per-user namespaces; a profile_list profile\'s extended resource (a GPU) is the pod\'s, one more than the node has ends the start with the scheduler\'s words; kill -9 of the spawner re-attaches across namespaces', async (t) => {
  const api = apiClient(hub.url);
  t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['dana', 'erin'] } })).status, 201);

  await startServer('dana', { profile: 'gpu' });
  const dana = (await serverRecord(hub.natsUrl, 'dana'))!;
  t.like(dana.spawner_state, { namespace: `${BASE}-dana`, pod: 'jupyter-dana' });
  const ns = await kube('GET', `/api/v1/namespaces/${BASE}-dana`, undefined, 200);
  t.is(ns.metadata.labels['hub.jupyter.org/username'], 'dana', 'the namespace was made for her, labelled as KubeSpawner labels it');
  const pod = await kube('GET', `/api/v1/namespaces/${BASE}-dana/pods/jupyter-dana`, undefined, 200);
  t.is(pod.spec.containers[0].resources.limits[GPU], '1');
  t.is(pod.spec.nodeName, NODE_NAME, 'scheduled on the node offering it');
  const token = (await api('POST', '/users/dana/tokens', { token: ADMIN, body: {} })).body.token;
  const status = await fetch(`${hub.url}/user/dana/api/status`, { headers: { authorization: `token ${token}` } });
  t.is(status.status, 200, 'reached through the front door');

  // the node has two: dana holds one, three more cannot fit
  const tooMany = await api('POST', '/users/erin/server', { token: ADMIN, body: { profile: 'gpus' } });
  t.is(tooMany.status, 500, JSON.stringify(tooMany.body));
  t.regex(tooMany.body.message, new RegExp(`^Spawn failed: the pod cannot be scheduled: 0/1 nodes are available: 1 Insufficient ${GPU.replace(/\./g, '\\.')}`));
  t.is((await cluster.api('GET', `/api/v1/namespaces/${BASE}-erin/pods/jupyter-erin`)).status, 404, 'no pod left behind');

  const spawner = hub.children().spawner!;
  process.kill(spawner, 'SIGKILL');
  await waitFor('a new spawner', async () => (hub.children().spawner !== spawner ? true : undefined), 20_000);
  await waitFor('dana re-adopted', async () => ((await serverRecord(hub.natsUrl, 'dana'))?.instance !== dana.instance ? true : undefined), 60_000);
  t.is((await kube('GET', `/api/v1/namespaces/${BASE}-dana/pods/jupyter-dana`, undefined, 200)).metadata.uid, pod.metadata.uid, 'the same pod');
  t.is((await fetch(`${hub.url}/user/dana/api/status`, { headers: { authorization: `token ${token}` } })).status, 200);

  t.is((await api('DELETE', '/users/dana/server', { token: ADMIN })).status, 204);
  t.is((await cluster.api('GET', `/api/v1/namespaces/${BASE}-dana/pods/jupyter-dana`)).status, 404, 'gone when the stop answers');
  t.is((await cluster.api('GET', `/api/v1/namespaces/${BASE}-dana`)).status, 200, 'her namespace stays (KubeSpawner.delete_namespace_on_stop is not supported)');
});
