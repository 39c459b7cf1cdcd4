// A real single-node Kubernetes cluster on this machine, for the Kubernetes backend's tests and for trying it:
// `npm run cluster -- up | down | check | status`. Everything is built or made here, because no container
// registry is reachable: the control plane and kubelet from the k8s.io/kubernetes Go module (cluster/go/kubernetes),
// etcd 3.6 from go.etcd.io/etcd/server/v3 (cluster/go/etcd), the pause image from cluster/go/pause, the single-user
// image from a debootstrapped Debian rootfs with the established hub's jupyterhub-singleuser 6.1.1 + JupyterLab.
// Binaries and image archives are cached outside the repository, keyed by version. The node is Debian's containerd
// (CRI, its own root/state/socket under the cluster dir, cgroupfs), runc and the bridge + host-local CNI plugins.
// `up` fails with the step and the reason when something cannot work here; it never stands in a fake cluster.
import { spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync, closeSync, rmdirSync } from 'node:fs';
import { request } from 'node:https';
import { homedir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../shared/ports.js';

const REPO = fileURLToPath(new URL('..', import.meta.url));
const GO_DIR = join(REPO, 'cluster', 'go');

/** Where one cluster lives on this machine: certificates, configs, logs, containerd's root and state. */
export const CLUSTER_DIR = process.env.HUB_CLUSTER_DIR ?? '/tmp/hub-cluster';
export const CACHE_DIR = process.env.HUB_CLUSTER_CACHE ?? join(homedir(), '.cache', 'hub-cluster');
/** Pods' and services' subnets: no other test on this machine uses them (Podman has 10.88.0.0/16). */
export const POD_SUBNET = '10.217.0.0/24';
export const SERVICE_SUBNET = '10.218.0.0/24';
const SERVICE_IP = '10.218.0.1';
const BRIDGE = 'hubk8s0';
export const NODE_NAME = 'hub-cluster-node';
export const PAUSE_IMAGE = 'localhost/hub-cluster/pause:3.10';
const SINGLEUSER_PINS = ['jupyterhub==6.1.1', 'jupyterlab==4.6.6', 'jupyter-server==2.21.1'];
export const SINGLEUSER_IMAGE = 'localhost/hub-cluster/singleuser:6.1.1-lab4.6.6';
const BINARIES = ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubelet', 'kubectl'] as const;

const log = (line: string) => process.stderr.write(`cluster: ${line}\n`);

class StepError extends Error {}
const fail = (step: string, reason: string): never => {
  throw new StepError(`${step}: ${reason}`);
};

function run(step: string, command: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; input?: string } = {}): string {
  const r: SpawnSyncReturns<string> = spawnSync(command, args, { cwd: options.cwd, env: options.env ?? process.env, encoding: 'utf8', timeout: options.timeoutMs ?? 120_000, input: options.input, maxBuffer: 64 << 20 });
  if (r.error) fail(step, `${command} ${args.join(' ')}: ${r.error.message}`);
  if (r.status !== 0) fail(step, `${command} ${args.join(' ')} exited ${r.status ?? r.signal}: ${(r.stderr || r.stdout).trim().split('\n').slice(-8).join('\n')}`);
  return r.stdout;
}

/** A module's required version, read from its wrapper go.mod: one source of truth for the version and cache key. */
function requiredVersion(goMod: string, module: string): string {
  const m = readFileSync(goMod, 'utf8').match(new RegExp(`^\\s*(?:require\\s+)?${module.replace(/\./g, '\\.')} (v\\S+)`, 'm'));
  return m ? m[1] : fail('versions', `${module} is not required in ${goMod}`);
}
export const KUBERNETES_VERSION = requiredVersion(join(GO_DIR, 'kubernetes', 'go.mod'), 'k8s.io/kubernetes');
export const ETCD_VERSION = requiredVersion(join(GO_DIR, 'etcd', 'go.mod'), 'go.etcd.io/etcd/server/v3');

interface BuildRecord { seconds: number; at: string }

/** go build, niced (other people's tests share the machine), into dir/bin; the record is written last, so a cut build is rebuilt. */
function goBuild(what: string, dir: string, moduleDir: string, packages: string[], ldflags: string): BuildRecord {
  const record = join(dir, 'build.json');
  if (existsSync(record)) return JSON.parse(readFileSync(record, 'utf8'));
  log(`building ${what} with go build, niced (once per version; Kubernetes takes tens of minutes cold on 2 cores) ...`);
  mkdirSync(join(dir, 'bin'), { recursive: true });
  const started = Date.now();
  const env = { ...process.env, CGO_ENABLED: '0', GOFLAGS: '-mod=readonly -buildvcs=false', GOMAXPROCS: process.env.GOMAXPROCS ?? '2' };
  run(`build ${what}`, 'nice', ['-n', '19', 'go', 'build', '-p', '2', '-trimpath', '-ldflags', ldflags, '-o', join(dir, 'bin') + '/', ...packages], { cwd: moduleDir, env, timeoutMs: 3 * 3600_000 });
  const built: BuildRecord = { seconds: Math.round((Date.now() - started) / 1000), at: new Date().toISOString() };
  writeFileSync(record, JSON.stringify(built) + '\n');
  return built;
}

