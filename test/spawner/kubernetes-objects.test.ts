// The Kubernetes objects of one server (services/spawner/backends/kubernetes-objects.ts): what KubeSpawner's options
// make of the pod, its Secret, PVC and namespace, asserted field by field; then each manifest sent to the real API
// server of `npm run cluster` with a server-side dry run and strict field validation, so a field Kubernetes would
// refuse or drop fails here. KubeSpawner's own test vectors pin the slugs, so PVCs made by KubeSpawner are found again.
import { createHash } from 'node:crypto';
import test from 'ava';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import type { V1Container, V1EnvVar, V1Pod } from '@kubernetes/client-node';
import { escapeSlug, isValidLabelValue, kubeObjects, kubeSpawnerOptionProblems, legacyPvcName, multiSlug, safeSlug, type KubeObjectsInput } from '../../services/spawner/backends/kubernetes-objects.js';
import { ConfigError, validateConfig } from '../../shared/config.js';
import { chooseProfile, profilesOf, sectionFor, userOptionSettings } from '../../shared/profiles.js';
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
  // what a login passes (auth state), and anything the hub does not know as public, is kept secret
  const more = kubeObjects(input({}, { env: { JUPYTERHUB_API_TOKEN: 't1', JUPYTERHUB_USER: 'ann', GITHUB_ACCESS_TOKEN: 't2', UPSTREAM_HOST: 'h', 'WEIRD NAME': 'w' } }));
  t.deepEqual(Object.keys(more.secret.stringData!).sort(), ['GITHUB_ACCESS_TOKEN', 'JUPYTERHUB_API_TOKEN', 'UPSTREAM_HOST', `env-${createHash('sha256').update('WEIRD NAME').digest('hex').slice(0, 16)}`].sort());
  t.is(envOf(more.pod, 'JUPYTERHUB_USER')?.value, 'ann');
  t.deepEqual(envOf(more.pod, 'WEIRD NAME')?.valueFrom?.secretKeyRef?.key, `env-${createHash('sha256').update('WEIRD NAME').digest('hex').slice(0, 16)}`);
  t.is(envOf(pod, 'MEM_LIMIT')?.value, String(1 << 30));
  t.is(envOf(pod, 'CPU_LIMIT')?.value, '1.5');
});

test('objects: bad options are refused with a readable error naming the option', (t) => {
  t.throws(() => kubeObjects(input({ image: '' })), { message: /KubeSpawner\.image is not set/ });
  t.throws(() => kubeObjects(input({ pod_name_template: 'jupyter-{nope}' })), { message: /KubeSpawner\.pod_name_template: \{nope\}/ });
  t.throws(() => kubeObjects(input({ pod_name_template: 'Jupyter_{username}' })), { message: /KubeSpawner\.pod_name_template gives "Jupyter_ann"/ });
  t.throws(() => kubeObjects(input({ mem_limit: 'lots' })), { message: /KubeSpawner\.mem_limit: expected a size/ });
  t.throws(() => kubeObjects(input({ extra_resource_limits: { 'nvidia.com/gpu': 'one' } })), { message: /KubeSpawner\.extra_resource_limits\["nvidia\.com\/gpu"\]/ });
  t.deepEqual(kubeSpawnerOptionProblems({ image: 'localhost/x:1' }), []);
  t.deepEqual(kubeSpawnerOptionProblems({}), ['KubeSpawner.image is not set: name the image servers run in']);
  // every problem, not only the first
  t.deepEqual(kubeSpawnerOptionProblems({ image: 'x', cpu_limit: 'two', uid: 'root' }).map((l) => l.split(':')[0]), ['KubeSpawner.cpu_limit', 'KubeSpawner.uid']);
});

// ---- the real API server: every manifest accepted by a server-side dry run, no field dropped ----

async function coreApi(): Promise<CoreV1Api> {
  const cluster = await ensureCluster();
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfig);
  return kc.makeApiClient(CoreV1Api);
}

const dryRun = { dryRun: 'All', fieldValidation: 'Strict' } as const;

/**
 * Where `sent` differs from what the API server made of it, or null: every field sent is in the answer with its value
 * (the server may add fields and list items after ours), so no field was dropped on the way (the client's serializer
 * drops fields it does not know) or read otherwise than meant.
 */
