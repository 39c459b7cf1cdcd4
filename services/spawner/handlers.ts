// The spawner's operations: start (with readiness and progress), stop (escalating signals), the
// lists other actors read, re-adoption of servers that outlived a previous spawner, and activity.
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { AuditPublisher } from '../../shared/audit.js';
import type { EventChange } from '../../shared/subjects.js';
import { hubInternalUrl, type HubConfig } from '../../shared/config.js';
import { errors, HubError } from '../../shared/errors.js';
import type { OAuthClient, TokensClient } from '../../shared/contracts/index.js';
import type { Logger } from '../../shared/log.js';
import { REPO_ROOT, RUNNING_FROM_SOURCE } from '../../shared/paths.js';
import {
  invalidServerNameReason, isActive, serverClientId, serverKey, serverUrl, type ProgressEvent, type ServerRecord,
} from '../../shared/servers.js';
import { isoNow } from '../../shared/time.js';
import { freePort } from '../../shared/ports.js';
import { isSameProcess, launch, processStartTime, stopProcess, waitForHttp } from './process.js';
import type { Registry } from './registry.js';

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
}

/** What only this process knows about a server it is starting or stopping. */
interface Local {
  child?: ChildProcess;
  abort?: AbortController;
  spawning?: Promise<void>;
  stopping?: Promise<void>;
}

const label = (r: { user: string; name: string }) => (r.name ? `${r.user}:${r.name}` : r.user);
const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

/** The proto Server message (and event body) for a record. */
export function serverMessage(r: ServerRecord) {
  return {
    user: r.user, name: r.name, ready: r.state === 'running', pending: r.state === 'spawn' ? 'spawn' : r.state === 'stop' ? 'stop' : '',
    url: r.url, target: r.target, started: r.started, last_activity: r.last_activity, user_options_json: JSON.stringify(r.user_options),
    pid: r.pid, instance: r.instance,
  };
}

