#!/usr/bin/env node
// Installs what the hub needs and builds it, doing only the steps that are missing.
// Plain Node with no dependencies: it runs before node_modules exists.
// On failure it prints one line naming the fix and exits 1.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync, statSync, readdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generateContracts } from './contracts.mjs';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const quiet = { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] };

function fail(line) {
  console.error(`hub setup: ${line}`);
  process.exit(1);
}

function installNpmPackages() {
  const lock = readFileSync(join(root, 'package-lock.json'));
  const want = createHash('sha256').update(lock).digest('hex');
  const stamp = join(root, 'node_modules', '.hub-install-stamp');
  if (existsSync(stamp) && readFileSync(stamp, 'utf8') === want) return;
  console.error('hub setup: installing npm packages (npm ci)');
  const r = spawnSync('npm', ['ci', '--no-audit', '--no-fund'], quiet);
  if (r.status !== 0) fail('`npm ci` failed: check network access to the npm registry, then run `npm ci` by hand');
  writeFileSync(stamp, want);
}

function findOnPath(name, extraDirs) {
  const dirs = [...(process.env.PATH ?? '').split(':'), ...extraDirs];
  return dirs.map((d) => join(d, name)).find((p) => existsSync(p));
}

/** A hub that uses an external NATS (HUB_NATS_URL or Hub.nats_url) needs no local server. */
function usesExternalNats() {
  if (process.env.HUB_NATS_URL) return true;
  const i = process.argv.indexOf('--config');
  const file = i > 0 ? process.argv[i + 1] : process.env.HUB_CONFIG;
  if (!file || !file.endsWith('.json') || !existsSync(file)) return false;
  try {
    return Boolean(JSON.parse(readFileSync(file, 'utf8'))?.Hub?.nats_url);
  } catch {
    return false;
  }
}

/** apt-get install, waiting for the dpkg lock (other installs may run) and refreshing the lists once if needed. */
function aptInstall(packages) {
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const args = ['-o', 'DPkg::Lock::Timeout=300', 'install', '-y', '--no-install-recommends', ...packages];
  let r = spawnSync('apt-get', args, { ...quiet, env });
  if (r.status !== 0) {
    spawnSync('apt-get', ['-o', 'DPkg::Lock::Timeout=300', 'update'], { ...quiet, env });
    r = spawnSync('apt-get', args, { ...quiet, env });
  }
  return r.status === 0;
}

const canApt = () => process.getuid?.() === 0 && existsSync('/usr/bin/apt-get');

function installNatsServer() {
  if (findOnPath('nats-server', ['/usr/sbin', '/usr/local/sbin', '/usr/local/bin'])) return;
  if (usesExternalNats() && !process.argv.includes('--for-tests')) return;
  if (!canApt()) fail('nats-server is not installed: run `sudo apt-get install -y nats-server`, or set HUB_NATS_URL');
  console.error('hub setup: installing nats-server (apt-get)');
  if (!aptInstall(['nats-server'])) fail('`apt-get install -y nats-server` failed: install nats-server by hand, or set HUB_NATS_URL');
}

/**
 * Tests run the established hub's own single-user server (notebook 6) behind this hub, as a localprocess
 * user: Debian packages it. Only for tests; `npm start` never needs it.
 */
function installJupyterForTests() {
  if (!process.argv.includes('--for-tests') || existsSync('/usr/bin/jupyterhub-singleuser')) return;
  if (!canApt()) fail('the tests need /usr/bin/jupyterhub-singleuser: run `sudo apt-get install -y jupyterhub python3-notebook python3-ipykernel`');
  console.error('hub setup: installing jupyterhub and python3-notebook for the tests (apt-get)');
  if (!aptInstall(['jupyterhub', 'python3-notebook', 'python3-ipykernel'])) {
    fail('`apt-get install -y jupyterhub python3-notebook python3-ipykernel` failed: install them by hand');
  }
}

/** The browser tests drive Debian's chromium through playwright-core (its own browser download cannot reach the internet here). */
const CHROMIUM = '/usr/bin/chromium';

function installChromium() {
  if (!process.argv.includes('--for-tests') || existsSync(CHROMIUM)) return;
  const isRoot = process.getuid?.() === 0;
  if (!isRoot || !existsSync('/usr/bin/apt-get')) fail('chromium is not installed (the browser tests need it): run `sudo apt-get install -y chromium`');
  console.error('hub setup: installing chromium for the browser tests (apt-get)');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  let r = spawnSync('apt-get', ['install', '-y', 'chromium'], { ...quiet, env });
  if (r.status !== 0) {
    spawnSync('apt-get', ['update'], { ...quiet, env });
    r = spawnSync('apt-get', ['install', '-y', 'chromium'], { ...quiet, env });
  }
  if (r.status !== 0 || !existsSync(CHROMIUM)) fail('`apt-get install -y chromium` failed: install chromium by hand for the browser tests');
}