function notKept(sent: unknown, got: unknown, path = ''): string | null {
  if (Array.isArray(sent)) {
    if (!sent.length && got === undefined) return null;
    if (!Array.isArray(got) || got.length < sent.length) return `${path}: sent ${JSON.stringify(sent)}, got ${JSON.stringify(got)}`;
    for (let i = 0; i < sent.length; i++) {
      const why = notKept(sent[i], got[i], `${path}[${i}]`);
      if (why) return why;
    }
    return null;
  }
  if (typeof sent === 'object' && sent !== null) {
    if (typeof got !== 'object' || got === null) return `${path}: sent an object, got ${JSON.stringify(got)}`;
    for (const [k, v] of Object.entries(sent)) {
      const why = notKept(v, (got as Record<string, unknown>)[k], `${path}.${k}`);
      if (why) return why;
    }
    return null;
  }
  // Kubernetes leaves out false, 0, "" and [] of plain (not pointer) fields: the same value
  return sent === got || (got === undefined && (sent === false || sent === 0 || sent === '')) ? null : `${path}: sent ${JSON.stringify(sent)}, got ${JSON.stringify(got)}`;
}

/** The API server's own JSON of a dry-run create (not the client's model of it). */
async function dryRunCreate(path: string, body: unknown): Promise<Record<string, any>> {
  const cluster = await ensureCluster();
  const answer = await cluster.api('POST', `${path}?dryRun=All&fieldValidation=Strict`, body);
  if (answer.status !== 201) throw new Error(`POST ${path}: ${answer.status} ${JSON.stringify(answer.body).slice(0, 600)}`);
  return answer.body as Record<string, any>;
}

test('cluster: the basic pod and its Secret pass a dry run on the API server', async (t) => {
  const core = await coreApi();
  const o = kubeObjects(input({}, { limits: { memBytes: 512 * 2 ** 20, cpu: 0.5 } }));
  const pod = await core.createNamespacedPod({ namespace: o.namespace, body: o.pod, ...dryRun });
  t.is(pod.metadata?.name, 'jupyter-ann');
  t.deepEqual(pod.spec?.containers[0].resources?.limits, { cpu: '500m', memory: String(512 * 2 ** 20) });
  const secret = await core.createNamespacedSecret({ namespace: o.namespace, body: o.secret, ...dryRun });
  t.is(Buffer.from(secret.data!.HUB_API_TOKEN, 'base64').toString(), 'tok-secret');
});

// ---- every option KubeSpawner has for the pod, and the same manifests through the API server ----

