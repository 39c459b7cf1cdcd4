// The spawner's operations: start (with readiness and progress), stop, the lists other actors read,
// re-adoption of servers that outlived a previous spawner, and activity. How a server actually runs is
// the backend's business (backend.ts; `Hub.spawner_class`); everything here is the same for all of them.
import { join } from 'node:path';
import type { AuditPublisher } from '../../shared/audit.js';
import type { EventChange } from '../../shared/subjects.js';
import { hubPublicUrl, internalHubUrl, publicHubUrl, type HubConfig } from '../../shared/config.js';
import { outsideRequest } from '../../shared/context.js';
import { errors, HubError } from '../../shared/errors.js';
import type { OAuthClient, TokensClient } from '../../shared/contracts/index.js';
import { parseJson } from '../../shared/json.js';
import { withPrefixAliases } from '../../shared/environment.js';
import type { Logger } from '../../shared/log.js';
import {
  gauge, HotCounter, HotHistogram, jupyterhubHistogram, jupyterhubName, jupyterhubSpawnBuckets, jupyterhubStopBuckets, secondsSince, SLOW_BUCKETS,
  SPAWN_BUCKETS,
} from '../../shared/metrics.js';
import { REPO_ROOT, RUNNING_FROM_SOURCE } from '../../shared/paths.js';
import { chooseProfile, groupOverridesFor, limitsOf, sectionFor, userOptionSettings, type StartChoice } from '../../shared/profiles.js';
import {
  invalidLocationReason, invalidServerNameReason, isActive, locationTarget, nodeLostReason, serverClientId, serverId, serverKey, serverModel, serverUrl,
  type ProgressEvent, type ServerRecord,
} from '../../shared/servers.js';
import { isoNow } from '../../shared/time.js';
import { browserLocation, subdomainsOf } from '../../shared/subdomains.js';
import type { ExitStatus, Listen, ReportedLocation, SpawnerBackend } from './backend.js';
import { BACKENDS } from './backends/index.js';
import { SpawnQueue } from './queue.js';
import { waitForHttp } from './readiness.js';
import type { Registry } from './registry.js';
import { RunJournal } from './runs.js';

export interface SpawnerDeps {
  config: HubConfig;
  registry: Registry;
  tokens: TokensClient;
  /** the oauth actor: each server is an OAuth client from its spawn to its stop */
  oauth: OAuthClient;
  audit: AuditPublisher;
  log: Logger;
  instance: string;
  /** how many running gateways have applied a registry write, and how many run */
  gatewaysHaveApplied: (revision: number) => Promise<{ confirmed: number; gateways: number }>;
  /** hub.evt.server.<change> with the record as the proto's Server message */
  announce: (change: EventChange<'server'>, record: ServerRecord) => void;
  /** the backend of each `Hub.spawner_class` a record may name (made on first use) */
  backend: (spawnerClass: string) => SpawnerBackend;
  /** the spawner of this node this one replaces (`hub restart`), while it finishes the starts and stops it began */
  predecessor?: { running: boolean; gone: Promise<void> };
  /** passes a location report on to the other spawners of this node (the predecessor may be the one waiting for it) */
  relayReport?: (report: RelayedReport) => void;
}

/** A server's location report as one spawner of a node passes it to another: where it listens, or why it was refused. */
export interface RelayedReport { node: string; user: string; name: string; token_id: string; host: string; port: number; refused?: string }

/** What a start was asked with besides its record's user_options: the profile they chose and the user's groups. */
type Choice = Omit<StartChoice, 'userOptions'>;

/** What only this process knows about a server it is starting or stopping. */
interface Local {
  /** the backend tells this process promptly when the server ends (else it is polled) */
  watched?: boolean;
  /** how it ended, once it has */
  ended?: ExitStatus;
  abort?: AbortController;
  spawning?: Promise<void>;
  stopping?: Promise<void>;
}

const spawnDuration = new HotHistogram('hub_server_spawn_duration_seconds',
  'Server starts, from request to ready or failed, by status (success, failure)', ['status'], SPAWN_BUCKETS);
const spawnSucceeded = spawnDuration.child('success');
const spawnFailedTimer = spawnDuration.child('failure');
const spawnFailures = new HotCounter('hub_server_spawn_failures_total',
  'Server starts that did not succeed, by reason (throttled, too_many_users, timeout, exited, launch_error, cancelled, error)', ['reason']);
const rateLimited = new HotCounter('hub_rate_limited_total', 'Requests answered 429, by reason (concurrent_spawn_limit, active_server_limit)', ['reason']);

// The established hub's families (its label values; series it makes ahead are exported from the start), fed by the
// same measurements as the hub_ ones. Its spawn status: success; failure, a start refused or called off (reason
// throttled, too-many-users, already-pending, or none); error, a start that broke (reason exited when the server died).
const established = {
  spawn: jupyterhubHistogram('server_spawn_duration_seconds', 'Server starts, from request to ready, refused or failed, by status and reason',
    ['status', 'reason'], jupyterhubSpawnBuckets(),
    [['success', ''], ['failure', ''], ['error', ''], ['failure', 'throttled'], ['failure', 'too-many-users'], ['failure', 'already-pending']]),
  stop: jupyterhubHistogram('server_stop_seconds', 'Server stops, by status (success, failure)', ['status'], jupyterhubStopBuckets(), [['success'], ['failure']]),
  poll: jupyterhubHistogram('server_poll_duration_seconds', 'Asking a backend whether a server still runs, by answer (running, stopped)', ['status'], undefined, [['running'], ['stopped']]),
  routeAdd: jupyterhubHistogram('proxy_add_duration_seconds', 'Routing a started server: its record written and every gateway routing it, by status (success, failure)', ['status'], undefined, [['success'], ['failure']]),
  routeDelete: jupyterhubHistogram('proxy_delete_duration_seconds', 'Unrouting a stopped server (its record written stopped), by status (success, failure)', ['status'], undefined, [['success'], ['failure']]),
  init: jupyterhubHistogram('init_spawners_duration_seconds', 'Time the spawner took at its start to adopt, resume or clean up the servers a previous one left').child(),
};
const establishedSpawnOk = established.spawn.child('success', '');
const polled = { running: established.poll.child('running'), stopped: established.poll.child('stopped') };
const routeAdded = { success: established.routeAdd.child('success'), failure: established.routeAdd.child('failure') };
const routeDeleted = { success: established.routeDelete.child('success'), failure: established.routeDelete.child('failure') };

const stopDuration = new HotHistogram('hub_server_stop_seconds', 'Server stops, by status (success, failure)', ['status'], SLOW_BUCKETS,
  { also: ([status]) => established.stop.child(status) });

/** The established hub's status and reason for a start that failed (failureReason's words). */
function establishedFailure(reason: string): [string, string] {
  if (reason === 'cancelled') return ['failure', ''];
  return ['error', reason === 'exited' ? 'exited' : ''];
}

/** Why a start failed, as a bounded label. */
function failureReason(e: unknown, cancelled: boolean): string {
  if (cancelled) return 'cancelled';
  const m = (e as Error)?.message ?? '';
  if (/did not answer within/.test(m)) return 'timeout';
  if (/exited before/.test(m)) return 'exited';
  if (/could not start|ENOENT|EACCES|spawn/.test(m)) return 'launch_error';
  return 'error';
}

