// `npm run bench spawn`: one spawn alone, N at once and N stops at once (BENCH_SPAWN_COUNT, default 50), with
// this hub's `simple` and `localprocess` and the established hub's SimpleLocalProcessSpawner and
// LocalProcessSpawner, all spawning the same tiny program in the same run; beside the floor: the CPU time
// that program's start-up costs here, times the count, divided by the cores. This hub's `slurm` row (jobs on
// a one-node cluster started here, BENCH_SLURM_COUNT at once, default 20) adds SLURM's scheduling and the
// job wrapper to the same program; the `docker` row runs it in containers on a Podman service started for the
// run (at most 20 at once: containers cost far more); the `kubernetes` row runs the same server in Python (the pod's
// image has no node) in pods on the real one-node cluster of `npm run cluster` (reused, or brought up), 20 at once at
// most, beside what the kubelet itself reports for the same starts (pod creation to running).
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { freePort, sleep, startHub, waitFor } from '../harness.js';
import { randomToken } from '../api/client.js';
import { jupyterhubInstalled, startJupyterHub } from './jupyterhub.js';
import { aptInstall } from './tools.js';
import { IMAGE, startPodman } from '../spawner/podman.js';
import { startSlurmCluster } from '../spawner/slurm-cluster.js';
import { ensureCluster } from '../spawner/kube-cluster.js';
import { NODE_NAME } from '../../scripts/cluster.js';

const TARGET = fileURLToPath(new URL('./spawn-target.mjs', import.meta.url));
const COUNT = Number(process.env.BENCH_SPAWN_COUNT ?? 50);
const SLURM_COUNT = Math.min(COUNT, Number(process.env.BENCH_SLURM_COUNT ?? 20));
const ALONE_RUNS = 5;
/** BENCH_SPAWN_ROWS=simple,slurm runs only those rows (simple, localprocess, docker, kubernetes, slurm, established) */
const ROWS = new Set((process.env.BENCH_SPAWN_ROWS ?? 'simple,localprocess,docker,kubernetes,slurm,established').split(','));
const DOCKER_COUNT = Math.min(COUNT, 20);
const KUBE_COUNT = Math.min(COUNT, 20);
/** spawn-target.mjs in Python, for the single-user image (no node in it) */
const PY_TARGET = [
  'import os, urllib.parse, http.server',
  "u = urllib.parse.urlparse(os.environ['HUB_SERVICE_URL'])",
  'class H(http.server.BaseHTTPRequestHandler):',
  "    def do_GET(self): self.send_response(200); self.end_headers(); self.wfile.write(b'ok\\n')",
  '    def log_message(self, *a): pass',
  'http.server.HTTPServer((u.hostname, u.port), H).serve_forever()',
].join('\n');
const log = (line: string) => console.error(`bench spawn: ${line}`);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** CPU seconds (user + system) the target costs from exec until it answers HTTP. */
async function startupCpu(): Promise<{ cpu: number; wall: number }> {
  const port = await freePort();
  const t0 = performance.now();
  const child = spawn(process.execPath, [TARGET], { env: { ...process.env, HUB_SERVICE_URL: `http://127.0.0.1:${port}/` }, stdio: 'ignore' });
  await waitFor('the target to answer', async () => ((await fetch(`http://127.0.0.1:${port}/`).catch(() => null))?.ok ? true : undefined), 10_000, 5);
  const wall = performance.now() - t0;
  const f = readFileSync(`/proc/${child.pid}/stat`, 'utf8');
  const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
  const cpu = (Number(fields[11]) + Number(fields[12])) / TICKS;
  child.kill('SIGKILL');
  return { cpu, wall };
}

/** The API with a long deadline: 50 starts at once on a loaded 2-core machine take a while. */
function apiClient(base: string) {
  return async (method: string, path: string, o: { token?: string; body?: unknown } = {}) => {
    const r = await fetch(`${base}/hub/api${path}`, {
      method, headers: { authorization: `token ${o.token}`, ...(o.body ? { 'content-type': 'application/json' } : {}) },
      body: o.body ? JSON.stringify(o.body) : undefined, signal: AbortSignal.timeout(300_000),
    });
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : null };
  };
}

interface Api {
  call: ReturnType<typeof apiClient>;
  token: string;
}

interface Figures { alone: number; burst: number; stops: number; count: number; note?: string }