/**
 * The container backend's tests drive a real Podman service (Docker Engine API) with runc: crun, Podman's
 * default on Debian, fails on this kind of machine (hybrid cgroups). Only for tests; a hub with
 * spawner_class "docker" uses whatever Docker or Podman host DockerSpawner.host names.
 */
function installPodmanForTests() {
  if (!process.argv.includes('--for-tests') || (existsSync('/usr/bin/podman') && existsSync('/usr/sbin/runc'))) return;
  if (!canApt()) fail('the container tests need podman and runc: run `sudo apt-get install -y podman runc`');
  console.error('hub setup: installing podman and runc for the container tests (apt-get)');
  if (!aptInstall(['podman', 'runc', 'containernetworking-plugins', 'conmon', 'iptables'])) fail('`apt-get install -y podman runc` failed: install them by hand');
}

/**
 * The slurm backend's tests start their own slurmctld, slurmd and munged (test/spawner/slurm-cluster.ts):
 * Debian's slurm-wlm and munge. Only for tests; a hub pointed at a real cluster uses that cluster's commands.
 */
function installSlurmForTests() {
  if (!process.argv.includes('--for-tests')) return;
  if (['/usr/sbin/slurmctld', '/usr/sbin/slurmd', '/usr/bin/sbatch', '/usr/sbin/munged', '/usr/sbin/mungekey'].every((f) => existsSync(f))) return;
  if (!canApt()) fail('the slurm tests need slurm-wlm and munge: run `sudo apt-get install -y slurm-wlm munge`');
  console.error('hub setup: installing slurm-wlm and munge for the tests (apt-get)');
  if (!aptInstall(['slurm-wlm', 'munge'])) fail('`apt-get install -y slurm-wlm munge` failed: install them by hand');
}

/**
 * The ldap backend's tests start their own slapd from a temp dir (test/auth/slapd.ts): Debian's slapd (with its
 * schemas and back_mdb) and ldap-utils (slappasswd, ldapsearch for a look by hand). Only for tests; a hub with
 * authenticator_class "ldap" talks to whatever directory LDAPAuthenticator.server_address names. apt's debconf
 * questions take their defaults (noninteractive); a system slapd the package may start on 389 is not used.
 */
function installSlapdForTests() {
  if (!process.argv.includes('--for-tests')) return;
  if (['/usr/sbin/slapd', '/usr/sbin/slapadd', '/usr/lib/ldap/back_mdb.so', '/etc/ldap/schema/nis.schema', '/usr/bin/ldapsearch'].every((f) => existsSync(f))) return;
  if (!canApt()) fail('the ldap tests need slapd and ldap-utils: run `sudo apt-get install -y slapd ldap-utils`');
  console.error('hub setup: installing slapd and ldap-utils for the tests (apt-get)');
  if (!aptInstall(['slapd', 'ldap-utils'])) fail('`apt-get install -y slapd ldap-utils` failed: install them by hand');
}

/** A Debian package the tests run, installed when `binary` is missing (only with --for-tests); `why` names the tests. */
function installDebianForTests(binary, pkg, why) {
  if (!process.argv.includes('--for-tests') || existsSync(binary)) return;
  if (!canApt()) fail(`${pkg} is missing (${why}): run \`sudo apt-get install -y ${pkg}\``);
  console.error(`hub setup: installing ${pkg} for ${why} (apt-get)`);
  if (!aptInstall([pkg])) fail(`\`apt-get install -y ${pkg}\` failed: install it by hand`);
}

// the automatic-certificate tests run Debian's pebble, the ACME test CA, on 127.0.0.1 (test/tls/pebble.ts); a hub with
// Hub.letsencrypt_domains talks to Hub.acme_directory_url (Let's Encrypt by default)
const installPebbleForTests = () => installDebianForTests('/usr/bin/pebble', 'pebble', 'the ACME tests');
// the node-loss test puts nginx in front of three gateways as README "Several nodes" shows, with a config of its own
// in a temp dir (the package's own service is never started here: no systemd)
const installNginxForTests = () => installDebianForTests('/usr/sbin/nginx', 'nginx', 'the node-loss test');
// the PostgreSQL tests (Hub.db_url, test/postgres.ts) run clusters of their own in temp dirs as the package's postgres
// account; the package's own cluster is not used
const installPostgresForTests = () => installDebianForTests('/usr/lib/postgresql/15/bin/postgres', 'postgresql', 'the PostgreSQL tests');

