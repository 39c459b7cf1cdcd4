// Audit events: every state change and every security decision (including refusals), published on
// hub.audit.<entity>.<verb> and retained in the HUB_AUDIT JetStream stream, so an operator can
// `nats sub 'hub.audit.>'` or replay history. One schema, versioned (`v`), documented in the README
// ("Operating it"); `hub audit` reads it.
import { randomBytes } from 'node:crypto';
import { RetentionPolicy, StorageType, nanos, type JetStreamClient } from 'nats';
import { currentRequest, type RequestContext } from './context.js';
import type { Logger } from './log.js';
import { HotHistogram, NODE_NAME, outcomeOf, secondsSince, SLOW_BUCKETS, type HistogramChild } from './metrics.js';
import { encodeJson, jetStreamReplicas, retryJetStream, type NatsConnection } from './nats.js';
import { AUDIT_STREAM, subjects } from './subjects.js';

export const AUDIT_SCHEMA_VERSION = 1;

/** One stored audit event (schema v1). */
export interface AuditRecord {
  v: typeof AUDIT_SCHEMA_VERSION;
  /** ISO 8601, when the publisher recorded it */
  time: string;
  /** `<entity>.<verb>`, the subject's last two tokens: `server.start`, `login.failure`, `access.denied` */
  type: string;
  /** who asked: `user:<name>`, `service:<name>`, `oauth:<client id>`, `anonymous`, or `actor:<actor>` when the hub acted on its own */
  who: string;
  /** what it was done to (a user, `user:server`, a token id, a route...); '' when nothing in particular */
  what: string;
  outcome: 'ok' | 'failed' | 'denied';
  /** why, for failures and refusals (and some changes: `logout`, `exited`); null otherwise */
  reason: string | null;
  /** the client's address as the gateway saw it, when a request caused it */
  client: string | null;
  /** the request it belongs to (X-Request-Id, or the gateway's own id), when a request caused it */
  request_id: string | null;
  /** the actor that published it, and where it runs */
  actor: string;
  node: string;
  /** facts of this type (scopes, pid, ...), never a secret */
  details: Record<string, unknown>;
}

/** What a publisher says; the rest comes from the request being served (shared/context.ts). */
export interface AuditEvent {
  /** who asked; default: the request's `who`, else `actor:<publisher>` */
  who?: string;
  what?: string;
  outcome: 'ok' | 'failed' | 'denied';
  reason?: string;
  /** the request, when the publisher is not inside a served call (the gateway says it explicitly) */
  request?: RequestContext;
  /** the client's address, when known better than the request's (a login's remote address) */
  client?: string;
  /** anything else becomes `details` */
  [detail: string]: unknown;
}

export interface AuditPublisher {
  publish(entity: string, verb: string, event: AuditEvent): Promise<void>;
  /** Events of one bulk change (thousands of users at once), `PUBLISH_WINDOW` in flight at a time. */
  publishMany(entity: string, verb: string, events: readonly AuditEvent[]): Promise<void>;
}

/**
 * A bulk change's events in flight at once: one after another, 10,000 acknowledged publishes trail on for ~10 s
 * behind the answer; all at once they would queue thousands of requests on the connection.
 */
const PUBLISH_WINDOW = 64;

/** Keys never stored in details, whatever a publisher passes. */
const SECRET_KEY = /^(token|access_token|refresh_token|api_token|id_token)$|secret|password|cookie|authorization|verifier|^code$/i;

/** The record a publisher's event becomes (exported for tests and `hub audit`). */
export function auditRecord(entity: string, verb: string, event: AuditEvent, actor: string, context = currentRequest()): AuditRecord {
  const { who, what, outcome, reason, request, client, ...rest } = event;
  const ctx = request ?? context;
  const details: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(rest)) if (v !== undefined && !SECRET_KEY.test(k)) details[k] = v;
  return {
    v: AUDIT_SCHEMA_VERSION,
    time: new Date().toISOString(),
    type: `${entity}.${verb}`,
    who: who || ctx?.who || `actor:${actor}`,
    what: what ?? '',
    outcome,
    reason: reason ?? null,
    client: client || ctx?.client || null,
    request_id: ctx?.requestId ?? null,
    actor,
    node: NODE_NAME,
    details,
  };
}