/** POST start (waits for ready: slow_spawn_timeout is long), N together, then N stops together; `alone` wraps the lone starts. */
async function measure(api: Api, users: string[], alone_?: { before(): Promise<void>; after(): Promise<string> }): Promise<Figures> {
  const start = async (u: string) => {
    const r = await api.call('POST', `/users/${u}/server`, { token: api.token });
    if (r.status !== 201) throw new Error(`start ${u}: ${r.status} ${JSON.stringify(r.body)}`);
  };
  const stop = async (u: string) => {
    const r = await api.call('DELETE', `/users/${u}/server`, { token: api.token });
    if (r.status !== 204) throw new Error(`stop ${u}: ${r.status} ${JSON.stringify(r.body)}`);
  };
  const alone: number[] = [];
  await alone_?.before();
  for (let i = 0; i < ALONE_RUNS; i++) {
    const t0 = performance.now();
    await start(users[0]);
    alone.push(performance.now() - t0);
    await stop(users[0]);
    await sleep(200);
  }
  const note = await alone_?.after();
  let t0 = performance.now();
  await Promise.all(users.map(start));
  const burst = performance.now() - t0;
  await sleep(500);
  t0 = performance.now();
  await Promise.all(users.map(stop));
  const stops = performance.now() - t0;
  return { alone: median(alone), burst, stops, count: users.length, ...(note ? { note } : {}) };
}

function accounts(n: number) {
  const tag = randomBytes(2).toString('hex');
  const names = Array.from({ length: n }, (_, i) => `hb${tag}${i}`);
  for (const name of names) execFileSync('useradd', ['-m', '-K', 'HOME_MODE=0700', name]);
  return { names, remove: () => { for (const name of names) spawnSync('userdel', ['-r', name], { stdio: 'ignore' }); } };
}

