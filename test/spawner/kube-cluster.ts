// The real one-node Kubernetes cluster of `npm run cluster` (scripts/cluster.ts), shared by the Kubernetes tests:
// a cluster that is up and healthy is reused as it is (several test files, and anyone trying the backend, use the
// same one); when none is, one is brought up (the binaries and images come from ~/.cache/hub-cluster, which
// `node scripts/setup.mjs --for-tests` fills, so this takes ~20 s); an unhealthy one is taken down first. Nothing
// here stands in for a cluster: if it cannot come up, `ensureCluster` throws the step and the reason.
//
// Who takes it down: a cluster the tests brought up is marked (MADE_BY_TESTS in its directory) and stays up
// between test files; `.ci/run` calls `node --import=tsx test/spawner/kube-cluster.ts release` after the suite,
// which takes it down only when the tests made it (a cluster someone brought up by hand is left as it was).
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { api, CLUSTER_DIR, down, NODE_NAME, POD_SUBNET, SINGLEUSER_IMAGE, up } from '../../scripts/cluster.js';
import { freePort, sleep, startHub, type HubUnderTest, type StartOptions } from '../harness.js';
import { tmpdir } from 'node:os';

export interface KubeCluster {
  /** an admin kubeconfig (KUBECONFIG for the hub's spawner) */
  kubeconfig: string;
  /** the single-user image with the established hub's jupyterhub-singleuser 6.1.1 and JupyterLab, in containerd already */
  image: string;
  /** the node's address (the kubelet's, the API server's advertised one) */
  nodeIp: string;
  /**
   * this machine as pods reach it: the pod bridge's own address (the CNI bridge is the pods' gateway, with no
   * default route out of their subnet, so the node's address is unreachable from a pod): KubeSpawner.hub_connect_url's host
   */
  hostIp: string;
  /** the API as the cluster's admin: status and parsed body */
  api: typeof api;
  /** the same, failing with the API's words unless the status is `expect` */
  want(method: string, path: string, body: unknown, expect: number): Promise<any>;
  /** a JSON Patch (RFC 6902) of an object, e.g. a node's status (api() sends only merge-able JSON) */
  jsonPatch(path: string, ops: unknown[]): Promise<void>;
  /** the API server's port on 127.0.0.1 and the cluster's CA (what a pod's service account directory holds as ca.crt) */
  apiserverPort: number;
  caFile: string;
}

export interface PolicyRule { apiGroups: string[]; resources: string[]; verbs: string[] }

/**
 * The rules README.md says the hub's account needs (its `rules:` block under "The rights the hub's account needs"):
 * the tests grant exactly these, so the README is what is tested.
 */
export function readmeHubRules(): PolicyRule[] {
  const readme = readFileSync(fileURLToPath(new URL('../../README.md', import.meta.url)), 'utf8');
  const block = /The rights the hub's account needs[\s\S]*?```yaml\nrules:\n([\s\S]*?)```/.exec(readme)?.[1];
  if (!block) throw new Error('README.md has no `rules:` block after "The rights the hub\'s account needs"');
  return block.split('\n').map((l) => l.replace(/#.*$/, '').trim()).filter(Boolean).map((line) => {
    const list = (key: string) => {
      const m = new RegExp(`${key}: \\[([^\\]]*)\\]`).exec(line);
      if (!m) throw new Error(`README.md's rule '${line}' has no ${key}`);
      return m[1].split(',').map((v) => v.trim().replace(/^"(.*)"$/, '$1')).filter((v, i, all) => v !== '' || all.length === 1);
    };
    return { apiGroups: list('apiGroups'), resources: list('resources'), verbs: list('verbs') };
  });
}

