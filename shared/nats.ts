// The NATS connection every process shares, JSON request/reply with HubError mapping,
// and an actor's NATS service (the services framework gives $SRV.PING/INFO/STATS discovery for free).
import { connect, headers as natsHeaders, type NatsConnection, type ServiceMsg, type Service } from 'nats';
import { asHubError, fromNatsReply, fromNatsRequestError, toNatsHeaders } from './errors.js';
import type { Logger } from './log.js';
import { natsRequestDuration, outcomeOf, secondsSince } from './metrics.js';
import { natsServiceName } from './subjects.js';

export type { NatsConnection };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export const encodeJson = (v: unknown): Uint8Array => encoder.encode(JSON.stringify(v ?? null));
export const decodeJson = <T = unknown>(data: Uint8Array): T => (data.length ? JSON.parse(decoder.decode(data)) : null) as T;

/** Connects and keeps reconnecting forever: NATS may restart under the supervisor at any time. */
export async function connectNats(url: string, name: string, log: Logger, onStatus?: (type: string) => void): Promise<NatsConnection> {
  const nc = await connect({
    servers: url,
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    reconnectJitter: 100,
    waitOnFirstConnect: true,
    timeout: 5000,
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

export type NatsHandler = (payload: unknown, msg: ServiceMsg) => Promise<unknown> | unknown;

/**
 * Registers the actor as a NATS service `hub-<actor>` with endpoints `hub.<actor>.<verb>`,
 * all in one queue group so replicas share the work.
 */
export async function serveNats(
  nc: NatsConnection, actor: string, version: string, endpoints: Record<string, NatsHandler>, log: Logger,
  /** endpoints every replica answers (scatter-gather): each in a queue group of its own, named `instance` */
  everyReplica: Record<string, NatsHandler> = {}, instance = '',
): Promise<Service> {
  const service = await nc.services.add({ name: natsServiceName(actor), version, queue: `hub-${actor}` });
  const group = service.addGroup(`hub.${actor}`);
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
        msg.respond(reply instanceof Uint8Array ? reply : encodeJson(reply)); // bytes go as they are
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
