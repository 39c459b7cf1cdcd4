#!/usr/bin/env -S node --max-semi-space-size=1 --lite-mode --no-expose-wasm --single-threaded
// The `hub` command. `hub start` (the default) runs NATS and the six actors under supervision; every
// other verb (`hub token`, `hub add-user`, `hub audit`, ...) is the command-line tool in cli/.
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { join } from 'node:path';
import { resolveCookieSecret } from './shared/cookies.js';
import { preflightSpawner } from './services/spawner/backends/index.js';
import { waitForHttp } from './services/spawner/readiness.js';
import { authenticatorProblems } from './services/auth/authenticators/index.js';
import { bindSocketPath, bindSocketProblems, ConfigError, internalHubUrl, loadConfig, NATS_TOKEN_ENV, natsServers, readResolvedConfig, RESOLVED_CONFIG_ENV, writeResolvedConfig, type HubConfig } from './shared/config.js';
import { natsTlsStance, offMachineNatsPeers, prepareInternalTls, type NatsTlsFiles } from './shared/internal-ssl.js';
import { busEnv, busSecret, SECRET_SHAPE_TEXT, validBusSecret } from './shared/nats-auth.js';
import { natsServerConfig } from './shared/nats-server-config.js';
import { withPrefixAliases } from './shared/environment.js';
import { createLogger, type Logger } from './shared/log.js';
import { ACTORS, actorEntry, REPO_ROOT, resolvedConfigPath, runDir, RUNNING_FROM_SOURCE } from './shared/paths.js';
import { isAlive, processesFile, processStart, readProcesses, type ProcessesRecord } from './shared/processes.js';
import { portInUse } from './shared/ports.js';
import { CRYPT_KEY_ENV, newToken, parseCryptKeys } from './shared/secrets.js';
import type { ServiceConfig } from './shared/roles.js';
import { servicePrefix } from './shared/servers.js';
import { serviceCallbackUrl, subdomainsOf } from './shared/subdomains.js';
import { announceReady } from './shared/ready-line.js';
import { METRICS_ENV, metricsEnvProblems } from './shared/metrics.js';
import { useBaseUrl } from './shared/urls.js';
import { certificateProblems, frontDoorPlainPorts } from './shared/tls.js';
import { HUB_COMMIT, HUB_VERSION } from './shared/build-info.js';
import { restartResultFile, rollingRestart, takeRestartRequest, writeJsonAtomically, type RestartResult } from './shared/rolling-restart.js';
import { createReloader, isReloadAsked, RELOAD_ASKED_REPLY, reloadResultFile, takeReloadAsker } from './shared/reload.js';
import { isFrontDoorFailed, isGatewayBooted, isShutdownRequest, SupervisedChild, type ChildSpec, type RestartPolicy } from './shared/supervision.js';

/** between a shutdown asked through the API and the first child stopping: the 202 goes out meanwhile */
const SHUTDOWN_GRACE_MS = 250;

/**
 * V8 flags per actor. Every actor is its own Node process (~40 MB before any code), so actors off the
 * request path trade peak speed for memory (lite mode: no optimising compiler); the gateway, tokens and
 * auth (which serves list pages) keep the full JIT and V8's helper threads (concurrent GC). Small young
 * generations keep idle RSS down; `--single-threaded` (no V8 worker threads) saves ~5 MB per cold actor.
 * `--heap-growing-percent=100` on the two that API list pages load: V8 let the old generation grow to 4x what
 * survived its last full collection (the gateway 20 -> 75 MB during list pages, --trace-gc); 2x kept it under 42 MB
 * with a full collection of 4-16 ms about once a second there, and no lower req/s in the same run (bench memory).
 * The auth actor at 50 (1.5x): under list pages its old generation was 27 MB of which 12 were live (2026-11-28,
 * v8.getHeapSpaceStatistics right after the API load); the gateway's semi-spaces at 4 MB, not 8 (16 MB of young
 * generation under load and, before shared/idle-gc.ts gave it back, at idle); tokens, off the API's hot path (the
 * gateway answers known tokens from memory), single-threaded like the cold actors: 3-4 MB less. `--expose-gc`
 * everywhere: shared/idle-gc.ts collects at the first idle moment after the start, and after bursts.
 */
