// Starts and stops the established hub for a benchmark: everything on 127.0.0.1 and free ports, its database,
// cookie secret, proxy pid file and log in a temp dir. Its current release (JUPYTERHUB_VERSION) runs from the
// venv that `scripts/setup.mjs --for-bench` makes (`npm run bench` passes the flag); without that venv, Debian's
// `jupyterhub` package (3.0), loudly. Either way Debian's configurable-http-proxy is its proxy.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, closeSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, isAlive, sleep, waitFor } from '../harness.js';

/** The release the benchmarks compare against; scripts/setup.mjs pins the same one (BENCH_JUPYTERHUB_VERSION). */
export const JUPYTERHUB_VERSION = '6.1.1';
/** setup.mjs's venv, keyed by version; its `.installed` stamp is written once pip has succeeded */
export const JUPYTERHUB_VENV = join(homedir(), '.cache', 'hub-bench', `jupyterhub-${JUPYTERHUB_VERSION}`);
const VENV_PYTHON = join(JUPYTERHUB_VENV, 'bin', 'python');
const DEBIAN_PYTHON = '/usr/bin/python3';
const PROXY = '/usr/bin/configurable-http-proxy';

const venvReady = (): boolean => existsSync(join(JUPYTERHUB_VENV, '.installed')) && existsSync(VENV_PYTHON);
const python = (): string => (venvReady() ? VENV_PYTHON : DEBIAN_PYTHON);

let described: string | undefined;
/** Which jupyterhub runs (version and where from), as its own Python reports it; the first call prints it. */
export function jupyterhubDescription(): string {
  if (described) return described;
  const r = spawnSync(python(), ['-c', 'import jupyterhub; print(jupyterhub.__version__)'], { encoding: 'utf8', timeout: 30_000 });
  const version = r.status === 0 ? r.stdout.trim() : 'unknown version';
  if (venvReady()) {
    described = `jupyterhub ${version} (${JUPYTERHUB_VENV})`;
    console.error(`established hub: ${described}, Debian's configurable-http-proxy`);
  } else {
    described = `jupyterhub ${version} (Debian's package, NOT ${JUPYTERHUB_VERSION})`;
    const line = `!!!!! established hub: no venv with jupyterhub ${JUPYTERHUB_VERSION} at ${JUPYTERHUB_VENV} (run \`node scripts/setup.mjs --for-bench\`): running Debian's jupyterhub ${version} instead !!!!!`;
    console.error(`${'!'.repeat(line.length)}\n${line}\n${'!'.repeat(line.length)}`);
  }
  return described;
}

export interface JupyterHubUnderTest {
  url: string;
  dir: string;
  pid: number;
  /** its configurable-http-proxy's pid, once it has written its pid file */
  proxyPid(): number | undefined;
  /** what `reuse` takes to start it again on the same database and ports */
  reusable: JupyterHubReuse;
  /** the last part of its log */
  logs(): string;
  /** SIGTERM, SIGKILL after a bound; makes sure its proxy is gone; removes the temp dir unless kept. */
  stop(options?: { keepDir?: boolean }): Promise<void>;
}

export interface JupyterHubReuse { dir: string; port: number; hubPort: number; proxyApiPort: number }

export interface JupyterHubOptions {
  /** token -> user name (JupyterHub.api_tokens) */
  apiTokens?: Record<string, string>;
  adminUsers?: string[];
  startTimeoutMs?: number;
  /** more lines of jupyterhub_config.py (e.g. the spawner's) */
  extraConfig?: string[];
  /** start again on the temp dir (database, cookie secret) and ports of a hub stopped with `stop({ keepDir: true })` */
  reuse?: JupyterHubReuse;
  /** another venv's python (a test's: .cache/jupyter-6.1) instead of the bench's */
  python?: string;
  /** JupyterHub.db_url; default a SQLite file in its temp dir */
  dbUrl?: string;
  /** more environment (JUPYTERHUB_CRYPT_KEY) */
  env?: NodeJS.ProcessEnv;
}

/** Whether a jupyterhub can run: the venv's or Debian's (as `python3 -m jupyterhub` runs it), and Debian's proxy. */
export const jupyterhubInstalled = (): boolean =>
  existsSync(PROXY) && (venvReady() || (existsSync('/usr/lib/python3/dist-packages/jupyterhub/__init__.py') && existsSync(DEBIAN_PYTHON)));

const py = (s: string): string => JSON.stringify(s); // a JSON string of plain text is a valid Python literal

