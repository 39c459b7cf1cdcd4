// The life of an actor process, written once: config, log, NATS, audit, its gRPC and NATS services,
// a Ping on both, and an ordered, bounded, idempotent shutdown. Each services/<actor>/main.ts only wires.
import { randomBytes } from 'node:crypto';
import { createAuditPublisher, ensureAuditStream, type AuditPublisher } from './audit.js';
import { readResolvedConfig, type HubConfig } from './config.js';
import { useBaseUrl } from './urls.js';
import type { ActorHandlers, Client, Handlers, ServiceActor } from './contracts/index.js';
import { callsDone, createActorClient, serveGrpc, serveGrpcOverNats, stopGrpc } from './grpc.js';
import { internalTlsFiles } from './internal-ssl.js';
import { createLogger, type Logger } from './log.js';
import { initMetrics, metricsSnapshot, setNodeName } from './metrics.js';
import { collectWhenIdle } from './idle-gc.js';
import { connectNats, decodeJson, encodeJson, serveNats, setJetStreamReplicas, startHeartbeat, type NatsConnection, type NatsHandler } from './nats.js';
import { grpcSocketPath, type ActorName } from './paths.js';
import { subjects } from './subjects.js';
import { HUB_COMMIT, HUB_VERSION } from './build-info.js';
import { isReloadAnswer, isReloadRequest, RELOAD_ASKED, RELOADED_MESSAGE, type ReloadAsked, type ReloadedReply, type ReloadRequest } from './reload.js';
import {
  ACTOR_READY_MESSAGE, isGo, isPredecessorGone, isReplacedNotice, PREDECESSOR_ENV, SHUTDOWN_MESSAGE, STANDBY_ENV, STANDBY_MESSAGE, type ReplacedNotice, type ShutdownRequest,
} from './supervision.js';

export { HUB_VERSION };
/**
 * The established hub's release whose API and single-user environment this hub answers as: what version-gated clients
 * compare with (GET /hub/api `version`, the version headers): jupyterhub-singleuser warns on another major version,
 * the idle culler filters by state only from 1.3. Our own release is HUB_VERSION (`hub_version`).
 */
export const API_VERSION = '6.1.1';

export interface ActorContext {
  readonly actor: ActorName;
  readonly instance: string;
  readonly config: HubConfig;
  readonly log: Logger;
  readonly nc: NatsConnection;
  readonly audit: AuditPublisher;
  /** the config's timeout for one internal call, in ms */
  readonly rpcTimeoutMs: number;
  /** called with each NATS connection status change ('reconnect', 'disconnect', ...) */
  onNatsStatus(listener: (type: string) => void): void;
  /**
   * Whether this process replaces one of this node that still runs beside it (`hub restart`), and when that one is
   * gone: what one instance of a node must do alone waits for it (resolved at once for a process that replaces none).
   */
  readonly predecessor: { running: boolean; gone: Promise<void> };
}

/**
 * A successor's view of the process it replaces (PREDECESSOR_ENV): gone when the supervisor says so, or when the pid
 * no longer runs (checked every second: the supervisor's word may be lost with it).
 */
function watchPredecessor(): ActorContext['predecessor'] {
  const pid = Number(process.env[PREDECESSOR_ENV]);
  if (!process.send || !Number.isInteger(pid) || pid <= 0) return { running: false, gone: Promise.resolve() };
  const view = { running: true, gone: Promise.resolve() };
  view.gone = new Promise<void>((resolve) => {
    const done = () => {
      view.running = false;
      clearInterval(timer);
      process.off('message', onMessage);
      resolve();
    };
    const onMessage = (m: unknown) => { if (isPredecessorGone(m)) done(); };
    const timer = setInterval(() => {
      try {
        process.kill(pid, 0);
      } catch {
        done();
      }
    }, 1000);
    timer.unref();
    process.on('message', onMessage);
  });
  return view;
}

export interface ActorParts<A extends ActorName> {
  /** rpc handlers other than Ping (typed by the actor's service in proto/) */
  grpc?: ActorHandlers<A>;
  /** NATS endpoints `hub.<actor>.<verb>` other than ping */
  nats?: Record<string, NatsHandler>;
  /** facts reported in Ping replies */
  details?: () => Record<string, string>;
  /** stop taking outside work (e.g. close a listen socket); runs first on shutdown */
  stopIntake?: () => Promise<void> | void;
  /** when replaced by a fresh process (`hub restart`): after stopIntake, wait (at most `ms`) for the work in progress */
  drain?: (ms: number) => Promise<void>;
  /** release resources (stores, timers); runs after the transports are drained */
  close?: () => Promise<void> | void;
  /** applies the live options (shared/reload.ts LIVE_OPTIONS) of a reloaded configuration; the log level is done already */
  reload?: (next: HubConfig) => Promise<void> | void;
}

export function natsUrl(config: HubConfig): string {
  return config.Hub.nats_url || `nats://127.0.0.1:${config.Hub.nats_port}`;
}

