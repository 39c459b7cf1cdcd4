// `hub reload` (and SIGHUP to the supervisor): what a new configuration changes, sorted into what the running hub
// takes live and what needs a restart. The supervisor validates the file as at start, writes the resolved config
// with only the live changes applied, and tells every actor over IPC; each actor re-reads it and applies its part
// (runActor's `reload`). A change that cannot be taken live is named ("needs `hub restart`") and not applied, so
// an actor restarted meanwhile runs with what every other actor runs.
import { readFileSync, rmSync, statSync } from 'node:fs';
import { ConfigError, SCHEMA, type HubConfig } from './config.js';
import type { Logger } from './log.js';

/**
 * Options a running hub cannot take, each with why (the `hub reload` answer says it). Others not live and not listed
 * here are read once when an actor starts; `hub restart` applies them all.
 */
export const RESTART_ONLY: Readonly<Record<string, string>> = {
  'Spawner.poll_interval': 'the spawner\'s poll of running servers is set up once, at its start',
  ...Object.fromEntries(['sbatch', 'squeue', 'scontrol', 'scancel', 'sacct', 'slurm_conf', 'poll_interval'].map((o) => [`SlurmSpawner.${o}`,
    'the spawner\'s SLURM client and job watcher are made once, at its start (they serve the running jobs too)'])),
  'KubeSpawner.namespace': 'the spawner\'s pod watch (and its adoption of running pods) covers this namespace from its start',
  'KubeSpawner.enable_user_namespaces': 'it decides which namespaces the spawner\'s pod watch covers, from its start',
  ...Object.fromEntries(['k8s_api_host', 'k8s_api_ssl_ca_cert', 'k8s_api_verify_ssl', 'k8s_api_request_timeout', 'k8s_api_request_retry_timeout'].map((o) => [`KubeSpawner.${o}`,
    'the spawner\'s Kubernetes API client and its pod watch are made once, at its start'])),
};

/**
 * Options only a stop and start of the whole hub applies: during `hub restart` old and new processes run side by
 * side, and these would split them (two stores, two buses, two front doors). `hub restart` keeps them as they were.
 */
export const FULL_RESTART_ONLY: Readonly<Record<string, string>> = {
  'Hub.port': 'the supervisor checks it and the gateways share it (SO_REUSEPORT) from the hub\'s start',
  'Hub.hub_port': 'the supervisor checks it and the gateways share it from the hub\'s start',
  'Hub.data_dir': 'every actor keeps its files and stores there',
  'Hub.db_url': 'every actor opens its store once, at its start; old and new processes would write two stores',
  'Hub.nats_url': 'every actor connects to NATS once, at its start; old and new processes would be on two buses',
  'Hub.nats_port': 'NATS and every actor\'s connection to it are set up at the hub\'s start',
};

/** Options the running hub applies without restarting anything (each actor that uses one re-reads it on reload). */
export const LIVE_OPTIONS: readonly string[] = [
  'Hub.log_level', 'Hub.services', 'Hub.api_tokens', 'Hub.load_roles', 'Hub.extra_headers',
  // the next starts (spawner handlers, the gateway's pages and call budgets)
  'Hub.active_server_limit', 'Hub.named_server_limit_per_user', 'Hub.concurrent_spawn_limit', 'Hub.spawn_queue_limit',
  ...['cmd', 'args', 'environment', 'start_timeout', 'http_timeout', 'slow_spawn_timeout', 'slow_stop_timeout', 'stop_signal_timeout',
    'notebook_dir', 'default_url', 'debug', 'disable_user_config', 'mem_limit', 'cpu_limit', 'profiles', 'group_overrides', 'apply_user_options',
    'placement', 'node_limit', 'node', 'node_lost_timeout',
  ].map((o) => `Spawner.${o}`),
  // the backends' own sections: a start reads its section then (services/spawner/handlers.ts sectionFor), so running
  // servers keep what they started with; what a backend's client or watch is made of once is in RESTART_ONLY
  ...(['LocalProcessSpawner', 'DockerSpawner', 'SlurmSpawner', 'KubeSpawner'] as const)
    .flatMap((s) => Object.keys(SCHEMA[s]).map((o) => `${s}.${o}`)).filter((name) => !Object.hasOwn(RESTART_ONLY, name)),
  // who may log in and how (the auth actor makes its authenticator again; the gateway reads these at use); a
  // username_map change maps the next logins and API names (users keep theirs); enable_auth_state: liveAuthState
  ...['admin_users', 'username_map', 'blocked_users', 'allowed_users', 'allow_all', 'allow_existing_users', 'auth_refresh_age', 'refresh_pre_spawn',
    'password_form', 'auto_login', 'manage_groups', 'manage_roles', 'auth_state_environment'].map((o) => `Authenticator.${o}`),
  // every option of the authenticators' own sections (`Section.*`)
  ...['PasswordAuthenticator', 'SharedPasswordAuthenticator', 'DummyAuthenticator', 'PAMAuthenticator', 'LDAPAuthenticator', 'OAuthenticator'].map((s) => `${s}.*`),
];