export function createSpawnerHandlers({ config, registry, tokens, oauth, audit, log, instance, announce, gatewaysHaveApplied }: SpawnerDeps) {
  const S = config.Spawner;
  const local = new Map<string, Local>();
  const localOf = (r: { user: string; name: string }) => {
    const key = serverKey(r.user, r.name);
    let l = local.get(key);
    if (!l) local.set(key, (l = {}));
    return l;
  };
  const apiUrl = `${hubInternalUrl(config)}/hub/api`;

  async function progress(r: ServerRecord, event: ProgressEvent): Promise<void> {
    r.progress.push(event);
    await registry.save(r);
  }

  function command(): string[] {
    if (S.cmd.length) return [...S.cmd, ...S.args];
    const program = RUNNING_FROM_SOURCE ? join(REPO_ROOT, 'singleuser', 'server.ts') : join(REPO_ROOT, 'dist', 'singleuser', 'server.js');
    return [process.execPath, ...(RUNNING_FROM_SOURCE ? ['--import', 'tsx'] : []), program, ...S.args];
  }

  /** What the server needs to know, and nothing of the hub's own environment beyond PATH and locale. */
  function environment(r: ServerRecord, token: string): NodeJS.ProcessEnv {
    const clientId = serverClientId(r.user, r.name);
    const accessScopes = JSON.stringify([`access:servers!server=${r.user}/${r.name}`, `access:servers!user=${r.user}`]);
    return {
      PATH: process.env.PATH, LANG: process.env.LANG ?? 'C.UTF-8', HOME: process.env.HOME,
      ...S.environment,
      HUB_API_TOKEN: token, HUB_API_URL: apiUrl, HUB_BASE_URL: '/', HUB_CLIENT_ID: clientId, HUB_USER: r.user,
      HUB_SERVER_NAME: r.name, HUB_SERVICE_PREFIX: r.url, HUB_SERVICE_URL: `${r.target}${r.url}`,
      HUB_OAUTH_CALLBACK_URL: `${r.url}oauth_callback`, HUB_OAUTH_ACCESS_SCOPES: accessScopes, HUB_OAUTH_SCOPES: accessScopes,
      HUB_OAUTH_CLIENT_ALLOWED_SCOPES: '[]', HUB_ACTIVITY_URL: `${apiUrl}/users/${encodeURIComponent(r.user)}/activity`,
    };
  }

  async function revokeToken(r: ServerRecord): Promise<void> {
    if (!r.token_id) return;
    await tokens.deleteToken({ owner: { kind: 'user', name: r.user }, id: r.token_id, by: 'actor:spawner' }).catch((e: HubError) => {
      if (e.status !== 404) log.warn({ event: 'server.token.revoke_failed', server: label(r), err: e.message }, 'server token not revoked');
    });
    // its OAuth client goes too (and with it the browser tokens it issued); the oauth actor prunes missed ones at its start
    await oauth.deleteClient({ client_id: serverClientId(r.user, r.name), by: 'actor:spawner' }).catch((e: HubError) =>
      log.warn({ event: 'server.oauth_client.delete_failed', server: label(r), err: e.message }, 'server OAuth client not deleted'));
  }

  /** Launch, wait for HTTP, record the outcome. Resolves when ready; rejects with the reason it failed. */
  async function spawnServer(r: ServerRecord, abort: AbortController): Promise<void> {
    const l = localOf(r);
    try {
      const issued = await tokens.issueServerToken({ user: r.user, server_name: r.name, url: r.url });
      r.token_id = issued.model!.id;
      // the server's token is also its OAuth client secret (reference §6.7)
      await oauth.registerServerClient({ client_id: serverClientId(r.user, r.name), user: r.user, server_name: r.name, url: r.url, secret: issued.token });
      r.port = await freePort();
      r.target = `http://127.0.0.1:${r.port}`;
      const child = launch({ cmd: command(), env: environment(r, issued.token), logFile: join(config.Hub.data_dir, 'servers', `${serverKey(r.user, r.name)}.log`) });
      l.child = child;
      child.on('exit', (code, signal) => void onChildExit(r.user, r.name, child, code, signal));
      if (!child.pid) throw new Error(`could not start ${command()[0]}`);
      r.pid = child.pid;
      r.pid_start = processStartTime(child.pid);
      await progress(r, { progress: 50, message: 'Spawning server...' });
      await waitForHttp(`${r.target}${r.url}`, {
        timeoutMs: S.start_timeout * 1000, requestTimeoutMs: S.http_timeout * 1000, signal: abort.signal,
        alive: () => child.exitCode === null && child.signalCode === null,
      });
      await markReady(r, 'ready');
      void audit.publish('server', 'start', { who: 'actor:spawner', what: label(r), outcome: 'ok', pid: r.pid });
    } catch (e) {
      const cancelled = abort.signal.aborted;
      const reason = (e as Error).message;
      if (r.pid) await stopProcess(r.pid, r.pid_start, S.stop_signal_timeout * 1000, log).catch(() => undefined);
      await revokeToken(r);
      r.state = 'failed';
      r.target = '';
      await progress(r, { progress: 100, failed: true, message: cancelled ? 'Spawn cancelled' : `Spawn failed: ${reason}` });
      announce('failed', r);
      log.warn({ event: 'server.spawn.failed', server: label(r), reason, cancelled }, 'server did not start');
      void audit.publish('server', 'start', { who: 'actor:spawner', what: label(r), outcome: 'failed', reason: cancelled ? 'cancelled' : reason });
      throw errors.spawnFailed(cancelled ? 'Spawn cancelled' : `Spawn failed: ${reason}`);
    }
  }

  /**
   * Ready means routed: the record says `running` (gateways route a server from the registry), then every
   * gateway confirms its copy has that write, and only then the ready event and the 201 go out.
   */
  async function markReady(r: ServerRecord, change: 'ready' | 'adopted'): Promise<void> {
    r.state = 'running';
    const revision = await registry.save(r);
    const seen = await gatewaysHaveApplied(revision);
    if (seen.confirmed < seen.gateways) log.warn({ event: 'server.route.unconfirmed', server: label(r), ...seen }, 'not every gateway confirmed the route in time');
    if (change === 'ready') {
      await progress(r, { progress: 100, ready: true, url: r.url, message: `Server ready at ${r.url}`, html_message: `Server ready at <a href="${r.url}">${r.url}</a>` });
    }
    announce(change, r);
  }

  /** A server exits on its own (crash, or killed by someone): clean up and say so. */
  async function onChildExit(user: string, name: string, child: ChildProcess, code: number | null, signal: string | null): Promise<void> {
    const r = registry.get(user, name);
    if (!r || r.pid !== child.pid || r.state !== 'running') return; // a start or a stop is handling it
    log.warn({ event: 'server.exited', server: label(r), pid: r.pid, code, signal }, 'server exited by itself');
    await forget(r, 'exited');
  }

  /**
   * A server that is gone: token revoked, event and audit line; its record dropped, except a named
   * server's, which stays (stopped) until it is removed, as the established hub keeps named servers.
   */
  async function forget(r: ServerRecord, reason: string, remove = false): Promise<void> {
    await revokeToken(r);
    if (r.name && !remove) {
      await registry.save({ ...r, state: 'stopped', target: '', port: 0, pid: 0, pid_start: '', token_id: '', instance: '', progress: [] });
    } else {
      await registry.remove(r.user, r.name);
    }
    local.delete(serverKey(r.user, r.name));
    announce('stopped', { ...r, state: 'stop' });
    void audit.publish('server', 'stop', { who: 'actor:spawner', what: label(r), outcome: 'ok', reason });
  }

  async function stopServerNow(r: ServerRecord, by: string, remove = false): Promise<void> {
    const l = localOf(r);
    if (r.state === 'spawn') {
      l.abort?.abort();
      await l.spawning?.catch(() => undefined);
      const after = registry.get(r.user, r.name);
      if (after && after.state === 'failed') await (r.name && !remove ? registry.save({ ...after, state: 'stopped', progress: [] }) : registry.remove(r.user, r.name));
      return;
    }
    r.state = 'stop';
    await registry.save(r);
    announce('stopping', r);
    try {
      await stopProcess(r.pid, r.pid_start, S.stop_signal_timeout * 1000, log);
    } catch (e) {
      log.error({ event: 'server.stop.failed', server: label(r), err: (e as Error).message }, 'server could not be stopped');
      throw e;
    }
    await forget(r, `stopped by ${by}`, remove);
  }

  function checkStartAllowed(user: string, name: string): void {
    if (name) {
      if (!config.Hub.allow_named_servers) throw errors.badRequest('Named servers are not enabled.');
      const existing = registry.get(user, name);
      if (!existing) {
        const why = invalidServerNameReason(name);
        if (why) throw errors.badRequest(`Invalid server_name: '${name.slice(0, 60)}' (${why})`);
        const limit = config.Hub.named_server_limit_per_user;
        const named = registry.all().filter((r) => r.user === user && r.name !== '' && isActive(r)).length;
        if (limit > 0 && named >= limit) {
          throw errors.badRequest(`User ${user} already has the maximum of ${limit} named servers.  One must be deleted before a new server can be created`);
        }
      }
    }
    const all = registry.all();
    const spawning = all.filter((r) => r.state === 'spawn').length;
    if (config.Hub.concurrent_spawn_limit > 0 && spawning >= config.Hub.concurrent_spawn_limit) {
      const retry = 30 + Math.floor(Math.random() * 31);
      throw errors.tooManyRequests(`Too many users trying to log in right now. Try again in ${retry} seconds.`, retry);
    }
    const active = all.filter(isActive).length;
    if (config.Hub.active_server_limit > 0 && active >= config.Hub.active_server_limit) {
      throw errors.tooManyRequests('Active user limit exceeded. Try again in a few minutes.', 60);
    }
  }

  const alive = (r: ServerRecord) => isSameProcess(r.pid, r.pid_start);

  return {
    async startServer(req: { user: string; name: string; user_options_json: string; by: string }) {
      const current = registry.get(req.user, req.name);
      if (current?.state === 'spawn') return { status: 'pending', server: serverMessage(current) };
      if (current?.state === 'stop') throw errors.badRequest(`${label(req)} is pending stop`);
      if (current?.state === 'running') {
        if (alive(current)) throw errors.badRequest(`${label(req)} is already running`);
        await forget(current, 'found dead at start');
      }
      checkStartAllowed(req.user, req.name);
      const options = req.user_options_json ? JSON.parse(req.user_options_json) : current?.user_options ?? {};
      const now = isoNow();
      const r: ServerRecord = {
        user: req.user, name: req.name, state: 'spawn', url: serverUrl(req.user, req.name), target: '', port: 0, pid: 0, pid_start: '',
        started: now, last_activity: now, user_options: options, instance, token_id: '',
        progress: [{ progress: 0, message: 'Server requested' }],
      };
      await registry.save(r);
      announce('spawning', r);
      const abort = new AbortController();
      const l = localOf(r);
      l.abort = abort;
      const spawning = spawnServer(r, abort);
      l.spawning = spawning;
      spawning.catch(() => undefined);
      const outcome = await Promise.race([spawning.then(() => 'ready' as const), sleep(S.slow_spawn_timeout * 1000).then(() => 'pending' as const)]);
      return { status: outcome, server: serverMessage(registry.get(req.user, req.name) ?? r) };
    },

    async stopServer(req: { user: string; name: string; by: string; remove?: boolean }) {
      const r = registry.get(req.user, req.name);
      // not running: a remove forgets it; a failed start is dismissed (a named server stays, stopped)
      if (r && !isActive(r)) {
        if (req.remove || !r.name) await registry.remove(r.user, r.name);
        else if (r.state === 'failed') await registry.save({ ...r, state: 'stopped', progress: [] });
      }
      if (!r || !isActive(r)) return { status: 'stopped' };
      const l = localOf(r);
      if (r.state === 'stop' && l.stopping) return { status: 'pending', server: serverMessage(r) };
      const stopping = l.stopping ?? stopServerNow(r, req.by, req.remove === true);
      l.stopping = stopping;
      stopping.catch(() => undefined).finally(() => { if (local.get(serverKey(r.user, r.name)) === l) l.stopping = undefined; });
      const outcome = await Promise.race([stopping.then(() => 'stopped' as const), sleep(S.slow_stop_timeout * 1000).then(() => 'pending' as const)]);
      return { status: outcome };
    },

    /** Before a user is deleted: every server stopped, waiting until gone (bounded by the caller's deadline). */
    async stopUserServers(req: { user: string; by: string }) {
      const mine = registry.all().filter((r) => r.user === req.user && isActive(r));
      await Promise.all(mine.map((r) => {
        const l = localOf(r);
        return (l.stopping ??= stopServerNow(r, req.by));
      }));
      for (const r of registry.all().filter((x) => x.user === req.user)) await registry.remove(r.user, r.name);
      return { status: 'stopped' };
    },

    userServers: (req: { user: string }) => ({ servers: registry.all().filter((r) => r.user === req.user && isActive(r)).map(serverMessage) }),

    listServers: (req: { ready_only: boolean }) => ({
      servers: registry.all().filter((r) => (req.ready_only ? r.state === 'running' : isActive(r))).map(serverMessage),
    }),

    /**
     * At start: servers that outlived the previous spawner are adopted when their process is ours and
     * answers HTTP; starts and stops it left half-done are finished; the dead are cleaned up.
     */
    async adoptAll(): Promise<void> {
      for (const r of registry.all()) {
        if (r.state === 'failed' || r.state === 'stopped') continue;
        if (!alive(r)) {
          log.info({ event: 'server.reaped', server: label(r), pid: r.pid }, 'server died while no spawner watched it');
          await forget(r, 'died while the spawner was down');
          continue;
        }
        if (r.state === 'stop') {
          const l = localOf(r);
          l.stopping = stopServerNow(r, 'actor:spawner (resumed)');
          l.stopping.catch(() => undefined);
          continue;
        }
        const abort = new AbortController();
        const resumed = waitForHttp(`${r.target}${r.url}`, {
          timeoutMs: r.state === 'spawn' ? S.start_timeout * 1000 : S.http_timeout * 1000,
          requestTimeoutMs: S.http_timeout * 1000, signal: abort.signal, alive: () => alive(r),
        });
        try {
          await resumed;
          r.instance = instance;
          if (r.state === 'spawn') await markReady(r, 'ready');
          else await markReady(r, 'adopted');
          log.info({ event: 'server.adopted', server: label(r), pid: r.pid }, 'server re-adopted');
          void audit.publish('server', 'adopt', { who: 'actor:spawner', what: label(r), outcome: 'ok', pid: r.pid });
        } catch (e) {
          log.warn({ event: 'server.adopt.failed', server: label(r), err: (e as Error).message }, 'server alive but not answering: stopping it');
          await stopServerNow(r, 'actor:spawner (unhealthy at adoption)').catch(() => undefined);
        }
      }
    },

    /** Servers this process did not start send no exit event: look at them now and then. */
    async pollAdopted(): Promise<void> {
      for (const r of registry.all()) {
        if (r.state !== 'running' || local.get(serverKey(r.user, r.name))?.child) continue;
        if (!alive(r)) await forget(r, 'exited');
      }
    },

    /** Activity from the server itself or from proxied traffic: forward only, written in batches. */
    async recordActivity(entries: { user: string; name: string; at: string }[]): Promise<void> {
      for (const e of entries) {
        const r = registry.get(e.user, e.name);
        if (r && isActive(r) && e.at > r.last_activity) {
          r.last_activity = e.at;
          await registry.save(r);
        }
      }
    },

    /** On a clean hub shutdown with Hub.cleanup_servers: stop everything, in parallel. */
    async stopAll(): Promise<void> {
      await Promise.all(registry.all().filter(isActive).map((r) => {
        const l = localOf(r);
        return (l.stopping ??= stopServerNow(r, 'hub shutdown')).catch(() => undefined);
      }));
    },
  };
}

export type SpawnerHandlers = ReturnType<typeof createSpawnerHandlers>;