/**
 * glibc arenas per actor. By default each thread that allocates gets its own (up to 8 per core), and the SQLite
 * driver's queries run on libuv's four pool threads: after a bulk create of 300,000 users the auth actor held
 * 91 MB of PSS in arenas it never trims, 56 MB with two (the whole hub 270 -> 214 MB, same run). An operator's
 * own MALLOC_ARENA_MAX wins.
 */
const MALLOC_ARENAS = process.env.MALLOC_ARENA_MAX || '2';

/** Actors an API request needs, started before the others; and how long the others wait for a gateway's start. */
const API_PATH = new Set(['tokens', 'auth', 'gateway']);
const FRONT_DOOR_FIRST_MS = 3000;

const ACTOR_NODE_FLAGS: Record<string, string[]> = {
  gateway: ['--max-semi-space-size=4', '--expose-gc', '--heap-growing-percent=100'],
  tokens: ['--max-semi-space-size=2', '--expose-gc', '--single-threaded'],
  auth: ['--max-semi-space-size=2', '--expose-gc', '--heap-growing-percent=50'],
  oauth: ['--max-semi-space-size=1', '--lite-mode', '--no-expose-wasm', '--single-threaded', '--expose-gc'],
  spawner: ['--max-semi-space-size=1', '--lite-mode', '--no-expose-wasm', '--single-threaded', '--expose-gc'],
  'proxy-router': ['--max-semi-space-size=1', '--lite-mode', '--no-expose-wasm', '--single-threaded', '--expose-gc'],
};

function findNatsServer(): string {
  const dirs = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/local/sbin', '/usr/local/bin'];
  const found = dirs.map((d) => join(d, 'nats-server')).find((p) => existsSync(p));
  if (!found) throw new ConfigError(['nats-server is not installed: run `npm start` (it installs it) or `apt-get install -y nats-server`, or set HUB_NATS_URL']);
  return found;
}

/** A previous supervisor killed with SIGKILL can leave NATS behind; actors stop themselves when it dies. */
function killLeftovers(dataDir: string, log: Logger): void {
  const record = readProcesses(dataDir);
  if (!record) return;
  const sameSupervisor = !record.supervisor_start || processStart(record.supervisor) === record.supervisor_start;
  if (isAlive(record.supervisor) && sameSupervisor && record.supervisor !== process.pid) {
    throw new ConfigError([`another hub (pid ${record.supervisor}) is running with data dir ${dataDir}`]);
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
}

async function waitForPort(port: number, timeoutMs: number, what = 'NATS', host = '127.0.0.1'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 10; Date.now() < deadline; delay = Math.min(delay * 2, 200)) {
    const open = await new Promise<boolean>((resolve) => {
      const s = tcpConnect({ host, port }, () => { s.destroy(); resolve(true); });
      s.on('error', () => resolve(false));
    });
    if (open) return;
    await new Promise((r) => setTimeout(r, delay));
  }
  throw new Error(`${what} did not accept connections on ${host}:${port} within ${timeoutMs} ms`);
}

function lookupUser(name: string): { uid: number; gid: number } {
  const line = readFileSync('/etc/passwd', 'utf8').split('\n').find((l) => l.split(':')[0] === name);
  if (!line) throw new ConfigError([`Hub.services: no such system user ${JSON.stringify(name)}`]);
  const [, , uid, gid] = line.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}

