// The registry of servers: a JetStream KV bucket, so it survives any spawner process and every
// gateway can watch it. This spawner is its only writer; it keeps a copy in memory for reads.
import type { KV } from 'nats';
import { errors } from '../../shared/errors.js';
import { encodeJson, type NatsConnection } from '../../shared/nats.js';
import type { Logger } from '../../shared/log.js';
import { mirrorServers, serverKey, type ServerRecord } from '../../shared/servers.js';

/**
 * JetStream answers slowly or not at all for a few seconds after NATS restarts: a write is retried
 * (bounded), then reported as 503, the hub's "try again shortly", never as an internal error.
 */
async function withRetry<T>(write: () => Promise<T>): Promise<T> {
  let last: unknown;
  for (let attempt = 0, delay = 100; attempt < 6; attempt++, delay *= 2) {
    try {
      return await write();
    } catch (e) {
      last = e;
      await new Promise((r) => setTimeout(r, delay));
    }
  }
  throw errors.unavailable('the server registry', last);
}

export class Registry {
  private readonly records = new Map<string, ServerRecord>();
  /** writes of one key are applied in order */
  private readonly queues = new Map<string, Promise<unknown>>();

  private constructor(private readonly kv: KV) {}

  /** Loads the bucket once (this spawner is its only writer, so its own copy stays right from then on). */
  static async open(nc: NatsConnection, log: Logger, loadTimeoutMs: number): Promise<Registry> {
    const copy = await mirrorServers(nc, log, loadTimeoutMs);
    copy.stop();
    const registry = new Registry(copy.kv);
    for (const [key, record] of copy.entries()) registry.records.set(key, record);
    return registry;
  }

  get(user: string, name: string): ServerRecord | undefined {
    return this.records.get(serverKey(user, name));
  }

  all(): ServerRecord[] {
    return [...this.records.values()];
  }

  private enqueue<T>(key: string, write: () => Promise<T>): Promise<T> {
    const next = (this.queues.get(key) ?? Promise.resolve()).then(() => withRetry(write)) as Promise<T>;
    this.queues.set(key, next.catch(() => undefined));
    return next;
  }

  /** Stores a copy; the in-memory view changes at once, the bucket in order. Resolves with the bucket revision. */
  save(record: ServerRecord): Promise<number> {
    const key = serverKey(record.user, record.name);
    const previous = this.records.get(key);
    const copy = structuredClone(record);
    this.records.set(key, copy);
    const written = this.enqueue(key, () => this.kv.put(key, encodeJson(copy)));
    // A write JetStream never took (its leader moving after a NATS member died) must not stay in the copy: a start
    // refused with 503 would otherwise look pending forever to the next one. Back to what the bucket holds.
    written.catch(() => {
      if (this.records.get(key) !== copy) return;
      if (previous) this.records.set(key, previous);
      else this.records.delete(key);
    });
    return written;
  }

  remove(user: string, name: string): Promise<void> {
    const key = serverKey(user, name);
    this.records.delete(key);
    return this.enqueue(key, () => this.kv.purge(key)).then(() => undefined);
  }
}
