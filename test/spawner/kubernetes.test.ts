// The `kubernetes` backend on the real one-node cluster of `npm run cluster` (test/spawner/kube-cluster.ts: reused
// when up, brought up when not): the established hub's jupyterhub-singleuser 6.1.1 in a pod, reached through the front
// door with a user's token; a claim that keeps a file across stop and start; a pod that cannot be scheduled and an
// image that is not there end their starts with the cluster's reasons; kill -9 of the spawner: the new one re-attaches
// to the running pod and deletes a labelled pod no server names. Each run has its own namespace and hub id.
import test from 'ava';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, runHubCommand, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { readProgress, serverRecord, startAndWaitReady } from './helpers.js';
import { ensureCluster, startKubeHub, type KubeCluster } from './kube-cluster.js';

const ADMIN = randomToken();
const SUFFIX = Date.now().toString(36);
const NAMESPACE = `hub-test-${SUFFIX}`;
const STORAGE_CLASS = `hub-test-${SUFFIX}`;
const PV = `hub-test-home-${SUFFIX}`;
const LATER_PV = `hub-test-later-${SUFFIX}`;
const MISSING_IMAGE = 'localhost/hub-cluster/no-such-image:1';
let cluster: KubeCluster;
let hub: HubUnderTest;
let homeDir: string;

const podPath = (name: string) => `/api/v1/namespaces/${NAMESPACE}/pods/${name}`;
/** A volume on the node for one claim (this cluster has no provisioner). */
const volumeFor = (name: string, claim: string) => ({
  apiVersion: 'v1', kind: 'PersistentVolume', metadata: { name },
  spec: { capacity: { storage: '1Gi' }, accessModes: ['ReadWriteOnce'], storageClassName: STORAGE_CLASS, persistentVolumeReclaimPolicy: 'Retain',
    hostPath: { path: homeDir, type: 'Directory' }, claimRef: { namespace: NAMESPACE, name: claim } },
});
const kube = (method: string, path: string, body: unknown, expect: number) => cluster.want(method, path, body, expect);
const startServer = (user: string, body: Record<string, unknown> = {}) => startAndWaitReady(hub.url, ADMIN, user, body);