export function ensureBinaries(): { kubernetes: string; etcd: string; report: string[] } {
  const v = KUBERNETES_VERSION;
  const [major, minor] = v.slice(1).split('.');
  const p = 'k8s.io/component-base/version';
  const kubeDir = join(CACHE_DIR, v);
  const kube = goBuild(`Kubernetes ${v}`, kubeDir, join(GO_DIR, 'kubernetes'), BINARIES.map((b) => `k8s.io/kubernetes/cmd/${b}`),
    `-s -w -X ${p}.gitVersion=${v} -X ${p}.gitMajor=${major} -X ${p}.gitMinor=${minor} -X ${p}.gitTreeState=clean -X ${p}.buildDate=2026-11-25T00:00:00Z -X k8s.io/client-go/pkg/version.gitVersion=${v}`);
  const etcdDir = join(CACHE_DIR, `etcd-${ETCD_VERSION}`);
  const etcd = goBuild(`etcd ${ETCD_VERSION}`, etcdDir, join(GO_DIR, 'etcd'), ['.'], '-s -w');
  for (const b of BINARIES) if (!existsSync(join(kubeDir, 'bin', b))) fail('binaries', `${join(kubeDir, 'bin', b)} is missing although ${kubeDir}/build.json says it was built: remove that directory to rebuild`);
  return {
    kubernetes: join(kubeDir, 'bin'), etcd: join(etcdDir, 'bin', 'etcd'),
    report: [`Kubernetes ${v} binaries: built in ${kube.seconds} s on ${kube.at} (cached in ${kubeDir})`, `etcd ${ETCD_VERSION}: built in ${etcd.seconds} s on ${etcd.at} (cached in ${etcdDir})`],
  };
}

// ---------- images (made locally: rootfs → podman import → podman save → ctr import) ----------

/** An image archive made once from a root filesystem; podman's own store is left as it was. */
function archiveFromRootfs(name: string, rootfs: string, archive: string, changes: string[]): void {
  const tarball = `${archive}.rootfs.tar`;
  run(`image ${name}`, 'tar', ['-C', rootfs, '--numeric-owner', '--exclude=./.debootstrapped', '-cf', tarball, '.'], { timeoutMs: 600_000 });
  try {
    run(`image ${name}`, 'podman', ['import', ...changes.flatMap((c) => ['--change', c]), tarball, name], { timeoutMs: 600_000 });
    run(`image ${name}`, 'podman', ['save', '--format', 'docker-archive', '-o', `${archive}.partial`, name], { timeoutMs: 600_000 });
    run(`image ${name}`, 'mv', [`${archive}.partial`, archive]);
  } finally {
    spawnSync('podman', ['rmi', '-f', name], { timeout: 60_000 });
    rmSync(tarball, { force: true });
  }
}

export function ensurePauseArchive(): string {
  const dir = join(CACHE_DIR, 'images');
  const archive = join(dir, 'pause-3.10.tar');
  if (existsSync(archive)) return archive;
  const rootfs = join(dir, 'pause-rootfs');
  rmSync(rootfs, { recursive: true, force: true });
  mkdirSync(rootfs, { recursive: true });
  run('image pause', 'go', ['build', '-trimpath', '-ldflags', '-s -w', '-o', join(rootfs, 'pause'), '.'], { cwd: join(GO_DIR, 'pause'), env: { ...process.env, CGO_ENABLED: '0' } });
  archiveFromRootfs(PAUSE_IMAGE, rootfs, archive, ['ENTRYPOINT ["/pause"]', 'USER 65535:65535']);
  rmSync(rootfs, { recursive: true, force: true });
  return archive;
}

/**
 * The single-user image: a Debian bookworm rootfs (debootstrap, from the Debian mirror) with a venv holding the
 * established hub's jupyterhub-singleuser and JupyterLab at the pins of .cache/jupyter-6.1, user jovyan (1000)
 * as the established hub's images have.
 */