export interface ActorOptions {
  /** names this replica's gRPC socket, when several replicas share a data dir */
  grpcInstance?: (config: HubConfig) => string;
}

export async function runActor<A extends ActorName>(actor: A, setup: (ctx: ActorContext) => Promise<ActorParts<A>>, options: ActorOptions = {}): Promise<void> {
  const config = readResolvedConfig();
  useBaseUrl(config.Hub.base_url);
  const node = config.Hub.node_name;
  const log = createLogger(actor, config.Hub.log_level, config.Hub.log_format, node);
  setNodeName(node);
  initMetrics(actor, options.grpcInstance?.(config));
  collectWhenIdle(); // gives back what a burst of requests left behind (actors with --expose-gc)
  const instance = `${actor}-${randomBytes(4).toString('hex')}`;
  const startedAt = Date.now();
  const startedIso = new Date(startedAt).toISOString();
  process.on('uncaughtException', (err) => {
    log.fatal({ event: 'actor.crash', err }, 'uncaught exception');
    process.exit(1);
  });
  process.on('unhandledRejection', (err) => log.error({ event: 'actor.unhandled_rejection', err }, 'unhandled rejection'));

  const statusListeners: ((type: string) => void)[] = [];
  // as its own NATS user (from the environment the supervisor gave it), with its certificate under Hub.internal_ssl
  const nc = await connectNats(natsUrl(config), `${instance}@${node}`, log, (type) => statusListeners.forEach((l) => l(type)), { tls: internalTlsFiles(config) });
  setJetStreamReplicas(nc, config.Hub.nats_replicas);
  // a NATS cluster starting with the hub may need a while to elect its JetStream leader
  await ensureAuditStream(nc, config.Hub.audit_retention_days, Math.max(30_000, config.Supervisor.startup_timeout * 2000), log);
  const audit = createAuditPublisher(nc, actor, log);
  const ctx: ActorContext = {
    actor, instance, config, log, nc, audit, rpcTimeoutMs: config.Hub.rpc_timeout * 1000,
    onNatsStatus: (l) => void statusListeners.push(l),
    predecessor: watchPredecessor(),
  };
  // a successor started by `hub restart` waits here, booted, until its predecessor is gone (shared/supervision.ts)
  if (process.env[STANDBY_ENV] === '1' && process.send) {
    process.send({ type: STANDBY_MESSAGE });
    await new Promise<void>((resolve) => {
      process.on('message', (m) => { if (isGo(m)) resolve(); });
      process.once('disconnect', () => process.exit(0)); // the supervisor went away meanwhile
    });
  }
  const parts = await setup(ctx);

  const ping = () => ({
    actor, instance, pid: process.pid, uptime_seconds: (Date.now() - startedAt) / 1000, version: HUB_VERSION,
    details: { ...parts.details?.(), commit: HUB_COMMIT, started: startedIso },
  });
  const socket = grpcSocketPath(config.Hub.data_dir, actor, options.grpcInstance?.(config));
  const handlers = { Ping: ping, ...parts.grpc } as unknown as Handlers<A>;
  const grpcServer = await serveGrpc(actor, socket, handlers, log);
  // the same rpcs for other nodes (a node without this actor calls it over NATS; any instance answers)
  const rpcOverNats = serveGrpcOverNats(nc, actor, handlers, log);
  // `metrics` is asked of every replica (its own queue group), so the gateway's scrape sees them all
  const natsService = await serveNats(nc, actor, HUB_VERSION, { ...parts.nats }, log, { actor, instance, node, pid: String(process.pid), commit: HUB_COMMIT, started: startedIso }, { metrics: metricsSnapshot }, instance);
  const heartbeat = startHeartbeat(nc, actor, instance, node);

  // `hub restart` tells an actor it is being replaced (shared/supervision.ts REPLACED_MESSAGE): with `overlap` its
  // successor already serves, and it stops by itself; else (an older supervisor's way) a SIGTERM follows
  let replaced: ReplacedNotice | null = null;
  let stopping: Promise<void> | undefined;
  if (process.send) process.on('message', (m) => {
    if (!isReplacedNotice(m)) return;
    replaced = m;
    if (m.overlap) void stop('replaced');
  });
  const stop = (reason: string): Promise<void> => (stopping ??= (async () => {
    const successor = replaced as ReplacedNotice | null;
    // (replaced the older way, through standby, only a gateway drains: the others' successor waits for them to stop)
    const drainMs = successor && (successor.overlap || (parts.drain && actor === 'gateway')) ? successor.drain_ms : 0;
    log.info({ event: 'actor.stopping', reason, replaced: Boolean(successor), drainMs }, 'stopping');
    const budget = setTimeout(() => {
      log.error({ event: 'actor.stop.timeout' }, 'shutdown budget exceeded, exiting');
      process.exit(1);
    }, drainMs + config.Supervisor.shutdown_timeout * 1000 - 500);
    budget.unref();
    if (successor?.overlap) {
      // the successor serves: no new call comes here (the socket path is its own, NATS queue groups deliver to it),
      // open gRPC connections are told to go away (their clients connect again, to it), and the calls under way,
      // the actor's own work in progress (parts.drain) and a gateway's connections finish within the drain budget
      const until = Date.now() + drainMs;
      const left = () => Math.max(0, until - Date.now());
      await rpcOverNats.drain().catch(() => undefined);
      await natsService.stop().catch(() => undefined);
      const grpcClosed = stopGrpc(grpcServer, drainMs);
      await parts.stopIntake?.();
      if (parts.drain) await parts.drain(left());
      const idle = await callsDone(left());
      await grpcClosed;
      log.info({ event: 'actor.drained', calls_finished: idle, ms: drainMs - left() }, 'work in progress finished');
    } else {
      await parts.stopIntake?.();
      if (drainMs) await parts.drain!(drainMs);
      await stopGrpc(grpcServer, 1000);
      await rpcOverNats.drain().catch(() => undefined);
    }
    heartbeat.stop();
    await natsService.stop().catch(() => undefined);
    await parts.close?.();
    await audit.publish('actor', 'stop', { who: `actor:${actor}`, what: instance, outcome: 'ok', reason });
    await nc.drain().catch(() => undefined);
    log.info({ event: 'actor.stopped' }, 'stopped');
    process.exit(0);
  })());
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  // Started by the supervisor with an IPC channel: when the supervisor dies, so do we (no orphans).
  if (process.send) {
    process.on('disconnect', () => void stop('supervisor gone'));
    // The supervisor has no NATS client: a shutdown asked for over NATS (POST /hub/api/shutdown, from any
    // gateway, supervised or not) reaches it through every actor it started; the first to answer confirms.
    nc.subscribe(subjects.command('supervisor', 'shutdown'), {
      callback: (_e, m) => {
        const body = decodeJson<{ servers?: unknown; by?: unknown }>(m.data) ?? {};
        const request: ShutdownRequest = {
          type: SHUTDOWN_MESSAGE, servers: typeof body.servers === 'boolean' ? body.servers : undefined, by: String(body.by ?? 'unknown').slice(0, 200),
        };
        process.send?.(request);
        m.respond(encodeJson({ relayed_by: instance }));
      },
    });
  }

  // `hub reload` (shared/reload.ts): the supervisor wrote the resolved config again; one reload at a time
  let reloading: Promise<void> = Promise.resolve();
  const applyReload = async (m: ReloadRequest): Promise<void> => {
    try {
      const next = readResolvedConfig();
      log.level = next.Hub.log_level;
      await parts.reload?.(next);
      if (m.audit) await audit.publish('config', 'reload', { who: m.audit.who, what: 'config', outcome: 'ok', changed: m.audit.changed, needs_restart: m.audit.needs_restart });
      log.info({ event: 'actor.reloaded' }, 'configuration reloaded');
      process.send?.({ type: RELOADED_MESSAGE, id: m.id, ok: true } satisfies ReloadedReply);
    } catch (e) {
      log.error({ event: 'actor.reload_failed', err: e }, 'configuration not fully reloaded');
      process.send?.({ type: RELOADED_MESSAGE, id: m.id, ok: false, problem: (e as Error).message } satisfies ReloadedReply);
    }
  };
  if (process.send) {
    process.on('message', (m) => { if (isReloadRequest(m)) reloading = reloading.then(() => applyReload(m)); });
    // `hub reload --all-nodes` reaches every node's supervisor through its actors (as a shutdown does); it reloads once per id
    nc.subscribe(subjects.command('supervisor', 'reload'), {
      callback: (_e, m) => {
        const body = decodeJson<{ id?: unknown; by?: unknown }>(m.data) ?? {};
        if (typeof body.id !== 'string' || !m.reply) return;
        const id = body.id.slice(0, 100);
        const answer = (reply: unknown) => {
          if (!isReloadAnswer(reply) || reply.id !== id) return;
          process.off('message', answer);
          clearTimeout(timer);
          m.respond(encodeJson({ node, actor, result: reply.result }));
        };
        const timer = setTimeout(() => process.off('message', answer), config.Supervisor.startup_timeout * 1000);
        process.on('message', answer);
        process.send?.({ type: RELOAD_ASKED, id, by: String(body.by ?? 'hub reload --all-nodes').slice(0, 200) } satisfies ReloadAsked);
      },
    });
  }

  await audit.publish('actor', 'start', { who: `actor:${actor}`, what: instance, outcome: 'ok', pid: process.pid });
  log.info({ event: 'actor.ready', instance, startupMs: Date.now() - startedAt }, 'ready');
  process.send?.({ type: ACTOR_READY_MESSAGE });
}

/** The client of another actor, by whatever way reaches it from this node (shared/grpc.ts createActorClient). */
export function actorClient<B extends ServiceActor>(ctx: ActorContext, actor: B, timeoutMs = ctx.rpcTimeoutMs, waitForCalleeMs?: number): Client<B> {
  return createActorClient(actor, { config: ctx.config, nc: ctx.nc, timeoutMs, waitForCalleeMs });
}
