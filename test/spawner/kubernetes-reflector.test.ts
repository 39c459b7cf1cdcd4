// The Kubernetes backend's reflector (services/spawner/backends/kubernetes-reflector.ts) against the real API server
// of the test cluster, reached through a TCP relay this test can cut: pods created and deleted are seen through the
// watch; while the connection is cut, a pod is created and another deleted; once it is back, the reflector has listed
// again and holds exactly what the API holds, its listeners told of the deletion it missed. And which pod states end a start.
import test from 'ava';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { KubeConfig, Watch } from '@kubernetes/client-node';
import { createLogger } from '../../shared/log.js';
import { PodReflector } from '../../services/spawner/backends/kubernetes-reflector.js';
import { podProblem } from '../../services/spawner/backends/kubernetes.js';
import { waitFor } from '../harness.js';
import { ensureCluster, type KubeCluster } from './kube-cluster.js';
import { CLUSTER_DIR } from '../../scripts/cluster.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const SUFFIX = Date.now().toString(36);
const NAMESPACE = `hub-refl-${SUFFIX}`;
const LABEL = 'hub.test/reflector';
let cluster: KubeCluster;

/** A TCP relay to the API server that can be cut (every connection closed, new ones refused) and restored. */
async function relay(port: number): Promise<{ url: string; cut(): void; restore(): void; close(): Promise<void>; connections: () => number }> {
  const open = new Set<Socket>();
  let refusing = false;
  let connections = 0;
  const server: Server = createServer((client) => {
    if (refusing) return void client.destroy();
    connections++;
    const upstream = connect(port, '127.0.0.1');
    open.add(client).add(upstream);
    const drop = () => { client.destroy(); upstream.destroy(); open.delete(client); open.delete(upstream); };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const address = server.address() as { port: number };
  return {
    url: `https://127.0.0.1:${address.port}`,
    cut() { refusing = true; for (const s of open) s.destroy(); open.clear(); },
    restore() { refusing = false; },
    close: () => new Promise<void>((r) => { for (const s of open) s.destroy(); server.close(() => r()); }),
    connections: () => connections,
  };
}

const pod = (name: string) => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { name, labels: { [LABEL]: SUFFIX } },
  spec: { terminationGracePeriodSeconds: 0, containers: [{ name: 'main', image: 'localhost/hub-cluster/pause:3.10', imagePullPolicy: 'IfNotPresent' }] },
});

test.before(async () => {
  cluster = await ensureCluster();
  await cluster.want('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } }, 201);
});

test.after.always(async () => {
  await cluster?.api('DELETE', `/api/v1/namespaces/${NAMESPACE}`).catch(() => undefined);
});

test('kubernetes reflector: one LIST + WATCH sees pods come and go; after the connection is cut it lists again and holds what the API holds', async (t) => {
  const state = JSON.parse(readFileSync(join(CLUSTER_DIR, 'state.json'), 'utf8')) as { apiserverPort: number };
  const through = await relay(state.apiserverPort);
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfig);
  kc.loadFromClusterAndUser({ ...kc.getCurrentCluster()!, server: through.url }, kc.getCurrentUser()!);
  const reflector = new PodReflector({ kc, watch: new Watch(kc), namespace: NAMESPACE, labelSelector: `${LABEL}=${SUFFIX}`, log: createLogger('test', 'silent') });
  const deletions: string[] = [];
  reflector.subscribe((p, deleted) => { if (deleted) deletions.push(p.metadata!.name!); });
  try {
    await reflector.ready(30_000);
    t.deepEqual(reflector.all(), []);
    const api = (method: string, path: string, body: unknown, expect: number) => cluster.want(method, path, body, expect);
    const pods = `/api/v1/namespaces/${NAMESPACE}/pods`;

    await api('POST', pods, pod('first'), 201);
    await waitFor('the watch to show the first pod Running', async () => (reflector.get(NAMESPACE, 'first')?.status?.phase === 'Running' ? true : undefined), 60_000, 50);
    const beforeCut = through.connections();

    through.cut();
    await api('POST', pods, pod('second'), 201);
    await api('DELETE', `${pods}/first?gracePeriodSeconds=0`, undefined, 200);
    await waitFor('the first pod gone from the API', async () => ((await cluster.api('GET', `${pods}/first`)).status === 404 ? true : undefined), 60_000, 100);
    t.truthy(reflector.get(NAMESPACE, 'first'), 'cut off, the reflector still holds what it last saw');
    through.restore();

    await waitFor('the reflector to list again', async () => (reflector.get(NAMESPACE, 'second') && !reflector.get(NAMESPACE, 'first') ? true : undefined), 60_000, 50);
    t.deepEqual(reflector.all().map((p) => p.metadata!.name), ['second']);
    t.deepEqual(deletions, ['first'], 'its listeners heard of the deletion it missed');
    t.true(through.connections() > beforeCut, 'it connected again');
  } finally {
    reflector.stop();
    await through.close();
  }
});

test('kubernetes: which pod states end a start (the kubelet\'s and the scheduler\'s words, as this cluster gave them) and which it waits through', (t) => {
  const waiting = (reason: string, message: string) => ({
    spec: { containers: [{ name: 'notebook', image: 'i:1' }] },
    status: { phase: 'Pending', containerStatuses: [{ name: 'notebook', image: 'i:1', imageID: '', ready: false, restartCount: 0, state: { waiting: { reason, message } } }] },
  });
  const unschedulable = (message: string) => ({ spec: { containers: [{ name: 'notebook' }] }, status: { phase: 'Pending', conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message }] } });
  // the Secret was created just before the pod and the kubelet's cache has not caught up: it tries again, and runs it
  t.is(podProblem(waiting('CreateContainerConfigError', 'failed to sync secret cache: timed out waiting for the condition') as never), null);
  t.is(podProblem(waiting('ContainerCreating', '') as never), null);
  t.is(podProblem(unschedulable('0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.') as never), null);
  t.deepEqual(podProblem(waiting('CreateContainerConfigError', 'secret "jupyter-x" not found') as never), { reason: 'the server\'s container could not be created (CreateContainerConfigError): secret "jupyter-x" not found', code: null });
  t.regex(podProblem(unschedulable('0/1 nodes are available: 1 Insufficient cpu.') as never)!.reason, /^the pod cannot be scheduled: 0\/1 nodes are available: 1 Insufficient cpu\.$/);
});
