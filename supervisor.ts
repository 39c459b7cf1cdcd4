#!/usr/bin/env -S node --max-semi-space-size=1 --lite-mode --no-expose-wasm --single-threaded
// The `hub` command. `hub start` (the default) runs NATS and the six actors under supervision;
// the other subcommands are small tools for operators.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { join } from 'node:path';
import { resolveCookieSecret } from './shared/cookies.js';
import { ConfigError, hubInternalUrl, loadConfig, RESOLVED_CONFIG_ENV, writeResolvedConfig, type HubConfig } from './shared/config.js';
import { createLogger, type Logger } from './shared/log.js';
import { ACTORS, actorEntry, REPO_ROOT, runDir, RUNNING_FROM_SOURCE } from './shared/paths.js';
import { normalizeUsername } from './shared/names.js';
import { GENERATED_ROUNDS, hashSecret, newToken, tokenPrefix } from './shared/secrets.js';
import type { ServiceConfig } from './shared/roles.js';
import { servicePrefix } from './shared/servers.js';
import { announceReady } from './shared/ready-line.js';
import { SupervisedChild, type ChildSpec, type RestartPolicy } from './shared/supervision.js';

const HELP = `usage: hub [command] [--config FILE] [--Section.option=value ...]

commands:
  start     run the hub: NATS and the actors, restarted when they die (default)
  status    list the running hub's processes with their memory (RSS and PSS)
  token     print a new API token for a user: hub token <username> (works whether or not the hub runs)
  set-password  set a user's password for the password authenticator: hub set-password <username>
                (reads the password from standard input; asks without echo on a terminal)
  help      show this text

options:
  --config FILE            JSON, or a TypeScript/JavaScript module exporting the config object (env HUB_CONFIG)
  --Section.option=value   override one option, e.g. --Hub.port=8001
`;

const PROCESSES_FILE = 'processes.json';

/**
 * V8 flags per actor. Every actor is its own Node process (~40 MB before any code), so actors off the
 * request path trade peak speed for memory (lite mode: no optimising compiler); the gateway, tokens and
 * auth (which serves list pages) keep the full JIT and V8's helper threads (concurrent GC). Small young
 * generations keep idle RSS down; `--single-threaded` (no V8 worker threads) saves ~5 MB per cold actor.
 */
const ACTOR_NODE_FLAGS: Record<string, string[]> = {
  gateway: ['--max-semi-space-size=8'],
  tokens: ['--max-semi-space-size=2'],
  auth: ['--max-semi-space-size=2'],
  oauth: ['--max-semi-space-size=1', '--lite-mode', '--no-expose-wasm', '--single-threaded'],
  spawner: ['--max-semi-space-size=1', '--lite-mode', '--no-expose-wasm', '--single-threaded'],
  'proxy-router': ['--max-semi-space-size=1', '--lite-mode', '--no-expose-wasm', '--single-threaded'],
};

interface ProcessesRecord {
  supervisor: number;
  children: Record<string, number | null>;
  /** each child's start time from /proc, so a recycled pid is never taken for a leftover */
  starts?: Record<string, string>;
}

function processStart(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? '';
  } catch {
    return '';
  }
}

function findNatsServer(): string {
  const dirs = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/local/sbin', '/usr/local/bin'];
  const found = dirs.map((d) => join(d, 'nats-server')).find((p) => existsSync(p));
  if (!found) throw new ConfigError(['nats-server is not installed: run `npm start` (it installs it) or `apt-get install -y nats-server`, or set HUB_NATS_URL']);
  return found;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A previous supervisor killed with SIGKILL can leave NATS behind; actors stop themselves when it dies. */
function killLeftovers(dir: string, log: Logger): void {
  const file = join(dir, PROCESSES_FILE);
  if (!existsSync(file)) return;
  try {
    const record = JSON.parse(readFileSync(file, 'utf8')) as ProcessesRecord;
    if (isAlive(record.supervisor) && record.supervisor !== process.pid) {
      throw new ConfigError([`another hub (pid ${record.supervisor}) is running with data dir ${dir}`]);
    }
    for (const [id, pid] of Object.entries(record.children)) {
      if (pid && isAlive(pid) && record.starts?.[id] && processStart(pid) === record.starts[id]) {
        log.warn({ event: 'supervisor.leftover_killed', child: id, pid }, `killing ${id} left over from a previous run`);
        try {
          process.kill(-pid, 'SIGKILL'); // children lead their own process group
        } catch {
          process.kill(pid, 'SIGKILL');
        }
      }
    }
  } catch (e) {
    if (e instanceof ConfigError) throw e;
  }
}

async function waitForPort(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 10; Date.now() < deadline; delay = Math.min(delay * 2, 200)) {
    const open = await new Promise<boolean>((resolve) => {
      const s = tcpConnect({ host: '127.0.0.1', port }, () => { s.destroy(); resolve(true); });
      s.on('error', () => resolve(false));
    });
    if (open) return;
    await new Promise((r) => setTimeout(r, delay));
  }
  throw new Error(`NATS did not accept connections on 127.0.0.1:${port} within ${timeoutMs} ms`);
}