/** One server's options touching every part of the pod: the shape a deployment of KubeSpawner's has. */
const FULL: Record<string, unknown> = {
  image_pull_policy: 'IfNotPresent', image_pull_secrets: ['regcred', { name: 'other-cred' }],
  cmd: ['jupyterhub-singleuser', '--debug'],
  environment: { GREETING: 'hello {unescaped_username}', FROM_FIELD: { valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } }, USES: '$(GREETING)!' },
  working_dir: '/home/{username}',
  storage_pvc_ensure: true, storage_capacity: '1Gi', storage_class: 'standard', storage_access_modes: ['ReadWriteOnce'],
  storage_extra_labels: { 'example.org/owner': '{username}' }, storage_selector: { matchLabels: { user: '{username}' } },
  volumes: { '02-scratch': { name: 'scratch', emptyDir: {} }, '01-home': { name: 'home', persistentVolumeClaim: { claimName: '{pvc_name}' } } },
  volume_mounts: [{ name: 'home', mountPath: '/home/{username}' }, { name: 'scratch', mount_path: '/scratch' }],
  cpu_guarantee: 0.25, cpu_limit: 2, mem_guarantee: '256M', mem_limit: '1G',
  extra_resource_limits: { 'nvidia.com/gpu': '1' }, extra_resource_guarantees: { 'nvidia.com/gpu': 1 },
  node_selector: { 'kubernetes.io/os': 'linux' },
  tolerations: [{ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' }, { key: 'hub.jupyter.org/dedicated', operator: 'Equal', value: 'user', effect: 'NoSchedule' }],
  node_affinity_required: [{ matchExpressions: [{ key: 'kubernetes.io/os', operator: 'In', values: ['linux'] }] }],
  node_affinity_preferred: [{ weight: 10, preference: { matchExpressions: [{ key: 'hub.jupyter.org/node-purpose', operator: 'In', values: ['user'] }] } }],
  pod_affinity_preferred: [{ weight: 5, podAffinityTerm: { topologyKey: 'kubernetes.io/hostname', labelSelector: { matchLabels: { component: 'singleuser-server' } } } }],
  pod_anti_affinity_required: [{ topologyKey: 'kubernetes.io/hostname', labelSelector: { matchLabels: { 'hub.jupyter.org/username': 'nobody' } } }],
  uid: 1000, gid: 100, fs_gid: 100, supplemental_gids: [100, 2000], allow_privilege_escalation: false,
  container_security_context: { capabilities: { drop: ['ALL'] }, runAsNonRoot: true },
  pod_security_context: { seccompProfile: { type: 'RuntimeDefault' } },
  extra_labels: { 'example.org/user': '{username}' }, extra_annotations: { 'example.org/who': '{unescaped_username}' },
  extra_pod_config: { dnsPolicy: 'ClusterFirst', terminationGracePeriodSeconds: 5, enable_service_links: false },
  extra_container_config: { stdin: false, terminationMessagePolicy: 'FallbackToLogsOnError' },
  init_containers: [{ name: 'prepare', image: 'localhost/singleuser:1', command: ['sh', '-c', 'echo {username}'] }],
  extra_containers: [{ name: 'sidecar', image: 'localhost/singleuser:1', command: ['sleep', 'infinity'] }],
  lifecycle_hooks: { postStart: { exec: { command: ['sh', '-c', 'true'] } }, preStop: { exec: { command: ['sh', '-c', 'true'] } } },
  priority_class_name: '', scheduler_name: 'default-scheduler',
};

test('objects: every pod option lands where KubeSpawner puts it', (t) => {
  const o = kubeObjects(input(FULL, { username: 'Ann.Lee@example.org' }));
  const spec = o.pod.spec!;
  const c = notebook(o.pod);
  // the name is not valid as it is: its safe letters and a hash of it (the vectors above pin the scheme)
  const slug = safeSlug('Ann.Lee@example.org');
  t.regex(slug, /^ann-lee-example-org---[0-9a-f]{8}$/);
  t.is(o.pod.metadata!.name, `jupyter-${slug}`);
  t.is(c.imagePullPolicy, 'IfNotPresent');
  t.deepEqual(spec.imagePullSecrets, [{ name: 'regcred' }, { name: 'other-cred' }]);
  t.deepEqual(c.args, ['jupyterhub-singleuser', '--debug']);
  t.is(c.workingDir, `/home/${slug}`);
  t.is(envOf(o.pod, 'GREETING')?.value, 'hello Ann.Lee@example.org');
  t.deepEqual(envOf(o.pod, 'FROM_FIELD'), { name: 'FROM_FIELD', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } });
  const names = c.env!.map((e) => e.name);
  t.true(names.indexOf('GREETING') < names.indexOf('USES'), 'a variable comes after the one it refers to');
  // volumes: an object's values in key order, {pvc_name} expanded; snake_case fields of a mount read as camelCase
  t.deepEqual(spec.volumes, [{ name: 'home', persistentVolumeClaim: { claimName: `claim-${slug}` } }, { name: 'scratch', emptyDir: {} }]);
  t.deepEqual(c.volumeMounts, [{ name: 'home', mountPath: `/home/${slug}` }, { name: 'scratch', mountPath: '/scratch' }]);
  t.deepEqual(c.resources, {
    requests: { cpu: '250m', memory: String(256 * 2 ** 20), 'nvidia.com/gpu': '1' },
    limits: { cpu: '2', memory: String(2 ** 30), 'nvidia.com/gpu': '1' },
  });
  t.deepEqual(spec.nodeSelector, { 'kubernetes.io/os': 'linux' });
  t.is(spec.tolerations!.length, 2);
  t.deepEqual(spec.affinity!.nodeAffinity!.requiredDuringSchedulingIgnoredDuringExecution, { nodeSelectorTerms: FULL.node_affinity_required as never });
  t.is(spec.affinity!.nodeAffinity!.preferredDuringSchedulingIgnoredDuringExecution![0].weight, 10);
  t.is(spec.affinity!.podAffinity!.preferredDuringSchedulingIgnoredDuringExecution![0].podAffinityTerm.topologyKey, 'kubernetes.io/hostname');
  t.is(spec.affinity!.podAntiAffinity!.requiredDuringSchedulingIgnoredDuringExecution!.length, 1);
  t.deepEqual(c.securityContext, { runAsUser: 1000, runAsGroup: 100, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] }, runAsNonRoot: true });
  t.deepEqual(spec.securityContext, { fsGroup: 100, supplementalGroups: [100, 2000], seccompProfile: { type: 'RuntimeDefault' } });
  t.is(spec.automountServiceAccountToken, false);
  t.is(o.pod.metadata!.labels!['example.org/user'], slug);
  t.is(o.pod.metadata!.labels!['hub.jupyter.org/username'], safeSlug('Ann.Lee@example.org', isValidLabelValue));
  t.is(o.pod.metadata!.annotations!['hub.jupyter.org/username'], 'Ann.Lee@example.org');
  t.is(o.pod.metadata!.annotations!['example.org/who'], 'Ann.Lee@example.org');
  t.is(spec.dnsPolicy, 'ClusterFirst');
  t.is(spec.enableServiceLinks, false);
  t.is(c.terminationMessagePolicy, 'FallbackToLogsOnError');
  t.deepEqual(spec.initContainers![0].command, ['sh', '-c', `echo ${slug}`]);
  t.deepEqual(spec.containers.map((x) => x.name), ['notebook', 'sidecar']);
  t.deepEqual(c.lifecycle!.preStop, { exec: { command: ['sh', '-c', 'true'] } });
  t.is(spec.schedulerName, 'default-scheduler');
  t.is(spec.priorityClassName, undefined);
  // the claim
  t.is(o.pvc!.metadata!.name, `claim-${slug}`);
  t.is(o.pvc!.spec!.storageClassName, 'standard');
  t.deepEqual(o.pvc!.spec!.resources, { requests: { storage: '1Gi' } });
  t.deepEqual(o.pvc!.spec!.selector, { matchLabels: { user: slug } });
  t.like(o.pvc!.metadata!.labels, { component: 'singleuser-storage', 'example.org/owner': slug, 'hub.jupyter.org/hub-id': 'hub0123456' });
});