export async function spawnBench(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench spawn: localprocess needs root');
  if (ROWS.has('established') && !jupyterhubInstalled()) aptInstall('jupyterhub', log);
  const cores = availableParallelism();
  const users = accounts(COUNT);
  const token = randomToken();
  const results: [string, Figures][] = [];
  try {
    const probes: { cpu: number; wall: number }[] = [];
    for (let i = 0; i < 5; i++) probes.push(await startupCpu());
    const cpu = median(probes.map((p) => p.cpu));
    const wallAlone = median(probes.map((p) => p.wall));

    /** One row: a hub with this backend (and its own options), these users made, then spawned and stopped. */
    const measureRow = async (label: string, spawner: string, names: string[], backend: Record<string, unknown> = {},
      o: { env?: NodeJS.ProcessEnv; alone?: Parameters<typeof measure>[2] } = {}) => {
      log(`this hub, ${label}`);
      const hub = await startHub({
        env: o.env,
        config: {
          Hub: { api_tokens: { [token]: 'boss' }, spawner_class: spawner, concurrent_spawn_limit: 0, rpc_timeout: 300 },
          Authenticator: { admin_users: ['boss'] },
          Spawner: { cmd: [process.execPath, TARGET], slow_spawn_timeout: 280, slow_stop_timeout: 280, start_timeout: 280 },
          ...backend,
        },
      });
      try {
        const call = apiClient(hub.url);
        await call('POST', '/users', { token, body: { usernames: names } });
        results.push([`hub ${label}`, await measure({ call, token }, names, o.alone)]);
        log(JSON.stringify(results.at(-1)));
      } finally {
        await hub.stop();
      }
    };
    for (const spawner of ['simple', 'localprocess'].filter((r) => ROWS.has(r))) await measureRow(spawner, spawner, users.names);
    if (ROWS.has('docker')) {
      const podman = await startPodman();
      try {
        await measureRow('docker (Podman)', 'docker', users.names.slice(0, DOCKER_COUNT), {
          DockerSpawner: { host: podman.host, image: IMAGE, pull_policy: 'never', extra_host_config: { Binds: podman.hostBinds } },
        });
      } finally {
        await podman.stop();
      }
    }
    if (ROWS.has('kubernetes')) {
      const cluster = await ensureCluster();
      const namespace = `hub-bench-${randomBytes(3).toString('hex')}`;
      await cluster.want('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } }, 201);
      // what the kubelet itself reports for the same starts: its histogram of pod creation → running, before and after
      const kubelet = async () => {
        const text = String((await cluster.api('GET', `/api/v1/nodes/${NODE_NAME}/proxy/metrics`)).body);
        const value = (name: string) => Number(text.match(new RegExp(`^${name} (\\S+)$`, 'm'))?.[1] ?? NaN);
        return { sum: value('kubelet_pod_start_total_duration_seconds_sum'), count: value('kubelet_pod_start_total_duration_seconds_count') };
      };
      let before = { sum: 0, count: 0 };
      try {
        await measureRow('kubernetes', 'kubernetes', users.names.slice(0, KUBE_COUNT), {
          Spawner: { cmd: ['python3', '-c', PY_TARGET], slow_spawn_timeout: 280, slow_stop_timeout: 280, start_timeout: 280, http_timeout: 280 },
          KubeSpawner: { image: cluster.image, image_pull_policy: 'IfNotPresent', namespace },
        }, {
          env: { KUBECONFIG: cluster.kubeconfig },
          alone: {
            before: async () => { before = await kubelet(); },
            after: async () => {
              const after = await kubelet();
              const n = after.count - before.count;
              return n > 0 ? `the kubelet's own pod creation → running: ${Math.round(((after.sum - before.sum) / n) * 1000)} ms (mean of ${n})` : 'the kubelet reported no start';
            },
          },
        });
      } finally {
        await cluster.api('DELETE', `/api/v1/namespaces/${namespace}`).catch(() => undefined);
      }
    }
    if (ROWS.has('slurm')) {
      const cluster = await startSlurmCluster({ cpus: SLURM_COUNT + 4 });
      try {
        await measureRow('slurm', 'slurm', users.names.slice(0, SLURM_COUNT), {
          SlurmSpawner: { slurm_conf: cluster.conf, partition: cluster.partition, req_memory: '100M', poll_interval: 1 },
        });
      } finally {
        await cluster.stop();
      }
    }
    for (const [label, cls] of ROWS.has('established') ? [['established SimpleLocalProcessSpawner', 'SimpleLocalProcessSpawner'], ['established LocalProcessSpawner', 'LocalProcessSpawner']] : []) {
      log(label);
      const jh = await startJupyterHub({
        apiTokens: { [token]: 'boss' }, adminUsers: ['boss'],
        extraConfig: [
          `c.JupyterHub.spawner_class = 'jupyterhub.spawner.${cls}'`,
          `c.Spawner.cmd = [${JSON.stringify(process.execPath)}, ${JSON.stringify(TARGET)}]`,
          'c.Spawner.start_timeout = 280', 'c.Spawner.http_timeout = 280',
          'c.JupyterHub.concurrent_spawn_limit = 0',
          "c.JupyterHub.tornado_settings = {'slow_spawn_timeout': 280, 'slow_stop_timeout': 280}",
        ],
      });
      try {
        const call = apiClient(jh.url);
        await call('POST', '/users', { token, body: { usernames: users.names } });
        results.push([label, await measure({ call, token }, users.names)]);
        log(JSON.stringify(results.at(-1)));
      } catch (e) {
        throw new Error(`${(e as Error).message}\n${jh.logs()}`);
      } finally {
        await jh.stop();
      }
    }

    const floorAlone = cpu * 1000;
    const floorBurst = (count: number) => (cpu * count * 1000) / cores;
    const ms = (x: number) => `${Math.round(x)} ms`;
    const above = (x: number, floor: number) => `${(x / floor).toFixed(1)}×`;
    console.log(`\nspawn (${COUNT} servers, ${cores} cores); floor: start-up CPU ${ms(cpu * 1000)} per server (wall ${ms(wallAlone)} alone)`);
    console.log(`${'what'.padEnd(40)} ${'one alone'.padStart(16)} ${'N at once'.padStart(22)} ${'N stops'.padStart(10)}`);
    console.log(`${`floor (N = ${COUNT})`.padEnd(40)} ${ms(floorAlone).padStart(16)} ${ms(floorBurst(COUNT)).padStart(22)} ${'-'.padStart(10)}`);
    for (const [label, f] of results) {
      console.log(`${`${label} (N = ${f.count})`.padEnd(40)} ${`${ms(f.alone)} (${above(f.alone, floorAlone)})`.padStart(16)} ${`${ms(f.burst)} (${above(f.burst, floorBurst(f.count))})`.padStart(22)} ${ms(f.stops).padStart(10)}${f.note ? `   ${f.note}` : ''}`);
    }
  } finally {
    users.remove();
  }
}