function lookupUser(name: string): { uid: number; gid: number } {
  const line = readFileSync('/etc/passwd', 'utf8').split('\n').find((l) => l.split(':')[0] === name);
  if (!line) throw new ConfigError([`Hub.services: no such system user ${JSON.stringify(name)}`]);
  const [, , uid, gid] = line.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}

/** A hub-managed service: its command, cwd and user, and the HUB_* environment the seed lists. */
function managedServiceSpec(config: HubConfig, svc: ServiceConfig, baseEnv: NodeJS.ProcessEnv): ChildSpec {
  const apiUrl = `${hubInternalUrl(config)}/hub/api`;
  const prefix = servicePrefix(svc.name);
  const access = JSON.stringify([`access:services!service=${svc.name}`]);
  const command = Array.isArray(svc.command) ? svc.command : ['/bin/sh', '-c', svc.command as string];
  let ids: { uid?: number; gid?: number } = {};
  if (typeof svc.user === 'string') {
    if (process.getuid?.() !== 0) throw new ConfigError([`Hub.services "${svc.name}".user: running a service as another user needs the hub to run as root`]);
    ids = lookupUser(svc.user);
  }
  return {
    id: `service:${svc.name}`, command: command[0], args: command.slice(1), ipc: false, cwd: typeof svc.cwd === 'string' ? svc.cwd : undefined, ...ids,
    env: {
      ...baseEnv, ...(svc.environment as Record<string, string> | undefined),
      HUB_SERVICE_NAME: svc.name, HUB_API_TOKEN: svc.api_token, HUB_API_URL: apiUrl, HUB_BASE_URL: '/',
      HUB_SERVICE_PREFIX: prefix, ...(svc.url ? { HUB_SERVICE_URL: svc.url } : {}),
      HUB_OAUTH_SCOPES: access, HUB_OAUTH_ACCESS_SCOPES: access,
      HUB_OAUTH_CLIENT_ALLOWED_SCOPES: JSON.stringify(svc.oauth_client_allowed_scopes ?? []),
      HUB_CLIENT_ID: typeof svc.oauth_client_id === 'string' ? svc.oauth_client_id : `service-${svc.name}`,
      HUB_OAUTH_CALLBACK_URL: typeof svc.oauth_redirect_uri === 'string' ? svc.oauth_redirect_uri : `${prefix}oauth_callback`,
    },
  };
}

function restartPolicy(config: HubConfig): RestartPolicy {
  const s = config.Supervisor;
  return {
    backoffInitialMs: s.restart_backoff_initial * 1000, backoffMaxMs: s.restart_backoff_max * 1000,
    stableUptimeMs: s.stable_uptime * 1000, intensity: s.restart_intensity, periodMs: s.restart_period * 1000,
    shutdownMs: s.shutdown_timeout * 1000,
  };
}

