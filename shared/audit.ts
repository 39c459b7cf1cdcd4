// Audit events: every state change, published on hub.audit.<entity>.<verb> and retained in the
// HUB_AUDIT JetStream stream, so an operator can `nats sub 'hub.audit.>'` or replay history.
import { RetentionPolicy, StorageType, nanos, type JetStreamClient } from 'nats';
import type { Logger } from './log.js';
import { encodeJson, type NatsConnection } from './nats.js';
import { AUDIT_STREAM, subjects } from './subjects.js';

export interface AuditEvent {
  /** who did it: `user:<name>`, `service:<name>`, `actor:<name>` or `anonymous` */
  who: string;
  /** what it was done to, e.g. the user or server name */
  what?: string;
  outcome: 'ok' | 'failed' | 'denied';
  [detail: string]: unknown;
}

export interface AuditPublisher {
  publish(entity: string, verb: string, event: AuditEvent): Promise<void>;
}

/** Makes sure the stream exists (idempotent, safe for several actors at once). */
export async function ensureAuditStream(nc: NatsConnection, retentionDays: number): Promise<void> {
  const jsm = await nc.jetstreamManager();
  const config = {
    name: AUDIT_STREAM,
    subjects: [subjects.allAudit],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: retentionDays > 0 ? nanos(retentionDays * 86_400_000) : 0,
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

export function createAuditPublisher(nc: NatsConnection, actor: string, log: Logger): AuditPublisher {
  const js: JetStreamClient = nc.jetstream();
  return {
    async publish(entity, verb, event) {
      const subject = subjects.audit(entity, verb);
      const body = { ...event, entity, verb, actor, at: new Date().toISOString() };
      try {
        await js.publish(subject, encodeJson(body));
      } catch (e) {
        // The state change already happened; losing its audit line must be loud, not fatal.
        log.error({ event: 'audit.publish.failed', subject, err: (e as Error).message }, 'audit event not stored');
      }
    },
  };
}