export function ensureSingleuserArchive(): string {
  const dir = join(CACHE_DIR, 'images');
  const archive = join(dir, 'singleuser-6.1.1-lab4.6.6.tar');
  if (existsSync(archive)) return archive;
  const rootfs = join(dir, 'singleuser-rootfs');
  const step = 'image singleuser';
  if (!existsSync(join(rootfs, '.debootstrapped'))) {
    if (spawnSync('debootstrap', ['--version']).error) fail(step, 'debootstrap is not installed (Debian package debootstrap): it makes the image\'s Debian root filesystem');
    rmSync(rootfs, { recursive: true, force: true });
    log('making the single-user image\'s Debian rootfs (debootstrap) ...');
    run(step, 'nice', ['-n', '19', 'debootstrap', '--variant=minbase', '--include=python3,python3-venv,ca-certificates,tini', 'bookworm', rootfs, 'http://deb.debian.org/debian'], { timeoutMs: 1800_000 });
    writeFileSync(join(rootfs, '.debootstrapped'), '');
  }
  if (!existsSync(join(rootfs, 'opt', 'jupyter', '.complete'))) {
    log(`installing ${SINGLEUSER_PINS.join(' ')} into the image's venv (pip) ...`);
    // pip inside the rootfs reaches PyPI as this machine does: its resolver and CA bundle (e.g. a proxy's CA), for this step only
    const hostCa = process.env.PIP_CERT ?? process.env.SSL_CERT_FILE ?? '/etc/ssl/certs/ca-certificates.crt';
    writeFileSync(join(rootfs, 'etc', 'resolv.conf'), readFileSync('/etc/resolv.conf'));
    writeFileSync(join(rootfs, 'build-ca.crt'), readFileSync(hostCa));
    const env = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/root', PIP_CERT: '/build-ca.crt', PIP_DEFAULT_TIMEOUT: '60', PIP_NO_CACHE_DIR: '1' };
    try {
      rmSync(join(rootfs, 'opt', 'jupyter'), { recursive: true, force: true });
      run(step, 'chroot', [rootfs, '/usr/bin/python3', '-m', 'venv', '/opt/jupyter'], { env });
      run(step, 'nice', ['-n', '19', 'chroot', rootfs, '/opt/jupyter/bin/pip', 'install', '--disable-pip-version-check', '--no-input', '-q', ...SINGLEUSER_PINS], { env, timeoutMs: 1800_000 });
    } finally {
      rmSync(join(rootfs, 'build-ca.crt'), { force: true });
      writeFileSync(join(rootfs, 'etc', 'resolv.conf'), '');
    }
    writeFileSync(join(rootfs, 'opt', 'jupyter', '.complete'), '');
  }
  if (spawnSync('chroot', [rootfs, 'id', 'jovyan']).status !== 0) run(step, 'chroot', [rootfs, 'useradd', '--uid', '1000', '--gid', '100', '--create-home', '--shell', '/bin/bash', 'jovyan']);
  rmSync(join(rootfs, 'var', 'cache', 'apt', 'archives'), { recursive: true, force: true });
  archiveFromRootfs(SINGLEUSER_IMAGE, rootfs, archive, [
    'ENV PATH=/opt/jupyter/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'ENV HOME=/home/jovyan',
    'USER 1000:100', 'WORKDIR /home/jovyan', 'EXPOSE 8888', 'ENTRYPOINT ["tini", "-g", "--"]', 'CMD ["jupyterhub-singleuser"]',
  ]);
  rmSync(rootfs, { recursive: true, force: true });
  return archive;
}

// ---------- certificates (openssl) ----------

interface Paths { dir: string; pki: string; state: string; containerdSock: string; kubeletRoot: string; logs: string }
function paths(dir = CLUSTER_DIR): Paths {
  return { dir, pki: join(dir, 'pki'), state: join(dir, 'state.json'), containerdSock: join(dir, 'containerd', 'containerd.sock'), kubeletRoot: join(dir, 'kubelet'), logs: join(dir, 'logs') };
}

