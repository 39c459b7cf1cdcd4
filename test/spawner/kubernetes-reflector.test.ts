// The Kubernetes backend's reflector (services/spawner/backends/kubernetes-reflector.ts) against the real API server
// of the test cluster, reached through a TCP relay this test can cut: pods created and deleted are seen through the
// watch; while the connection is cut, a pod is created and another deleted; once it is back, the reflector has listed
// again and holds exactly what the API holds, its listeners told of the deletion it missed. A watch resumed from a
// version etcd has compacted meanwhile (a second API server of the test's own on the cluster's etcd, without a watch
// cache, so the watch reads etcd): the API server says 410 and the reflector lists again. And which pod states end a start.
import test from 'ava';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { KubeConfig, Watch } from '@kubernetes/client-node';
import { createLogger } from '../../shared/log.js';
import { PodReflector } from '../../services/spawner/backends/kubernetes-reflector.js';
import { podProblem } from '../../services/spawner/backends/kubernetes.js';
import { waitFor } from '../harness.js';
import { ensureCluster, type KubeCluster } from './kube-cluster.js';
import { CLUSTER_DIR, ensureBinaries } from '../../scripts/cluster.js';
import { spawn } from 'node:child_process';
import { mkdtempSync, openSync, closeSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { freePort, stopChild } from '../harness.js';

const SUFFIX = Date.now().toString(36);
const NAMESPACE = `hub-refl-${SUFFIX}`;
const LABEL = 'hub.test/reflector';
let cluster: KubeCluster;

/**
 * A TCP relay to the API server that can be cut (every connection closed, new ones refused) and restored, or held
 * (what clients send waits in the relay, on open connections and new ones) and released.
 */
async function relay(port: number): Promise<{ url: string; cut(): void; restore(): void; hold(): void; release(): void; held: () => number; close(): Promise<void>; connections: () => number }> {
  const open = new Set<Socket>();
  const clients = new Set<{ client: Socket; upstream: Socket; queue: Buffer[] }>();
  let refusing = false;
  let holding = false;
  let connections = 0;
  const server: Server = createServer((client) => {
    if (refusing) return void client.destroy();
    connections++;
    const upstream = connect(port, '127.0.0.1');
    open.add(client).add(upstream);
    const link = { client, upstream, queue: [] as Buffer[] };
    clients.add(link);
    const drop = () => { client.destroy(); upstream.destroy(); open.delete(client); open.delete(upstream); clients.delete(link); };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.on('data', (chunk: Buffer) => (holding ? link.queue.push(chunk) : upstream.write(chunk)));
    upstream.pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const address = server.address() as { port: number };
  return {
    url: `https://127.0.0.1:${address.port}`,
    cut() { refusing = true; for (const s of open) s.destroy(); open.clear(); },
    restore() { refusing = false; },
    hold() { holding = true; },
    release() { holding = false; for (const l of clients) for (const chunk of l.queue.splice(0)) l.upstream.write(chunk); },
    held: () => [...clients].reduce((n, l) => n + l.queue.length, 0),
    close: () => new Promise<void>((r) => { for (const s of open) s.destroy(); server.close(() => r()); }),
    connections: () => connections,
  };
}

const pod = (name: string, label = SUFFIX) => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { name, labels: { [LABEL]: label } },
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

/**
 * A second kube-apiserver on the cluster's etcd, without a watch cache (so a watch reads etcd from its version, and
 * a compacted version is a 410, as it is on any API server once its cache no longer holds the version) and without
 * touching the `kubernetes` Service's endpoints; the cluster's own API server is left as it is.
 */
async function apiServerWithoutWatchCache(): Promise<{ port: number; stop(): Promise<void> }> {
  const state = JSON.parse(readFileSync(join(CLUSTER_DIR, 'state.json'), 'utf8')) as { etcdPort: number; nodeIp: string };
  const port = await freePort();
  const pki = (f: string) => join(CLUSTER_DIR, 'pki', f);
  const dir = mkdtempSync(join(tmpdir(), 'hub-apiserver-'));
  const out = openSync(join(dir, 'kube-apiserver.log'), 'a');
  const proc = spawn(join(ensureBinaries().kubernetes, 'kube-apiserver'), [
    `--etcd-servers=http://127.0.0.1:${state.etcdPort}`, '--bind-address=127.0.0.1', `--advertise-address=${state.nodeIp}`, `--secure-port=${port}`,
    `--tls-cert-file=${pki('apiserver.crt')}`, `--tls-private-key-file=${pki('apiserver.key')}`, `--client-ca-file=${pki('ca.crt')}`,
    `--service-account-key-file=${pki('sa.pub')}`, `--service-account-signing-key-file=${pki('sa.key')}`, '--service-account-issuer=https://kubernetes.default.svc',
    '--service-cluster-ip-range=10.218.0.0/24', '--authorization-mode=Node,RBAC', '--profiling=false',
    '--watch-cache=false', '--endpoint-reconciler-type=none',
  ], { stdio: ['ignore', out, out] });
  closeSync(out);
  const stop = async () => {
    await stopChild(proc);
    rmSync(dir, { recursive: true, force: true });
  };
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfig);
  kc.loadFromClusterAndUser({ ...kc.getCurrentCluster()!, server: `https://127.0.0.1:${port}` }, kc.getCurrentUser()!);
  const { CoreV1Api } = await import('@kubernetes/client-node');
  const core = kc.makeApiClient(CoreV1Api);
  try {
    await waitFor('the second API server to list pods', async () => {
      if (proc.exitCode !== null) throw new Error(`kube-apiserver exited with ${proc.exitCode}: ${readFileSync(join(dir, 'kube-apiserver.log'), 'utf8').slice(-1500)}`);
      return (await core.listNamespacedPod({ namespace: NAMESPACE, limit: 1 }).catch(() => null)) ? true : undefined;
    }, 90_000, 250);
  } catch (e) {
    await stop();
    throw e;
  }
  return { port, stop };
}

/** etcd's own API (its JSON gateway on the client port): compacts everything before its current revision. */
async function compactEtcd(): Promise<number> {
  const { etcdPort } = JSON.parse(readFileSync(join(CLUSTER_DIR, 'state.json'), 'utf8')) as { etcdPort: number };
  const etcd = async (path: string, body: unknown) => {
    const r = await fetch(`http://127.0.0.1:${etcdPort}${path}`, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
    if (r.status !== 200) throw new Error(`etcd ${path}: ${r.status} ${await r.text()}`);
    return r.json() as Promise<{ header: { revision: string } }>;
  };
  const revision = Number((await etcd('/v3/kv/range', { key: Buffer.from('/registry/namespaces/default').toString('base64') })).header.revision);
  await etcd('/v3/kv/compaction', { revision: String(revision), physical: true });
  return revision;
}

test.serial('kubernetes reflector: a watch resumed from a version etcd has compacted meanwhile gets a 410 and lists again, and holds what the API holds', async (t) => {
  const second = await apiServerWithoutWatchCache();
  const through = await relay(second.port);
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfig);
  kc.loadFromClusterAndUser({ ...kc.getCurrentCluster()!, server: through.url }, kc.getCurrentUser()!);
  const said: string[] = [];
  const log = pino({ level: 'info' }, { write: (line: string) => void said.push(line) });
  const label = `${SUFFIX}-compacted`;
  // each watch lasts a second, then resumes from the last version it saw (no list)
  const reflector = new PodReflector({ kc, watch: new Watch(kc), namespace: NAMESPACE, labelSelector: `${LABEL}=${label}`, log, watchSeconds: 1 });
  const deletions: string[] = [];
  reflector.subscribe((p, deleted) => { if (deleted) deletions.push(p.metadata!.name!); });
  const api = (method: string, path: string, body: unknown, expect: number) => cluster.want(method, path, body, expect);
  const pods = `/api/v1/namespaces/${NAMESPACE}/pods`;
  try {
    await reflector.ready(30_000);
    await api('POST', pods, pod('old', label), 201);
    await waitFor('the watch to show the pod Running', async () => (reflector.get(NAMESPACE, 'old')?.status?.phase === 'Running' ? true : undefined), 60_000, 50);
    await waitFor('the watch to see no more of it (its last version known)', async () => {
      const v = reflector.get(NAMESPACE, 'old')?.metadata?.resourceVersion;
      await new Promise((r) => setTimeout(r, 1500));
      return reflector.get(NAMESPACE, 'old')?.metadata?.resourceVersion === v ? true : undefined;
    }, 30_000, 0);
    const before = said.filter((l) => l.includes('"kubernetes.watch')).length;

    // its next watch (from the version it has) waits in the relay while the pods change and etcd forgets the past
    through.hold();
    await waitFor('the reflector to ask for its next watch', async () => (through.held() > 0 ? true : undefined), 10_000, 20);
    await api('POST', pods, pod('new', label), 201);
    await api('DELETE', `${pods}/old?gracePeriodSeconds=0`, undefined, 200);
    await waitFor('the old pod gone from the API', async () => ((await cluster.api('GET', `${pods}/old`)).status === 404 ? true : undefined), 60_000, 100);
    const compactedAt = await compactEtcd();
    t.true(Number(reflector.get(NAMESPACE, 'old')!.metadata!.resourceVersion) < compactedAt, 'the version the watch resumes from is compacted');
    through.release();

    await waitFor('the reflector to list again', async () => (reflector.get(NAMESPACE, 'new') && !reflector.get(NAMESPACE, 'old') ? true : undefined), 60_000, 50);
    t.deepEqual(reflector.all().map((p) => p.metadata!.name), ['new']);
    t.deepEqual(deletions, ['old'], 'its listeners heard of the deletion it missed');
    const after = said.filter((l) => l.includes('"kubernetes.watch')).slice(before);
    t.true(after.some((l) => /"event":"kubernetes\.watch\.error".*"code":410,"message":"The resourceVersion for the provided watch is too old\."/.test(l)), `the API server said 410 on the resumed watch: ${after.join('')}`);
  } finally {
    reflector.stop();
    await through.close();
    await second.stop();
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