export async function startJupyterHub({ apiTokens = {}, adminUsers = [], startTimeoutMs = 60_000, extraConfig = [], reuse, python: pythonPath, dbUrl, env = {} }: JupyterHubOptions = {}): Promise<JupyterHubUnderTest> {
  if (!pythonPath) jupyterhubDescription();
  const dir = reuse?.dir ?? mkdtempSync(join(tmpdir(), 'jupyterhub-bench-'));
  const [port, hubPort, proxyApiPort] = reuse ? [reuse.port, reuse.hubPort, reuse.proxyApiPort] : [await freePort(), await freePort(), await freePort()];
  const tokens = Object.entries(apiTokens).map(([t, u]) => `${py(t)}: ${py(u)}`).join(', ');
  const config = [
    `c.JupyterHub.bind_url = 'http://127.0.0.1:${port}'`,
    `c.JupyterHub.hub_ip = '127.0.0.1'`,
    `c.JupyterHub.hub_port = ${hubPort}`,
    `c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:${proxyApiPort}'`,
    `c.ConfigurableHTTPProxy.command = [${py(PROXY)}]`,
    `c.ConfigurableHTTPProxy.pid_file = ${py(join(dir, 'proxy.pid'))}`,
    `c.JupyterHub.db_url = ${py(dbUrl ?? `sqlite:///${join(dir, 'jupyterhub.sqlite')}`)}`,
    `c.JupyterHub.cookie_secret_file = ${py(join(dir, 'cookie_secret'))}`,
    `c.JupyterHub.pid_file = ${py(join(dir, 'jupyterhub.pid'))}`,
    // not a local (system-user) authenticator, so users can be created through the API
    `c.JupyterHub.authenticator_class = 'jupyterhub.auth.DummyAuthenticator'`,
    `c.JupyterHub.api_tokens = {${tokens}}`,
    `c.Authenticator.admin_users = {${adminUsers.map(py).join(', ')}}`,
    ...extraConfig,
    '',
  ].join('\n');
  const configFile = join(dir, 'jupyterhub_config.py');
  writeFileSync(configFile, config, { mode: 0o600 });
  const logFile = join(dir, 'jupyterhub.log');
  const log = openSync(logFile, 'a');
  const proc = spawn(pythonPath ?? python(), ['-m', 'jupyterhub', '-f', configFile], {
    cwd: dir,
    detached: true, // its own process group, so a stop reaches anything it forked
    stdio: ['ignore', log, log],
    env: { ...process.env, NODE_PATH: '/usr/share/nodejs', ...env },
  });
  closeSync(log);
  const exited = new Promise<void>((resolve) => proc.on('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const logs = (): string => {
    try {
      return readFileSync(logFile, 'utf8').slice(-5000);
    } catch {
      return '';
    }
  };
  let proxyPid: number | undefined;
  const readProxyPid = (): void => {
    try {
      proxyPid = Number(readFileSync(join(dir, 'proxy.pid'), 'utf8').trim()) || proxyPid;
    } catch { /* not written yet, or already removed */ }
  };
  const hub: JupyterHubUnderTest = {
    url, dir, pid: proc.pid!, logs, reusable: { dir, port, hubPort, proxyApiPort },
    proxyPid: () => {
      readProxyPid();
      return proxyPid && isAlive(proxyPid) ? proxyPid : undefined;
    },
    async stop({ keepDir = false } = {}) {
      readProxyPid();
      if (proc.exitCode === null && proc.signalCode === null) {
        try { process.kill(-proc.pid!, 'SIGTERM'); } catch { /* gone */ }
        const timer = setTimeout(() => { try { process.kill(-proc.pid!, 'SIGKILL'); } catch { /* gone */ } }, 15_000);
        await exited;
        clearTimeout(timer);
      }
      // the hub stops its proxy on a clean exit; the proxy runs in its own session, so check it by pid
      if (proxyPid && isAlive(proxyPid)) {
        process.kill(proxyPid, 'SIGTERM');
        for (let i = 0; i < 50 && isAlive(proxyPid); i++) await sleep(100);
        if (isAlive(proxyPid)) process.kill(proxyPid, 'SIGKILL');
      }
      if (!keepDir) rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await Promise.race([
      waitFor('jupyterhub to answer GET /hub/api', async () => {
        readProxyPid();
        const r = await fetch(`${url}/hub/api`, { signal: AbortSignal.timeout(2000) });
        return r.status === 200 ? true : undefined;
      }, startTimeoutMs, 250),
      exited.then(() => { throw new Error(`jupyterhub exited with ${proc.exitCode ?? proc.signalCode} while starting`); }),
    ]);
  } catch (e) {
    const text = logs();
    await hub.stop();
    throw new Error(`${(e as Error).message}\n--- jupyterhub log ---\n${text}`);
  }
  return hub;
}