test('objects: a service account gets its token mounted unless told otherwise', (t) => {
  t.is(kubeObjects(input({ service_account: 'notebooks' })).pod.spec!.serviceAccountName, 'notebooks');
  t.is(kubeObjects(input({ service_account: 'notebooks' })).pod.spec!.automountServiceAccountToken, undefined);
  t.is(kubeObjects(input({ service_account: 'notebooks', automount_service_account_token: false })).pod.spec!.automountServiceAccountToken, false);
  t.is(kubeObjects(input({ automount_service_account_token: true })).pod.spec!.automountServiceAccountToken, true);
  t.deepEqual(notebook(kubeObjects(input({ privileged: true, allow_privilege_escalation: true })).pod).securityContext, { privileged: true, allowPrivilegeEscalation: true });
});

test('objects: per-user namespaces: the namespace object, and every object in it', (t) => {
  const o = kubeObjects(input({ enable_user_namespaces: true, namespace: 'jhub', storage_pvc_ensure: true, storage_capacity: '1Gi', user_namespace_labels: { 'example.org/user': '{username}' } }, { username: 'Bob' }));
  t.regex(o.namespace, /^jhub-bob---[0-9a-f]{8}$/);
  t.is(o.namespaceObject!.metadata!.name, o.namespace);
  // a label value may have capitals, an object name may not
  t.like(o.namespaceObject!.metadata!.labels, { 'hub.jupyter.org/username': 'Bob', 'example.org/user': o.namespace.slice('jhub-'.length) });
  for (const x of [o.pod, o.secret, o.pvc!]) t.is(x.metadata!.namespace, o.namespace);
  // the hub in "default": user namespaces start with "user-"
  t.is(kubeObjects(input({ enable_user_namespaces: true }, { username: 'bob' })).namespace, 'user-bob');
});

