// The Kubernetes objects of one server (services/spawner/backends/kubernetes-objects.ts): what KubeSpawner's options
// make of the pod, its Secret, PVC and namespace, asserted field by field; then each manifest sent to the real API
// server of `npm run cluster` with a server-side dry run and strict field validation, so a field Kubernetes would
// refuse or drop fails here. KubeSpawner's own test vectors pin the slugs, so PVCs made by KubeSpawner are found again.
import test from 'ava';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import type { V1Container, V1EnvVar, V1Pod } from '@kubernetes/client-node';
import { escapeSlug, isValidLabelValue, kubeObjects, kubeSpawnerOptionProblems, multiSlug, safeSlug, type KubeObjectsInput } from '../../services/spawner/backends/kubernetes-objects.js';
import { ensureCluster } from './kube-cluster.js';

const input = (options: Record<string, unknown>, over: Partial<KubeObjectsInput> = {}): KubeObjectsInput => ({
  username: 'ann', servername: '', id: 'ann', hubId: 'hub0123456', cmd: ['jupyterhub-singleuser'],
  env: { HUB_API_TOKEN: 'tok-secret', HUB_USER: 'ann', HUB_API_URL: 'http://10.0.0.1:8081/hub/api', LANG: 'C.UTF-8' },
  port: 8888, limits: { memBytes: null, cpu: null }, notebookDir: '', options: { image: 'localhost/singleuser:1', ...options }, ...over,
});
const notebook = (pod: V1Pod): V1Container => pod.spec!.containers[0];
const envOf = (pod: V1Pod, name: string): V1EnvVar | undefined => notebook(pod).env?.find((e) => e.name === name);

// ---- slugs: KubeSpawner 7's own test vectors (tests/test_slugs.py, tests/test_spawner.py) ----

test('slugs: safe_slug as KubeSpawner 7 makes them', (t) => {
  const vectors: [string, string][] = [
    ['jupyter-alex', 'jupyter-alex'], ['jupyter-Alex', 'jupyter-alex---3a1c285c'], ['jupyter-üni', 'jupyter-ni---a5aaf5dd'],
    ['endswith-', 'endswith---165f1166'], ['user@email.com', 'user-email-com---0925f997'], ['user-_@_emailß.com', 'user-email-com---7e3a7efd'],
    ['has.dot', 'has-dot---03e27fdf'], ['z9', 'z9'], ['9z9', 'x-9z9---224de202'], ['-start', 'start---f587e2dc'], ['üser', 'ser---73506260'],
    ['username--servername', 'username-servername---d957f1de'], ['start---f587e2dc', 'start-f587e2dc---cc5bb9c9'],
    ['x'.repeat(63), 'x'.repeat(63)], ['x'.repeat(64), 'xxxxxxxxxxxxxxxxxxxxx---7ce10097'], ['x'.repeat(65), 'xxxxxxxxxxxxxxxxxxxxx---9537c5fd'], ['', 'x---e3b0c442'],
  ];
  for (const [name, want] of vectors) t.is(safeSlug(name), want, name);
  t.is(safeSlug('x'.repeat(16), undefined, 16), 'x'.repeat(16));
  t.is(safeSlug('x'.repeat(17), undefined, 16), 'xxxxx---d04fd59f');
  t.is(safeSlug('x'.repeat(16), undefined, 12), 'x---9c572959');
  t.throws(() => safeSlug('x'.repeat(16), undefined, 11));
  const labels: [string, string][] = [
    ['', ''], ['x', 'x'], ['a-b', 'a-b'], ['9a', '9a'], ['9.', 'x-9---99a1b84b'], ['AbC', 'AbC'], ['AbC.', 'abc---dbe8c5d1'], ['ab.c', 'ab.c'],
    ['a@b.c', 'a-b-c---d648b243'], ['-x', 'x---a4209624'], ['x-', 'x---c8b60efc'], ['x'.repeat(64), 'xxxxxxxxxxxxxxxxxxxxx---7ce10097'],
  ];
  for (const [name, want] of labels) t.is(safeSlug(name, isValidLabelValue), want, `label ${name}`);
});

test('slugs: pod and PVC names of KubeSpawner 7 for names with special characters', (t) => {
  const names = (username: string, servername: string, options: Record<string, unknown> = {}) => {
    const o = kubeObjects(input(options, { username, servername }));
    return { pod: o.pod.metadata!.name, pvc: o.pvc?.metadata?.name ?? null };
  };
  t.is(names('user', '').pod, 'jupyter-user');
  t.is(names('user', 'server').pod, 'jupyter-user--server');
  t.is(names('some_user', 'test-server!').pod, 'jupyter-some-user---7d3a4d4e--test-server---cb54a9af');
  t.is(names('some_user', '', { pod_name_template: 'prefix-{user_server}-suffix' }).pod, 'prefix-some-user---7d3a4d4e-suffix');
  // a user "user-has-dash" and a user "user-has" with a server "dash" do not share a pod or a claim
  const ensure = { storage_pvc_ensure: true, storage_capacity: '1Gi' };
  t.deepEqual(names('user-has-dash', '', ensure), { pod: 'jupyter-user-has-dash', pvc: 'claim-user-has-dash' });
  t.deepEqual(names('user-has', 'dash', ensure), { pod: 'jupyter-user-has--dash', pvc: 'claim-user-has--dash' });
  t.true(multiSlug(['a', 'b']).startsWith('a--b---'));
  // the legacy scheme (KubeSpawner < 7): every other byte as "-" and its hex
  t.is(escapeSlug('user@example.com'), 'user-40example-2ecom');
  t.is(escapeSlug('Ann'), '-41nn');
});

