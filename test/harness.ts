// Boots a complete hub for a test: its own nats-server on a free port, a temp data dir, the gateway on a
// free port, all real processes started by the real supervisor (compiled dist/, as `npm start` runs it).
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { testPort } from './ports.js';
import { ADMIN_USER, busAuth, type BusUser } from '../shared/nats-auth.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = fileURLToPath(new URL('..', import.meta.url));
export const SUPERVISOR = join(REPO, 'dist', 'supervisor.js');
/** The V8 flags `npm start` gives the supervisor (see package.json). */
export const SUPERVISOR_FLAGS = ['--max-semi-space-size=1', '--lite-mode', '--no-expose-wasm', '--single-threaded'];

/** A port for what a test starts itself (test/ports.ts: never one a hub's spawner or another test process may pick). */
export const freePort = testPort;

/** The NATS secret of every test hub (given to the supervisor as HUB_NATS_TOKEN; shared/nats-auth.ts). */
export const NATS_TOKEN = `hub_test_${randomBytes(12).toString('hex')}`;
/** The bus's admin user, for tests that poke NATS directly: `connect({servers, ...NATS_ADMIN})`. */
export const NATS_ADMIN = busAuth(NATS_TOKEN, ADMIN_USER);
/** One bus user's connection options (an actor's, or the operators' `audit` / `metrics`): what that user may do and no more. */
export const natsUser = (user: BusUser) => busAuth(NATS_TOKEN, user);

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `probe` until it returns a value, at most `timeoutMs`; throws with `what` when it never does. */
export async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 10_000, intervalMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    await sleep(intervalMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`);
}

/** A zombie (exited, not yet reaped by whoever adopted it) counts as gone. */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

export interface HubUnderTest {
  /** the front door (with Hub.bind_url's unix socket: the loopback Hub.hub_port, the socket being the test's to reach) */
  url: string;
  /** where the hub's own processes reach it: `url`, or with HTTPS the plain loopback Hub.hub_port */
  internalUrl: string;
  port: number;
  natsPort: number;
  natsUrl: string;
  dataDir: string;
  proc: ChildProcess;
  /** pids of the supervisor's children, from the record it keeps in the data dir */
  children(): Record<string, number | null>;
  logs(): string;
  /** SIGTERM to the supervisor; resolves with how it exited, after checking nothing is left running. */
  stop(options?: { keepDataDir?: boolean }): Promise<{ code: number | null; signal: NodeJS.Signals | null; leftovers: number[] }>;
}

export interface StartOptions {
  config?: Record<string, Record<string, unknown>>;
  healthTimeoutMs?: number;
  /** reuse the data dir (and ports) of a hub stopped with `stop({ keepDataDir: true })` */
  reuse?: { dataDir: string; port: number; natsPort: number; hubPort?: number };
  /** another checkout of the hub to run (a benchmark's baseline, test/bench/tools.ts baselineCheckout); default this one */
  repo?: string;
  /** more environment for the supervisor (e.g. NODE_EXTRA_CA_CERTS) */
  env?: NodeJS.ProcessEnv;
  /** return once /hub/health says 200 (default), or as soon as the port answers anything (the front door's first answer) */
  readyWhen?: 'healthy' | 'answering';
  /** a command the supervisor runs under (its arguments follow), which must exec it in the same process, e.g. `unshare … sh -c 'exec "$@"'` */
  launcher?: string[];
}

/**
 * Hubs of this test process not stopped yet: killed, with every process they started, when the test process ends
 * without stopping them (a test file that crashed): else they would run on through the rest of the suite.
 */
const runningHubs = new Set<() => void>();
process.on('exit', () => {
  for (const killAll of runningHubs) {
    try {
      killAll();
    } catch {
      // a process file half-written or gone: what could be killed was
    }
  }
});

export async function startHub({ config = {}, healthTimeoutMs = 45_000, reuse, repo = REPO, env = {}, readyWhen = 'healthy', launcher = [] }: StartOptions = {}): Promise<HubUnderTest> {
  const dataDir = reuse?.dataDir ?? mkdtempSync(join(tmpdir(), 'hub-test-'));
  const port = reuse?.port ?? await freePort();
  const natsPort = reuse?.natsPort ?? await freePort();
  // HTTPS at the front door (Hub.ssl_cert, Hub.letsencrypt_domains): health is asked on the plain loopback Hub.hub_port
  const tls = Boolean(config.Hub?.ssl_cert || (config.Hub?.letsencrypt_domains as unknown[] | undefined)?.length);
  // a unix socket at the front door (Hub.bind_url): the same loopback Hub.hub_port answers health
  const unixSocket = Boolean(config.Hub?.bind_url);
  const hubPort = tls || unixSocket ? (config.Hub?.hub_port as number | undefined) ?? reuse?.hubPort ?? await freePort() : undefined;
  const full = { ...config, Hub: { data_dir: dataDir, port, nats_port: natsPort, log_level: 'warn', ...(hubPort ? { hub_port: hubPort } : {}), ...config.Hub } };
  const configFile = join(dataDir, 'hub.json');
  writeFileSync(configFile, JSON.stringify(full));
  const command = [...launcher, process.execPath, ...SUPERVISOR_FLAGS, join(repo, 'dist', 'supervisor.js'), '--config', configFile];
  const proc = spawn(command[0], command.slice(1), {
    stdio: ['ignore', 'pipe', 'pipe'], cwd: repo, env: { ...process.env, HUB_NATS_TOKEN: NATS_TOKEN, ...env },
  });
  let logText = '';
  const keep = (chunk: Buffer) => { logText = (logText + chunk.toString()).slice(-200_000); };
  proc.stdout!.on('data', keep);
  proc.stderr!.on('data', keep);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = unixSocket ? `http://127.0.0.1:${hubPort}` : `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  const internalUrl = hubPort ? `http://127.0.0.1:${hubPort}` : url;
  const children = (): Record<string, number | null> => {
    const file = join(dataDir, 'run', 'processes.json');
    return existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')).children : {};
  };
  let seen: number[] = [];
  const killAll = () => {
    for (const pid of [proc.pid, ...Object.values(children())]) if (pid && isAlive(pid)) process.kill(pid, 'SIGKILL');
  };
  runningHubs.add(killAll);
  const hub: HubUnderTest = {
    url, internalUrl, port, natsPort, natsUrl: `nats://127.0.0.1:${natsPort}`, dataDir, proc, children, logs: () => logText,
    async stop({ keepDataDir = false } = {}) {
      runningHubs.delete(killAll);
      seen = [...new Set([...seen, ...Object.values(children()).filter((p): p is number => p !== null)])];
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 20_000);
      const result = await exited;
      clearTimeout(timer);
      const leftovers = seen.filter(isAlive);
      for (const pid of leftovers) process.kill(pid, 'SIGKILL');
      if (!keepDataDir) rmSync(dataDir, { recursive: true, force: true });
      return { ...result, leftovers };
    },
  };
  try {
    await waitFor('the hub to become healthy', async () => {
      if (proc.exitCode !== null) throw new Error(`supervisor exited with ${proc.exitCode}`);
      const r = await fetch(`${internalUrl}/hub/health`);
      seen = [...new Set([...seen, ...Object.values(children()).filter((p): p is number => p !== null)])];
      const text = await r.text();
      if (readyWhen === 'answering') return true;
      // this hub's answer, not another process's on the same port
      return r.status === 200 && /^\{"status":"ok"/.test(text) ? true : undefined;
    }, healthTimeoutMs, readyWhen === 'answering' ? 10 : 50);
  } catch (e) {
    await hub.stop();
    throw new Error(`${(e as Error).message}\n--- hub log ---\n${logText.slice(-5000)}`);
  }
  return hub;
}