async function want(method: string, path: string, body: unknown, expect: number): Promise<any> {
  const r = await api(method, path, body);
  if (r.status !== expect) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body).slice(0, 500)}`);
  return r.body;
}

async function jsonPatch(path: string, ops: unknown[]): Promise<void> {
  const state = JSON.parse(readFileSync(STATE, 'utf8')) as { apiserverPort: number };
  const pki = (f: string) => readFileSync(join(CLUSTER_DIR, 'pki', f));
  await new Promise<void>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: state.apiserverPort, method: 'PATCH', path, timeout: 10_000,
      ca: pki('ca.crt'), cert: pki('admin.crt'), key: pki('admin.key'), headers: { 'content-type': 'application/json-patch+json' } }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`PATCH ${path}: ${res.statusCode} ${text.slice(0, 300)}`))));
    });
    req.on('timeout', () => req.destroy(new Error(`PATCH ${path}: no answer in 10 s`)));
    req.on('error', reject);
    req.end(JSON.stringify(ops));
  });
}

const STATE = join(CLUSTER_DIR, 'state.json');
const MARK = join(CLUSTER_DIR, 'MADE_BY_TESTS');
const LOCK = `${CLUSTER_DIR}.lock`;
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Why the cluster at CLUSTER_DIR cannot be used as it is, or null when it is up and healthy. */
async function unhealthy(): Promise<string | null> {
  const state = JSON.parse(readFileSync(STATE, 'utf8')) as { pids: Record<string, number> };
  const dead = Object.entries(state.pids).filter(([, pid]) => !alive(pid)).map(([name]) => name);
  if (dead.length) return `${dead.join(', ')} not running`;
  const ready = await api('GET', '/readyz', undefined, CLUSTER_DIR, 5_000).catch((e: Error) => ({ status: 0, body: e.message }));
  if (ready.status !== 200) return `the API server is not ready (${ready.status} ${String(ready.body).slice(0, 200)})`;
  const node = await api('GET', `/api/v1/nodes/${NODE_NAME}`, undefined, CLUSTER_DIR, 5_000);
  const cond = node.body?.status?.conditions?.find((c: { type: string }) => c.type === 'Ready');
  return cond?.status === 'True' ? null : `node ${NODE_NAME} not Ready (${cond?.message ?? node.status})`;
}

/** One process at a time brings a cluster up or down (test files start together): a directory as the lock, bounded wait. */
async function locked<T>(fn: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + 10 * 60_000;
  for (let attempt = 0; ; attempt++) {
    try {
      mkdirSync(LOCK);
      writeFileSync(join(LOCK, 'pid'), String(process.pid));
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const holder = Number(existsSync(join(LOCK, 'pid')) ? readFileSync(join(LOCK, 'pid'), 'utf8') : 0);
      if (holder && !alive(holder)) rmSync(LOCK, { recursive: true, force: true }); // its holder died
      else if (Date.now() > deadline || attempt > 3000) throw new Error(`the cluster lock ${LOCK} is held by process ${holder || '?'} for more than 10 min`);
      else await sleep(200);
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
}

let ensured: Promise<KubeCluster> | null = null;

/** The cluster, up and healthy (reused, or brought up now); throws why it cannot be. */
export function ensureCluster(): Promise<KubeCluster> {
  ensured ??= locked(async () => {
    if (existsSync(STATE)) {
      const why = await unhealthy();
      if (why) {
        process.stderr.write(`kube-cluster: the cluster at ${CLUSTER_DIR} is unhealthy (${why}): taking it down and bringing up another\n`);
        await down();
      }
    }
    if (!existsSync(STATE)) {
      await up();
      writeFileSync(MARK, `${new Date().toISOString()}\n`);
    }
    const state = JSON.parse(readFileSync(STATE, 'utf8')) as { nodeIp: string; apiserverPort: number };
    const hostIp = POD_SUBNET.replace(/\.0\/\d+$/, '.1'); // the bridge's address: the subnet's first
    return { kubeconfig: join(CLUSTER_DIR, 'admin.kubeconfig'), image: SINGLEUSER_IMAGE, nodeIp: state.nodeIp, hostIp, api, want, jsonPatch,
      apiserverPort: state.apiserverPort, caFile: join(CLUSTER_DIR, 'pki', 'ca.crt') };
  });
  ensured.catch(() => { ensured = null; });
  return ensured;
}

/**
 * A hub whose servers run as pods on the cluster: its gateway on all addresses and a port picked here (pods reach it at
 * `cluster.hostIp`, which KubeSpawner.hub_connect_url names), the spawner given the admin kubeconfig, the image the
 * cluster made, `JUPYTERHUB_*` aliases for the established hub's server. `config` adds to each section; `how` gives
 * other credentials than the admin kubeconfig (`env`) and a command to run the hub under (`launcher`).
 */
export async function startKubeHub(cluster: KubeCluster, config: Record<string, Record<string, unknown>>,
  how: Pick<StartOptions, 'env' | 'launcher'> = {}): Promise<HubUnderTest> {
  const port = await freePort();
  const base: Record<string, Record<string, unknown>> = {
    Hub: { spawner_class: 'kubernetes', ip: '0.0.0.0', port, env_prefix_aliases: ['JUPYTERHUB_'] },
    Spawner: { cmd: ['jupyterhub-singleuser'], start_timeout: 120, http_timeout: 60 },
    KubeSpawner: { image: cluster.image, image_pull_policy: 'IfNotPresent', hub_connect_url: `http://${cluster.hostIp}:${port}` },
  };
  for (const [section, options] of Object.entries(config)) base[section] = { ...base[section], ...options };
  return startHub({ reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port, natsPort: await freePort() }, env: how.env ?? { KUBECONFIG: cluster.kubeconfig }, launcher: how.launcher, config: base });
}

/** Takes the cluster down if the tests brought it up (`.ci/run` after the suite); one made by hand stays. */
export async function release(): Promise<string> {
  if (!existsSync(STATE)) return 'no cluster';
  if (!existsSync(MARK)) return `the cluster at ${CLUSTER_DIR} was not brought up by the tests: left up`;
  return locked(async () => (await down()).join('; '));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (process.argv[2] === 'release') process.stderr.write(`kube-cluster release: ${await release()}\n`);
  else if (process.argv[2] === 'ensure') process.stdout.write(`KUBECONFIG=${(await ensureCluster()).kubeconfig}\n`);
  else {
    process.stderr.write('usage: node --import=tsx test/spawner/kube-cluster.ts ensure | release\n');
    process.exitCode = 2;
  }
}
