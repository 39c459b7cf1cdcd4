// Several hub nodes on one machine for scale tests: each node its own data dir, gateway port and NATS port,
// all sharing the NATS token (the harness gives every hub the same one) and the cookie secret.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, type NatsConnection } from 'nats';
import { freePort, isAlive, NATS_ADMIN, NATS_TOKEN, REPO, startHub, stopChild, waitFor, type HubUnderTest } from '../harness.js';
import { natsServerConfig } from '../../shared/nats-server-config.js';
import { SERVERS_BUCKET, serverKey } from '../../shared/servers.js';

export const COOKIE_SECRET = randomBytes(32).toString('hex');

/** The configuration every node of a test hub shares (one configuration, several nodes). */
export function sharedConfig(admin: string, fixture: string): Record<string, Record<string, unknown>> {
  return {
    Hub: { api_tokens: { [admin]: 'boss' }, cookie_secret: COOKIE_SECRET, allow_named_servers: true },
    Authenticator: { admin_users: ['boss'] },
    Spawner: { cmd: [process.execPath, fixture], start_timeout: 10, stop_signal_timeout: 0.5 },
  };
}

/** Merges a node's own options (data dir, ports, node name, actors) over the shared ones, section by section. */
export function nodeConfig(shared: Record<string, Record<string, unknown>>, own: Record<string, Record<string, unknown>>) {
  const out: Record<string, Record<string, unknown>> = structuredClone(shared);
  for (const [section, options] of Object.entries(own)) out[section] = { ...out[section], ...options };
  return out;
}

export interface ClusterPorts { client: number[]; cluster: number[] }

export async function clusterPorts(members: number): Promise<ClusterPorts> {
  const client: number[] = [];
  const cluster: number[] = [];
  for (let i = 0; i < members; i++) {
    client.push(await freePort());
    cluster.push(await freePort());
  }
  return { client, cluster };
}

/** The NATS options of member `i` of a cluster: its own ports, routes to the others, every member's client URL. */
export function memberOptions(ports: ClusterPorts, i: number, replicas = ports.client.length): Record<string, unknown> {
  return {
    nats_port: ports.client[i], nats_cluster_port: ports.cluster[i],
    nats_routes: ports.cluster.filter((_, j) => j !== i).map((p) => `nats://127.0.0.1:${p}`),
    nats_url: ports.client.map((p) => `nats://127.0.0.1:${p}`).join(','),
    nats_replicas: replicas,
  };
}

/**
 * Member `i` of a cluster as a bare nats-server of the test's own (configured as the supervisor configures a
 * member, under no supervisor: a kill -9 of it stays dead). `kill()` is that kill -9; `stop()` cleans up.
 */
export async function startNatsMember(ports: ClusterPorts, i: number): Promise<{ proc: ChildProcess; url: string; name: string; kill(): void; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'hub-nats-member-'));
  const conf = join(dir, 'nats.conf');
  const name = `test-member-${i}-${ports.client[i]}`;
  writeFileSync(conf, natsServerConfig({
    port: ports.client[i], name, storeDir: join(dir, 'js'), pidFile: join(dir, 'nats.pid'), secret: NATS_TOKEN,
    cluster: { host: '127.0.0.1', port: ports.cluster[i], routes: ports.cluster.filter((_, j) => j !== i).map((p) => `nats://127.0.0.1:${p}`) },
  }), { mode: 0o600 });
  const proc = spawn('nats-server', ['-c', conf], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const url = `nats://127.0.0.1:${ports.client[i]}`;
  const kill = () => void proc.kill('SIGKILL');
  const stop = async () => {
    kill();
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(`NATS member ${i} to accept connections`, async () => {
      if (proc.exitCode !== null) throw new Error(`nats-server exited with ${proc.exitCode}`);
      const nc = await connect({ servers: url, ...NATS_ADMIN, reconnect: false });
      await nc.close();
      return true;
    }, 15_000, 100);
  } catch (e) {
    await stop();
    throw e;
  }
  return { proc, url, name, kill, stop };
}

