// The NATS connection every process shares, JSON request/reply with HubError mapping,
// and an actor's NATS service (the services framework gives $SRV.PING/INFO/STATS discovery for free).
import { connect, headers as natsHeaders, RequestStrategy, type KV, type NatsConnection, type ServiceMsg, type Service } from 'nats';
import { natsServers } from './config.js';
import type { NatsTlsFiles } from './internal-ssl.js';
import { busAuthFromEnv, type BusAuth } from './nats-auth.js';
import { asHubError, fromNatsReply, fromNatsRequestError, toNatsHeaders } from './errors.js';
import type { Logger } from './log.js';
import { natsRequestDuration, outcomeOf, secondsSince } from './metrics.js';
import { natsServiceName, subjects, type EventChange, type EventEntity } from './subjects.js';

export type { NatsConnection };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export const encodeJson = (v: unknown): Uint8Array => encoder.encode(JSON.stringify(v ?? null));
export const decodeJson = <T = unknown>(data: Uint8Array): T => (data.length ? JSON.parse(decoder.decode(data)) : null) as T;

/** A connection whose server has not answered MAX_PINGS_OUT pings, one every PING_INTERVAL_MS, is dropped for another member. */
export const PING_INTERVAL_MS = 1000;
export const MAX_PINGS_OUT = 2;

/** How a process proves who it is to the hub's NATS: its bus user (shared/nats-auth.ts) and, with Hub.internal_ssl, its certificate. */
export interface NatsLink {
  auth?: BusAuth;
  tls?: NatsTlsFiles;
}

/**
 * Connects and keeps reconnecting forever: NATS may restart under the supervisor at any time. `url` may list
 * several members of a cluster (comma-separated); the client picks one and moves to another when it dies
 * (it also learns the members the servers announce).
 */
export async function connectNats(url: string, name: string, log: Logger, onStatus?: (type: string) => void, { auth = busAuthFromEnv(), tls }: NatsLink = {}): Promise<NatsConnection> {
  const nc = await connect({
    servers: natsServers(url),
    name,
    ...(auth ? { user: auth.user, pass: auth.pass, ...(auth.inboxPrefix ? { inboxPrefix: auth.inboxPrefix } : {}) } : {}),
    ...(tls ? { tls } : {}),
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    reconnectJitter: 100,
    // A member that dies with its machine closes no socket: only unanswered pings tell (nats.js's default, 2 min
    // × 2, left a gateway's copy of the registry frozen for minutes). Answered at once by a live server, so a busy
    // process does not miss them: its pings wait with it.
    pingInterval: PING_INTERVAL_MS,
    maxPingOut: MAX_PINGS_OUT,
    waitOnFirstConnect: true,
    timeout: 5000,
    // no Error (with its stack) captured per request and timer: with it a bulk create's 20,000 audit publishes
    // spent more time making stack traces and collecting them than publishing; failures still say what failed
    noAsyncTraces: true,
  });
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === 'pingTimer') continue;
      onStatus?.(s.type);
      log.info({ event: 'nats.status', type: s.type, data: typeof s.data === 'string' ? s.data : undefined }, 'nats connection status');
    }
  })();
  return nc;
}

// ---- JetStream: replicas and a cluster that is still electing ----------------------------------------

const replicasOf = new WeakMap<NatsConnection, number>();

/** `Hub.nats_replicas` for every bucket and stream created through this connection (set once by shared/actor.ts). */
export function setJetStreamReplicas(nc: NatsConnection, replicas: number): void {
  replicasOf.set(nc, replicas);
}

export const jetStreamReplicas = (nc: NatsConnection): number => replicasOf.get(nc) ?? 1;

/**
 * A JetStream set-up step (create or bind a bucket or stream), retried with backoff for at most `timeoutMs`:
 * a cluster answers "JetStream system temporarily unavailable" (or nothing) until its members have elected a
 * leader, and two actors creating the same bucket at once race. The last error is thrown when time runs out.
 */
