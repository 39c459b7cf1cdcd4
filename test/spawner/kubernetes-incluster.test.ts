// The `kubernetes` backend as it runs inside the cluster: no kubeconfig, only a service account's directory
// (/var/run/secrets/kubernetes.io/serviceaccount: token, ca.crt, namespace) and KUBERNETES_SERVICE_HOST/PORT, as a
// hub pod has them. The hub runs in a private mount namespace of its own where a temp dir is that directory (the
// machine's /run is not touched); the token is minted by the TokenRequest API for a ServiceAccount bound to exactly
// the rules README.md lists (readmeHubRules): a start, the front door, a kill -9 of the spawner and its re-attach, its
// reconcile of a pod no server names, and a stop must all work with only those rights. An account without them gets
// a start that fails with the API's words naming the right that is missing, and a hub that keeps running.
import test from 'ava';
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { serverRecord, startAndWaitReady } from './helpers.js';
import { ensureCluster, readmeHubRules, startKubeHub, type KubeCluster } from './kube-cluster.js';

const ADMIN = randomToken();
const SUFFIX = Date.now().toString(36);
const NAMESPACE = `hub-incluster-${SUFFIX}`;
const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
let cluster: KubeCluster;
const dirs: string[] = [];
const hubs: HubUnderTest[] = [];

const kube = (method: string, path: string, body: unknown, expect: number) => cluster.want(method, path, body, expect);
const podPath = (name: string) => `/api/v1/namespaces/${NAMESPACE}/pods/${name}`;

/** A ServiceAccount in NAMESPACE and a token for it from the TokenRequest API (what the kubelet mounts in a pod). */
async function serviceAccountToken(name: string): Promise<string> {
  await kube('POST', `/api/v1/namespaces/${NAMESPACE}/serviceaccounts`, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name } }, 201);
  const r = await kube('POST', `/api/v1/namespaces/${NAMESPACE}/serviceaccounts/${name}/token`,
    { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 3600 } }, 201);
  return r.status.token;
}

/**
 * A hub "in a pod" of `account`: its service account directory is a temp dir bind-mounted in a mount namespace of
 * its own (over a private /run: nothing of the machine's changes), the API server at KUBERNETES_SERVICE_HOST/PORT.
 */
async function hubInCluster(account: string, config: Record<string, Record<string, unknown>> = {}): Promise<HubUnderTest> {
  const dir = mkdtempSync(join(tmpdir(), 'hub-k8s-sa-'));
  dirs.push(dir);
  writeFileSync(join(dir, 'token'), await serviceAccountToken(account));
  writeFileSync(join(dir, 'namespace'), NAMESPACE);
  copyFileSync(cluster.caFile, join(dir, 'ca.crt'));
  const mountAndExec = `mount -t tmpfs hub-test-run /run && mkdir -p ${SA_DIR} && mount --bind -o ro "$0" ${SA_DIR} && exec "$@"`;
  const hub = await startKubeHub(cluster, { Hub: { api_tokens: { [ADMIN]: 'boss' } }, Authenticator: { admin_users: ['boss'] }, ...config }, {
    env: { KUBECONFIG: undefined, KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: String(cluster.apiserverPort) },
    launcher: ['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c', mountAndExec, dir],
  });
  hubs.push(hub);
  return hub;
}

test.before(async () => {
  cluster = await ensureCluster();
  await kube('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } }, 201);
  await kube('POST', `/apis/rbac.authorization.k8s.io/v1/namespaces/${NAMESPACE}/roles`,
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: 'hub' }, rules: readmeHubRules() }, 201);
  await kube('POST', `/apis/rbac.authorization.k8s.io/v1/namespaces/${NAMESPACE}/rolebindings`, {
    apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'hub' },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'hub' },
    subjects: [{ kind: 'ServiceAccount', name: 'hub', namespace: NAMESPACE }],
  }, 201);
});

