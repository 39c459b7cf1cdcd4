// A real Podman service for container tests: its own socket, configuration and storage in a temp dir (so
// test files and engineers never share containers), Docker Engine API on a unix socket, an image made
// here (no registry is reachable): an empty filesystem into which the host's /usr, /lib, /lib64, /bin,
// /etc and this repository are bound read-only, so the host's node and the project's programs run inside.
// Configuration as /work/shared/NOTES.md found it works here: runc (crun fails on hybrid cgroups),
// cgroupfs, no default ulimits. If the service cannot start, `startPodman` throws the reason.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { REPO, sleep, waitFor } from '../harness.js';

const run = promisify(execFile);
export const PODMAN = '/usr/bin/podman';
export const RUNC = '/usr/sbin/runc';
/** the image every test container runs; nothing in it, everything bound from the host */
export const IMAGE = 'localhost/hub-test-host:1';

export interface PodmanService {
  /** for DockerSpawner.host */
  host: string;
  socket: string;
  dir: string;
  /** read-only binds that make the host's node and this repository usable inside IMAGE */
  hostBinds: string[];
  /** runs the podman command line against this service's storage */
  podman(args: string[]): Promise<string>;
  /** the engine's own answer to GET <path> (Docker API), as JSON */
  api(path: string, init?: { method?: string }): Promise<any>;
  stop(): Promise<void>;
}

export async function startPodman(): Promise<PodmanService> {
  for (const [p, pkg] of [[PODMAN, 'podman'], [RUNC, 'runc']]) {
    if (!existsSync(p)) throw new Error(`${p} is missing: run \`node scripts/setup.mjs --for-tests\` (installs the Debian package ${pkg})`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'hub-podman-'));
  for (const d of ['root', 'runroot', 'tmp']) mkdirSync(join(dir, d));
  writeFileSync(join(dir, 'containers.conf'), [
    '[containers]', 'default_ulimits = []',
    '[engine]', 'cgroup_manager = "cgroupfs"', 'events_logger = "file"', `events_logfile_path = "${dir}/events.log"`,
    `tmp_dir = "${dir}/tmp"`, `volume_path = "${dir}/root/volumes"`, '',
  ].join('\n'));
  // vfs: the image is empty, so copying it per container costs nothing, and there are no overlay mounts to leak
  writeFileSync(join(dir, 'storage.conf'), ['[storage]', 'driver = "vfs"', `graphroot = "${dir}/root"`, `runroot = "${dir}/runroot"`, ''].join('\n'));
  const env = { ...process.env, CONTAINERS_CONF: join(dir, 'containers.conf'), CONTAINERS_STORAGE_CONF: join(dir, 'storage.conf') };
  delete env.DOCKER_HOST;
  const podman = async (args: string[]) => (await run(PODMAN, ['--runtime', RUNC, ...args], { env, timeout: 60_000 })).stdout;
  const socket = join(dir, 'podman.sock');
  const logFile = join(dir, 'service.log');
  const service: ChildProcess = spawn(PODMAN, ['--runtime', RUNC, 'system', 'service', '--time=0', `unix://${socket}`], {
    env, stdio: ['ignore', 'ignore', 'pipe'], detached: true,
  });
  let log = '';
  service.stderr!.on('data', (c: Buffer) => { log = (log + c.toString()).slice(-20_000); });
  const exited = new Promise<void>((r) => service.on('exit', () => r()));

  const request = async (path: string, init: { method?: string } = {}) => {
    const { request: httpRequest } = await import('node:http');
    return new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest({ socketPath: socket, path, method: init.method ?? 'GET', timeout: 30_000 }, (res) => {
        let body = '';
        res.on('data', (c) => { body += c; });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('timeout', () => req.destroy(new Error(`GET ${path}: no answer in 30 s`)));
      req.on('error', reject);
      req.end();
    });
  };

  const svc: PodmanService = {
    host: `unix://${socket}`, socket, dir,
    hostBinds: [...['/usr', '/lib', '/lib64', '/bin', '/etc'].filter(existsSync).map((p) => `${p}:${p}:ro`), `${REPO}:${REPO}:ro`],
    podman,
    async api(path, init) {
      const r = await request(path, init);
      return r.body ? JSON.parse(r.body) : null;
    },
    async stop() {
      // every container goes first (their network addresses and mounts with them), then the service
      const all = await svc.api('/containers/json?all=true').catch(() => []) as { Id: string }[];
      await Promise.all(all.map((c) => request(`/containers/${c.Id}?force=true&v=true`, { method: 'DELETE' }).catch(() => undefined)));
      if (service.exitCode === null && service.signalCode === null) {
        service.kill('SIGTERM');
        await Promise.race([exited, sleep(10_000)]);
        if (service.exitCode === null && service.signalCode === null) service.kill('SIGKILL');
      }
      // anything still mounted under the dir (a container's shm) would make the removal fail
      const mounts = readFileSync('/proc/mounts', 'utf8').split('\n').map((l) => l.split(' ')[1]).filter((m) => m?.startsWith(dir));
      for (const m of mounts.reverse()) await run('umount', ['-l', m]).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };

  try {
    await waitFor('the Podman service to answer on its socket', async () => {
      if (service.exitCode !== null) throw new Error(`podman system service exited with ${service.exitCode}`);
      if (!existsSync(socket)) return undefined;
      return (await request('/_ping')).status === 200 ? true : undefined;
    }, 30_000, 100);
    // the image: an empty filesystem (everything it runs is bound in from the host)
    const tar = join(dir, 'empty.tar');
    await run('tar', ['cf', tar, '-T', '/dev/null']);
    await podman(['import', tar, IMAGE]);
  } catch (e) {
    await svc.stop().catch(() => undefined);
    throw new Error(`the Podman service could not start: ${(e as Error).message}\n--- podman service log ---\n${log.slice(-3000)}`);
  }
  return svc;
}