export async function retryJetStream<T>(what: string, step: () => Promise<T>, timeoutMs: number, log?: Logger): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let attempt = 1, delay = 100; ; attempt++, delay = Math.min(delay * 2, 2000)) {
    try {
      return await step();
    } catch (e) {
      if (Date.now() + delay >= deadline) throw e;
      if (attempt === 3) log?.warn({ event: 'nats.jetstream.waiting', what, err: (e as Error).message }, 'JetStream not ready yet, retrying');
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}

/** Opens (creating when missing, with the hub's replicas) a KV bucket, retried while JetStream is not ready. */
export function openKv(nc: NatsConnection, bucket: string, { history = 1, timeoutMs = 30_000, log }: { history?: number; timeoutMs?: number; log?: Logger } = {}): Promise<KV> {
  return retryJetStream(`bucket ${bucket}`, () => nc.jetstream().views.kv(bucket, { history, replicas: jetStreamReplicas(nc) }), timeoutMs, log);
}

/** A JSON request to an actor's NATS endpoint; errors come back as HubErrors (503 when nobody listens, 504 on timeout). */
export async function requestJson<T>(nc: NatsConnection, subject: string, payload: unknown, timeoutMs: number): Promise<T> {
  const start = performance.now();
  let reply;
  try {
    reply = await nc.request(subject, encodeJson(payload), { timeout: timeoutMs });
  } catch (e) {
    const err = fromNatsRequestError(e, subject);
    natsRequestDuration.observe([subject, outcomeOf(err)], secondsSince(start));
    throw err;
  }
  const err = fromNatsReply(reply.headers);
  natsRequestDuration.observe([subject, err ? outcomeOf(err) : 'ok'], secondsSince(start));
  if (err) throw err;
  return decodeJson<T>(reply.data);
}

/** Publishes one domain event `hub.evt.<entity>.<change>` (the names are checked against shared/subjects.ts EVENTS). */
export type Announce = <E extends EventEntity>(entity: E, change: EventChange<E>, body: Record<string, unknown>) => void;

export function createAnnouncer(nc: NatsConnection): Announce {
  return (entity, change, body) => nc.publish(subjects.event(entity, change), encodeJson(body));
}

/**
 * Asks every running gateway to confirm that its copy of the server registry has applied `revision`
 * (so it routes what that write made ready). The count of gateways comes from the NATS services
 * framework's PING; a gateway that starts later loads the whole registry before it listens.
 * Resolves with how many confirmed out of how many run.
 */
export async function gatewaysHaveApplied(nc: NatsConnection, revision: number, timeoutMs: number): Promise<{ confirmed: number; gateways: number }> {
  /** replies counted until the strategy ends the request; no responders counts as none */
  const count = async (replies: Promise<AsyncIterable<{ data: Uint8Array }>>) => {
    let n = 0;
    try {
      for await (const m of await replies) if (m.data.length) n++;
    } catch {
      // no responders or a closed connection: those that answered are what we have
    }
    return n;
  };
  const gateways = await count(nc.requestMany(`$SRV.PING.${natsServiceName('gateway')}`, new Uint8Array(), {
    strategy: RequestStrategy.JitterTimer, jitter: 50, maxWait: Math.min(500, timeoutMs),
  }));
  if (!gateways) return { confirmed: 0, gateways };
  const confirmed = await count(nc.requestMany(subjects.command('gateway', 'servers-applied'), encodeJson({ revision, wait_ms: timeoutMs }), {
    strategy: RequestStrategy.Count, maxMessages: gateways, maxWait: timeoutMs + 100,
  }));
  return { confirmed, gateways };
}

export type NatsHandler = (payload: unknown, msg: ServiceMsg) => Promise<unknown> | unknown;

/** Header naming the instance that answered an every-replica endpoint: the scrape tells replicas apart by it. */
export const INSTANCE_HEADER = 'Hub-Instance';

/**
 * Registers the actor as a NATS service `hub-<actor>` with endpoints `hub.<actor>.<verb>`, all in one queue
 * group so replicas share the work. The framework answers `$SRV.PING|INFO|STATS.hub-<actor>` itself, with
 * `metadata` (actor, instance, pid): that is the actor's NATS ping.
 */
export async function serveNats(
  nc: NatsConnection, actor: string, version: string, endpoints: Record<string, NatsHandler>, log: Logger, metadata: Record<string, string> = {},
  /** endpoints every replica answers (scatter-gather): each in a queue group of its own, named `instance` */
  everyReplica: Record<string, NatsHandler> = {}, instance = '',
): Promise<Service> {
  const service = await nc.services.add({ name: natsServiceName(actor), version, queue: `hub-${actor}`, metadata });
  const group = service.addGroup(subjects.commandGroup(actor));
  const instanceHeaders = natsHeaders();
  if (instance) instanceHeaders.set(INSTANCE_HEADER, instance);
  const all = [
    ...Object.entries(endpoints).map(([verb, handle]) => [verb, handle, undefined] as const),
    ...Object.entries(everyReplica).map(([verb, handle]) => [verb, handle, instance || undefined] as const),
  ];
  for (const [verb, handle, queue] of all) {
    group.addEndpoint(verb, { queue, handler: async (err, msg) => {
      if (err) {
        log.warn({ event: 'nats.endpoint.error', verb, err: err.message }, 'nats endpoint error');
        return;
      }
      try {
        const reply = await handle(msg.data.length ? decodeJson(msg.data) : null, msg);
        msg.respond(reply instanceof Uint8Array ? reply : encodeJson(reply), queue ? { headers: instanceHeaders } : undefined); // bytes go as they are
      } catch (e) {
        const hubErr = asHubError(e);
        if (hubErr.status >= 500) log.error({ event: 'nats.handler.failed', verb, err: e }, 'handler failed');
        const h = natsHeaders();
        for (const [k, v] of Object.entries(toNatsHeaders(hubErr))) h.set(k, v);
        msg.respond(encodeJson({ status: hubErr.status, message: hubErr.message }), { headers: h });
      }
    } });
  }
  return service;
}

// ---- liveness: every actor's heartbeat -----------------------------------------------------------------

/** How often an actor says it is alive; one not heard for HEARTBEATS_MISSED of these is taken as gone. */
export const HEARTBEAT_MS = 3000;
export const HEARTBEATS_MISSED = 3;

/** What an actor publishes on `hub.<actor>.heartbeat`: at start, every HEARTBEAT_MS, and `gone` when it stops. */
export interface Heartbeat { actor: string; instance: string; node: string; gone?: true }

/**
 * Publishes this instance's heartbeat now and every HEARTBEAT_MS (the gateway's scrape waits for every replica
 * it knows alive, services/gateway/metrics.ts); `stop` says goodbye so nobody waits for it until it ages out.
 */
export function startHeartbeat(nc: NatsConnection, actor: string, instance: string, node: string): { stop(): void } {
  const subject = subjects.command(actor, 'heartbeat');
  const beat: Heartbeat = { actor, instance, node };
  const publish = (body: Heartbeat) => {
    try {
      nc.publish(subject, encodeJson(body));
    } catch {
      // a closed connection: nobody to tell
    }
  };
  publish(beat);
  const timer = setInterval(() => publish(beat), HEARTBEAT_MS);
  timer.unref();
  return {
    stop() {
      clearInterval(timer);
      publish({ ...beat, gone: true });
    },
  };
}