test.before(async () => {
  cluster = await ensureCluster();
  await kube('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } }, 201);
  // no storage provisioner on this cluster: one volume on the node, for alice's claim only
  homeDir = mkdtempSync(join(tmpdir(), 'hub-k8s-home-'));
  chmodSync(homeDir, 0o777); // the image's jovyan (uid 1000) writes there
  await kube('POST', '/api/v1/persistentvolumes', volumeFor(PV, 'claim-alice'), 201);
  // pods reach the hub at the pod bridge's address on this machine: the gateway listens there too (the test uses 127.0.0.1)
  hub = await startKubeHub(cluster, {
    Hub: { api_tokens: { [ADMIN]: 'boss' }, allow_named_servers: true },
    Authenticator: { admin_users: ['boss'] },
    Spawner: {
      poll_interval: 1,
      profiles: [
        { name: 'standard', display_name: 'Standard', default: true },
        {
          name: 'home', display_name: 'With a home that stays', overrides: {
            'KubeSpawner.storage_pvc_ensure': true, 'KubeSpawner.storage_class': STORAGE_CLASS, 'KubeSpawner.storage_capacity': '1Gi',
            'KubeSpawner.volumes': [{ name: 'home', persistentVolumeClaim: { claimName: '{pvc_name}' } }],
            'KubeSpawner.volume_mounts': [{ name: 'home', mountPath: '/home/jovyan' }],
          },
        },
        { name: 'nowhere', display_name: 'A node nobody has', overrides: { 'KubeSpawner.node_selector': { 'hub.test/pool': 'nowhere' } } },
        { name: 'missing', display_name: 'An image nobody has', overrides: { 'KubeSpawner.image': MISSING_IMAGE } },
      ],
    },
    KubeSpawner: { namespace: NAMESPACE },
  });
});

test.after.always(async () => {
  await hub?.stop();
  if (cluster) {
    await cluster.api('DELETE', `/api/v1/namespaces/${NAMESPACE}`).catch(() => undefined);
    for (const pv of [PV, LATER_PV]) await cluster.api('DELETE', `/api/v1/persistentvolumes/${pv}`).catch(() => undefined);
  }
  if (homeDir) rmSync(homeDir, { recursive: true, force: true });
});

test.serial('kubernetes: the established hub\'s single-user server runs in a pod, is reached through the front door, and its claim keeps a file across stop and start', async (t) => {
  const api = apiClient(hub.url);
  t.is((await api('POST', '/users/alice', { token: ADMIN })).status, 201);
  await startServer('alice', { profile: 'home' });
  const rec = (await serverRecord(hub.natsUrl, 'alice'))!;
  const state = rec.spawner_state as { namespace: string; pod: string; uid: string; pvc: string; secret: string };
  t.like(state, { namespace: NAMESPACE, pod: 'jupyter-alice', pvc: 'claim-alice', secret: 'jupyter-alice' });
  const pod = await kube('GET', podPath('jupyter-alice'), undefined, 200);
  t.is(pod.metadata.uid, state.uid);
  t.is(rec.target, `http://${pod.status.podIP}:8888`, 'the hub reaches the pod at its own IP');
  t.like(pod.metadata.labels, { component: 'singleuser-server', 'hub.jupyter.org/username': 'alice' });
  const tokenVar = pod.spec.containers[0].env.find((e: { name: string }) => e.name === 'JUPYTERHUB_API_TOKEN');
  t.deepEqual(Object.keys(tokenVar), ['name', 'valueFrom'], 'the server\'s token is not in the pod\'s spec');
  t.is(tokenVar.valueFrom.secretKeyRef.name, 'jupyter-alice', 'but in its Secret');
  // the lines the progress stream gave while it started (the record keeps them; a stream opened now says only "ready")
  const lines = rec.progress.map((e) => e.message);
  t.true(lines.some((l) => l.startsWith('[Normal] Scheduled: Successfully assigned')), lines.join('\n'));
  t.true(lines.some((l) => l.startsWith('[Normal] Started:')), lines.join('\n'));

  // through the front door with alice's token: the single-user server asks the hub (from its pod) who that is
  const token = (await api('POST', '/users/alice/tokens', { token: ADMIN, body: {} })).body.token;
  const auth = { authorization: `token ${token}`, 'content-type': 'application/json' };
  const status = await fetch(`${hub.url}/user/alice/api/status`, { headers: auth });
  t.is(status.status, 200, await status.clone().text());
  const put = await fetch(`${hub.url}/user/alice/api/contents/kept.txt`, { method: 'PUT', headers: auth, body: JSON.stringify({ type: 'file', format: 'text', content: 'written in the first pod' }) });
  t.is(put.status, 201, await put.text());

  t.is((await api('DELETE', '/users/alice/server', { token: ADMIN })).status, 204);
  t.is((await cluster.api('GET', podPath('jupyter-alice'))).status, 404, 'the pod is gone when the stop answers');
  t.is((await cluster.api('GET', `/api/v1/namespaces/${NAMESPACE}/secrets/jupyter-alice`)).status, 404, 'so is its Secret');
  t.is((await cluster.api('GET', `/api/v1/namespaces/${NAMESPACE}/persistentvolumeclaims/claim-alice`)).status, 200, 'the claim stays');

  await startServer('alice', { profile: 'home' });
  const again = (await serverRecord(hub.natsUrl, 'alice'))!;
  t.not((again.spawner_state as { uid: string }).uid, state.uid, 'a new pod');
  const file = await fetch(`${hub.url}/user/alice/api/contents/kept.txt`, { headers: auth });
  t.is(file.status, 200);
  t.is((await file.json()).content, 'written in the first pod');
  t.is((await api('DELETE', '/users/alice/server', { token: ADMIN })).status, 204);
});

test.serial('kubernetes: a pod no node can take and an image the node does not have end their starts with the cluster\'s reasons, leaving no pod', async (t) => {
  const api = apiClient(hub.url);
  t.is((await api('POST', '/users/carol', { token: ADMIN })).status, 201);

  const unschedulable = await api('POST', '/users/carol/server', { token: ADMIN, body: { profile: 'nowhere' } });
  t.is(unschedulable.status, 500, JSON.stringify(unschedulable.body));
  t.regex(unschedulable.body.message, /^Spawn failed: the pod cannot be scheduled: 0\/1 nodes are available: 1 node\(s\) didn't match Pod's node affinity\/selector/);
  t.is((await cluster.api('GET', podPath('jupyter-carol'))).status, 404);

  const missing = await api('POST', '/users/carol/server', { token: ADMIN, body: { profile: 'missing' } });
  t.is(missing.status, 500, JSON.stringify(missing.body));
  t.regex(missing.body.message, new RegExp(`^Spawn failed: the image '${MISSING_IMAGE}' of the server's container could not be pulled \\((ErrImagePull|ImagePullBackOff)\\): `));
  const progress = await readProgress(`${hub.url}/hub/api/users/carol/server/progress`, ADMIN);
  t.true(progress.events.some((e) => /^\[Normal\] Pulling: Pulling image/.test(e.message)), 'the kubelet\'s events are the progress lines');
  t.like(progress.events.at(-1), { failed: true });
  t.is((await cluster.api('GET', podPath('jupyter-carol'))).status, 404);
});

test.serial('kubernetes: kill -9 of the spawner leaves the pod serving; the new spawner re-attaches to it and deletes a pod of this hub that no server names', async (t) => {
  const api = apiClient(hub.url);
  t.is((await api('POST', '/users/bob', { token: ADMIN })).status, 201);
  await startServer('bob');
  const bob = (await serverRecord(hub.natsUrl, 'bob'))!;
  const uid = (bob.spawner_state as { uid: string }).uid;
  const pod = await kube('GET', podPath('jupyter-bob'), undefined, 200);
  const hubId = pod.metadata.labels['hub.jupyter.org/hub-id'];
  t.regex(hubId, /^[0-9a-f]{10}$/);
  // a pod labelled as this hub's server that no record names (a crash between its creation and the record's save), and another hub's
  const stray = (name: string, id: string) => kube('POST', `/api/v1/namespaces/${NAMESPACE}/pods`, {
    apiVersion: 'v1', kind: 'Pod', metadata: { name, labels: { component: 'singleuser-server', 'hub.jupyter.org/hub-id': id } },
    spec: { terminationGracePeriodSeconds: 0, containers: [{ name: 'main', image: 'localhost/hub-cluster/pause:3.10', imagePullPolicy: 'IfNotPresent' }] },
  }, 201);
  await stray('jupyter-ghost', hubId);
  await stray('jupyter-other-hub', 'ffffffffff');

  const token = (await api('POST', '/users/bob/tokens', { token: ADMIN, body: {} })).body.token;
  const spawner = hub.children().spawner!;
  process.kill(spawner, 'SIGKILL');
  t.is((await fetch(`${bob.target}/user/bob/api/status`, { headers: { authorization: `token ${token}` } })).status, 200, 'the pod serves without its spawner');

  await waitFor('a new spawner', async () => (hub.children().spawner !== spawner ? true : undefined), 20_000);
  await waitFor('bob re-adopted', async () => ((await serverRecord(hub.natsUrl, 'bob'))?.instance !== bob.instance ? true : undefined), 60_000);
  t.is((await kube('GET', podPath('jupyter-bob'), undefined, 200)).metadata.uid, uid, 'the same pod: re-attached, not started again');
  t.true((await api('GET', '/users/bob', { token: ADMIN })).body.servers[''].ready);
  t.is((await fetch(`${hub.url}/user/bob/api/status`, { headers: { authorization: `token ${token}` } })).status, 200, 'still reached through the front door');
  await waitFor('the pod no server names deleted', async () => ((await cluster.api('GET', podPath('jupyter-ghost'))).status === 404 ? true : undefined), 60_000);
  t.is((await cluster.api('GET', podPath('jupyter-other-hub'))).status, 200, 'another hub\'s pod is left alone');

  // the re-attached spawner follows the pod through the watch: deleted behind its back, the server is gone at once
  await kube('DELETE', `${podPath('jupyter-bob')}?gracePeriodSeconds=0`, undefined, 200);
  await waitFor('bob\'s end noticed', async () =>
    (Object.keys((await api('GET', '/users/bob', { token: ADMIN })).body.servers).length === 0 ? true : undefined), 30_000);
});

test.serial('kubernetes: a spawner killed while a pod waits for its volume: the new spawner re-attaches to the starting pod and the start completes once it runs', async (t) => {
  const api = apiClient(hub.url);
  t.is((await api('POST', '/users/frank', { token: ADMIN })).status, 201);
  // the claim has no volume yet: the pod waits, unscheduled, and that does not end the start
  const asked = api('POST', '/users/frank/server', { token: ADMIN, body: { profile: 'home' } }).catch((e: Error) => ({ status: 0, body: e.message }));
  const starting = await waitFor('frank\'s pod created', async () => {
    const r = await serverRecord(hub.natsUrl, 'frank');
    return r?.state === 'spawn' && (r.spawner_state as { uid?: string }).uid ? r : undefined;
  }, 60_000, 50);
  const uid = (starting.spawner_state as { uid: string }).uid;
  await waitFor('the scheduler to hold the pod back for its claim', async () => {
    const p = await kube('GET', podPath('jupyter-frank'), undefined, 200);
    return p.status?.conditions?.some((c: { type: string; status: string }) => c.type === 'PodScheduled' && c.status === 'False') ? true : undefined;
  }, 60_000, 100);

  const spawner = hub.children().spawner!;
  process.kill(spawner, 'SIGKILL');
  await asked; // the start's answer is lost with its spawner
  await waitFor('a new spawner', async () => (hub.children().spawner !== spawner ? true : undefined), 20_000);
  // the new spawner answers (health) only once it has looked at this node's servers: frank's start is its own from then
  await waitFor('the new spawner serving', async () => ((await fetch(`${hub.url}/hub/health`)).status === 200 ? true : undefined), 60_000, 100);
  t.is((await serverRecord(hub.natsUrl, 'frank'))!.state, 'spawn', 'still starting');

  await kube('POST', '/api/v1/persistentvolumes', volumeFor(LATER_PV, 'claim-frank'), 201);
  await waitFor('frank\'s server ready', async () => ((await api('GET', '/users/frank', { token: ADMIN })).body.servers['']?.ready ? true : undefined), 120_000, 250);
  const rec = (await serverRecord(hub.natsUrl, 'frank'))!;
  t.is((rec.spawner_state as { uid: string }).uid, uid, 'the pod the first spawner made');
  t.not(rec.instance, starting.instance, 'made ready by the new spawner');
  const pod = await kube('GET', podPath('jupyter-frank'), undefined, 200);
  t.is(rec.target, `http://${pod.status.podIP}:8888`);
  const token = (await api('POST', '/users/frank/tokens', { token: ADMIN, body: {} })).body.token;
  t.is((await fetch(`${hub.url}/user/frank/api/status`, { headers: { authorization: `token ${token}` } })).status, 200);
  t.is((await api('DELETE', '/users/frank/server', { token: ADMIN })).status, 204);
});

test.serial('kubernetes: a hub without Kubernetes credentials, or with a kubeconfig that is not there, does not start and says why', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-k8s-nocreds-'));
  try {
    const config = join(dir, 'hub.json');
    writeFileSync(config, JSON.stringify({
      Hub: { data_dir: join(dir, 'data'), port: await freePort(), nats_port: await freePort(), spawner_class: 'kubernetes' },
      KubeSpawner: { image: 'localhost/hub-cluster/singleuser:6.1.1-lab4.6.6' },
    }));
    const env = { HOME: dir, KUBECONFIG: '', KUBERNETES_SERVICE_HOST: '' };
    const none = await runHubCommand(['--config', config], { env });
    t.not(none.code, 0);
    t.regex(none.stderr + none.stdout, /no Kubernetes credentials: the hub runs neither in a pod with a service account nor with a kubeconfig \(set KUBECONFIG, or put one at ~\/\.kube\/config\)/);
    const missing = await runHubCommand(['--config', config], { env: { ...env, KUBECONFIG: join(dir, 'nowhere.kubeconfig') } });
    t.not(missing.code, 0);
    t.regex(missing.stderr + missing.stdout, /KUBECONFIG names \S*nowhere\.kubeconfig, which does not exist/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