/**
 * Makes sure the stream exists with the hub's replicas (idempotent, safe for several actors at once), retried
 * while a NATS cluster is still electing its JetStream leader (bounded by `timeoutMs`).
 */
export async function ensureAuditStream(nc: NatsConnection, retentionDays: number, timeoutMs = 30_000, log?: Logger): Promise<void> {
  await retryJetStream(`stream ${AUDIT_STREAM}`, () => ensureAuditStreamOnce(nc, retentionDays), timeoutMs, log);
}

async function ensureAuditStreamOnce(nc: NatsConnection, retentionDays: number): Promise<void> {
  const jsm = await nc.jetstreamManager();
  const config = {
    name: AUDIT_STREAM,
    subjects: [subjects.allAudit],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: retentionDays > 0 ? nanos(retentionDays * 86_400_000) : 0,
    num_replicas: jetStreamReplicas(nc),
  };
  try {
    await jsm.streams.info(AUDIT_STREAM);
    await jsm.streams.update(AUDIT_STREAM, config);
  } catch {
    await jsm.streams.add(config).catch(async (e) => {
      // another actor created it between our info and add
      if (!/already in use/i.test(String(e?.message))) throw e;
    });
  }
}

const publishDuration = new HotHistogram('hub_audit_publish_duration_seconds',
  'Time to store one audit event in the HUB_AUDIT stream (a JetStream publish), by outcome', ['outcome'], SLOW_BUCKETS);

/**
 * Each attempt's wait, the pause between attempts (250 ms doubling, at most 4 s), and how long one event is tried
 * in all: longer than a JetStream stream's leader election after a cluster member dies (seen past 20 s on a loaded
 * machine). Publishes run behind the answers, so the wait holds up no client.
 */
const PUBLISH_TIMEOUT_MS = 2000;
const PUBLISH_MAX_PAUSE_MS = 4000;
const PUBLISH_GIVE_UP_MS = 60_000;
const PUBLISH_ATTEMPTS = 30;

export function createAuditPublisher(nc: NatsConnection, actor: string, log: Logger): AuditPublisher {
  const js: JetStreamClient = nc.jetstream();
  let sequence = 0;
  const origin = `${actor}-${randomBytes(6).toString('hex')}`;
  const ok: HistogramChild = publishDuration.child('ok');
  const publisher: AuditPublisher = {
    async publishMany(entity, verb, events) {
      let next = 0;
      const lane = async () => {
        while (next < events.length) await publisher.publish(entity, verb, events[next++]);
      };
      await Promise.all(Array.from({ length: Math.min(PUBLISH_WINDOW, events.length) }, lane));
    },
    async publish(entity, verb, event) {
      const subject = subjects.audit(entity, verb);
      const record = auditRecord(entity, verb, event, actor);
      const start = performance.now();
      try {
        // retried, bounded: in a NATS cluster the stream takes a few seconds to elect a new leader when a member
        // dies, and an event refused meanwhile would be lost (the message id makes a retry of a stored one a no-op)
        const data = encodeJson(record);
        const msgID = `${origin}-${++sequence}`;
        // after the answers of this turn of the event loop: the publish (a socket write that wakes nats-server on
        // the same cores) never stands between a handler and its reply; the record is made above, in its context
        await new Promise<void>((resolve) => setImmediate(resolve));
        for (let attempt = 1, delay = 250; ; attempt++, delay = Math.min(delay * 2, PUBLISH_MAX_PAUSE_MS)) {
          try {
            await js.publish(subject, data, { msgID, timeout: PUBLISH_TIMEOUT_MS });
            break;
          } catch (e) {
            if (attempt >= PUBLISH_ATTEMPTS || performance.now() - start + delay > PUBLISH_GIVE_UP_MS) throw e;
            await new Promise((r) => setTimeout(r, delay));
          }
        }
        ok.observe(secondsSince(start));
      } catch (e) {
        publishDuration.observe([outcomeOf(e)], secondsSince(start));
        // The state change already happened; losing its audit line must be loud, not fatal.
        log.error({ event: 'audit.publish.failed', subject, err: (e as Error).message }, 'audit event not stored');
      }
    },
  };
  return publisher;
}