const label = (r: { user: string; name: string }) => (r.name ? `${r.user}:${r.name}` : r.user);
const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

/**
 * `Spawner.notebook_dir` as the server sees it (HUB_ROOT_DIR): absolute, or `~`-relative, which the server expands with
 * its own HOME (its account's, or its container's); a relative path is under the home, as the backends run it.
 */
function rootDir(dir: string): string {
  return dir.startsWith('/') || dir === '~' || dir.startsWith('~/') ? dir : `~/${dir}`;
}

/** The proto Server message (and event body) for a record. */
export function serverMessage(r: ServerRecord) {
  return {
    user: r.user, name: r.name, ready: r.state === 'running', pending: r.state === 'spawn' ? 'spawn' : r.state === 'stop' ? 'stop' : '',
    url: r.url, target: r.target, started: r.started, last_activity: r.last_activity, user_options_json: JSON.stringify(r.user_options),
    pid: r.pid, instance: r.instance,
  };
}

/**
 * What stays of a server once it has stopped: who, which, when, and the options of its last start; and, when it
 * ended without anyone asking (`endedBecause`), why and when (shown by its progress stream and the home page).
 */
function stoppedRecord(r: ServerRecord, endedBecause?: string): ServerRecord {
  return {
    ...r, state: 'stopped', target: '', pid: 0, spawner_state: {}, token_id: '', progress: [], lost: undefined,
    ended: endedBecause ? { at: isoNow(), reason: endedBecause } : undefined,
  };
}

/**
 * "the server exited with code 1 (reason)", or the backend's own words when it knows no code or signal (a batch
 * job's end, a container gone): what a person reads in the progress stream, the home page, the audit and logs.
 */
function describeExit(e: ExitStatus): string {
  // a reason that only names the signal again ("killed (SIGKILL)") adds nothing
  const why = (said: string) => (e.reason && !(e.signal && e.reason.includes(e.signal)) ? `${said} (${e.reason})` : said);
  if (e.code !== null && e.code !== undefined) return why(`the server exited with code ${e.code}`);
  if (e.signal) return why(`the server was killed by ${e.signal}`);
  return e.reason || 'the server exited';
}