const isLive = (section: string, option: string) => LIVE_OPTIONS.includes(`${section}.${option}`) || LIVE_OPTIONS.includes(`${section}.*`);

/** Supervisor options: read only when the supervisor itself starts. */
const SUPERVISOR_SECTION = 'Supervisor';

export interface ConfigChanges {
  /** `Section.option` taken live */
  live: string[];
  /** changed options the running hub cannot take: `hub restart` (every actor replaced) applies them */
  restart: string[];
  /** changed Supervisor options: only a stop and start of the hub applies them */
  supervisor: string[];
  /** why an option of `restart` or `supervisor` cannot be taken live, where it is known */
  why: Record<string, string>;
}

/** What the running hub has that decides whether some options can change live. */
export interface RunningHub {
  /** the auth actor holds HUB_CRYPT_KEY: the supervisor gives it only when it starts with enable_auth_state on */
  authStateKey: boolean;
}

const AUTH_STATE = 'Authenticator.enable_auth_state';

/**
 * Authenticator.enable_auth_state changes live (the auth actor keeps, or stops keeping, new auth state) unless it
 * is turned on in a hub whose auth actor has no key: the supervisor gives it one only when it starts with it on.
 */
function authStateChange(next: HubConfig, running: RunningHub): 'live' | string {
  return !next.Authenticator.enable_auth_state || running.authStateKey ? 'live'
    : 'the supervisor gives the auth state key (HUB_CRYPT_KEY) to the auth actor only when the hub starts with auth state on: stop and start the hub';
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/** Every option whose value differs between two validated configurations, sorted by how it can be applied. */
export function configChanges(previous: HubConfig, next: HubConfig, running: RunningHub = { authStateKey: true }): ConfigChanges {
  const out: ConfigChanges = { live: [], restart: [], supervisor: [], why: {} };
  const p = previous as unknown as Record<string, Record<string, unknown>>;
  const n = next as unknown as Record<string, Record<string, unknown>>;
  for (const section of [...new Set([...Object.keys(p), ...Object.keys(n)])].sort()) {
    for (const option of [...new Set([...Object.keys(p[section] ?? {}), ...Object.keys(n[section] ?? {})])].sort()) {
      if (same(p[section]?.[option], n[section]?.[option])) continue;
      const name = `${section}.${option}`;
      const authState = name === AUTH_STATE ? authStateChange(next, running) : null;
      if (section === SUPERVISOR_SECTION) {
        out.supervisor.push(name);
        out.why[name] = 'the supervisor\'s own, read when it starts';
      } else if (Object.hasOwn(FULL_RESTART_ONLY, name)) {
        out.supervisor.push(name);
        out.why[name] = FULL_RESTART_ONLY[name];
      } else if (isLive(section, option) || authState === 'live') out.live.push(name);
      else if (authState) {
        out.supervisor.push(name);
        out.why[name] = authState;
      } else {
        out.restart.push(name);
        if (Object.hasOwn(RESTART_ONLY, name)) out.why[name] = RESTART_ONLY[name];
      }
    }
  }
  return out;
}

/**
 * What `hub restart` runs: `next` whole, but for what only a stop and start applies (the Supervisor section,
 * FULL_RESTART_ONLY, auth state turned on without its key), kept as `previous` has it.
 */
export function withRestartOptions(previous: HubConfig, next: HubConfig, changes: ConfigChanges): HubConfig {
  const out = structuredClone(next) as unknown as Record<string, Record<string, unknown>>;
  const p = previous as unknown as Record<string, Record<string, unknown>>;
  for (const name of changes.supervisor) {
    const [section, option] = name.split('.');
    out[section] = { ...out[section], [option]: structuredClone(p[section]?.[option]) };
  }
  return out as unknown as HubConfig;
}

/** `previous` with the live options of `next` (or those named, `Section.option`): what the running hub runs after a reload. */
export function withLiveOptions(previous: HubConfig, next: HubConfig, live: readonly string[] = LIVE_OPTIONS): HubConfig {
  const out = structuredClone(previous) as unknown as Record<string, Record<string, unknown>>;
  const n = next as unknown as Record<string, Record<string, unknown>>;
  for (const name of live) {
    const [section, option] = name.split('.');
    out[section] = option === '*' ? structuredClone(n[section]) : { ...out[section], [option]: structuredClone(n[section]?.[option]) };
  }
  return out as unknown as HubConfig;
}

/** IPC: the supervisor asks its actors to apply the resolved config again; `audit` to the one that records it. */
export const RELOAD_MESSAGE = 'hub.reload';
export interface ReloadRequest { type: typeof RELOAD_MESSAGE; id: string; audit?: { who: string; changed: string[]; needs_restart: string[] } }
export const isReloadRequest = (m: unknown): m is ReloadRequest =>
  typeof m === 'object' && m !== null && (m as { type?: unknown }).type === RELOAD_MESSAGE && typeof (m as { id?: unknown }).id === 'string';

/** IPC: an actor's answer to a reload (what it applied, or why it could not). */
export const RELOADED_MESSAGE = 'hub.reloaded';
export interface ReloadedReply { type: typeof RELOADED_MESSAGE; id: string; ok: boolean; problem?: string }
export const isReloadedReply = (m: unknown): m is ReloadedReply =>
  typeof m === 'object' && m !== null && (m as { type?: unknown }).type === RELOADED_MESSAGE;

/**
 * IPC: an actor relays `hub reload --all-nodes` (NATS `hub.supervisor.reload`, which the supervisor cannot hear: it
 * has no NATS client) to its supervisor, and answers the command with the supervisor's reply. Every actor of a node
 * relays the same request: the supervisor reloads once per id.
 */
export const RELOAD_ASKED = 'hub.reload.asked';
export const RELOAD_ASKED_REPLY = 'hub.reload.answer';
export interface ReloadAsked { type: typeof RELOAD_ASKED; id: string; by: string }
export interface ReloadAnswer { type: typeof RELOAD_ASKED_REPLY; id: string; result: ReloadResult }
export const isReloadAsked = (m: unknown): m is ReloadAsked =>
  typeof m === 'object' && m !== null && (m as { type?: unknown }).type === RELOAD_ASKED && typeof (m as { id?: unknown }).id === 'string';
export const isReloadAnswer = (m: unknown): m is ReloadAnswer =>
  typeof m === 'object' && m !== null && (m as { type?: unknown }).type === RELOAD_ASKED_REPLY;

/** What the last reload did, kept in `<data_dir>/run/reload.json` for `hub reload` to read back. */
export interface ReloadResult {
  /** increases with every reload of this supervisor (the command waits for a newer one than it saw) */
  seq: number;
  at: string;
  by: string;
  ok: boolean;
  /** why the new file was refused (nothing changed) */
  problems: string[];
  changed: string[];
  needs_restart: string[];
  needs_full_restart: string[];
  /** why an option of needs_restart or needs_full_restart cannot change live, where it is known */
  why?: Record<string, string>;
  /** actors that did not confirm within the bound */
  unconfirmed: string[];
}

export function reloadResultFile(runDir: string): string {
  return `${runDir}/reload.json`;
}

/** `hub reload` leaves who asked here before its SIGHUP (a signal carries no name); the supervisor takes it. */
export const reloadAskerFile = (runDir: string) => `${runDir}/reload-asker`;

/** Who asked for the reload a SIGHUP starts: the command line's account when it just said so, else the signal. */
export function takeReloadAsker(runDir: string): string {
  const file = reloadAskerFile(runDir);
  try {
    const fresh = Date.now() - statSync(file).mtimeMs < 10_000;
    const who = readFileSync(file, 'utf8').trim().slice(0, 200);
    rmSync(file, { force: true });
    return fresh && who ? `${who} (hub reload)` : 'SIGHUP';
  } catch {
    return 'SIGHUP';
  }
}

/** What the supervisor's reload needs, given by it (shared/supervision.ts children, its config resolution). */
export interface ReloaderDeps {
  /** reads and validates the configuration as at start (throws a ConfigError listing every problem) */
  load: () => Promise<HubConfig>;
  /** the start's other checks of a configuration (spawner, authenticator, certificates): problems, one line each */
  preflight: (config: HubConfig) => Promise<string[]>;
  /** the configuration with what the supervisor resolves at start (cookie secret; service tokens it made, kept) */
  resolve: (config: HubConfig, current: HubConfig) => HubConfig;
  /** the resolved configuration the actors read (written whole, atomically) */
  write: (config: HubConfig) => void;
  /** the supervisor's own share of a live change, once the actors took theirs (hub-managed services started or stopped) */
  applyOwn: (previous: HubConfig, next: HubConfig) => Promise<void>;
  /** actors to tell: id, IPC send, a way to hear their answer */
  actors: () => { id: string; send: (m: unknown) => boolean; onMessage: (fn: (m: unknown) => void) => void }[];
  writeResult: (result: ReloadResult) => void;
  log: Logger;
  /** how long actors have to confirm */
  confirmMs: number;
  /** what the running hub has that decides whether some options can change live */
  running: RunningHub;
}


/**
 * The supervisor's reloader: one reload at a time (a second waits for the first), each validated whole before
 * anything changes. Resolves with what it did (also written for `hub reload`).
 */
export interface Reloader {
  /** `hub reload`: the live options applied, the rest named (a repeated `id` gets the same answer) */
  (by: string, id?: string): Promise<ReloadResult>;
  /** before a whole `hub restart`: the file's options for the fresh processes written (see below) */
  prepareRestart(by: string): Promise<ReloadResult>;
}

export function createReloader(initial: HubConfig, d: ReloaderDeps): Reloader {
  let current = initial;
  let seq = 0;
  let chain: Promise<unknown> = Promise.resolve();
  /** `<reload id>/<actor id>` → who is waiting for that actor's reply */
  const waiting = new Map<string, (reply: ReloadedReply) => void>();
  const heard = new Set<string>();

  /** The file read, resolved and checked again as at start: the new configuration, or the refusal to answer with. */
  const readAndCheck = async (by: string): Promise<{ base: ReloadResult; next?: HubConfig }> => {
    seq++;
    const base: ReloadResult = { seq, at: new Date().toISOString(), by, ok: false, problems: [], changed: [], needs_restart: [], needs_full_restart: [], unconfirmed: [] };
    try {
      const next = d.resolve(await d.load(), current);
      const problems = await d.preflight(next);
      return problems.length ? { base: { ...base, problems } } : { base, next };
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      return { base: { ...base, problems: e.problems } };
    }
  };

  const once = async (by: string): Promise<ReloadResult> => {
    const { base, next } = await readAndCheck(by);
    if (!next) return base;
    const changes = configChanges(current, next, d.running);
    const previous = current;
    current = withLiveOptions(current, next, changes.live);
    const result: ReloadResult = { ...base, ok: true, problems: [], changed: changes.live, needs_restart: changes.restart, needs_full_restart: changes.supervisor, why: changes.why };
    if (!changes.live.length && !changes.restart.length && !changes.supervisor.length) return result;
    d.write(current);
    // every actor re-reads the file and applies its part: first the owners of tokens, roles and services (at once),
    // then the gateways, whose caches then fill from the new answers; the first to apply records the audit event
    const id = `${process.pid}-${seq}`;
    const until = Date.now() + d.confirmMs;
    const unconfirmed: string[] = [];
    const problems: string[] = [];
    let audit: ReloadRequest['audit'] = { who: by, changed: changes.live, needs_restart: [...changes.restart, ...changes.supervisor] };
    const ask = async (actor: ReturnType<ReloaderDeps['actors']>[number]): Promise<void> => {
      if (!heard.has(actor.id)) {
        heard.add(actor.id);
        actor.onMessage((m) => { if (isReloadedReply(m)) waiting.get(`${m.id}/${actor.id}`)?.(m); });
      }
      const replied = new Promise<ReloadedReply | null>((resolve) => {
        waiting.set(`${id}/${actor.id}`, resolve);
        setTimeout(() => resolve(null), Math.max(0, until - Date.now())).unref();
      });
      const sent = actor.send({ type: RELOAD_MESSAGE, id, ...(audit ? { audit } : {}) } satisfies ReloadRequest);
      if (sent) audit = undefined;
      const reply = sent ? await replied : undefined; // not running now: it reads the file when it starts
      waiting.delete(`${id}/${actor.id}`);
      if (reply === null) unconfirmed.push(actor.id);
      else if (reply && !reply.ok) problems.push(`${actor.id}: ${reply.problem ?? 'failed'}`);
    };
    const actors = d.actors();
    const isGateway = (a: { id: string }) => /^gateway(-\d+)?$/.test(a.id);
    await Promise.all(actors.filter((a) => !isGateway(a)).map(ask));
    await Promise.all(actors.filter(isGateway).map(ask));
    await d.applyOwn(previous, current);
    return { ...result, unconfirmed, problems };
  };

  /**
   * Before a whole `hub restart`: the file read and checked again; what only a restart applies is written for the
   * fresh processes to read (what only a stop and start applies is kept, and named). Nothing is sent to the running
   * actors: the restart replaces them. An invalid file changes nothing and stops the restart.
   */
  const prepareRestart = (by: string): Promise<ReloadResult> => {
    const run = chain.then(async (): Promise<ReloadResult> => {
      const { base, next } = await readAndCheck(by);
      if (!next) return base;
      const changes = configChanges(current, next, d.running);
      const previous = current;
      current = withRestartOptions(current, next, changes);
      if (changes.live.length || changes.restart.length) {
        d.write(current);
        await d.applyOwn(previous, current);
      }
      return { ...base, ok: true, problems: [], changed: [...changes.live, ...changes.restart].sort(), needs_full_restart: changes.supervisor, why: changes.why };
    });
    chain = run.catch(() => undefined);
    return run;
  };

  const byId = new Map<string, Promise<ReloadResult>>();
  const reload = (by: string, id?: string) => {
    const earlier = id ? byId.get(id) : undefined;
    if (earlier) return earlier;
    const run = chain.then(() => once(by)).then((result) => {
      d.writeResult(result);
      const level = result.ok ? 'info' : 'error';
      d.log[level]({ event: result.ok ? 'supervisor.reloaded' : 'supervisor.reload_refused', by, changed: result.changed, needs_restart: result.needs_restart,
        needs_full_restart: result.needs_full_restart, problems: result.problems, unconfirmed: result.unconfirmed },
      result.ok ? `configuration reloaded: ${result.changed.length ? result.changed.join(', ') : 'nothing to change live'}` : `configuration not reloaded: ${result.problems.join('; ')}`);
      return result;
    });
    chain = run.catch(() => undefined);
    if (id) {
      byId.set(id, run);
      if (byId.size > 32) byId.delete(byId.keys().next().value!);
    }
    return run;
  };
  return Object.assign(reload, { prepareRestart });
}

/**
 * A view of the configuration that follows `hub reload`: each section is looked up when it is read, so code that keeps
 * this object and reads `config.Spawner.profiles` at use sees the reloaded value (a section copied out at start does
 * not; only live options reach a running actor anyway).
 */
export function liveConfig(initial: HubConfig): { config: HubConfig; use(next: HubConfig): void } {
  let current = initial as unknown as Record<PropertyKey, unknown>;
  const config = new Proxy({} as HubConfig, {
    get: (_target, key) => current[key],
    has: (_target, key) => key in current,
    ownKeys: () => Reflect.ownKeys(current),
    getOwnPropertyDescriptor: (_target, key) => {
      const d = Reflect.getOwnPropertyDescriptor(current, key);
      return d && { ...d, configurable: true };
    },
  });
  return { config, use: (next) => { current = next as unknown as Record<PropertyKey, unknown>; } };
}