test('objects: more bad options, each named', (t) => {
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ tolerations: 'all' }, /^KubeSpawner\.tolerations: expected a list/],
    [{ tolerations: ['x'] }, /^KubeSpawner\.tolerations\[0\]: expected an object/],
    [{ volumes: [{ emptyDir: {} }] }, /^KubeSpawner\.volumes\[0\]\.name: required/],
    [{ volume_mounts: [{ name: 'home', mountPath: 'relative' }] }, /^KubeSpawner\.volume_mounts\[0\]\.mountPath/],
    [{ node_affinity_preferred: [{ preference: {} }] }, /^KubeSpawner\.node_affinity_preferred\[0\]\.weight/],
    [{ pod_anti_affinity_required: [{ labelSelector: {} }] }, /^KubeSpawner\.pod_anti_affinity_required\[0\]\.topologyKey/],
    [{ uid: -1 }, /^KubeSpawner\.uid:/],
    [{ supplemental_gids: ['staff'] }, /^KubeSpawner\.supplemental_gids:/],
    [{ container_security_context: { run_as_user: 0 } }, /^KubeSpawner\.container_security_context: keys are Kubernetes' camelCase/],
    [{ init_containers: [{ image: 'x' }] }, /^KubeSpawner\.init_containers\[0\]\.name/],
    [{ extra_containers: [{ name: 'notebook', image: 'x' }] }, /^KubeSpawner\.extra_containers\[0\]\.name: "notebook"/],
    [{ image_pull_policy: 'Sometimes' }, /^KubeSpawner\.image_pull_policy:/],
    [{ privileged: true }, /^KubeSpawner\.privileged: a privileged container always may escalate/],
    [{ image_pull_secrets: [{}] }, /^KubeSpawner\.image_pull_secrets\[0\]/],
    [{ extra_labels: { 'bad key!': 'x' } }, /^KubeSpawner\.extra_labels: "bad key!"/],
    [{ extra_labels: { ok: '{unescaped_username} has spaces' } }, /^KubeSpawner\.extra_labels\["ok"\]/],
    [{ storage_pvc_ensure: true }, /^KubeSpawner\.storage_capacity is not set/],
    [{ storage_pvc_ensure: true, storage_capacity: 'big' }, /^KubeSpawner\.storage_capacity: expected a quantity/],
    [{ storage_pvc_ensure: true, storage_capacity: '1Gi', storage_access_modes: ['Everyone'] }, /^KubeSpawner\.storage_access_modes/],
    [{ enable_user_namespaces: true, user_namespace_template: '{unescaped_username}' }, /^KubeSpawner\.user_namespace_template gives/],
    [{ slug_scheme: 'fancy' }, /^KubeSpawner\.slug_scheme/],
    [{ environment: { N: 3 } }, /^KubeSpawner\.environment\["N"\]: expected a string or an EnvVar/],
    [{ cmd: [1] }, /^KubeSpawner\.cmd:/],
    [{ pod_name_template: 'x-{username' }, /^KubeSpawner\.pod_name_template: a "\{" without its "\}"/],
  ];
  for (const [options, want] of bad) t.throws(() => kubeObjects(input(options, { username: 'Ann Lee' })), { message: want }, JSON.stringify(options));
});

test('slugs: the legacy (KubeSpawner 6) claim name, for claims made before 7', (t) => {
  const i = input({}, { username: 'ann@example.org', servername: 'gpu' });
  t.is(legacyPvcName(i), 'claim-ann-40example-2eorg--gpu');
  t.is(kubeObjects({ ...i, options: { ...i.options, storage_pvc_ensure: true, storage_capacity: '1Gi' }, pvcName: legacyPvcName(i) }).pvc!.metadata!.name, 'claim-ann-40example-2eorg--gpu');
  t.is(kubeObjects(input({ slug_scheme: 'escape' }, { username: 'ann@example.org' })).pod.metadata!.name, 'jupyter-ann-40example-2eorg');
});

