// The NATS connection every process shares, JSON request/reply with HubError mapping,
// and an actor's NATS service (the services framework gives $SRV.PING/INFO/STATS discovery for free).
import { connect, headers as natsHeaders, type NatsConnection, type ServiceMsg, type Service } from 'nats';
import { NATS_TOKEN_ENV } from './config.js';
import { asHubError, fromNatsReply, fromNatsRequestError, toNatsHeaders } from './errors.js';
import type { Logger } from './log.js';
import { natsServiceName } from './subjects.js';

export type { NatsConnection };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export const encodeJson = (v: unknown): Uint8Array => encoder.encode(JSON.stringify(v ?? null));
export const decodeJson = <T = unknown>(data: Uint8Array): T => (data.length ? JSON.parse(decoder.decode(data)) : null) as T;

/** Connects and keeps reconnecting forever: NATS may restart under the supervisor at any time. */
export async function connectNats(url: string, name: string, log: Logger, onStatus?: (type: string) => void, token = process.env[NATS_TOKEN_ENV]): Promise<NatsConnection> {
  const nc = await connect({
    servers: url,
    name,
    ...(token ? { token } : {}),
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
  let reply;
  try {
    reply = await nc.request(subject, encodeJson(payload), { timeout: timeoutMs });
  } catch (e) {
    throw fromNatsRequestError(e, subject);
  }
  const err = fromNatsReply(reply.headers);
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
): Promise<Service> {
  const service = await nc.services.add({ name: natsServiceName(actor), version, queue: `hub-${actor}` });
  const group = service.addGroup(`hub.${actor}`);
  for (const [verb, handle] of Object.entries(endpoints)) {
    group.addEndpoint(verb, async (err, msg) => {
      if (err) {
        log.warn({ event: 'nats.endpoint.error', verb, err: err.message }, 'nats endpoint error');
        return;
      }
      try {
        msg.respond(encodeJson(await handle(msg.data.length ? decodeJson(msg.data) : null, msg)));
      } catch (e) {
        const hubErr = asHubError(e);
        if (hubErr.status >= 500) log.error({ event: 'nats.handler.failed', verb, err: e }, 'handler failed');
        const h = natsHeaders();
        for (const [k, v] of Object.entries(toNatsHeaders(hubErr))) h.set(k, v);
        msg.respond(encodeJson({ status: hubErr.status, message: hubErr.message }), { headers: h });
      }
    });
  }
  return service;
}