test.after.always(async () => {
  for (const hub of hubs) await hub.stop().catch(() => undefined);
  if (cluster) await cluster.api('DELETE', `/api/v1/namespaces/${NAMESPACE}`).catch(() => undefined);
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

test.serial('kubernetes in the cluster: with only the README\'s rights, a service account\'s token starts a server in its namespace, re-attaches after kill -9, reconciles and stops', async (t) => {
  const hub = await hubInCluster('hub');
  const api = apiClient(hub.url);
  t.is((await api('POST', '/users/alice', { token: ADMIN })).status, 201);
  await startAndWaitReady(hub.url, ADMIN, 'alice');
  // no KubeSpawner.namespace: the account's own namespace, from the directory's `namespace` file
  const pod = await kube('GET', podPath('jupyter-alice'), undefined, 200);
  const alice = (await serverRecord(hub.natsUrl, 'alice'))!;
  t.is((alice.spawner_state as { uid: string }).uid, pod.metadata.uid);
  const token = (await api('POST', '/users/alice/tokens', { token: ADMIN, body: {} })).body.token;
  t.is((await fetch(`${hub.url}/user/alice/api/status`, { headers: { authorization: `token ${token}` } })).status, 200);

  // a pod of this hub that no server names (a crash between its creation and its record): the next spawner deletes it
  await kube('POST', `/api/v1/namespaces/${NAMESPACE}/pods`, {
    apiVersion: 'v1', kind: 'Pod', metadata: { name: 'jupyter-ghost', labels: { component: 'singleuser-server', 'hub.jupyter.org/hub-id': pod.metadata.labels['hub.jupyter.org/hub-id'] } },
    spec: { terminationGracePeriodSeconds: 0, containers: [{ name: 'main', image: 'localhost/hub-cluster/pause:3.10', imagePullPolicy: 'IfNotPresent' }] },
  }, 201);
  const spawner = hub.children().spawner!;
  process.kill(spawner, 'SIGKILL');
  await waitFor('a new spawner', async () => (hub.children().spawner !== spawner ? true : undefined), 20_000);
  await waitFor('alice re-adopted', async () => ((await serverRecord(hub.natsUrl, 'alice'))?.instance !== alice.instance ? true : undefined), 60_000);
  t.is((await kube('GET', podPath('jupyter-alice'), undefined, 200)).metadata.uid, pod.metadata.uid, 'the same pod: re-attached');
  t.is((await fetch(`${hub.url}/user/alice/api/status`, { headers: { authorization: `token ${token}` } })).status, 200);
  await waitFor('the pod no server names deleted', async () => ((await cluster.api('GET', podPath('jupyter-ghost'))).status === 404 ? true : undefined), 60_000);

  t.is((await api('DELETE', '/users/alice/server', { token: ADMIN })).status, 204);
  t.is((await cluster.api('GET', podPath('jupyter-alice'))).status, 404, 'the pod is gone once the stop returns');
  t.is((await cluster.api('GET', `/api/v1/namespaces/${NAMESPACE}/secrets/${(alice.spawner_state as { secret: string }).secret}`)).status, 404, 'and its secret');
  t.false(/kubernetes\.(secret|pod)\.\w*_failed|forbidden/i.test(hub.logs()), `no right was missing:\n${hub.logs().split('\n').filter((l) => /forbidden|_failed/i.test(l)).join('\n')}`);
});

test.serial('kubernetes in the cluster: an account without the rights gets a start that fails naming what it may not do; the hub keeps running', async (t) => {
  const hub = await hubInCluster('nobody');
  const api = apiClient(hub.url);
  t.is((await api('POST', '/users/bob', { token: ADMIN })).status, 201);
  const spawner = hub.children().spawner;
  const r = await api('POST', '/users/bob/server', { token: ADMIN });
  // the established hub's answer to a spawner's failure (500 "Spawn failed: …"), in the API server's words
  t.is(r.status, 500);
  t.regex(r.body.message, new RegExp(`^Spawn failed: the Kubernetes API refuses to list the server pods: pods is forbidden: User "system:serviceaccount:${NAMESPACE}:nobody" cannot list resource "pods" in API group "" in the namespace "${NAMESPACE}" \\(HTTP 403\\)$`));
  t.is(hub.children().spawner, spawner, 'the spawner did not crash');
  t.is((await api('GET', '/users/bob', { token: ADMIN })).body.servers[''], undefined, 'no server left half-started');
  t.is((await cluster.api('GET', podPath('jupyter-bob'))).status, 404);
  t.is((await fetch(`${hub.url}/hub/health`)).status, 200, 'the hub still serves');
});