/** A hub-managed service: its command, cwd and user, and the HUB_* environment the seed lists. */
function managedServiceSpec(config: HubConfig, svc: ServiceConfig, baseEnv: NodeJS.ProcessEnv): ChildSpec {
  const apiUrl = internalHubUrl(config, '/hub/api');
  const prefix = servicePrefix(svc.name);
  const subdomains = subdomainsOf(config);
  const access = JSON.stringify([`access:services!service=${svc.name}`]);
  const command = Array.isArray(svc.command) ? svc.command : ['/bin/sh', '-c', svc.command as string];
  let ids: { uid?: number; gid?: number } = {};
  if (typeof svc.user === 'string') {
    if (process.getuid?.() !== 0) throw new ConfigError([`Hub.services "${svc.name}".user: running a service as another user needs the hub to run as root`]);
    ids = lookupUser(svc.user);
  }
  return {
    id: `service:${svc.name}`, command: command[0], args: command.slice(1), ipc: false, cwd: typeof svc.cwd === 'string' ? svc.cwd : undefined, ...ids,
    env: { ...baseEnv, ...withPrefixAliases({
      ...(svc.environment as Record<string, string> | undefined),
      HUB_SERVICE_NAME: svc.name, HUB_API_TOKEN: svc.api_token, HUB_API_URL: apiUrl, HUB_BASE_URL: config.Hub.base_url,
      HUB_SERVICE_PREFIX: prefix, ...(svc.url ? { HUB_SERVICE_URL: svc.url } : {}),
      HUB_OAUTH_SCOPES: access, HUB_OAUTH_ACCESS_SCOPES: access,
      HUB_OAUTH_CLIENT_ALLOWED_SCOPES: JSON.stringify(svc.oauth_client_allowed_scopes ?? []),
      HUB_CLIENT_ID: typeof svc.oauth_client_id === 'string' ? svc.oauth_client_id : `service-${svc.name}`,
      HUB_OAUTH_CALLBACK_URL: serviceCallbackUrl(subdomains, svc),
      // with per-user subdomains the service is at a host of its own: its links and OAuth redirects name the hub's
      HUB_HOST: subdomains?.hubOrigin ?? '',
    } as Record<string, string>, config.Hub.env_prefix_aliases) },
  };
}

/**
 * `timeout` of each service with a url (the established hub 6.0's, default 30 s): how long the hub waits at start for
 * it to answer HTTP. A hub-managed one that does not (or keeps dying) stops the hub, as the established hub exits;
 * an external one is a warning. Resolves null when all is well, else why the hub must stop.
 */
async function awaitServices(services: ServiceConfig[], children: SupervisedChild[], log: Logger): Promise<string | null> {
  const signal = new AbortController().signal;
  const checks = services.filter((s) => typeof s.url === 'string' && s.url.startsWith('http://')).map(async (svc) => {
    const child = children.find((c) => c.spec.id === `service:${svc.name}`);
    const timeout = typeof svc.timeout === 'number' ? svc.timeout : 30;
    try {
      await waitForHttp(svc.url!, {
        timeoutMs: timeout * 1000, requestTimeoutMs: 2000, signal,
        ended: () => (child?.failed ? 'it keeps exiting (restarted too often)' : null),
      });
      log.info({ event: 'service.reachable', service: svc.name, url: svc.url }, `service ${svc.name} answers at ${svc.url}`);
      return null;
    } catch (e) {
      const why = `${(e as Error).message.replace(/^the server/, 'it')}`;
      if (!child) {
        log.warn({ event: 'service.unreachable', service: svc.name, url: svc.url, timeout }, `cannot connect to external service ${svc.name} at ${svc.url}: ${why}. Is it running?`);
        return null;
      }
      log.fatal({ event: 'service.unreachable', service: svc.name, url: svc.url, timeout }, `hub-managed service ${svc.name} did not answer at ${svc.url}: ${why}; the hub stops (Hub.services timeout)`);
      return `service ${svc.name} did not start`;
    }
  });
  return (await Promise.all(checks)).find((why) => why !== null) ?? null;
}

/**
 * Hub.internal_ssl at start: the CA and this node's certificate made (or the operator's files checked), and an
 * existing NATS the hub is told to use (Hub.nats_url alone) asked whether it refuses plain connections: one that
 * accepts them stops the start. Without internal_ssl, NATS traffic that leaves this machine is named once as a risk.
 */