export async function natsClient(servers: string | string[]): Promise<NatsConnection> {
  return connect({ servers, ...NATS_ADMIN, maxReconnectAttempts: 20, reconnectTimeWait: 250 });
}

/** The default servers' records of these users, straight from the KV bucket (absent ones are left out). */
export async function serverRecords(nc: NatsConnection, users: string[]): Promise<Map<string, any>> {
  const kv = await nc.jetstream().views.kv(SERVERS_BUCKET);
  const out = new Map<string, any>();
  for (const user of users) {
    const e = await kv.get(serverKey(user, ''));
    if (e && e.operation === 'PUT') out.set(user, JSON.parse(new TextDecoder().decode(e.value)));
  }
  return out;
}

const LOAD = fileURLToPath(new URL('../fixtures/load.mjs', import.meta.url));

export interface LoadResult { total: number; failures: { at: number; why: string }[] }

/** Closed-loop GETs of `url` from a process of its own (the test process is too busy to be a fair client). */
export function load(url: string, token: string, workers: number, seconds: number): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [LOAD, url, token, String(workers), String(seconds)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), (seconds + 20) * 1000);
    p.on('exit', (code) => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(out));
      } catch {
        reject(new Error(`the load process exited with ${code}: ${out}`));
      }
    });
  });
}

/**
 * nginx in front of gateways, configured by the README's example ("Several nodes"): its upstream servers become
 * `gatewayPorts` on 127.0.0.1 and its TLS listener a plain one on a free loopback port; the rest as written. So
 * the example is what the test runs. Config, logs and temp files in a temp dir; in the foreground.
 */
export async function startReadmeNginx(gatewayPorts: number[]): Promise<{ url: string; stop(): Promise<void> }> {
  const example = /```nginx\n([\s\S]*?)```/.exec(readFileSync(join(REPO, 'README.md'), 'utf8'))?.[1];
  if (!example) throw new Error('README.md has no nginx example');
  const port = await freePort();
  let upstreams = 0;
  const server = example.replace(/server 10\.0\.0\.\d+:8000/g, () => `server 127.0.0.1:${gatewayPorts[upstreams++]}`)
    .replace('listen 443 ssl;', `listen 127.0.0.1:${port};`).replace(/^\s*ssl_certificate(_key)?\s.*$/gm, '');
  if (upstreams !== gatewayPorts.length) throw new Error(`README's nginx example names ${upstreams} gateways, the test has ${gatewayPorts.length}`);
  const dir = mkdtempSync(join(tmpdir(), 'hub-nginx-'));
  for (const d of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(dir, d));
  writeFileSync(join(dir, 'nginx.conf'), `daemon off;\npid ${dir}/nginx.pid;\nerror_log ${dir}/error.log warn;\nevents { worker_connections 1024; }\nhttp {\n`
    + `access_log off;\n${['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((d) => `${d === 'body' ? 'client_body' : d}_temp_path ${dir}/${d};`).join('\n')}\n${server}}\n`);
  const proc = spawn('/usr/sbin/nginx', ['-p', dir, '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr!.on('data', (d) => { err += d; });
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    await stopChild(proc);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitFor('nginx to answer', async () => {
      if (proc.exitCode !== null) throw new Error(`nginx exited: ${err.slice(0, 500)}`);
      return (await fetch(`${url}/hub/health`)).status === 200 ? true : undefined;
    }, 15_000, 100);
  } catch (e) {
    await stop();
    throw e;
  }
  return { url, stop };
}

/** kill -9 of a whole node: its supervisor first (so nothing restarts), then every child it had. */
export async function killNode(node: HubUnderTest): Promise<number[]> {
  const pids = Object.values(node.children()).filter((p): p is number => p !== null);
  node.proc.kill('SIGKILL');
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  await waitFor('the node\'s processes to be gone', async () => (pids.some(isAlive) ? undefined : true), 5000);
  return pids;
}

export { startHub };