/**
 * The benchmarks compare against the established hub's current release, not Debian's 3.0: pinned in a venv
 * outside the repository, keyed by version (`npm run bench` passes --for-bench). test/bench/jupyterhub.ts
 * uses it when its `.installed` stamp is there (same path and version there); Debian's configurable-http-proxy
 * stays its proxy. A failed install is loud, not fatal: the benchmarks then run Debian's jupyterhub.
 */
const BENCH_JUPYTERHUB_VERSION = '6.1.1';
function installJupyterHubForBench() {
  if (!process.argv.includes('--for-bench')) return;
  const venv = join(homedir(), '.cache', 'hub-bench', `jupyterhub-${BENCH_JUPYTERHUB_VERSION}`);
  const stamp = join(venv, '.installed');
  if (existsSync(stamp)) return;
  console.error(`hub setup: installing jupyterhub==${BENCH_JUPYTERHUB_VERSION} for the benchmarks into ${venv} (pip)`);
  const run = (cmd, args) => spawnSync(cmd, args, { ...quiet, timeout: 600_000 }).status === 0;
  rmSync(venv, { recursive: true, force: true });
  mkdirSync(dirname(venv), { recursive: true });
  // Debian's python3 makes a venv with pip only when python3-venv is installed
  let ok = run('/usr/bin/python3', ['-m', 'venv', venv]);
  if (!ok && canApt() && aptInstall(['python3-venv'])) ok = run('/usr/bin/python3', ['-m', 'venv', venv]);
  ok &&= run(join(venv, 'bin', 'python'), ['-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', '-q', `jupyterhub==${BENCH_JUPYTERHUB_VERSION}`]);
  if (ok) {
    writeFileSync(stamp, `${BENCH_JUPYTERHUB_VERSION}\n`);
    return;
  }
  rmSync(venv, { recursive: true, force: true });
  const line = `!!!!! hub setup: could not install jupyterhub==${BENCH_JUPYTERHUB_VERSION} (python3 -m venv, pip): the benchmarks fall back to Debian's jupyterhub 3.0 !!!!!`;
  console.error(`${'!'.repeat(line.length)}\n${line}\n${'!'.repeat(line.length)}`);
}

/**
 * The JupyterLab tests (test/web/jupyterlab.test.ts) run the established hub's current single-user server with
 * JupyterLab 4 behind this hub, and its idle culler as a hub-managed service: a pinned venv inside the repository
 * (gitignored), made with Debian's python3 (never installing into it). The stamp holds the pinned set, so a
 * changed pin reinstalls from scratch; a test finds the venv by the same path and stamp. Only for tests, and for
 * `hub import-config` (`--for-import`), which loads an established hub's config file with that jupyterhub's traitlets.
 */
const JUPYTER_TEST_VENV = join(root, '.cache', 'jupyter-6.1');
// psycopg2-binary: the established hub's PostgreSQL driver (test/cli/import-jupyterhub.test.ts runs it on PostgreSQL)
const JUPYTER_TEST_PINS = ['jupyterhub==6.1.1', 'jupyterlab==4.6.6', 'jupyterhub-idle-culler==2.0.0', 'ipykernel==7.4.0', 'psycopg2-binary==2.9.13'];
function installJupyterLabForTests() {
  if (!process.argv.includes('--for-tests') && !process.argv.includes('--for-import')) return;
  const venv = JUPYTER_TEST_VENV;
  const stamp = join(venv, '.installed');
  const want = `${JUPYTER_TEST_PINS.join('\n')}\n`;
  if (existsSync(stamp) && readFileSync(stamp, 'utf8') === want) return;
  console.error(`hub setup: installing ${JUPYTER_TEST_PINS.join(' ')} for the tests into ${venv} (pip, about a minute)`);
  // stderr kept, so a failure names pip's own last words; each step bounded (a stalled download ends the set-up)
  const run = (cmd, args, timeout) => {
    const r = spawnSync(cmd, args, { cwd: root, stdio: ['ignore', 'ignore', 'pipe'], timeout });
    const last = String(r.stderr ?? '').split('\n').map((l) => l.trim()).filter(Boolean).at(-1) ?? '';
    return r.status === 0 ? '' : r.error?.code === 'ETIMEDOUT' ? `timed out after ${timeout / 1000} s` : last || `exit ${r.status ?? r.signal}`;
  };
  rmSync(venv, { recursive: true, force: true });
  mkdirSync(dirname(venv), { recursive: true });
  // Debian's python3 makes a venv with pip only when python3-venv is installed
  let why = run('/usr/bin/python3', ['-m', 'venv', venv], 120_000);
  if (why && canApt() && aptInstall(['python3-venv'])) why = run('/usr/bin/python3', ['-m', 'venv', venv], 120_000);
  if (why) {
    rmSync(venv, { recursive: true, force: true });
    fail(`\`/usr/bin/python3 -m venv ${venv}\` failed (${why}): run \`sudo apt-get install -y python3-venv\``);
  }
  // JupyterLab's server runs node on scripts of its own (its build check): inside this repository they would be
  // read as ES modules (package.json "type": "module") and fail, so the venv is its own CommonJS package scope
  writeFileSync(join(venv, 'package.json'), '{"type": "commonjs"}\n');
  why = run(join(venv, 'bin', 'python'), ['-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', '-q', '--timeout', '60', ...JUPYTER_TEST_PINS], 900_000);
  if (why) {
    rmSync(venv, { recursive: true, force: true });
    fail(`\`pip install ${JUPYTER_TEST_PINS.join(' ')}\` into ${venv} failed (${why}): check access to PyPI, then run \`node scripts/setup.mjs --for-tests\` again`);
  }
  writeFileSync(stamp, want);
}