test('cluster: every option of a full deployment, a GPU as an extended resource, the claim: dry runs pass', async (t) => {
  const core = await coreApi();
  const o = kubeObjects(input(FULL, { username: 'Ann.Lee@example.org', servername: 'GPU box!' }));
  const pod = await core.createNamespacedPod({ namespace: o.namespace, body: o.pod, ...dryRun });
  t.deepEqual(pod.spec?.containers[0].resources?.limits?.['nvidia.com/gpu'], '1');
  // (the API server adds its default tolerations after ours)
  t.deepEqual(pod.spec?.tolerations?.slice(0, 2).map((x) => x.key), ['nvidia.com/gpu', 'hub.jupyter.org/dedicated']);
  t.truthy(pod.spec?.affinity?.podAntiAffinity);
  t.is(pod.spec?.securityContext?.fsGroup, 100);
  t.deepEqual(pod.spec?.containers[0].securityContext?.capabilities?.drop, ['ALL']);
  const pvc = await core.createNamespacedPersistentVolumeClaim({ namespace: o.namespace, body: o.pvc!, ...dryRun });
  t.is(pvc.metadata?.name, o.pvc!.metadata!.name);
  await core.createNamespacedSecret({ namespace: o.namespace, body: o.secret, ...dryRun });
  // as the API server reads the JSON itself, with strict field validation: nothing unknown, nothing read otherwise
  t.is(notKept(o.pod, await dryRunCreate(`/api/v1/namespaces/${o.namespace}/pods`, o.pod)), null);
  t.is(notKept(o.pvc, await dryRunCreate(`/api/v1/namespaces/${o.namespace}/persistentvolumeclaims`, o.pvc)), null);
  // and through the client (what the backend sends): the same pod, no field lost by its serializer
  t.is(notKept(o.pod, JSON.parse(JSON.stringify(pod))), null);
});

test('cluster: names with special characters make objects the API server takes', async (t) => {
  const core = await coreApi();
  for (const [username, servername] of [['ÜSER@Example.org', ''], ['a'.repeat(60), 'b'.repeat(60)], ['9lives', 'x--y'], ['user-has', 'dash'], ['_', '-']]) {
    const o = kubeObjects(input({ storage_pvc_ensure: true, storage_capacity: '1Gi' }, { username, servername }));
    await core.createNamespacedPod({ namespace: o.namespace, body: o.pod, ...dryRun });
    await core.createNamespacedPersistentVolumeClaim({ namespace: o.namespace, body: o.pvc!, ...dryRun });
    t.pass(`${username}/${servername}: ${o.pod.metadata!.name}, ${o.pvc!.metadata!.name}`);
  }
});

test('cluster: a per-user namespace and the objects in it', async (t) => {
  const core = await coreApi();
  const o = kubeObjects(input({ enable_user_namespaces: true, namespace: `kobj-${process.pid}`, storage_pvc_ensure: true, storage_capacity: '1Gi' }, { username: 'Carol' }));
  await core.createNamespace({ body: o.namespaceObject!, ...dryRun });
  // objects in a namespace need it to exist: made for real, then removed
  await core.createNamespace({ body: o.namespaceObject! });
  t.teardown(() => core.deleteNamespace({ name: o.namespace }).then(() => undefined, () => undefined));
  await core.createNamespacedPod({ namespace: o.namespace, body: o.pod, ...dryRun });
  await core.createNamespacedPersistentVolumeClaim({ namespace: o.namespace, body: o.pvc!, ...dryRun });
  await core.createNamespacedSecret({ namespace: o.namespace, body: o.secret, ...dryRun });
  const made = await core.readNamespace({ name: o.namespace });
  t.is(made.metadata?.labels?.['hub.jupyter.org/username'], safeSlug('Carol', isValidLabelValue));
});

// ---- profiles (KubeSpawner.profile_list) and the configuration's checks ----