/** Stops a child process and waits (bounded) for it to exit. */
export async function stopChild(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

/** Runs the `hub` command to completion (for config errors and CLI verbs); `input` is its whole standard input. */
export function runHubCommand(args: string[], { env = {}, input = '', killAfterMs }: { env?: NodeJS.ProcessEnv; input?: string; killAfterMs?: number } = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return runCommand(process.execPath, [SUPERVISOR, ...args], { env: { ...process.env, ...env }, input, killAfterMs });
}

/** Runs a program to its end (killed after `killAfterMs`, 30 s), with exactly `env`; its exit code and output. */
export function runCommand(command: string, args: string[], { env, input = '', killAfterMs = 30_000 }: { env: NodeJS.ProcessEnv; input?: string; killAfterMs?: number }): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(command, args, { cwd: REPO, env });
    p.stdin.end(input);
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), killAfterMs);
    // 'exit' can come before the last of its output is read: answer at 'close' (its pipes drained), or 2 s after
    // 'exit' when a process it left behind still holds them
    let exitCode: number | null = null;
    let drained: NodeJS.Timeout | undefined;
    const done = () => { clearTimeout(timer); clearTimeout(drained); resolve({ code: exitCode, stdout, stderr }); };
    p.on('exit', (code) => { exitCode = code; drained = setTimeout(done, 2000); });
    p.on('close', (code) => { exitCode = code; done(); });
  });
}