async function start(config: HubConfig): Promise<void> {
  const log = createLogger('supervisor', config.Hub.log_level);
  const dataDir = config.Hub.data_dir;
  const run = runDir(dataDir);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  mkdirSync(run, { recursive: true, mode: 0o700 });
  killLeftovers(run, log);
  const configPath = join(run, 'config.json');
  // every gateway must seal cookies with the same secret: resolved once, here
  const cookieSecret = resolveCookieSecret(config.Hub.cookie_secret, process.env, dataDir);
  // a hub-managed service without an api_token gets a fresh one at each start (registered by the tokens actor)
  const services = (config.Hub.services as ServiceConfig[]).map((s) => (s.command && !s.api_token ? { ...s, api_token: newToken() } : s));
  writeResolvedConfig({ ...config, Hub: { ...config.Hub, cookie_secret: cookieSecret, services } }, configPath);

  const policy = restartPolicy(config);
  const children: SupervisedChild[] = [];
  const recordProcesses = () => {
    const record: ProcessesRecord = {
      supervisor: process.pid,
      children: Object.fromEntries(children.map((c) => [c.spec.id, c.pid ?? null])),
      starts: Object.fromEntries(children.filter((c) => c.pid).map((c) => [c.spec.id, processStart(c.pid!)])),
    };
    writeFileSync(join(run, PROCESSES_FILE), JSON.stringify(record));
  };
  // Children get what they need to run, not the supervisor's whole environment.
  const baseEnv: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, LANG: process.env.LANG, TZ: process.env.TZ, NODE_ENV: process.env.NODE_ENV };

  if (!config.Hub.nats_url) {
    children.push(new SupervisedChild({
      id: 'nats', command: findNatsServer(), args: ['-c', join(REPO_ROOT, 'nats.conf')], ipc: false,
      env: { ...baseEnv, HUB_NATS_PORT: String(config.Hub.nats_port), HUB_NATS_NAME: `hub-${config.Hub.nats_port}`,
        HUB_NATS_STORE_DIR: join(dataDir, 'jetstream'), HUB_NATS_PID_FILE: join(run, 'nats.pid') },
    }, policy, log, recordProcesses));
  }
  for (const actor of ACTORS) {
    children.push(new SupervisedChild({
      id: actor, command: process.execPath, ipc: true,
      args: [...(ACTOR_NODE_FLAGS[actor] ?? []), ...(RUNNING_FROM_SOURCE ? ['--import', 'tsx'] : []), actorEntry(actor)],
      env: { ...baseEnv, [RESOLVED_CONFIG_ENV]: configPath },
    }, policy, log, recordProcesses));
  }

  for (const svc of services.filter((s) => s.command)) {
    children.push(new SupervisedChild(managedServiceSpec(config, svc, baseEnv), policy, log, recordProcesses));
  }

  let stopping: Promise<void> | undefined;
  const stopAll = (signal: string) => (stopping ??= (async () => {
    log.info({ event: 'supervisor.stopping', signal }, 'stopping the hub');
    for (const child of [...children].reverse()) await child.stop();
    rmSync(join(run, PROCESSES_FILE), { force: true });
    log.info({ event: 'supervisor.stopped' }, 'hub stopped');
    process.exit(0);
  })());
  process.on('SIGTERM', () => void stopAll('SIGTERM'));
  process.on('SIGINT', () => void stopAll('SIGINT'));

  const t0 = Date.now();
  const [first, ...rest] = children;
  if (first.spec.id === 'nats') {
    first.start();
    await waitForPort(config.Hub.nats_port, config.Supervisor.startup_timeout * 1000);
  } else {
    rest.unshift(first);
  }
  // Actors start together: each waits for what it needs, so start-up costs one actor's boot, not six.
  for (const child of rest) child.start();
  log.info({ event: 'supervisor.started', ms: Date.now() - t0, url: `http://${config.Hub.ip}:${config.Hub.port}` }, 'hub starting');
  // issue 13: a readable last line of start-up (where to go, how to get in); see shared/ready-line.ts
  void announceReady(config, log, children.find((c) => c.spec.id === 'auth'));
}

/** RSS counts pages shared between the Node processes once per process; PSS divides them fairly. */
function memoryOf(pid: number): { rssKb: number; pssKb: number } | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    return { rssKb: Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0), pssKb: Number(/^Pss:\s+(\d+)/m.exec(rollup)?.[1] ?? 0) };
  } catch {
    return null;
  }
}

function status(config: HubConfig): number {
  const file = join(runDir(config.Hub.data_dir), PROCESSES_FILE);
  if (!existsSync(file)) {
    console.log(`no hub is running with data dir ${config.Hub.data_dir}`);
    return 1;
  }
  const record = JSON.parse(readFileSync(file, 'utf8')) as ProcessesRecord;
  const rows: [string, number | null][] = [['supervisor', record.supervisor], ...Object.entries(record.children)];
  const mb = (kb: number) => `${(kb / 1024).toFixed(1)} MB`.padStart(10);
  let rss = 0;
  let pss = 0;
  console.log(`${'process'.padEnd(14)} ${'pid'.padEnd(8)} ${'rss'.padStart(10)} ${'pss'.padStart(10)}`);
  for (const [id, pid] of rows) {
    const m = pid ? memoryOf(pid) : null;
    rss += m?.rssKb ?? 0;
    pss += m?.pssKb ?? 0;
    console.log(`${id.padEnd(14)} ${String(pid ?? '-').padEnd(8)} ${m ? `${mb(m.rssKb)} ${mb(m.pssKb)}` : 'not running'}`);
  }
  console.log(`${'total'.padEnd(23)} ${mb(rss)} ${mb(pss)}`);
  return 0;
}

/**
 * `hub token <user>`: writes a token straight into the tokens store (SQLite in WAL mode allows it beside a
 * running hub); the tokens actor reads the store on every unknown token, so it is usable at once.
 */