/**
 * The Kubernetes backend's tests run on the real one-node cluster of `npm run cluster` (test/spawner/kube-cluster.ts
 * brings it up when none is): Debian's containerd, runc, the CNI plugins and debootstrap (for the single-user image),
 * Go for the control plane and kubelet. The binaries and images are built here, once per version, into
 * ~/.cache/hub-cluster (a cold build is ~17 min on 2 cores; afterwards this step takes seconds), so no test waits for it.
 */
function installKubernetesClusterForTests() {
  if (!process.argv.includes('--for-tests')) return;
  const needed = [['/usr/bin/containerd', 'containerd'], ['/usr/sbin/runc', 'runc'], ['/usr/lib/cni/bridge', 'containernetworking-plugins'], ['/usr/sbin/debootstrap', 'debootstrap']]
    .filter(([file]) => !existsSync(file)).map(([, pkg]) => pkg);
  if (needed.length) {
    if (!canApt()) fail(`the Kubernetes tests need ${needed.join(', ')}: run \`sudo apt-get install -y ${needed.join(' ')}\``);
    console.error(`hub setup: installing ${needed.join(' ')} for the Kubernetes tests (apt-get)`);
    if (!aptInstall(needed)) fail(`\`apt-get install -y ${needed.join(' ')}\` failed: install them by hand`);
  }
  if (spawnSync('go', ['version'], { stdio: 'ignore' }).error) fail('the Kubernetes tests build the cluster with Go (1.24 or later): install Go and put `go` on PATH');
  const r = spawnSync(process.execPath, ['--import=tsx', join(root, 'scripts', 'cluster.ts'), 'build'], { cwd: root, stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8', timeout: 3 * 3600_000 });
  if (r.status !== 0) fail(`building the Kubernetes cluster's binaries and images failed: ${String(r.stderr ?? r.error?.message ?? '').trim().split('\n').slice(-3).join(' ')} (run \`npm run cluster -- build\` to see it all)`);
}

function newestMtime(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestMtime(p));
    else if (entry.name.endsWith('.ts')) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

const GENERATED = join(root, 'shared', 'contracts', 'generated');
function contracts() {
  try {
    generateContracts(root);
  } catch (e) {
    fail(e.message);
  }
}

/** Actors run as compiled JavaScript: a TypeScript loader in each of them would cost ~20 MB apiece. */
function build() {
  contracts();
  const sources = Math.max(
    statSync(join(root, 'supervisor.ts')).mtimeMs,
    statSync(join(root, 'tsconfig.json')).mtimeMs,
    statSync(join(GENERATED, '.stamp')).mtimeMs,
    newestMtime(join(root, 'cli')),
    newestMtime(join(root, 'services')),
    newestMtime(join(root, 'shared')),
    newestMtime(join(root, 'singleuser')),
    newestMtime(join(root, 'hub-services')),
  );
  const stamp = join(root, 'dist', '.build-stamp');
  if (existsSync(stamp) && statSync(stamp).mtimeMs >= sources) return;
  try {
    execFileSync(join(root, 'node_modules', '.bin', 'tsc'), ['-p', '.'], { cwd: root, stdio: 'inherit' });
  } catch {
    fail('TypeScript build failed (see the errors above): fix them, then run `npm run build`');
  }
  // a separate process: esbuild is one of the packages installed above, after this script's imports were resolved
  execFileSync(process.execPath, [join(root, 'scripts', 'slim-dist.mjs')], { cwd: root, stdio: 'inherit' });
  writeFileSync(stamp, new Date().toISOString());
}

installNpmPackages();
installNatsServer();
installChromium();
installJupyterForTests();
installJupyterLabForTests();
installPodmanForTests();
installKubernetesClusterForTests();
installSlurmForTests();
installSlapdForTests();
installPebbleForTests();
installNginxForTests();
installPostgresForTests();
installJupyterHubForBench();
build();