async function internalTlsAtStart(config: HubConfig, ownNats: boolean, log: Logger): Promise<NatsTlsFiles | undefined> {
  if (!config.Hub.internal_ssl) {
    const peers = offMachineNatsPeers(config);
    if (peers.length) {
      log.warn({ event: 'nats.plain_between_machines', peers }, `NATS traffic to ${peers.join(', ')} leaves this machine in plain text without Hub.internal_ssl: `
        + 'the calls between nodes carry passwords and API tokens, readable and forgeable by anyone on the network path');
    }
    return undefined;
  }
  let files: NatsTlsFiles;
  try {
    files = prepareInternalTls(config);
  } catch (e) {
    throw new ConfigError([(e as Error).message]);
  }
  // a NATS the hub starts (alone or as a cluster member) has the TLS block it writes; one it is only told of is asked
  for (const url of ownNats ? [] : natsServers(config.Hub.nats_url)) {
    const stance = await natsTlsStance(url, 2000);
    if (stance === 'plain') throw new ConfigError([`Hub.internal_ssl: the NATS at ${url} accepts plain connections (or TLS without a client certificate): configure it with a tls block with verify: true`]);
    if (typeof stance === 'object') log.warn({ event: 'nats.tls_unchecked', url, why: stance.unreachable }, `Hub.internal_ssl: could not ask the NATS at ${url} whether it refuses plain connections (${stance.unreachable}); actors will connect with TLS only`);
  }
  return files;
}

/** A configuration's problems beyond its shape, one line each, checked before anything starts (and by `hub reload`). */
async function preflightProblems(config: HubConfig, log: Logger, warn: boolean): Promise<string[]> {
  const spawner = preflightSpawner(config, log);
  if (warn) for (const warning of spawner.warnings) log.warn({ event: 'spawner.warning', spawner_class: config.Hub.spawner_class }, warning);
  // the authenticator's section too, when this node runs the auth actor
  const authProblems = config.Supervisor.actors.includes('auth') ? await authenticatorProblems(config, log) : [];
  // the front door's certificate files (Hub.ssl_cert/ssl_key): readable, parsed, the key the certificate's
  const tlsProblems = config.Supervisor.actors.includes('gateway') ? [...certificateProblems(config), ...bindSocketProblems(config)] : [];
  return [...spawner.problems, ...authProblems, ...tlsProblems];
}

function restartPolicy(config: HubConfig): RestartPolicy {
  const s = config.Supervisor;
  return {
    backoffInitialMs: s.restart_backoff_initial * 1000, backoffMaxMs: s.restart_backoff_max * 1000,
    stableUptimeMs: s.stable_uptime * 1000, intensity: s.restart_intensity, periodMs: s.restart_period * 1000,
    shutdownMs: s.shutdown_timeout * 1000,
  };
}