function makeCertificates(pki: string, nodeIp: string): void {
  mkdirSync(pki, { recursive: true, mode: 0o700 });
  const ossl = (...args: string[]) => run('certificates', 'openssl', args, { timeoutMs: 30_000 });
  ossl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', join(pki, 'ca.key'));
  ossl('req', '-x509', '-new', '-key', join(pki, 'ca.key'), '-subj', '/CN=hub-cluster-ca', '-days', '3650', '-out', join(pki, 'ca.crt'),
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign,digitalSignature');
  const leaf = (name: string, subject: string, usage: 'server' | 'client' | 'both', sans: string[] = []) => {
    const key = join(pki, `${name}.key`);
    ossl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', key);
    ossl('req', '-new', '-key', key, '-subj', subject, '-out', join(pki, `${name}.csr`));
    const ext = [`basicConstraints=critical,CA:FALSE`, 'keyUsage=critical,digitalSignature,keyEncipherment',
      `extendedKeyUsage=${usage === 'server' ? 'serverAuth' : usage === 'client' ? 'clientAuth' : 'serverAuth,clientAuth'}`,
      ...(sans.length ? [`subjectAltName=${sans.join(',')}`] : [])];
    writeFileSync(join(pki, `${name}.ext`), ext.join('\n') + '\n');
    ossl('x509', '-req', '-in', join(pki, `${name}.csr`), '-CA', join(pki, 'ca.crt'), '-CAkey', join(pki, 'ca.key'), '-CAcreateserial', '-days', '365', '-extfile', join(pki, `${name}.ext`), '-out', join(pki, `${name}.crt`));
    rmSync(join(pki, `${name}.csr`));
    rmSync(join(pki, `${name}.ext`));
  };
  leaf('apiserver', '/CN=kube-apiserver', 'server', ['IP:127.0.0.1', `IP:${nodeIp}`, `IP:${SERVICE_IP}`, 'DNS:localhost', 'DNS:kubernetes', 'DNS:kubernetes.default', 'DNS:kubernetes.default.svc', 'DNS:kubernetes.default.svc.cluster.local']);
  leaf('apiserver-kubelet-client', '/O=system:masters/CN=kube-apiserver-kubelet-client', 'client');
  leaf('admin', '/O=system:masters/CN=hub-cluster-admin', 'client');
  leaf('controller-manager', '/CN=system:kube-controller-manager', 'client');
  leaf('scheduler', '/CN=system:kube-scheduler', 'client');
  leaf('kubelet', `/O=system:nodes/CN=system:node:${NODE_NAME}`, 'both', ['IP:127.0.0.1', `IP:${nodeIp}`, `DNS:${NODE_NAME}`]);
  ossl('genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', join(pki, 'sa.key'));
  ossl('pkey', '-in', join(pki, 'sa.key'), '-pubout', '-out', join(pki, 'sa.pub'));
}

function kubeconfig(file: string, server: string, pki: string, user: string): void {
  const b64 = (f: string) => readFileSync(join(pki, f)).toString('base64');
  writeFileSync(file, [
    'apiVersion: v1', 'kind: Config',
    'clusters:', '- name: hub-cluster', '  cluster:', `    server: ${server}`, `    certificate-authority-data: ${b64('ca.crt')}`,
    'users:', `- name: ${user}`, '  user:', `    client-certificate-data: ${b64(`${user}.crt`)}`, `    client-key-data: ${b64(`${user}.key`)}`,
    'contexts:', '- name: hub-cluster', '  context:', '    cluster: hub-cluster', `    user: ${user}`, 'current-context: hub-cluster', '',
  ].join('\n'), { mode: 0o600 });
}

// ---------- talking to the API (admin client certificate) ----------

export interface ApiAnswer { status: number; body: any }
export function api(method: string, path: string, body?: unknown, dir = CLUSTER_DIR, timeoutMs = 10_000): Promise<ApiAnswer> {
  const state = readState(paths(dir));
  const pki = paths(dir).pki;
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = request({ host: '127.0.0.1', port: state.apiserverPort, method, path, timeout: timeoutMs,
      ca: readFileSync(join(pki, 'ca.crt')), cert: readFileSync(join(pki, 'admin.crt')), key: readFileSync(join(pki, 'admin.key')),
      headers: { accept: 'application/json', ...(data ? { 'content-type': 'application/json' } : {}) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let parsed: unknown = text;
        try { parsed = JSON.parse(text); } catch { /* plain text (healthz) */ }
        resolve({ status: res.statusCode ?? 0, body: parsed });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(data);
  });
}

/** Polls `probe` until it returns a value, at most `timeoutMs`; the last reason is in the failure. */
async function waitUntil<T>(what: string, timeoutMs: number, probe: () => Promise<T | string>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last = 'not tried';
  for (let attempt = 0; Date.now() < deadline && attempt < 10_000; attempt++) {
    try {
      const r = await probe();
      if (typeof r !== 'string') return r;
      last = r;
    } catch (e) {
      last = (e as Error).message;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return fail(what, `not within ${timeoutMs / 1000} s; last: ${last}`);
}

// ---------- state, processes, clean-up ----------

interface State { apiserverPort: number; etcdPort: number; nodeIp: string; pids: Record<string, number>; startedAt: string; sysctls: Record<string, string>; madeRunContainerd: boolean }

/** Host-wide settings the kubelet sets at start (its kernel tunables): recorded by up, put back by down. */
const KUBELET_SYSCTLS = ['vm/overcommit_memory', 'vm/panic_on_oom', 'kernel/panic', 'kernel/panic_on_oops', 'kernel/keys/root_maxkeys', 'kernel/keys/root_maxbytes'];
const readSysctls = () => Object.fromEntries(KUBELET_SYSCTLS.flatMap((k) => { try { return [[k, readFileSync(`/proc/sys/${k}`, 'utf8').trim()]]; } catch { return []; } }));
function readState(p: Paths): State {
  if (!existsSync(p.state)) fail('state', `no cluster at ${p.dir} (run npm run cluster -- up)`);
  return JSON.parse(readFileSync(p.state, 'utf8'));
}
function writeState(p: Paths, state: State): void {
  writeFileSync(p.state, JSON.stringify(state, null, 1) + '\n');
}

function startProcess(p: Paths, state: State, name: string, command: string, args: string[]): void {
  const out = openSync(join(p.logs, `${name}.log`), 'a');
  const child = spawn(command, args, { detached: true, stdio: ['ignore', out, out], env: { ...process.env, PATH: `${dirname(command)}:/usr/sbin:/usr/bin:/sbin:/bin` } });
  closeSync(out);
  child.unref();
  if (!child.pid) fail(name, `could not start ${command}`);
  state.pids[name] = child.pid!;
  writeState(p, state);
}

const alive = (pid: number) => { try { process.kill(pid, 0); return true; } catch { return false; } };

function processExited(p: Paths, state: State, name: string): string | undefined {
  const pid = state.pids[name];
  if (pid && alive(pid)) return undefined;
  const tail = existsSync(join(p.logs, `${name}.log`)) ? readFileSync(join(p.logs, `${name}.log`), 'utf8').trim().split('\n').slice(-6).join('\n') : '';
  return `${name} exited; the end of ${join(p.logs, `${name}.log`)}:\n${tail}`;
}

async function stopPid(pid: number, graceMs: number): Promise<void> {
  if (!alive(pid)) return;
  try { process.kill(pid, 'SIGTERM'); } catch { return; }
  const deadline = Date.now() + graceMs;
  while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (alive(pid)) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
  for (let i = 0; i < 50 && alive(pid); i++) await new Promise((r) => setTimeout(r, 100));
}

const CGROUP_ROOT = '/sys/fs/cgroup';
/** The kubelet's pod cgroups in every hierarchy (cgroupfs driver, cgroupRoot /), deepest first. */
function podCgroups(): string[] {
  const found: string[] = [];
  const walk = (d: string, depth: number) => {
    if (depth > 8) return;
    let entries: string[] = [];
    try { entries = readdirSync(d, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name); } catch { return; }
    for (const e of entries) walk(join(d, e), depth + 1);
    found.push(d);
  };
  for (const h of existsSync(CGROUP_ROOT) ? readdirSync(CGROUP_ROOT) : []) if (existsSync(join(CGROUP_ROOT, h, 'kubepods'))) walk(join(CGROUP_ROOT, h, 'kubepods'), 0);
  return found;
}
function pidsIn(cgroups: string[]): number[] {
  const pids = new Set<number>();
  for (const c of cgroups) try { for (const l of readFileSync(join(c, 'cgroup.procs'), 'utf8').split('\n')) if (l) pids.add(Number(l)); } catch { /* gone */ }
  return [...pids];
}

/** /proc/<pid>/cmdline of every process naming our directory (containerd's shims carry its socket path). */
function processesNaming(dir: string): number[] {
  const found: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    try { if (readFileSync(`/proc/${e}/cmdline`, 'utf8').includes(dir)) found.push(Number(e)); } catch { /* gone */ }
  }
  return found;
}

function mountsUnder(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')[4]).filter((m) => m && (m === dir || m.startsWith(dir + '/'))).reverse();
}

/** containerd 1.6 keeps its shims' sockets here whatever its state dir (and ctr its fifos). */
const RUN_CONTAINERD = '/run/containerd';
/** A directory tree holding no file. */
const onlyEmptyDirs = (d: string): boolean => readdirSync(d, { withFileTypes: true }).every((e) => e.isDirectory() && onlyEmptyDirs(join(d, e.name)));

/** Removes everything `up` made: processes, pods' processes, mounts (pods' volumes and network namespaces), the bridge, the directory. */
export async function down(dir = CLUSTER_DIR): Promise<string[]> {
  const p = paths(dir);
  const done: string[] = [];
  const state: State | undefined = existsSync(p.state) ? JSON.parse(readFileSync(p.state, 'utf8')) : undefined;
  // the sandboxes' ids, for libcni's cache entries of pods killed without a CNI DEL
  const tasks = join(dir, 'containerd', 'state', 'io.containerd.runtime.v2.task', 'k8s.io');
  const containerIds = existsSync(tasks) ? readdirSync(tasks) : [];
  const t0 = Date.now();
  if (state?.pids.kubelet) { await stopPid(state.pids.kubelet, 10_000); done.push(`kubelet stopped (${Date.now() - t0} ms)`); }
  for (let round = 0; round < 20; round++) {
    const pids = pidsIn(podCgroups());
    if (!pids.length) break;
    for (const pid of pids) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
    await new Promise((r) => setTimeout(r, 250));
  }
  // the rest at once: with the kubelet and the pods gone, nothing depends on their order
  await Promise.all(['kube-scheduler', 'kube-controller-manager', 'kube-apiserver', 'etcd', 'containerd'].map(async (name) => {
    const pid = state?.pids[name];
    if (pid) { await stopPid(pid, 10_000); done.push(`${name} stopped`); }
  }));
  await Promise.all(processesNaming(dir).map((pid) => stopPid(pid, 5_000)));
  for (const [k, v] of Object.entries(state?.sysctls ?? {})) try { writeFileSync(`/proc/sys/${k}`, v); } catch (e) { done.push(`could not put back ${k}=${v}: ${(e as Error).message}`); }
  for (const c of podCgroups()) try { rmdirSync(c); } catch { /* busy or gone: reported below */ }
  const leftCgroups = podCgroups();
  for (const m of mountsUnder(dir)) spawnSync('umount', ['-l', m], { timeout: 10_000 });
  if (spawnSync('ip', ['link', 'show', BRIDGE], { timeout: 5_000 }).status === 0) {
    spawnSync('ip', ['link', 'delete', BRIDGE], { timeout: 10_000 });
    done.push(`bridge ${BRIDGE} removed`);
  }
  // libcni's cache of attachments (its default dir; files named <network>-<container id>-<interface>)
  const cniCache = '/var/lib/cni/results';
  if (existsSync(cniCache)) for (const f of readdirSync(cniCache)) if (containerIds.some((id) => f.includes(`-${id}-`))) rmSync(join(cniCache, f), { force: true });
  if (state?.madeRunContainerd && existsSync(RUN_CONTAINERD) && onlyEmptyDirs(RUN_CONTAINERD)) rmSync(RUN_CONTAINERD, { recursive: true });
  const leftMounts = mountsUnder(dir);
  if (leftMounts.length) fail('down', `still mounted: ${leftMounts.join(', ')}`);
  if (existsSync(dir)) { rmSync(dir, { recursive: true, force: true }); done.push(`${dir} removed`); }
  if (leftCgroups.length) fail('down', `pod cgroups still present: ${leftCgroups.slice(0, 5).join(', ')}`);
  return done;
}

// ---------- up ----------

function nodeAddress(): string {
  const route = run('node address', 'ip', ['-4', 'route', 'get', '1.1.1.1']);
  const m = route.match(/ src (\d+\.\d+\.\d+\.\d+)/);
  return m ? m[1] : fail('node address', `no source address in: ${route.trim()}`);
}

export async function up(dir = CLUSTER_DIR): Promise<{ kubeconfig: string; image: string; report: string[] }> {
  const p = paths(dir);
  if (existsSync(p.state)) fail('up', `a cluster is already at ${dir}: npm run cluster -- down first`);
  for (const [cmd, pkg] of [['containerd', 'containerd'], ['runc', 'runc'], ['podman', 'podman'], ['openssl', 'openssl'], ['go', 'Go 1.24 or later']] as const)
    if (spawnSync(cmd, ['--version'], { timeout: 10_000 }).error) fail('prerequisites', `${cmd} is not installed (Debian package ${pkg})`);
  for (const plugin of ['bridge', 'host-local', 'loopback']) if (!existsSync(join('/usr/lib/cni', plugin))) fail('prerequisites', `/usr/lib/cni/${plugin} is missing (Debian package containernetworking-plugins)`);
  if (process.getuid?.() !== 0) fail('prerequisites', 'the kubelet and containerd need root');

  const binaries = ensureBinaries();
  const report = [...binaries.report];
  const pauseArchive = ensurePauseArchive();
  const singleuserArchive = ensureSingleuserArchive();

  mkdirSync(p.logs, { recursive: true });
  const nodeIp = nodeAddress();
  const state: State = { apiserverPort: await freePort(), etcdPort: await freePort(), nodeIp, pids: {}, startedAt: new Date().toISOString(), sysctls: readSysctls(), madeRunContainerd: !existsSync(RUN_CONTAINERD) };
  writeState(p, state);
  try {
    makeCertificates(p.pki, nodeIp);
    const server = `https://127.0.0.1:${state.apiserverPort}`;
    const kubeconfigs = Object.fromEntries(['admin', 'controller-manager', 'scheduler', 'kubelet'].map((u) => {
      const f = join(dir, `${u}.kubeconfig`);
      kubeconfig(f, server, p.pki, u);
      return [u, f];
    }));

    // containerd: its own root, state and socket; CRI with cgroupfs, the local pause image, the bridge CNI network
    const cdir = join(dir, 'containerd');
    mkdirSync(join(dir, 'cni', 'net.d'), { recursive: true });
    writeFileSync(join(dir, 'cni', 'net.d', '10-hub-cluster.conflist'), JSON.stringify({
      cniVersion: '1.0.0', name: 'hub-cluster',
      plugins: [{ type: 'bridge', bridge: BRIDGE, isGateway: true, ipMasq: false, hairpinMode: true,
        ipam: { type: 'host-local', ranges: [[{ subnet: POD_SUBNET }]], dataDir: join(dir, 'cni', 'ipam') } }],
    }, null, 1));
    const cri = 'plugins."io.containerd.grpc.v1.cri"';
    writeFileSync(join(cdir + '.toml'), [
      'version = 2', `root = "${cdir}/root"`, `state = "${cdir}/state"`, 'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]',
      '[grpc]', `  address = "${p.containerdSock}"`, '[ttrpc]', `  address = "${p.containerdSock}.ttrpc"`,
      `[${cri}]`, `  sandbox_image = "${PAUSE_IMAGE}"`, '  stream_server_address = "127.0.0.1"', '  stream_server_port = "0"', '  enable_cdi = false',
      // pods' network namespaces under the state dir, so down finds them with the other mounts (not in /run/netns)
      '  netns_mounts_under_state_dir = true',
      // this machine's root lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj (the kubelet asks -998 for sandboxes),
      // so containerd clamps it to its own score instead of every pod failing with "can't get final child's PID"
      '  restrict_oom_score_adj = true',
      `[${cri}.containerd]`, '  snapshotter = "overlayfs"', '  default_runtime_name = "runc"',
      `[${cri}.containerd.runtimes.runc]`, '  runtime_type = "io.containerd.runc.v2"',
      `[${cri}.containerd.runtimes.runc.options]`, '  SystemdCgroup = false', `  BinaryName = "${process.env.HUB_CLUSTER_RUNC ?? '/usr/sbin/runc'}"`, // HUB_CLUSTER_RUNC: e.g. a wrapper adding --debug
      `  Root = "${cdir}/runc"`,
      `[${cri}.cni]`, '  bin_dir = "/usr/lib/cni"', `  conf_dir = "${dir}/cni/net.d"`, '  max_conf_num = 1', '',
    ].join('\n'));
    mkdirSync(cdir, { recursive: true });
    startProcess(p, state, 'containerd', '/usr/bin/containerd', ['--config', `${cdir}.toml`]);
    const ctr = (...args: string[]) => run('containerd', 'ctr', ['--address', p.containerdSock, '--namespace', 'k8s.io', ...args], { timeoutMs: 600_000 });
    await waitUntil('containerd', 30_000, async () => processExited(p, state, 'containerd') ? fail('containerd', processExited(p, state, 'containerd')!) : existsSync(p.containerdSock) && spawnSync('ctr', ['--address', p.containerdSock, 'version'], { timeout: 5_000 }).status === 0 ? true : 'socket not answering');
    const importStarted = Date.now();
    ctr('images', 'import', pauseArchive);
    ctr('images', 'import', singleuserArchive);
    report.push(`images imported into containerd in ${((Date.now() - importStarted) / 1000).toFixed(1)} s: ${PAUSE_IMAGE}, ${SINGLEUSER_IMAGE}`);

    // etcd, then the API server
    startProcess(p, state, 'etcd', binaries.etcd, ['--name', 'hub-cluster', '--data-dir', join(dir, 'etcd'), '--listen-client-urls', `http://127.0.0.1:${state.etcdPort}`,
      '--advertise-client-urls', `http://127.0.0.1:${state.etcdPort}`, '--listen-peer-urls', 'http://127.0.0.1:0', '--log-level', 'warn', '--quota-backend-bytes', String(2 << 30)]);
    const bin = (b: string) => join(binaries.kubernetes, b);
    const pki = (f: string) => join(p.pki, f);
    startProcess(p, state, 'kube-apiserver', bin('kube-apiserver'), [
      `--etcd-servers=http://127.0.0.1:${state.etcdPort}`, '--bind-address=127.0.0.1', `--advertise-address=${nodeIp}`, `--secure-port=${state.apiserverPort}`,
      `--tls-cert-file=${pki('apiserver.crt')}`, `--tls-private-key-file=${pki('apiserver.key')}`, `--client-ca-file=${pki('ca.crt')}`,
      `--kubelet-client-certificate=${pki('apiserver-kubelet-client.crt')}`, `--kubelet-client-key=${pki('apiserver-kubelet-client.key')}`,
      `--service-account-key-file=${pki('sa.pub')}`, `--service-account-signing-key-file=${pki('sa.key')}`, '--service-account-issuer=https://kubernetes.default.svc',
      `--service-cluster-ip-range=${SERVICE_SUBNET}`, '--authorization-mode=Node,RBAC', '--enable-admission-plugins=NodeRestriction', '--allow-privileged=true',
      '--kubelet-preferred-address-types=InternalIP,Hostname', '--profiling=false', '--v=1',
    ]);
    await waitUntil('kube-apiserver ready', 120_000, async () => {
      for (const n of ['etcd', 'kube-apiserver']) { const gone = processExited(p, state, n); if (gone) fail(n, gone); }
      const r = await api('GET', '/readyz', undefined, dir, 5_000);
      return r.status === 200 ? true : `readyz ${r.status}: ${String(r.body).slice(-300)}`;
    });

    const managerPort = await freePort();
    startProcess(p, state, 'kube-controller-manager', bin('kube-controller-manager'), [
      `--kubeconfig=${kubeconfigs['controller-manager']}`, `--authentication-kubeconfig=${kubeconfigs['controller-manager']}`, `--authorization-kubeconfig=${kubeconfigs['controller-manager']}`,
      '--bind-address=127.0.0.1', `--secure-port=${managerPort}`, '--leader-elect=false', '--use-service-account-credentials=true',
      `--service-account-private-key-file=${pki('sa.key')}`, `--root-ca-file=${pki('ca.crt')}`,
      `--cluster-signing-cert-file=${pki('ca.crt')}`, `--cluster-signing-key-file=${pki('ca.key')}`, `--service-cluster-ip-range=${SERVICE_SUBNET}`, '--v=1',
    ]);
    const schedulerPort = await freePort();
    startProcess(p, state, 'kube-scheduler', bin('kube-scheduler'), [
      `--kubeconfig=${kubeconfigs.scheduler}`, `--authentication-kubeconfig=${kubeconfigs.scheduler}`, `--authorization-kubeconfig=${kubeconfigs.scheduler}`,
      '--bind-address=127.0.0.1', `--secure-port=${schedulerPort}`, '--leader-elect=false', '--v=1',
    ]);

    // the kubelet: cgroupfs (PID 1 is not systemd), no swap check, the local containerd
    const kubeletConfig = join(dir, 'kubelet.yaml');
    const kubeletPort = await freePort();
    const healthzPort = await freePort();
    writeFileSync(kubeletConfig, JSON.stringify({
      apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration',
      address: nodeIp, port: kubeletPort, readOnlyPort: 0, healthzBindAddress: '127.0.0.1', healthzPort,
      authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: pki('ca.crt') } },
      authorization: { mode: 'Webhook' },
      tlsCertFile: pki('kubelet.crt'), tlsPrivateKeyFile: pki('kubelet.key'),
      cgroupDriver: 'cgroupfs', failSwapOn: false, containerRuntimeEndpoint: `unix://${p.containerdSock}`,
      resolvConf: '/etc/resolv.conf', podLogsDir: join(dir, 'pod-logs'), registerNode: true, rotateCertificates: false, serverTLSBootstrap: false,
      // a shared machine: neither evict pods nor collect the locally made images (they cannot be pulled again)
      evictionHard: { 'memory.available': '100Mi', 'nodefs.available': '1%', 'imagefs.available': '1%', 'nodefs.inodesFree': '1%' },
      imageGCHighThresholdPercent: 100, imageGCLowThresholdPercent: 99, maxPods: 110,
      localStorageCapacityIsolation: true, podPidsLimit: -1,
    }, null, 1));
    startProcess(p, state, 'kubelet', bin('kubelet'), [
      `--config=${kubeletConfig}`, `--kubeconfig=${kubeconfigs.kubelet}`, `--root-dir=${p.kubeletRoot}`, `--cert-dir=${join(dir, 'kubelet-pki')}`,
      `--hostname-override=${NODE_NAME}`, `--node-ip=${nodeIp}`, '--v=1',
    ]);
    await waitUntil('node Ready', 120_000, async () => {
      for (const n of Object.keys(state.pids)) { const gone = processExited(p, state, n); if (gone) fail(n, gone); }
      const r = await api('GET', `/api/v1/nodes/${NODE_NAME}`, undefined, dir);
      if (r.status !== 200) return `node: ${r.status} ${r.body?.message ?? ''}`;
      const ready = r.body.status?.conditions?.find((c: { type: string }) => c.type === 'Ready');
      return ready?.status === 'True' ? true : `Ready ${ready?.status}: ${ready?.message}`;
    });
    await waitUntil('default service account', 60_000, async () => {
      const r = await api('GET', '/api/v1/namespaces/default/serviceaccounts/default', undefined, dir);
      return r.status === 200 ? true : `${r.status}`;
    });
    report.push(`control plane and node ${NODE_NAME} Ready (node address ${nodeIp}, pods ${POD_SUBNET}, API ${server}); logs in ${p.logs}`);
    return { kubeconfig: kubeconfigs.admin, image: SINGLEUSER_IMAGE, report };
  } catch (e) {
    log(`up failed; removing what it made (the logs are kept in ${CACHE_DIR}/last-failed-logs)`);
    rmSync(join(CACHE_DIR, 'last-failed-logs'), { recursive: true, force: true });
    spawnSync('cp', ['-r', p.logs, join(CACHE_DIR, 'last-failed-logs')]);
    await down(dir).catch((d) => log(`down after a failed up: ${(d as Error).message}`));
    throw e;
  }
}

// ---------- check: a pod of each image reaches Running on the real kubelet ----------

/** The pod's events, oldest first, as "Reason: message" lines: why a pod is not running, in the kubelet's words. */
async function podEvents(name: string, dir = CLUSTER_DIR): Promise<string> {
  const r = await api('GET', `/api/v1/namespaces/default/events?fieldSelector=${encodeURIComponent(`involvedObject.name=${name}`)}`, undefined, dir);
  return (r.body.items ?? []).map((e: { reason: string; message: string }) => `${e.reason}: ${e.message}`).slice(-5).join('; ');
}

export async function runPod(name: string, container: Record<string, unknown>, timeoutMs = 120_000, dir = CLUSTER_DIR): Promise<any> {
  const created = await api('POST', '/api/v1/namespaces/default/pods', {
    apiVersion: 'v1', kind: 'Pod', metadata: { name },
    spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', imagePullPolicy: 'IfNotPresent', ...container }] },
  }, dir);
  if (created.status !== 201) fail(`pod ${name}`, `create answered ${created.status}: ${created.body?.message}`);
  try {
    return await waitUntil(`pod ${name} Running`, timeoutMs, async () => {
      const r = await api('GET', `/api/v1/namespaces/default/pods/${name}`, undefined, dir);
      const waiting = r.body.status?.containerStatuses?.[0]?.state?.waiting;
      if (waiting && waiting.reason !== 'ContainerCreating') fail(`pod ${name}`, `${waiting.reason}: ${waiting.message}`);
      return r.body.status?.phase === 'Running' ? r.body : `phase ${r.body.status?.phase}`;
    });
  } catch (e) {
    throw new StepError(`${(e as Error).message}; events: ${await podEvents(name, dir).catch((x) => (x as Error).message)}`);
  }
}

/** A pod of each made image reaches Running on the real kubelet, and JupyterLab answers from its pod's IP. */
async function check(dir = CLUSTER_DIR): Promise<void> {
  const suffix = Date.now().toString(36);
  const names = [`check-pause-${suffix}`, `check-singleuser-${suffix}`];
  try {
    const pause = await runPod(names[0], { image: PAUSE_IMAGE }, 120_000, dir);
    console.log(`pod ${pause.metadata.name} (${PAUSE_IMAGE}) Running on ${pause.spec.nodeName}, IP ${pause.status.podIP}`);
    const lab = await runPod(names[1], { image: SINGLEUSER_IMAGE, command: ['jupyter-lab', '--ip=0.0.0.0', '--port=8888', '--ServerApp.token=check'] }, 180_000, dir);
    console.log(`pod ${lab.metadata.name} (${SINGLEUSER_IMAGE}) Running, IP ${lab.status.podIP}`);
    const answer = await waitUntil('JupyterLab answering in its pod', 120_000, async () => {
      const r = await fetch(`http://${lab.status.podIP}:8888/api/status?token=check`, { signal: AbortSignal.timeout(3_000) });
      return r.status === 200 ? { text: await r.text() } : `HTTP ${r.status}`;
    });
    console.log(`GET http://${lab.status.podIP}:8888/api/status → ${answer.text}`);
  } finally {
    for (const name of names) await api('DELETE', `/api/v1/namespaces/default/pods/${name}`, undefined, dir).catch(() => undefined);
  }
}

async function main(): Promise<void> {
  const command = process.argv[2];
  try {
    if (command === 'up') {
      const started = Date.now();
      const { kubeconfig: kc, image, report } = await up();
      for (const line of report) log(line);
      log(`up in ${((Date.now() - started) / 1000).toFixed(1)} s`);
      console.log(`KUBECONFIG=${kc}`);
      console.log(`IMAGE=${image}`);
    } else if (command === 'down') {
      for (const line of await down()) log(line);
      log('down: nothing of the cluster is left');
    } else if (command === 'check') {
      await check();
    } else if (command === 'build') {
      for (const line of ensureBinaries().report) log(line);
      log(`images: ${ensurePauseArchive()}, ${ensureSingleuserArchive()}`);
    } else {
      console.error('usage: npm run cluster -- up | down | check | build');
      process.exitCode = 2;
    }
  } catch (e) {
    console.error(`cluster ${command}: ${e instanceof StepError ? e.message : (e as Error).stack}`);
    process.exitCode = 1;
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();