const PROFILE_LIST = [
  {
    display_name: 'Small', slug: 'small', default: true,
    kubespawner_override: { mem_limit: '512M', extra_labels: { size: 'small' } },
  },
  {
    display_name: 'GPU box', description: 'one GPU',
    kubespawner_override: {
      extra_resource_limits: { 'nvidia.com/gpu': '1' }, default_url: '/lab',
      tolerations: [{ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' }],
      extra_labels: { size: 'gpu', team: null }, environment: { GPU: 'yes' },
    },
    profile_options: {
      image: {
        display_name: 'Image',
        choices: {
          base: { display_name: 'Base', kubespawner_override: { image: 'localhost/base:1' } },
          lab: { display_name: 'Lab', default: true, kubespawner_override: { image: 'localhost/lab:1' } },
        },
        unlisted_choice: { enabled: true, validation_regex: '^localhost/.+:.+$', validation_message: 'Must be a local image', kubespawner_override: { image: '{value}', extra_annotations: { chosen: '{value}' } } },
      },
    },
  },
];

const kubeConfig = (KubeSpawner: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  validateConfig({ Hub: { spawner_class: 'kubernetes' }, KubeSpawner: { image: 'localhost/singleuser:1', ...KubeSpawner }, ...extra });

const configProblems = (KubeSpawner: Record<string, unknown>, extra: Record<string, unknown> = {}) => {
  try {
    kubeConfig(KubeSpawner, extra);
    return [];
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    return e.problems;
  }
};

/** The KubeSpawner section a start of `userOptions` runs with, as the spawner makes it. */
function startSection(config: ReturnType<typeof kubeConfig>, userOptions: Record<string, unknown>) {
  const profile = chooseProfile(config, userOptions);
  const start = { profile, groups: [], userOptions };
  return { options: sectionFor(config, 'KubeSpawner', start) as unknown as Record<string, unknown>, spawner: sectionFor(config, 'Spawner', start) };
}

test('profiles: KubeSpawner.profile_list is the profiles offered, kubespawner_override applies to the KubeSpawner section', (t) => {
  const config = kubeConfig({ profile_list: PROFILE_LIST, extra_labels: { team: 'a', size: 'none' }, environment: { BASE: '1' } });
  t.deepEqual(profilesOf(config).map((p) => [p.name, p.display_name, Boolean(p.default)]), [['small', 'Small', true], ['gpu-box', 'GPU box', false]]);
  // the default profile: its override; objects merged into the section's
  const small = startSection(config, {});
  t.is(small.options.mem_limit, '512M');
  t.deepEqual(small.options.extra_labels, { team: 'a', size: 'small' });
  const smallPod = kubeObjects(input(small.options)).pod;
  t.is(notebook(smallPod).resources!.limits!.memory, String(512 * 2 ** 20));
  // the GPU profile: merged objects (null removes a key), a Spawner option (default_url) to Spawner, the default choice
  const gpu = startSection(config, { profile: 'gpu-box' });
  t.deepEqual(gpu.options.extra_labels, { size: 'gpu' });
  t.deepEqual(gpu.options.environment, { BASE: '1', GPU: 'yes' });
  t.is(gpu.spawner.default_url, '/lab');
  t.is(gpu.options.image, 'localhost/lab:1');
  const pod = kubeObjects(input(gpu.options)).pod;
  t.is(notebook(pod).resources!.limits!['nvidia.com/gpu'], '1');
  t.is(notebook(pod).image, 'localhost/lab:1');
  t.is(pod.spec!.tolerations![0].key, 'nvidia.com/gpu');
  // a choice, a free-form value ({value} expanded), and the mistakes a client can make: 400 naming them
  t.is(startSection(config, { profile: 'gpu-box', image: 'base' }).options.image, 'localhost/base:1');
  const own = startSection(config, { profile: 'gpu-box', 'image--unlisted-choice': 'localhost/mine:2' }).options;
  t.is(own.image, 'localhost/mine:2');
  t.deepEqual(own.extra_annotations, { chosen: 'localhost/mine:2' });
  for (const [options, want] of [
    [{ profile: 'gpu-box', image: 'huge' }, /Invalid choice "huge" for 'image' of profile 'gpu-box'/],
    [{ profile: 'gpu-box', 'image--unlisted-choice': 'docker.io/evil:1' }, /Invalid value for 'image': Must be a local image/],
    [{ profile: 'nope' }, /Unknown profile 'nope'; choose one of: small, gpu-box/],
  ] as const) {
    const e = t.throws(() => chooseProfile(config, options as Record<string, unknown>));
    t.is((e as unknown as { status: number }).status, 400);
    t.regex(e!.message, want);
  }
});

test('config: bad KubeSpawner options stop the hub, each on a line naming it (profiles too)', (t) => {
  t.deepEqual(configProblems({}), []);
  t.deepEqual(configProblems({ profile_list: PROFILE_LIST }), []);
  const lines = configProblems({
    tolerations: 'all', uid: 'root', pod_name_template: 'jupyter-{nope}', extra_resource_limits: { 'nvidia.com/gpu': 'one' },
    storage_pvc_ensure: true,
  });
  for (const want of [/^KubeSpawner\.tolerations:/, /^KubeSpawner\.uid:/, /^KubeSpawner\.pod_name_template: \{nope\}/, /^KubeSpawner\.extra_resource_limits\["nvidia\.com\/gpu"\]/, /^KubeSpawner\.storage_capacity is not set/]) {
    t.true(lines.some((l) => want.test(l)), `${want} in:\n${lines.join('\n')}`);
  }
  const profileLines = configProblems({
    profile_list: [
      { display_name: 'Bad', kubespawner_override: { cpu_limit: 'lots', no_such_option: 1 } },
      { slug: 'opts', display_name: 'Opts', profile_options: { image: { choices: { x: { kubespawner_override: { image_pull_policy: 'Sometimes' } } } }, empty: { choices: {} } } },
    ],
  });
  for (const want of [/^KubeSpawner\.profile_list "bad": KubeSpawner\.cpu_limit:/, /kubespawner_override "no_such_option" is not an option/,
    /^KubeSpawner\.profile_list "opts" \(image: x\): KubeSpawner\.image_pull_policy/, /profile_options\.empty: needs choices/]) {
    t.true(profileLines.some((l) => want.test(l)), `${want} in:\n${profileLines.join('\n')}`);
  }
  // our own profiles may override KubeSpawner options: checked the same way
  const ours = configProblems({}, { Spawner: { profiles: [{ name: 'gpu', display_name: 'GPU', overrides: { 'KubeSpawner.extra_resource_limits': { 'nvidia.com/gpu': 'x' } } }] } });
  t.true(ours.some((l) => /^Spawner\.profiles "gpu": KubeSpawner\.extra_resource_limits/.test(l)), ours.join('\n'));
  // the image: required, unless every profile gives one
  t.true(configProblems({ image: '' }).some((l) => /KubeSpawner\.image is not set/.test(l)));
  t.deepEqual(configProblems({ image: '', profile_list: [{ display_name: 'A', kubespawner_override: { image: 'localhost/a:1' } }] }), []);
});

test('cluster: a profile with kubespawner_override (a GPU) makes a pod the API server takes', async (t) => {
  const core = await coreApi();
  const config = kubeConfig({ profile_list: PROFILE_LIST });
  const { options } = startSection(config, { profile: 'gpu-box', image: 'base' });
  const o = kubeObjects(input(options, { username: 'dana' }));
  const pod = await core.createNamespacedPod({ namespace: o.namespace, body: o.pod, ...dryRun });
  t.is(pod.spec?.containers[0].image, 'localhost/base:1');
  t.is(pod.spec?.containers[0].resources?.requests?.['nvidia.com/gpu'], '1', 'an extended resource\'s request defaults to its limit');
  t.is(notKept(o.pod, await dryRunCreate(`/api/v1/namespaces/${o.namespace}/pods`, o.pod)), null);
});

test('config: group overrides and user options that set KubeSpawner options are checked like the section', (t) => {
  const lines = configProblems({}, { Spawner: { group_overrides: { gpu: { groups: ['gpu'], spawner_override: { 'KubeSpawner.extra_resource_limits': { 'nvidia.com/gpu': 'all' } } } } } });
  t.true(lines.some((l) => /^Spawner\.group_overrides "gpu": KubeSpawner\.extra_resource_limits\["nvidia\.com\/gpu"\]/.test(l)), lines.join('\n'));
  const config = kubeConfig({}, { Spawner: { apply_user_options: { tol: 'KubeSpawner.tolerations', gpus: 'KubeSpawner.extra_resource_limits' } } });
  t.deepEqual(userOptionSettings(config, { gpus: { 'nvidia.com/gpu': '2' } }), [{ section: 'KubeSpawner', option: 'extra_resource_limits', value: { 'nvidia.com/gpu': '2' } }]);
  const e = t.throws(() => userOptionSettings(config, { tol: 'everything' }));
  t.is((e as unknown as { status: number }).status, 400);
  t.regex(e!.message, /^Invalid user option 'tol': KubeSpawner\.tolerations: expected a list/);
});