async function start(config: HubConfig, loadAgain: () => Promise<HubConfig>): Promise<void> {
  useBaseUrl(config.Hub.base_url);
  const log = createLogger('supervisor', config.Hub.log_level, config.Hub.log_format, config.Hub.node_name);
  const problems = await preflightProblems(config, log, true);
  if (problems.length) throw new ConfigError(problems);
  const dataDir = config.Hub.data_dir;
  const run = runDir(dataDir);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  mkdirSync(run, { recursive: true, mode: 0o700 });
  killLeftovers(dataDir, log);
  if (config.Supervisor.actors.includes('gateway')) {
    // the front door, and with HTTPS its plain loopback and redirect ports (shared/tls.ts)
    // (a unix socket instead of Hub.port: the gateway replaces a stale one, and refuses a file that is not a socket)
    const publicPort = bindSocketPath(config) ? [] : [['Hub.port', config.Hub.ip, config.Hub.port] as const];
    for (const [option, ip, port] of [...publicPort, ...frontDoorPlainPorts(config)]) {
      const held = await portInUse(ip, port);
      if (held) throw new ConfigError([`${option}: ${ip}:${port} cannot be listened on (${held === 'EADDRINUSE' ? 'in use by another process, perhaps another hub' : held})`]);
    }
  }
  const configPath = resolvedConfigPath(dataDir);
  // every gateway must seal cookies with the same secret: resolved once, here
  const cookieSecret = resolveCookieSecret(config.Hub.cookie_secret, process.env, dataDir);
  // a hub-managed service without an api_token gets a fresh one at each start (registered by the tokens actor)
  const services = (config.Hub.services as ServiceConfig[]).map((s) => (s.command && !s.api_token ? { ...s, api_token: newToken() } : s));
  writeResolvedConfig({ ...config, Hub: { ...config.Hub, cookie_secret: cookieSecret, services } }, configPath);

  const policy = restartPolicy(config);
  const children: SupervisedChild[] = [];
  const supervisorStart = processStart(process.pid);
  let startupSeconds: number | undefined; // from this process's start until the hub first answered its health check
  const recordProcesses = () => {
    const record: ProcessesRecord = {
      supervisor: process.pid,
      supervisor_start: supervisorStart,
      children: Object.fromEntries(children.map((c) => [c.spec.id, c.pid ?? null])),
      starts: Object.fromEntries(children.filter((c) => c.pid).map((c) => [c.spec.id, processStart(c.pid!)])),
      restarts: Object.fromEntries(children.map((c) => [c.spec.id, c.restarts])),
      failed: children.filter((c) => c.failed).map((c) => c.spec.id),
      ...(startupSeconds !== undefined ? { startup_seconds: startupSeconds } : {}),
      version: HUB_VERSION, commit: HUB_COMMIT, signals: ['SIGHUP', 'SIGUSR2'],
    };
    // whole or not at all: the command line decides from this file whether a hub runs here
    const tmp = `${processesFile(dataDir)}.tmp`;
    writeFileSync(tmp, JSON.stringify(record));
    renameSync(tmp, processesFile(dataDir));
  };
  // Children get what they need to run, not the supervisor's whole environment.
  const baseEnv: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, LANG: process.env.LANG, TZ: process.env.TZ, NODE_ENV: process.env.NODE_ENV,
    NODE_EXTRA_CA_CERTS: process.env.NODE_EXTRA_CA_CERTS }; // a CA of one's own (an ACME CA's directory, an https target)
  // the established hub's metric variables (prefix, buckets), checked here so a wrong one stops the start, not an actor
  // the spawner's Kubernetes credentials (Hub.spawner_class "kubernetes"): a kubeconfig, or the service account of the hub's own pod
  const spawnerEnv = Object.fromEntries(['KUBECONFIG', 'KUBERNETES_SERVICE_HOST', 'KUBERNETES_SERVICE_PORT'].filter((k) => process.env[k] !== undefined).map((k) => [k, process.env[k]]));
  const metricsProblems = metricsEnvProblems(process.env);
  if (metricsProblems.length) throw new ConfigError(metricsProblems);
  const metricsEnv = Object.fromEntries(METRICS_ENV.filter((k) => process.env[k] !== undefined).map((k) => [k, process.env[k]]));
  // The hub's NATS secret: HUB_NATS_TOKEN when given, else made at the first start and kept in the data dir (0600).
  // It is the admin's password and the routes' between cluster members, and every bus user's password is derived
  // from it (shared/nats-auth.ts): each actor gets only its own user's, so none can speak as another.
  // A cluster's members admit each other and every node's actors with it: it must be given to each node.
  const clustered = config.Hub.nats_cluster_port > 0;
  if (clustered && !process.env[NATS_TOKEN_ENV]) throw new ConfigError([`Hub.nats_cluster_port: every member of a NATS cluster needs the same token: set ${NATS_TOKEN_ENV} on every node`]);
  if (process.env[NATS_TOKEN_ENV] && !validBusSecret(process.env[NATS_TOKEN_ENV])) throw new ConfigError([`${NATS_TOKEN_ENV}: expected ${SECRET_SHAPE_TEXT}`]);
  const natsSecret = busSecret(dataDir, process.env[NATS_TOKEN_ENV], true)!;
  // the hub starts its own NATS unless it is told to use an existing one (a cluster member is always its own)
  const ownNats = !config.Hub.nats_url || clustered;
  const natsTls = await internalTlsAtStart(config, ownNats, log);
  // the auth state key goes to the auth actor alone; a hub asked to keep auth state without one does not start
  let cryptEnv: NodeJS.ProcessEnv = {};
  if (config.Authenticator.enable_auth_state) {
    const keys = parseCryptKeys(process.env);
    if ('problem' in keys) throw new ConfigError([`Authenticator.enable_auth_state: ${keys.problem}`]);
    cryptEnv = { [CRYPT_KEY_ENV]: process.env[CRYPT_KEY_ENV] || process.env.JUPYTERHUB_CRYPT_KEY };
  }

  if (ownNats) {
    const natsConf = join(run, 'nats.conf');
    writeFileSync(natsConf, natsServerConfig({
      port: config.Hub.nats_port,
      // a cluster's members need names of their own (the port alone may repeat on other machines)
      name: clustered ? `hub-${config.Hub.node_name}-${config.Hub.nats_port}` : `hub-${config.Hub.nats_port}`,
      storeDir: join(dataDir, 'jetstream'), pidFile: join(run, 'nats.pid'), secret: natsSecret, tls: natsTls,
      ...(clustered ? { cluster: { host: config.Hub.nats_cluster_ip, port: config.Hub.nats_cluster_port, routes: config.Hub.nats_routes } } : {}),
    }), { mode: 0o600 });
    children.push(new SupervisedChild({ id: 'nats', command: findNatsServer(), args: ['-c', natsConf], ipc: false, env: baseEnv }, policy, log, recordProcesses));
  }
  // Supervisor.actors: which actors run on this node (the others run on other nodes of the same hub)
  for (const actor of ACTORS.filter((a) => config.Supervisor.actors.includes(a))) {
    const copies = actor === 'gateway' ? config.Supervisor.gateways : 1;
    for (let i = 1; i <= copies; i++) {
      children.push(new SupervisedChild({
        // several gateways share Hub.port (SO_REUSEPORT); each is a child of its own, restarted on its own
        id: i > 1 ? `${actor}-${i}` : actor, command: process.execPath, ipc: true,
        args: [...(ACTOR_NODE_FLAGS[actor] ?? []), ...(RUNNING_FROM_SOURCE ? ['--import', 'tsx'] : []), actorEntry(actor)],
        env: {
          ...baseEnv, ...metricsEnv, MALLOC_ARENA_MAX: MALLOC_ARENAS, [RESOLVED_CONFIG_ENV]: configPath, ...busEnv(natsSecret, actor), ...(actor === 'auth' ? cryptEnv : {}), ...(actor === 'spawner' ? spawnerEnv : {}),
          ...(copies > 1 ? { HUB_GATEWAY_INDEX: String(i) } : {}),
        },
      }, policy, log, recordProcesses));
    }
  }

  for (const svc of services.filter((s) => s.command)) {
    children.push(new SupervisedChild(managedServiceSpec(config, svc, baseEnv), policy, log, recordProcesses));
  }

  let stopping: Promise<void> | undefined;
  const stopAll = (signal: string, code = 0) => (stopping ??= (async () => {
    log.info({ event: 'supervisor.stopping', signal }, 'stopping the hub');
    for (const child of [...children].reverse()) await child.stop();
    rmSync(processesFile(dataDir), { force: true });
    log.info({ event: 'supervisor.stopped' }, 'hub stopped');
    process.exit(code);
  })());
  process.on('SIGTERM', () => void stopAll('SIGTERM'));
  process.on('SIGINT', () => void stopAll('SIGINT'));
  // POST /hub/api/shutdown, relayed by the actors: tell every actor (the spawner reads `servers`), then stop
  // after a moment, so the gateway can still send its 202.
  let shutdownAsked = false;
  const onShutdownRequest = (m: unknown) => {
    if (!isShutdownRequest(m) || shutdownAsked || stopping) return;
    shutdownAsked = true;
    log.info({ event: 'supervisor.shutdown_requested', by: m.by, servers: m.servers }, 'shutdown requested through the API');
    for (const child of children) child.send(m);
    setTimeout(() => void stopAll('api'), SHUTDOWN_GRACE_MS);
  };
  for (const child of children) child.onMessage(onShutdownRequest);
  // a front door that cannot listen before the hub first answered: its port was taken after the check above
  for (const child of children.filter((c) => c.spec.id.startsWith('gateway'))) child.onMessage((m) => {
    if (!isFrontDoorFailed(m) || startupSeconds !== undefined || stopping) return;
    log.fatal({ event: 'supervisor.front_door_failed', gateway: child.spec.id, reason: m.reason },
      `${m.reason}: another process took it after the hub checked it at start; the hub stops`);
    void stopAll('front door', 1);
  });

  // `hub reload` and SIGHUP (issue 24, shared/reload.ts): the file validated again, live options applied, the rest named
  const managedServices = (c: HubConfig) => new Map((c.Hub.services as ServiceConfig[]).filter((s) => s.command).map((s) => [s.name, s]));
  const reload = createReloader(readResolvedConfig({ [RESOLVED_CONFIG_ENV]: configPath }), {
    load: loadAgain,
    preflight: (next) => preflightProblems(next, log, false),
    resolve: (next, current) => ({ ...next, Hub: { ...next.Hub, cookie_secret: resolveCookieSecret(next.Hub.cookie_secret, process.env, dataDir),
      // a hub-managed service keeps the token made for it at start
      services: (next.Hub.services as ServiceConfig[]).map((s) => (s.command && !s.api_token ? { ...s, api_token: managedServices(current).get(s.name)?.api_token ?? newToken() } : s)) } }),
    write: (c) => writeResolvedConfig(c, configPath),
    applyOwn: async (previous, next) => {
      const [before, after] = [managedServices(previous), managedServices(next)];
      const same = (a?: ServiceConfig, b?: ServiceConfig) => JSON.stringify(a) === JSON.stringify(b);
      for (const [name, svc] of before) {
        const child = children.find((c) => c.spec.id === `service:${name}`);
        if (child && !same(svc, after.get(name))) { await child.stop(); children.splice(children.indexOf(child), 1); }
      }
      for (const [name, svc] of after) {
        if (same(svc, before.get(name))) continue;
        try {
          const child = new SupervisedChild(managedServiceSpec(next, svc, baseEnv), policy, log, recordProcesses);
          children.push(child);
          child.start();
        } catch (e) {
          log.error({ event: 'service.not_started', service: name, err: (e as Error).message }, `hub-managed service ${name} not started: ${(e as Error).message}`);
        }
      }
      recordProcesses();
    },
    actors: () => children.filter((c) => c.spec.ipc && c.pid).map((c) => ({ id: c.spec.id, send: (m: unknown) => c.send(m), onMessage: (fn: (m: unknown) => void) => c.onMessage(fn) })),
    writeResult: (result) => writeJsonAtomically(reloadResultFile(run), result),
    log, confirmMs: config.Hub.rpc_timeout * 1000, running: { authStateKey: Boolean(cryptEnv[CRYPT_KEY_ENV]) },
  });
  process.on('SIGHUP', () => void reload(takeReloadAsker(run)).catch((err) => log.error({ event: 'supervisor.reload_failed', err }, 'reload failed')));
  for (const child of children) child.onMessage((m) => { if (isReloadAsked(m)) void reload(m.by, m.id).then((result) => child.send({ type: RELOAD_ASKED_REPLY, id: m.id, result })); });
  // `hub restart [ACTOR]` (shared/rolling-restart.ts): asked with SIGUSR2 and a request file; one at a time
  let restarting: Promise<unknown> = Promise.resolve();
  process.on('SIGUSR2', () => {
    const request = takeRestartRequest(run);
    if (!request || stopping) return;
    restarting = restarting.then(async () => {
      // a whole restart runs the file as it is now (what only a stop and start applies kept); an invalid file stops it
      const prepared = request.actor ? null : await reload.prepareRestart(request.by);
      if (prepared && !prepared.ok) {
        writeJsonAtomically(restartResultFile(run), { id: request.id, at: new Date().toISOString(), by: request.by, ok: false, actor: null, replaced: [], draining: [],
          problems: prepared.problems.map((p) => `the configuration file: ${p}`), ms: 0 } satisfies RestartResult);
        return;
      }
      const result = await rollingRestart(children, request, {
        readyMs: config.Supervisor.startup_timeout * 1000, drainMs: config.Supervisor.drain_timeout * 1000, log,
      });
      if (prepared) result.config = { applied: prepared.changed, needs_full_restart: prepared.needs_full_restart, why: prepared.why };
      writeJsonAtomically(restartResultFile(run), result);
    }).catch((err) => log.error({ event: 'supervisor.restart_failed', err }, 'rolling restart failed'));
  });

  const t0 = Date.now();
  const [first, ...rest] = children;
  if (first.spec.id === 'nats') {
    first.start();
    await waitForPort(config.Hub.nats_port, config.Supervisor.startup_timeout * 1000);
  } else {
    rest.unshift(first);
  }
  // Actors do not wait for each other (each waits for what it needs), but the API's path boots first: tokens,
  // auth and the gateways, then the others once the front door listens (bounded). On two cores six processes
  // booting at once each took the time of all, and a restarted hub answered its API a second later.
  const apiPath = rest.filter((c) => API_PATH.has(c.spec.id.replace(/-\d+$/, '')));
  for (const child of apiPath) child.start();
  // issue 13: a readable last line of start-up (where to go, how to get in); see shared/ready-line.ts. Listening
  // before anything is awaited: the auth actor sends the first-admin set-up code over IPC as soon as it runs.
  // (a node without a gateway has no front door of its own to announce)
  if (config.Supervisor.actors.includes('gateway')) {
    void announceReady(config, log, children.find((c) => c.spec.id === 'auth')).then((healthy) => {
      if (!healthy || stopping) return;
      startupSeconds = process.uptime();
      recordProcesses();
    });
  }
  if (config.Supervisor.actors.includes('gateway')) {
    // the gateways listen only once the others answer: they say over IPC when their own start is done
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, FRONT_DOOR_FIRST_MS);
      for (const gateway of apiPath.filter((c) => c.spec.id.startsWith('gateway'))) {
        gateway.onMessage((m) => { if (isGatewayBooted(m)) { clearTimeout(timer); resolve(); } });
      }
    });
  }
  for (const child of rest) if (!apiPath.includes(child)) child.start();
  // (a stop meanwhile ends the process, and these waits with it)
  void awaitServices(services, children, log).then((why) => (why && !stopping ? stopAll(why, 1) : undefined));
  log.info({ event: 'supervisor.started', ms: Date.now() - t0, url: `http://${config.Hub.ip}:${config.Hub.port}`, node: config.Hub.node_name,
    actors: config.Supervisor.actors, gateways: config.Supervisor.actors.includes('gateway') ? config.Supervisor.gateways : 0 }, 'hub starting');
}