async function token(config: HubConfig, positional: string[]): Promise<number> {
  if (positional.length !== 1) {
    process.stderr.write('usage: hub token <username>\n');
    return 2;
  }
  const name = normalizeUsername(positional[0]);
  const { AuthStore } = await import('./services/auth/store.js');
  const { TokenStore } = await import('./services/tokens/store.js');
  mkdirSync(config.Hub.data_dir, { recursive: true, mode: 0o700 });
  const users = await AuthStore.open(join(config.Hub.data_dir, 'auth.sqlite'));
  const exists = await users.getUser(name);
  await users.close();
  if (!exists) {
    process.stderr.write(`No such user: ${name}\n`);
    return 1;
  }
  const tokens = await TokenStore.open(join(config.Hub.data_dir, 'tokens.sqlite'));
  const secret = newToken();
  await tokens.insert({
    prefix: tokenPrefix(secret), hashed: hashSecret(secret, GENERATED_ROUNDS), owner_kind: 'user', owner_name: name,
    scopes: JSON.stringify(['inherit']), note: 'command-line generated', created: new Date().toISOString(), expires_at: null,
    session_id: null, oauth_client: 'hub', source: 'cli',
  });
  await tokens.close();
  process.stdout.write(`${secret}\n`);
  return 0;
}

/** One line from standard input; on a terminal, asked for without echo. */
async function readSecretLine(prompt: string): Promise<string> {
  const stdin = process.stdin;
  if (stdin.isTTY) {
    process.stderr.write(prompt);
    stdin.setRawMode(true);
  }
  return new Promise((resolve) => {
    let text = '';
    const done = () => {
      if (stdin.isTTY) {
        stdin.setRawMode(false);
        process.stderr.write('\n');
      }
      stdin.pause();
      resolve(text);
    };
    stdin.on('data', (chunk) => {
      for (const ch of chunk.toString('utf8')) {
        if (ch === '\n' || ch === '\r' || ch === '\u0004') return done();
        if (ch === '\u0003') process.exit(130);
        text += ch;
      }
    });
    stdin.on('end', done);
  });
}

/** `hub set-password <user>`: writes the scrypt hash straight into the auth store (beside a running hub too). */
async function setPassword(config: HubConfig, positional: string[]): Promise<number> {
  if (positional.length !== 1) {
    process.stderr.write('usage: hub set-password <username>  (password on standard input)\n');
    return 2;
  }
  const name = normalizeUsername(positional[0]);
  const password = await readSecretLine(`Password for ${name}: `);
  if (password.length < config.PasswordAuthenticator.min_password_length) {
    process.stderr.write(`Passwords must be at least ${config.PasswordAuthenticator.min_password_length} characters\n`);
    return 1;
  }
  const { AuthStore } = await import('./services/auth/store.js');
  const { hashPassword } = await import('./services/auth/login.js');
  mkdirSync(config.Hub.data_dir, { recursive: true, mode: 0o700 });
  const users = await AuthStore.open(join(config.Hub.data_dir, 'auth.sqlite'));
  const hashed = await hashPassword(password);
  const ok = await users.transaction(() => users.setPassword(name, hashed));
  await users.close();
  if (!ok) {
    process.stderr.write(`No such user: ${name}\n`);
    return 1;
  }
  process.stderr.write(`password set for ${name}\n`);
  return 0;
}

async function main(argv: string[]): Promise<number> {
  const command = argv[0] && !argv[0].startsWith('-') ? argv[0] : 'start';
  const afterCommand = command === argv[0] ? argv.slice(1) : argv;
  // positional arguments of a subcommand come before the options
  const positional = afterCommand.filter((a, i) => !a.startsWith('-') && afterCommand[i - 1] !== '--config');
  const rest = afterCommand.filter((a) => !positional.includes(a));
  if (command === 'help' || argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(HELP);
    return 0;
  }
  const commands: Record<string, (c: HubConfig, positional: string[]) => Promise<number | void> | number> = { start, status, token, 'set-password': setPassword };
  const run = commands[command];
  if (!run) {
    process.stderr.write(`hub: unknown command ${JSON.stringify(command)}\n\n${HELP}`);
    return 2;
  }
  try {
    const config = await loadConfig({ argv: rest });
    if (command !== 'token' && command !== 'set-password' && positional.length) {
      process.stderr.write(`hub ${command}: unexpected argument ${JSON.stringify(positional[0])}\n`);
      return 2;
    }
    const code = await run(config, positional);
    return code ?? -1; // -1: keep running (start)
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`hub: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
}

const code = await main(process.argv.slice(2));
if (code >= 0) process.exit(code);