export function createSpawnerHandlers({ config, registry, tokens, oauth, audit, log, instance, announce, backend, gatewaysHaveApplied, predecessor, relayReport }: SpawnerDeps) {
  let S = config.Spawner;
  const local = new Map<string, Local>();
  /** settles when adoptAll has looked at this node's servers (what a predecessor left is this process's from then on) */
  let adoptionDone!: () => void;
  const adopted = new Promise<void>((resolve) => { adoptionDone = resolve; });
  /**
   * Servers this node's spawner looks after: those it started (and records from before nodes). Another node's
   * servers are never adopted, polled, stopped at shutdown or rewritten from this copy of the registry.
   */
  const ours = (r: ServerRecord) => !r.node || r.node === config.Hub.node_name;
  /** this node's runs, in its data dir: what it must stop if it comes back to find them started elsewhere */
  const runs = new RunJournal(config.Hub.data_dir);
  registry.afterSave = (r) => {
    if (ours(r)) runs.note(r);
  };
  const localOf = (r: { user: string; name: string }) => {
    const key = serverKey(r.user, r.name);
    let l = local.get(key);
    if (!l) local.set(key, (l = {}));
    return l;
  };
  /**
   * During `hub restart` the spawner this one replaces finishes the starts and stops it had begun: a request about
   * such a server waits (bounded: the predecessor drains within Supervisor.drain_timeout) until that start or stop
   * has ended, or the predecessor is gone and this process has adopted what it left, then is handled as usual.
   */
  async function afterPredecessor(user: string, name: string): Promise<void> {
    if (!predecessor?.running) return;
    const key = serverKey(user, name);
    /** under way, and not (yet) by this process: neither started, stopped nor taken over by adoption here */
    const elsewhere = () => {
      const r = registry.get(user, name);
      const l = local.get(key);
      return Boolean(r && ours(r) && (r.state === 'spawn' || r.state === 'stop') && !l?.spawning && !l?.stopping && !l?.abort);
    };
    if (!elsewhere()) return;
    log.info({ event: 'server.waits_for_predecessor', server: label({ user, name }) }, 'the replaced spawner is still starting or stopping this server: waiting for it');
    let adoptionOver = false;
    void adopted.then(() => { adoptionOver = true; });
    while (predecessor.running && elsewhere()) await Promise.race([sleep(100), predecessor.gone]);
    // what it left under way is this process's once adoption has taken it over
    while (!adoptionOver && elsewhere()) await Promise.race([sleep(100), adopted]);
  }

  // Servers that report where they listen (a batch job lands on any node): one waiter per start, tied to
  // the start's token, so a report for an older start of the same server never counts.
  type Waiter = { tokenId: string; promise: Promise<ReportedLocation>; resolve: (l: ReportedLocation) => void; reject: (e: Error) => void };
  const reports = new Map<string, Waiter>();
  const reportOf = (r: ServerRecord) => {
    const key = serverKey(r.user, r.name);
    let w = reports.get(key);
    if (!w || w.tokenId !== r.token_id) {
      let resolve!: Waiter['resolve'];
      let reject!: Waiter['reject'];
      const promise = new Promise<ReportedLocation>((res, rej) => { resolve = res; reject = rej; });
      promise.catch(() => undefined); // nobody may be waiting yet
      reports.set(key, (w = { tokenId: r.token_id, promise, resolve, reject }));
    }
    return w;
  };
  // starts beyond the limit wait their turn; each move is a progress line ("2 starts ahead of yours")
  const waitingRecords = new Map<string, ServerRecord>();
  const waited = new Set<string>();
  const queue = new SpawnQueue(config.Hub.concurrent_spawn_limit, config.Hub.spawn_queue_limit, (key, ahead) => {
    const r = waitingRecords.get(key);
    if (!r) return;
    waited.add(key);
    void progress(r, { progress: 0, message: ahead ? `${ahead} start${ahead === 1 ? '' : 's'} ahead of yours` : 'Next in line' }).catch(() => undefined);
  });
  // this node's servers (each node's spawner reports its own; the registry copy holds every node's)
  gauge('hub_running_servers', 'Servers running', [], (g) => g.set(registry.all().filter((r) => r.state === 'running' && ours(r)).length));
  // the established hub's count is the hub's: every node's servers (the registry copy holds them all), so every
  // node's spawner reports the same number, which the dashboards read with max()
  gauge(jupyterhubName('running_servers'), 'Servers running in the whole hub (every node)', [], (g) => g.set(registry.all().filter((r) => r.state === 'running').length));
  gauge('hub_pending_spawns', 'Servers starting: asked for, not ready yet (includes the queued ones)', [], (g) => g.set(registry.all().filter((r) => r.state === 'spawn' && ours(r)).length));
  gauge('hub_queued_spawns', 'Servers asked for that wait in the spawn queue', [], (g) => g.set(queue.waitingCount));
  gauge('hub_pending_stops', 'Servers stopping', [], (g) => g.set(registry.all().filter((r) => r.state === 'stop' && ours(r)).length));
  const apiUrl = internalHubUrl(config, '/hub/api');
  // Where browsers reach the hub, only when Hub.public_url or Hub.subdomain_host says so (the established hub leaves the
  // public URLs empty otherwise); with subdomain_host a server's own URLs are at its user's host
  const subdomains = subdomainsOf(config);
  const publicOrigin = config.Hub.public_url || subdomains ? hubPublicUrl(config) : '';
  /** where browsers reach a server: its path, at its user's host with subdomains */
  const browserUrl = (r: ServerRecord) => browserLocation(subdomains, r.url);
  // The established hub's auth library marks its cookies Secure only when the request looks like https; the hub's own are
  // Secure whenever its public URL is https (sessions.ts), and servers' cookies get the same
  // Secure, too, with Hub.cookie_host_prefix_enabled: a `__Host-` cookie must be (the 6.1 server sets its OAuth state cookie
  // Secure only over https by itself, which a browser refuses for a `__Host-` name on http://*.localhost)
  const cookieOptions: Record<string, string> = publicOrigin.startsWith('https://') || config.Hub.cookie_host_prefix_enabled ? { HUB_COOKIE_OPTIONS: JSON.stringify({ secure: true }) } : {};

  async function progress(r: ServerRecord, event: ProgressEvent): Promise<void> {
    r.progress.push(event);
    const current = registry.get(r.user, r.name);
    if (current && current !== r && current.state !== r.state && (current.state === 'stop' || current.state === 'stopped')) {
      // stopped while this start was finishing (between "running" and "ready"): add the line, never bring it back
      current.progress.push(event);
      await registry.save(current);
      return;
    }
    await registry.save(r);
  }

  /** Progress percentages only go up; a backend's own messages sit between "requested" and "spawning". */
  const backendProgress = (r: ServerRecord, message: string) =>
    progress(r, { progress: Math.min(45, (r.progress.at(-1)?.progress ?? 0) + 10), message });

  /** `Spawner.cmd` (of the profile, when it sets one) + args, or this project's own server. */
  function command(spawner: HubConfig['Spawner']): string[] {
    if (spawner.cmd.length) return [...spawner.cmd, ...spawner.args];
    const program = RUNNING_FROM_SOURCE ? join(REPO_ROOT, 'singleuser', 'server.ts') : join(REPO_ROOT, 'dist', 'singleuser', 'server.js');
    return [process.execPath, ...(RUNNING_FROM_SOURCE ? ['--import', 'tsx'] : []), program, ...spawner.args];
  }

  /** What the server needs to know, and nothing of the hub's own environment beyond PATH and locale. */
  function environment(r: ServerRecord, token: string, listen: Listen, spawner: HubConfig['Spawner'], fromLogin: Record<string, string>): Record<string, string> {
    const clientId = serverClientId(r.user, r.name);
    const accessScopes = JSON.stringify([`access:servers!server=${r.user}/${r.name}`, `access:servers!user=${r.user}`]);
    const limits = limitsOf(spawner);
    const inherited = Object.fromEntries((['PATH', 'HOME'] as const).flatMap((k) => (process.env[k] ? [[k, process.env[k]!]] : [])));
    return withPrefixAliases({
      ...inherited, LANG: process.env.LANG ?? 'C.UTF-8',
      ...spawner.environment,
      // Authenticator.auth_state_environment: from the login (e.g. the provider's access token); never stored
      ...fromLogin,
      // as the established hub passes them: bytes, and cores
      ...(limits.memBytes !== null ? { MEM_LIMIT: String(limits.memBytes) } : {}),
      ...(limits.cpu !== null ? { CPU_LIMIT: String(limits.cpu) } : {}),
      HUB_API_TOKEN: token, HUB_API_URL: apiUrl, HUB_BASE_URL: config.Hub.base_url, HUB_CLIENT_ID: clientId, HUB_USER: r.user,
      HUB_SERVER_NAME: r.name, HUB_SERVICE_PREFIX: r.url, HUB_SERVICE_URL: `http://${listen.ip}:${listen.port}${r.url}`,
      HUB_OAUTH_CALLBACK_URL: `${browserUrl(r)}oauth_callback`, HUB_OAUTH_ACCESS_SCOPES: accessScopes, HUB_OAUTH_SCOPES: accessScopes,
      HUB_OAUTH_CLIENT_ALLOWED_SCOPES: '[]', HUB_ACTIVITY_URL: `${apiUrl}/users/${encodeURIComponent(r.user)}/activity`,
      // the public URLs of this server and of the hub ("" without Hub.public_url or subdomain_host); HUB_HOST: the hub's
      // origin with per-user subdomains (the server's links and OAuth redirects to the hub name it), else ""
      HUB_PUBLIC_URL: subdomains ? browserUrl(r) : publicOrigin && `${publicOrigin}${r.url}`, HUB_PUBLIC_HUB_URL: publicOrigin && publicHubUrl(config, '/hub/'),
      HUB_HOST: subdomains?.hubOrigin ?? '',
      HUB_COOKIE_HOST_PREFIX_ENABLED: config.Hub.cookie_host_prefix_enabled ? '1' : '0', ...cookieOptions,
      // what the single-user server reads of Spawner's options, set only when they are, as the established hub sets them
      ...(spawner.notebook_dir ? { HUB_ROOT_DIR: rootDir(spawner.notebook_dir) } : {}),
      ...(spawner.default_url ? { HUB_DEFAULT_URL: spawner.default_url.replaceAll('{username}', r.user) } : {}),
      ...(spawner.debug ? { HUB_DEBUG: '1' } : {}),
      ...(spawner.disable_user_config ? { HUB_DISABLE_USER_CONFIG: '1' } : {}),
    }, config.Hub.env_prefix_aliases);
  }

  /** Follows the end of a server the backend watches for us (only the start that made `state` counts). */
  function watchExit(r: ServerRecord, exited: Promise<ExitStatus> | undefined): void {
    const l = localOf(r);
    l.watched = Boolean(exited);
    l.ended = undefined;
    const state = JSON.stringify(r.spawner_state);
    void exited?.then((status) => {
      const now = registry.get(r.user, r.name);
      if (!now || JSON.stringify(now.spawner_state) !== state) return;
      l.ended = status;
      // an exit nobody asked for: not part of the request that started the server
      void outsideRequest(() => onExit(r.user, r.name, status));
    });
  }

  /** null while it runs; why it ended, once it has (asks the backend when it cannot tell us itself). */
  /** The backend's answer whether the server still runs, timed (the established hub's poll duration). */
  async function poll(r: ServerRecord) {
    const asked = performance.now();
    const p = await backend(r.spawner_class).poll(r.spawner_state);
    (p.running ? polled.running : polled.stopped).observe(secondsSince(asked));
    return p;
  }

  async function endedReason(r: ServerRecord): Promise<string | null> {
    const l = localOf(r);
    if (l.ended) return describeExit(l.ended);
    if (l.watched) return null;
    const p = await poll(r);
    return p.running ? null : describeExit(p);
  }

  async function revokeToken(r: ServerRecord, by: string): Promise<void> {
    if (!r.token_id) return;
    await tokens.deleteToken({ owner: { kind: 'user', name: r.user }, id: r.token_id, by }).catch((e: HubError) => {
      if (e.status !== 404) log.warn({ event: 'server.token.revoke_failed', server: label(r), err: e.message }, 'server token not revoked');
    });
    // its OAuth client goes too (and with it the browser tokens it issued); the oauth actor prunes missed ones at its start
    await oauth.deleteClient({ client_id: serverClientId(r.user, r.name), by }).catch((e: HubError) =>
      log.warn({ event: 'server.oauth_client.delete_failed', server: label(r), err: e.message }, 'server OAuth client not deleted'));
  }

  /** A target known only later (the server reports it): bounded by Spawner.start_timeout (this start's), cancelled by a stop. */
  async function awaitTarget(target: Promise<string>, signal: AbortSignal, startTimeout = S.start_timeout): Promise<string> {
    target.catch(() => undefined); // its end may come after ours
    let timer: NodeJS.Timeout | undefined;
    let onAbort = () => undefined as void;
    try {
      return await Promise.race([target, new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the server did not report where it listens within ${startTimeout} s`)), startTimeout * 1000);
        onAbort = () => reject(new Error('cancelled'));
        signal.addEventListener('abort', onAbort, { once: true });
      })]);
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    }
  }

  /** After a spawner restart: the report of a server adopted before it reported, or why it ended first. */
  async function reportedTarget(r: ServerRecord, signal: AbortSignal): Promise<string> {
    const report = reportOf(r).promise;
    while (!signal.aborted) {
      const got = await Promise.race([report, sleep(S.poll_interval * 1000).then(() => null)]);
      if (got) return locationTarget(got.host, got.port);
      const why = await endedReason(r);
      if (why !== null) throw new Error(why);
    }
    throw new Error('cancelled');
  }

  /** Start through the backend, wait for HTTP, record the outcome. Resolves when ready; rejects with the reason it failed. */
  async function spawnServer(r: ServerRecord, abort: AbortController, choice: Choice, by: string, fromLogin: Record<string, string>, answered: () => void = () => undefined): Promise<void> {
    const b = backend(r.spawner_class);
    const start = performance.now();
    try {
      const issued = await tokens.issueServerToken({ user: r.user, server_name: r.name, url: r.url });
      r.token_id = issued.model!.id;
      // the server's token is also its OAuth client secret (reference §6.7)
      // its redirect URI, registered exactly: <url>oauth_callback, at its user's host with subdomains
      await oauth.registerServerClient({ client_id: serverClientId(r.user, r.name), user: r.user, server_name: r.name, url: browserUrl(r), secret: issued.token });
      // the options of this start: group overrides, user options, profile (shared/profiles.ts)
      const chosen: StartChoice = { ...choice, userOptions: r.user_options };
      const spawner = sectionFor(config, 'Spawner', chosen);
      const section = BACKENDS[r.spawner_class].section;
      const applied = groupOverridesFor(config, choice.groups);
      if (applied.length) log.info({ event: 'server.group_overrides', server: label(r), applied }, 'group overrides applied');
      const started = await b.start({
        server: r, id: serverId(r.user, r.name), cmd: command(spawner), env: (listen) => environment(r, issued.token, listen, spawner, fromLogin),
        limits: limitsOf(spawner), notebookDir: spawner.notebook_dir,
        options: section ? (sectionFor(config, section, chosen) as Record<string, unknown>) : {},
        progress: (message) => backendProgress(r, message), signal: abort.signal, reported: () => reportOf(r).promise,
      });
      r.spawner_state = started.state;
      r.pid = started.pid ?? 0;
      watchExit(r, started.exited);
      if (typeof started.target === 'string') {
        r.target = started.target;
      } else {
        await registry.save(r); // with its state: a stop, or a restarted spawner, finds it while it waits for its place
        r.target = await awaitTarget(started.target, abort.signal, spawner.start_timeout);
      }
      await progress(r, { progress: 50, message: 'Spawning server...' }); // saved with its state: any spawner can adopt it from here
      await waitForHttp(`${r.target}${r.url}`, {
        timeoutMs: spawner.start_timeout * 1000, requestTimeoutMs: spawner.http_timeout * 1000, signal: abort.signal,
        ended: () => endedReason(r),
      });
      answered();
      await markReady(r, 'ready');
      const took = secondsSince(start);
      spawnSucceeded.observe(took);
      establishedSpawnOk.observe(took);
      log.info({ event: 'server.started', server: label(r), pid: r.pid, by, ms: Math.round(performance.now() - start) }, 'server ready');
      void audit.publish('server', 'start', { who: by, what: label(r), outcome: 'ok', pid: r.pid });
    } catch (e) {
      const cancelled = abort.signal.aborted;
      const reason = (e as Error).message;
      const took = secondsSince(start);
      const why = failureReason(e, cancelled);
      spawnFailedTimer.observe(took);
      established.spawn.observe(establishedFailure(why), took);
      spawnFailures.inc(why);
      if (Object.keys(r.spawner_state).length) {
        await b.stop(r.spawner_state, { graceMs: S.stop_signal_timeout * 1000 }).catch((err: Error) =>
          log.warn({ event: 'server.spawn.cleanup_failed', server: label(r), err: err.message }, 'failed start not cleaned up'));
      }
      await revokeToken(r, by);
      reports.delete(serverKey(r.user, r.name));
      r.state = 'failed';
      r.target = '';
      await progress(r, { progress: 100, failed: true, message: cancelled ? 'Spawn cancelled' : `Spawn failed: ${reason}` });
      announce('failed', r);
      log.warn({ event: 'server.spawn.failed', server: label(r), reason, cancelled }, 'server did not start');
      void audit.publish('server', 'start', { who: by, what: label(r), outcome: 'failed', reason: cancelled ? 'cancelled' : reason });
      throw errors.spawnFailed(cancelled ? 'Spawn cancelled' : `Spawn failed: ${reason}`);
    }
  }

  /** Waits for a turn in the spawn queue (if the limit is reached), then starts. */
  async function queuedSpawn(r: ServerRecord, abort: AbortController, choice: Choice, by: string, fromLogin: Record<string, string>): Promise<void> {
    const key = serverKey(r.user, r.name);
    waitingRecords.set(key, r);
    try {
      await queue.turn(key, abort.signal);
    } catch {
      r.state = 'failed';
      await progress(r, { progress: 100, failed: true, message: 'Spawn cancelled' });
      announce('failed', r);
      throw errors.spawnFailed('Spawn cancelled');
    } finally {
      waitingRecords.delete(key);
    }
    // the slot frees once the server answers: the route confirmation that follows is not a start any more
    let released = false;
    const release = () => {
      if (!released) queue.release();
      released = true;
    };
    try {
      if (waited.delete(key)) await progress(r, { progress: 5, message: 'Your turn: starting' });
      await spawnServer(r, abort, choice, by, fromLogin, release);
    } finally {
      release();
    }
  }

  /**
   * Ready means routed: the record says `running` (gateways route a server from the registry), then every
   * gateway confirms its copy has that write, and only then the ready event and the 201 go out.
   */
  async function markReady(r: ServerRecord, change: 'ready' | 'adopted'): Promise<void> {
    r.state = 'running';
    const routing = performance.now();
    let seen: Awaited<ReturnType<typeof gatewaysHaveApplied>>;
    try {
      seen = await gatewaysHaveApplied(await registry.save(r));
    } catch (e) {
      if (change === 'ready') routeAdded.failure.observe(secondsSince(routing));
      throw e;
    }
    // what the established hub times as adding the route to its proxy (an adoption is its start-up's route check)
    if (change === 'ready') (seen.confirmed < seen.gateways ? routeAdded.failure : routeAdded.success).observe(secondsSince(routing));
    if (seen.confirmed < seen.gateways) log.warn({ event: 'server.route.unconfirmed', server: label(r), ...seen }, 'not every gateway confirmed the route in time');
    if (registry.get(r.user, r.name)?.state !== 'running') return; // stopped meanwhile: the stop says so
    if (change === 'ready') {
      const url = browserUrl(r);
      await progress(r, { progress: 100, ready: true, url, message: `Server ready at ${url}`, html_message: `Server ready at <a href="${url}">${url}</a>` });
    }
    announce(change, r);
  }

  /** A server exits on its own (crash, out of memory, killed by someone): clean up and say so. */
  async function onExit(user: string, name: string, status: ExitStatus): Promise<void> {
    const r = registry.get(user, name);
    if (!r || r.state !== 'running') return; // a start or a stop is handling it
    log.warn({ event: 'server.exited', server: label(r), pid: r.pid, code: status.code, signal: status.signal, reason: status.reason }, 'server exited by itself');
    await forget(r, describeExit(status));
  }

  /**
   * A server that is gone: what it held freed, token revoked, event and audit line. Its record stays,
   * `stopped`, with its options (as the established hub keeps stopped servers) until it is removed.
   * `who` asked for it (the spawner itself when it found the server gone); `asked`: a stop someone asked for,
   * else the record keeps `reason` as how the server ended.
   */
  async function forget(r: ServerRecord, reason: string, { freed = false, who = 'actor:spawner', asked = false }: { freed?: boolean; who?: string; asked?: boolean } = {}): Promise<void> {
    if (!freed && Object.keys(r.spawner_state).length) {
      await backend(r.spawner_class).stop(r.spawner_state, { graceMs: S.stop_signal_timeout * 1000 }).catch((e: Error) =>
        log.warn({ event: 'server.free_failed', server: label(r), err: e.message }, 'what the server held was not freed'));
    }
    await revokeToken(r, who);
    // the record written stopped is the route gone (gateways route from it): what the established hub times as deleting the route
    const unrouting = performance.now();
    try {
      await registry.save(stoppedRecord(r, asked ? undefined : reason));
    } catch (e) {
      routeDeleted.failure.observe(secondsSince(unrouting));
      throw e;
    }
    routeDeleted.success.observe(secondsSince(unrouting));
    local.delete(serverKey(r.user, r.name));
    reports.delete(serverKey(r.user, r.name));
    announce('stopped', { ...r, state: 'stop' });
    void audit.publish('server', 'stop', { who, what: label(r), outcome: 'ok', reason });
  }

  /** `endedBecause`: the spawner stops it without being asked (unhealthy at adoption): kept as how it ended. */
  async function stopServerNow(r: ServerRecord, by: string, endedBecause?: string): Promise<void> {
    const l = localOf(r);
    if (r.state === 'spawn' && l.spawning) {
      l.abort?.abort();
      await l.spawning.catch(() => undefined);
      const after = registry.get(r.user, r.name);
      if (after && after.state === 'failed') await registry.save(stoppedRecord(after)); // cancelled, not failed
      return;
    }
    l.abort?.abort(); // a start adopted from a previous spawner: its wait ends, the backend stops it below
    r.state = 'stop';
    await registry.save(r);
    announce('stopping', r);
    const start = performance.now();
    try {
      await backend(r.spawner_class).stop(r.spawner_state, { graceMs: S.stop_signal_timeout * 1000 });
    } catch (e) {
      stopDuration.observe(['failure'], secondsSince(start));
      log.error({ event: 'server.stop.failed', server: label(r), err: (e as Error).message }, 'server could not be stopped');
      void audit.publish('server', 'stop', { who: by, what: label(r), outcome: 'failed', reason: (e as Error).message });
      throw e;
    }
    stopDuration.observe(['success'], secondsSince(start));
    log.info({ event: 'server.stopped', server: label(r), by, ms: Math.round(performance.now() - start) }, 'server stopped');
    await forget(r, endedBecause ?? 'stopped', { freed: true, who: by, asked: !endedBecause });
  }

  /** A start the previous spawner accepted but never handed to a backend: queued again, with its options. */
  async function resumeStart(r: ServerRecord): Promise<void> {
    const by = 'actor:spawner (resumed)';
    if (r.token_id) await revokeToken(r, by); // issued before the crash, never given to a server
    r.token_id = '';
    let profile: StartChoice['profile'];
    try {
      profile = chooseProfile(config, r.user_options);
      userOptionSettings(config, r.user_options);
    } catch (e) {
      await forget(r, `not restarted after a spawner restart: ${(e as Error).message}`);
      return;
    }
    // the user's groups came with the request and are not kept: without them the server would start without its
    // group overrides, unlike what was asked; the person starts it again
    if (Object.keys(config.Spawner.group_overrides).length) {
      await forget(r, 'not restarted after a spawner restart: the hub restarted before your server started; start it again');
      return;
    }
    r.instance = instance;
    await progress(r, { progress: 0, message: 'The hub restarted; your start goes on' });
    log.info({ event: 'server.start.resumed', server: label(r) }, 'start resumed after a spawner restart');
    const abort = new AbortController();
    const l = localOf(r);
    l.abort = abort;
    // what the login gave the start (auth_state_environment) is never stored: a resumed start goes on without it
    const spawning = queuedSpawn(r, abort, { profile, groups: [] }, by, {});
    l.spawning = spawning;
    spawning.catch(() => undefined);
  }

  /**
   * At start (after a predecessor of this node is gone): servers that outlived the previous spawner are adopted when
   * their process is ours and answers HTTP; starts and stops it left half-done are finished; the dead are cleaned up.
   */
  async function adoptEvery(): Promise<void> {
    const began = performance.now(); // the established hub's init_spawners: its start-up's look at every server
    // what this process started or stopped itself while its predecessor still ran (`hub restart`) is not a leftover
    const handledHere = (r: ServerRecord) => {
      const l = local.get(serverKey(r.user, r.name));
      return r.instance === instance || Boolean(l?.spawning || l?.stopping);
    };
    // starts that had not reached their backend yet (queued, or issuing their token) are started again, in
    // the order they were asked for: a restart must not lose a person's place
    const unstarted = registry.all().filter((r) => ours(r) && !handledHere(r) && r.state === 'spawn' && !Object.keys(r.spawner_state ?? {}).length)
      .sort((a, b) => a.started.localeCompare(b.started));
    const restarted = new Set(unstarted.map((r) => serverKey(r.user, r.name)));
    for (const r of unstarted) await resumeStart(r);
    const resume = async (r: ServerRecord, known?: Promise<string>) => {
      const abort = new AbortController();
      localOf(r).abort = abort; // a stop meanwhile ends the wait
      try {
        if (!r.target) {
          // adopted before it reported where it listens (a batch job still queued, or starting): wait for that as the start would have
          r.target = await awaitTarget(known ?? reportedTarget(r, abort.signal), abort.signal);
          await registry.save(r);
        }
        await waitForHttp(`${r.target}${r.url}`, {
          timeoutMs: r.state === 'spawn' ? S.start_timeout * 1000 : S.http_timeout * 1000,
          requestTimeoutMs: S.http_timeout * 1000, signal: abort.signal, ended: () => endedReason(r),
        });
        r.instance = instance;
        if (r.state === 'spawn') await markReady(r, 'ready');
        else await markReady(r, 'adopted');
        log.info({ event: 'server.adopted', server: label(r), pid: r.pid }, 'server re-adopted');
        void audit.publish('server', 'adopt', { who: 'actor:spawner', what: label(r), outcome: 'ok', pid: r.pid });
      } catch (e) {
        if (abort.signal.aborted) return; // a stop is handling it
        log.warn({ event: 'server.adopt.failed', server: label(r), err: (e as Error).message }, 'server alive but not answering: stopping it');
        await stopServerNow(r, 'actor:spawner (unhealthy at adoption)', `it did not answer after a hub restart: ${(e as Error).message}`).catch(() => undefined);
      }
    };
    // runs of this node that were started again elsewhere (or removed) while it was gone: stopped, never left running
    for (const run of runs.orphans((user, name) => registry.get(user, name), ours)) {
      const b = backend(run.spawner_class);
      if (await b.adopt(run.spawner_state).catch(() => null)) {
        await b.stop(run.spawner_state, { graceMs: S.stop_signal_timeout * 1000 }).catch((e: Error) =>
          log.warn({ event: 'server.orphan.stop_failed', server: label(run), err: e.message }, 'could not stop a server started again elsewhere'));
        log.warn({ event: 'server.orphan.stopped', server: label(run) }, 'stopped a server of this node that was started again elsewhere while the node was gone');
        void audit.publish('server', 'stop', { who: 'actor:spawner', what: label(run), outcome: 'ok', reason: 'started again elsewhere while this node was gone' });
      }
      runs.forget(run);
    }
    // servers another node marked stopped while this node was gone: running still? then they are ours again
    for (const r of registry.all()) {
      if (!r.lost || !ours(r) || !r.node) continue;
      const back = Object.keys(r.spawner_state ?? {}).length ? await backend(r.spawner_class).adopt(r.spawner_state).catch(() => null) : null;
      if (back) {
        await registry.save({ ...r, state: r.lost.state === 'stop' ? 'stop' : 'running', target: r.lost.target, lost: undefined, ended: undefined, instance });
        log.info({ event: 'server.lost.back', server: label(r) }, 'server of a lost node still runs: adopting it again');
      } else {
        await revokeToken(r, 'actor:spawner');
        await registry.save({ ...stoppedRecord(r), ended: r.ended ?? { at: r.lost.at, reason: nodeLostReason(r.node) } });
      }
    }
    for (const r of registry.all()) {
      if (!isActive(r) || !ours(r) || handledHere(r) || restarted.has(serverKey(r.user, r.name))) continue;
      const adopted = Object.keys(r.spawner_state ?? {}).length ? await backend(r.spawner_class).adopt(r.spawner_state).catch(() => null) : null;
      if (!adopted) {
        log.info({ event: 'server.reaped', server: label(r), pid: r.pid }, 'server died while no spawner watched it');
        await forget(r, 'died while the spawner was down');
        continue;
      }
      watchExit(r, adopted.exited);
      if (r.state === 'stop') {
        const l = localOf(r);
        l.stopping = stopServerNow(r, 'actor:spawner (resumed)');
        l.stopping.catch(() => undefined);
        continue;
      }
      // a start still on its way (also one whose address is known: its server may not listen yet) may wait up to
      // Spawner.start_timeout: the others are not held up by it
      if (r.state === 'spawn') void resume(r, adopted.target);
      else await resume(r);
    }
    // then what a backend holds that no server names any more (containers left by a crash)
    const active = registry.all().filter(isActive);
    for (const cls of new Set([config.Hub.spawner_class, ...active.map((r) => r.spawner_class)])) {
      await backend(cls).reconcile?.(active).catch((e: Error) =>
        log.warn({ event: 'spawner.reconcile.failed', backend: cls, err: e.message }, 'leftovers of a previous spawner not cleaned up'));
    }
    established.init.observe(secondsSince(began));
  }

  /** A new named server: enabled, a valid name, within the user's limit (stopped ones count until removed). */
  function checkNewNamed(user: string, name: string): void {
    if (!config.Hub.allow_named_servers) throw errors.badRequest('Named servers are not enabled.');
    const why = invalidServerNameReason(name);
    if (why) throw errors.badRequest(`Invalid server_name: '${name.slice(0, 60)}' (${why})`);
    const limit = config.Hub.named_server_limit_per_user;
    const named = registry.all().filter((r) => r.user === user && r.name !== '').length;
    if (limit > 0 && named >= limit) {
      throw errors.badRequest(`User ${user} already has the maximum of ${limit} named servers.  One must be deleted before a new server can be created`);
    }
  }

  /** A start refused by a hub-wide limit: 429, counted and audited with its reason. */
  function refused(req: { user: string; name: string; by: string }, reason: 'concurrent_spawn_limit' | 'active_server_limit', err: HubError, requested: number): HubError {
    rateLimited.inc(reason);
    spawnFailures.inc(reason === 'concurrent_spawn_limit' ? 'throttled' : 'too_many_users');
    established.spawn.observe(['failure', reason === 'concurrent_spawn_limit' ? 'throttled' : 'too-many-users'], secondsSince(requested));
    void audit.publish('server', 'start', { who: req.by, what: label(req), outcome: 'denied', reason });
    return err;
  }

  function checkStartAllowed(req: { user: string; name: string; by: string }, requested: number): void {
    const { user, name } = req;
    if (name) {
      if (!config.Hub.allow_named_servers) throw errors.badRequest('Named servers are not enabled.');
      if (!registry.get(user, name)) checkNewNamed(user, name);
    }
    const all = registry.all();
    if (queue.admit() === 'full') {
      const retry = 30 + Math.floor(Math.random() * 31);
      throw refused(req, 'concurrent_spawn_limit', errors.tooManyRequests(`Too many users trying to log in right now. Try again in ${retry} seconds.`, retry), requested);
    }
    const active = all.filter(isActive).length;
    if (config.Hub.active_server_limit > 0 && active >= config.Hub.active_server_limit) {
      throw refused(req, 'active_server_limit', errors.tooManyRequests('Active user limit exceeded. Try again in a few minutes.', 60), requested);
    }
  }

  const alive = async (r: ServerRecord) => (await poll(r)).running;

  /** user_options as a start or a PATCH gives them: an object whose profile (if any) exists and whose options (apply_user_options) fit. */
  function checkOptions(options: unknown): Record<string, unknown> {
    if (typeof options !== 'object' || options === null || Array.isArray(options)) throw errors.badRequest('user_options must be an object');
    chooseProfile(config, options as Record<string, unknown>);
    userOptionSettings(config, options as Record<string, unknown>);
    return options as Record<string, unknown>;
  }

  const modelJson = (r: ServerRecord) => JSON.stringify(serverModel(r));

  return {
    /**
     * `hub reload`: the next starts take the reloaded Spawner section (defaults, profiles, group overrides, limits, the
     * timeouts of a start and stop) and Hub's server limits; starts under way keep what they began with.
     */
    useConfig(next: HubConfig): void {
      config = next;
      S = next.Spawner;
      queue.setLimits(next.Hub.concurrent_spawn_limit, next.Hub.spawn_queue_limit);
    },
    async startServer(req: { user: string; name: string; user_options_json: string; by: string; display_name?: string; auth_environment?: Record<string, string>; groups?: string[] }) {
      const requested = performance.now();
      const current = registry.get(req.user, req.name);
      if (current?.state === 'spawn') return { status: 'pending', server: serverMessage(current) };
      if (current?.state === 'stop') throw errors.badRequest(`${label(req)} is pending stop`);
      if (current?.state === 'running') {
        if (await alive(current)) throw errors.badRequest(`${label(req)} is already running`);
        await forget(current, 'found dead at start');
      }
      checkStartAllowed(req, requested);
      // its node was lost with it: the token of that run is no use to the new one (if the node comes back, the
      // record is no longer the lost one, so the old server is not adopted)
      if (current?.lost && current.token_id) await revokeToken(current, req.by || 'actor:spawner');
      // bounded like every JSON from outside: a record nested thousands deep would overflow JSON.stringify later
      const options = (req.user_options_json ? parseJson(req.user_options_json, config.Hub.max_json_depth, 'user_options') : current?.user_options ?? {}) as Record<string, unknown>;
      if (typeof options !== 'object' || options === null || Array.isArray(options)) throw errors.badRequest('user_options must be a JSON object');
      const profile = chooseProfile(config, options); // an unknown profile is a 400 before anything starts
      userOptionSettings(config, options); // so is a value of the wrong type for an option apply_user_options names
      const now = isoNow();
      const r: ServerRecord = {
        user: req.user, name: req.name, state: 'spawn', url: serverUrl(req.user, req.name), target: '', pid: 0,
        spawner_class: config.Hub.spawner_class, spawner_state: {},
        started: now, last_activity: now, user_options: options, instance, node: config.Hub.node_name, token_id: '',
        progress: [{ progress: 0, message: 'Server requested' }],
        ...(req.display_name || current?.display_name ? { display_name: req.display_name || current?.display_name } : {}),
      };
      if (!(await registry.claim(r))) {
        // another spawner of this node (the one `hub restart` replaces, or its successor) started it a moment ago
        const winner = registry.get(req.user, req.name);
        if (winner?.state === 'spawn') return { status: 'pending', server: serverMessage(winner) };
        throw errors.badRequest(`${label(req)} is ${winner?.state === 'stop' ? 'pending stop' : 'already running'}`);
      }
      announce('spawning', r);
      const abort = new AbortController();
      const l = localOf(r);
      l.abort = abort;
      const waits = queue.admit() === 'wait';
      const spawning = queuedSpawn(r, abort, { profile, groups: req.groups ?? [] }, req.by || 'actor:spawner', req.auth_environment ?? {});
      l.spawning = spawning;
      spawning.catch(() => undefined);
      if (waits) return { status: 'pending', server: serverMessage(r) }; // queued: 202 at once, the place is on the progress stream
      const outcome = await Promise.race([spawning.then(() => 'ready' as const), sleep(S.slow_spawn_timeout * 1000).then(() => 'pending' as const)]);
      return { status: outcome, server: serverMessage(registry.get(req.user, req.name) ?? r) };
    },

    async stopServer(req: { user: string; name: string; by: string; remove?: boolean }) {
      if (req.remove && !req.name) throw errors.badRequest('The default server cannot be removed, only stopped');
      await afterPredecessor(req.user, req.name);
      const r = registry.get(req.user, req.name);
      // `remove` forgets the server (and its options) once it is stopped
      const removeAfter = async () => {
        if (req.remove && registry.get(req.user, req.name) && !isActive(registry.get(req.user, req.name)!)) await registry.remove(req.user, req.name);
      };
      if (!r || !isActive(r)) {
        // asked to stop what had already ended by itself: the person knows now, the stream and page forget why
        if (r?.ended && ours(r)) await registry.save({ ...r, ended: undefined });
        await removeAfter();
        return { status: 'stopped' };
      }
      const l = localOf(r);
      if (r.state === 'stop' && l.stopping) {
        if (req.remove) void l.stopping.then(removeAfter, () => undefined);
        return { status: 'pending', server: serverMessage(r) };
      }
      const stopping = (l.stopping ?? stopServerNow(r, req.by)).then(removeAfter);
      l.stopping = stopping;
      stopping.catch(() => undefined).finally(() => { if (local.get(serverKey(r.user, r.name)) === l) l.stopping = undefined; });
      const outcome = await Promise.race([stopping.then(() => 'stopped' as const), sleep(S.slow_stop_timeout * 1000).then(() => 'pending' as const)]);
      return { status: outcome };
    },

    /** Before a user is deleted: every server stopped, waiting until gone (bounded by the caller's deadline). */
    async stopUserServers(req: { user: string; by: string }) {
      // another node's servers are stopped by their own spawner (nodes.ts asks it before this runs)
      await Promise.all(registry.all().filter((r) => r.user === req.user).map((r) => afterPredecessor(r.user, r.name)));
      const mine = registry.all().filter((r) => r.user === req.user && isActive(r) && ours(r));
      await Promise.all(mine.map((r) => {
        const l = localOf(r);
        return (l.stopping ??= stopServerNow(r, req.by));
      }));
      for (const r of registry.all().filter((x) => x.user === req.user)) await registry.remove(r.user, r.name);
      return { status: 'stopped' };
    },

    /**
     * At start, once after `hub import jupyterhub`: the established hub's named servers, as stopped records. One
     * already here (an earlier import, or made since) is left running if it runs; a stopped one takes the imported
     * options, display name and the later activity. Nothing is started.
     */
    async importServers(servers: { user: string; name: string; display_name: string | null; started: string | null; last_activity: string | null; user_options: Record<string, unknown> }[]) {
      const writes: ServerRecord[] = [];
      let added = 0;
      for (const s of servers) {
        if (invalidServerNameReason(s.name)) continue;
        const r = registry.get(s.user, s.name);
        const lastActivity = s.last_activity ?? '';
        if (!r) {
          added++;
          writes.push({
            user: s.user, name: s.name, state: 'stopped', url: serverUrl(s.user, s.name), target: '', pid: 0,
            spawner_class: config.Hub.spawner_class, spawner_state: {}, started: s.started ?? '', last_activity: lastActivity,
            user_options: s.user_options, instance, node: config.Hub.node_name, token_id: '', progress: [],
            ...(s.display_name ? { display_name: s.display_name } : {}),
          });
        } else if (!isActive(r)) {
          writes.push({
            ...r, user_options: s.user_options, ...(s.display_name ? { display_name: s.display_name } : {}),
            last_activity: lastActivity > r.last_activity ? lastActivity : r.last_activity,
          });
        }
      }
      // a few hundred writes in flight at once (each its own key): 10,000 servers are not 10,000 round trips in a row
      for (let i = 0; i < writes.length; i += 256) await Promise.all(writes.slice(i, i + 256).map((r) => registry.save(r)));
      const updated = writes.length - added;
      if (writes.length) void audit.publish('server', 'import', { who: 'cli:hub import jupyterhub', what: `${added} added, ${updated} updated`, outcome: 'ok' });
      return { added, updated };
    },

    /** PUT: a named server that exists, stopped, without starting it. */
    async createServer(req: { user: string; name: string; user_options_json: string; display_name: string; by: string }) {
      if (!req.name) throw errors.badRequest('Only named servers can be created');
      if (registry.get(req.user, req.name)) throw errors.conflict(`${label(req)} already exists`);
      checkNewNamed(req.user, req.name);
      const r: ServerRecord = {
        user: req.user, name: req.name, state: 'stopped', url: serverUrl(req.user, req.name), target: '', pid: 0,
        spawner_class: config.Hub.spawner_class, spawner_state: {}, started: '', last_activity: '',
        user_options: req.user_options_json ? checkOptions(JSON.parse(req.user_options_json)) : {},
        instance, node: config.Hub.node_name, token_id: '', progress: [], ...(req.display_name ? { display_name: req.display_name } : {}),
      };
      await registry.save(r);
      void audit.publish('server', 'create', { who: req.by, what: label(r), outcome: 'ok' });
      return { status: 'created', model_json: modelJson(r) };
    },

    /** PATCH: rename, display_name or user_options of a server that exists and is stopped. */
    async modifyServer(req: { user: string; name: string; changes_json: string; by: string }) {
      const r = registry.get(req.user, req.name);
      if (!r) throw errors.notFound(`${req.user} has no server named '${req.name.slice(0, 60)}'`, 'HUB_ERR_SERVER_NOT_FOUND');
      if (isActive(r)) throw errors.badRequest(`${label(req)} must be stopped before it can be modified`);
      const changes = JSON.parse(req.changes_json) as { name?: string; display_name?: string; user_options?: unknown };
      const next: ServerRecord = { ...r };
      if (changes.user_options !== undefined) next.user_options = checkOptions(changes.user_options);
      if (changes.display_name !== undefined) next.display_name = changes.display_name;
      if (changes.name !== undefined && changes.name !== r.name) {
        if (!r.name) throw errors.badRequest('The default server cannot be renamed');
        const why = invalidServerNameReason(changes.name);
        if (why) throw errors.badRequest(`Invalid server_name: '${changes.name.slice(0, 60)}' (${why})`);
        if (registry.get(r.user, changes.name)) throw errors.conflict(`${label({ user: r.user, name: changes.name })} already exists`);
        Object.assign(next, { name: changes.name, url: serverUrl(r.user, changes.name), progress: [] });
        await registry.save(next);
        await registry.remove(r.user, r.name);
      } else {
        await registry.save(next);
      }
      void audit.publish('server', 'modify', { who: req.by, what: label(r), outcome: 'ok', renamed: next.name !== r.name ? next.name : undefined });
      return { status: 'modified', model_json: modelJson(next) };
    },

    userServers: (req: { user: string }) => ({ servers: registry.all().filter((r) => r.user === req.user && isActive(r)).map(serverMessage) }),

    listServers: (req: { ready_only: boolean }) => ({
      servers: registry.all().filter((r) => (req.ready_only ? r.state === 'running' : isActive(r))).map(serverMessage),
    }),

    /** At start, or once the spawner `hub restart` replaced is gone: what it left is adopted (adoptEvery). */
    async adoptAll(): Promise<void> {
      try {
        await adoptEvery();
      } finally {
        adoptionDone();
      }
    },

    /** `hub restart`: the starts and stops this process has under way, to finish before it exits (bounded by the caller). */
    workInProgress(): Promise<unknown> {
      return Promise.allSettled([...local.values()].flatMap((l) => [l.spawning, l.stopping]).filter(Boolean));
    },

    /**
     * POST …/location: a server that runs where the hub cannot know in advance (a batch job) says where it
     * listens, with its own token (the gateway passes the token's id; only the token of this start counts).
     */
    async reportLocation(req: { user: string; name: string; host: string; port: number; token_id: string }) {
      const why = invalidLocationReason(req.host, req.port);
      if (why) throw errors.badRequest(why);
      const r = registry.get(req.user, req.name);
      if (!r || !isActive(r)) throw errors.notFound(`${label(req)} is not running`, 'HUB_ERR_SERVER_NOT_FOUND');
      if (!r.token_id || r.token_id !== req.token_id) throw errors.forbidden('Only the server\'s own token may report where it listens');
      if (r.state !== 'spawn' || r.target) throw errors.conflict(`${label(req)} has already reported where it listens`);
      // a backend that cannot look now (its commands failing) is a 503: the reporter tries again
      const wrong = await backend(r.spawner_class).checkLocation?.(r.spawner_state, { host: req.host, port: req.port })
        .catch((e: Error) => { throw errors.unavailable(`the ${r.spawner_class} backend`, e); });
      // the start may be under way in the spawner `hub restart` replaces: it hears the report too
      const relay = (refused?: string) => {
        if (predecessor?.running && !local.get(serverKey(r.user, r.name))?.spawning) {
          relayReport?.({ node: config.Hub.node_name, user: r.user, name: r.name, token_id: r.token_id, host: req.host, port: req.port, ...(refused ? { refused } : {}) });
        }
      };
      if (wrong) {
        // a server that says it is somewhere it is not does not start: the start fails with why
        log.warn({ event: 'server.location.refused', server: label(r), host: req.host, port: req.port, reason: wrong }, 'server reported a place it does not run');
        const why = `the server reported ${req.host}:${req.port}, refused: ${wrong}`;
        reportOf(r).reject(new Error(why));
        relay(why);
        throw errors.badRequest(wrong);
      }
      reportOf(r).resolve({ host: req.host, port: req.port });
      relay();
      log.info({ event: 'server.located', server: label(r), host: req.host, port: req.port }, 'server reported where it listens');
      return { status: 'ok' };
    },

    /** A report another spawner of this node took (its successor, during `hub restart`) for a start this one waits for. */
    takeRelayedReport(report: RelayedReport): void {
      if (report.node !== config.Hub.node_name) return;
      const waiter = reports.get(serverKey(report.user, report.name));
      if (!waiter || waiter.tokenId !== report.token_id) return;
      if (report.refused) waiter.reject(new Error(report.refused));
      else waiter.resolve({ host: report.host, port: report.port });
      log.info({ event: 'server.located', server: label(report), host: report.host, port: report.port, relayed: true }, 'server reported where it listens (to the successor)');
    },

    /** Servers whose backend sends no exit notice to this process (e.g. adopted ones): look at them now and then. */
    async pollAdopted(): Promise<void> {
      for (const r of registry.all()) {
        if (r.state !== 'running' || !ours(r) || local.get(serverKey(r.user, r.name))?.watched) continue;
        const p = await poll(r).catch(() => ({ running: true as const }));
        if (!p.running) {
          log.warn({ event: 'server.exited', server: label(r), pid: r.pid, code: p.code, reason: p.reason }, 'server exited by itself');
          await forget(r, describeExit(p));
        }
      }
    },

    /** Activity from the server itself or from proxied traffic: forward only, written in batches. */
    async recordActivity(entries: { user: string; name: string; at: string }[]): Promise<void> {
      for (const e of entries) {
        const r = registry.get(e.user, e.name);
        if (r && isActive(r) && ours(r) && e.at > r.last_activity) {
          r.last_activity = e.at;
          await registry.save(r);
        }
      }
    },

    /** On a clean hub shutdown with Hub.cleanup_servers: stop everything, in parallel. */
    async stopAll(): Promise<void> {
      await Promise.all(registry.all().filter((r) => isActive(r) && ours(r)).map((r) => {
        const l = localOf(r);
        return (l.stopping ??= stopServerNow(r, 'hub shutdown')).catch(() => undefined);
      }));
    },
  };
}

export type SpawnerHandlers = ReturnType<typeof createSpawnerHandlers>;