/**
 * `hub` and `hub start` run the hub; every other verb is handed to the command-line tool (cli/), loaded
 * only then, so the supervisor carries none of it.
 */
/** `--log-level X` and `--log-level=X` are `--Hub.log_level=X`. */
function logLevelFlag(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--log-level') out.push(`--Hub.log_level=${argv[++i] ?? ''}`);
    else if (argv[i].startsWith('--log-level=')) out.push(`--Hub.log_level=${argv[i].slice('--log-level='.length)}`);
    else out.push(argv[i]);
  }
  return out;
}

async function main(rawArgv: string[]): Promise<number> {
  const argv = logLevelFlag(rawArgv);
  const { commandOf, parseArgs, UsageError } = await import('./cli/args.js');
  if (commandOf(argv) !== 'start') {
    const { runCli } = await import('./cli/main.js');
    return runCli(argv);
  }
  try {
    const { configArgs } = parseArgs('start', argv[0] === 'start' ? argv.slice(1) : argv, { positional: [0, 0] });
    await start(await loadConfig({ argv: configArgs }), () => loadConfig({ argv: configArgs }));
    return -1; // keep running
  } catch (e) {
    if (e instanceof ConfigError || e instanceof UsageError) {
      process.stderr.write(`hub${e instanceof UsageError ? ' ' : ': '}${e.message}\n`); // a UsageError names its verb
      return 2;
    }
    throw e;
  }
}

const code = await main(process.argv.slice(2));
if (code >= 0) process.exit(code);