// ---- the manifests ----

test('objects: a basic pod: image, command, labels, the secret environment through the Secret', (t) => {
  const o = kubeObjects(input({}, { limits: { memBytes: 1 << 30, cpu: 1.5 } }));
  t.is(o.namespace, 'default');
  t.is(o.namespaceObject, null);
  t.is(o.pvc, null);
  const pod = o.pod;
  t.is(pod.metadata!.name, 'jupyter-ann');
  t.like(pod.metadata!.labels, {
    'hub.jupyter.org/username': 'ann', 'hub.jupyter.org/servername': '', component: 'singleuser-server', app: 'jupyterhub',
    heritage: 'jupyterhub', 'hub.jupyter.org/hub-id': 'hub0123456',
  });
  t.is(notebook(pod).image, 'localhost/singleuser:1');
  t.deepEqual(notebook(pod).args, ['jupyterhub-singleuser']);
  t.deepEqual(notebook(pod).ports, [{ name: 'notebook-port', containerPort: 8888 }]);
  t.deepEqual(notebook(pod).resources, { requests: {}, limits: { cpu: '1500m', memory: String(1 << 30) } });
  // the token only through the Secret; public values in the pod
  t.deepEqual(envOf(pod, 'HUB_API_TOKEN'), { name: 'HUB_API_TOKEN', valueFrom: { secretKeyRef: { name: 'jupyter-ann', key: 'HUB_API_TOKEN' } } });
  t.false(JSON.stringify(pod).includes('tok-secret'));
  t.deepEqual(o.secret.stringData, { HUB_API_TOKEN: 'tok-secret' });
  t.is(envOf(pod, 'HUB_USER')?.value, 'ann');
  t.is(envOf(pod, 'MEM_LIMIT')?.value, String(1 << 30));
  t.is(envOf(pod, 'CPU_LIMIT')?.value, '1.5');
});

test('objects: bad options are refused with a readable error naming the option', (t) => {
  t.throws(() => kubeObjects(input({ image: '' })), { message: /KubeSpawner\.image is not set/ });
  t.throws(() => kubeObjects(input({ pod_name_template: 'jupyter-{nope}' })), { message: /KubeSpawner\.pod_name_template: \{nope\}/ });
  t.throws(() => kubeObjects(input({ pod_name_template: 'Jupyter_{username}' })), { message: /KubeSpawner\.pod_name_template gives "Jupyter_ann"/ });
  t.throws(() => kubeObjects(input({ mem_limit: 'lots' })), { message: /KubeSpawner\.mem_limit: expected a size/ });
  t.throws(() => kubeObjects(input({ extra_resource_limits: { 'nvidia.com/gpu': 'one' } })), { message: /KubeSpawner\.extra_resource_limits\["nvidia\.com\/gpu"\]/ });
  t.deepEqual(kubeSpawnerOptionProblems({}), []);
  t.true(kubeSpawnerOptionProblems({ cpu_limit: 'two' }).some((l) => l.startsWith('KubeSpawner.cpu_limit:')));
});

// ---- the real API server: every manifest accepted by a server-side dry run, no field dropped ----

async function coreApi(): Promise<CoreV1Api> {
  const cluster = await ensureCluster();
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfig);
  return kc.makeApiClient(CoreV1Api);
}

const dryRun = { dryRun: 'All', fieldValidation: 'Strict' } as const;

test('cluster: the basic pod and its Secret pass a dry run on the API server', async (t) => {
  const core = await coreApi();
  const o = kubeObjects(input({}, { limits: { memBytes: 512 * 2 ** 20, cpu: 0.5 } }));
  const pod = await core.createNamespacedPod({ namespace: o.namespace, body: o.pod, ...dryRun });
  t.is(pod.metadata?.name, 'jupyter-ann');
  t.deepEqual(pod.spec?.containers[0].resources?.limits, { cpu: '500m', memory: String(512 * 2 ** 20) });
  const secret = await core.createNamespacedSecret({ namespace: o.namespace, body: o.secret, ...dryRun });
  t.is(Buffer.from(secret.data!.HUB_API_TOKEN, 'base64').toString(), 'tok-secret');
});
