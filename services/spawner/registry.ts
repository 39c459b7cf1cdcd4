// The registry of servers: a JetStream KV bucket, so it survives any spawner process and every
// gateway can watch it. This spawner is its only writer; it keeps a copy in memory for reads.
import type { KV } from 'nats';
import { errors } from '../../shared/errors.js';
import { encodeJson, decodeJson, type NatsConnection } from '../../shared/nats.js';
import { SERVERS_BUCKET, serverKey, type ServerRecord } from '../../shared/servers.js';

/**
 * JetStream answers slowly or not at all for a few seconds after NATS restarts: a write is retried
 * (bounded), then reported as 503, the hub's "try again shortly", never as an internal error.
 */
async function withRetry(write: () => Promise<unknown>): Promise<unknown> {
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

  static async open(nc: NatsConnection): Promise<Registry> {
    const kv = await nc.jetstream().views.kv(SERVERS_BUCKET, { history: 1 });
    const registry = new Registry(kv);
    // keys first: awaiting inside the keys() iteration ends it early (seen with nats.js 2.29)
    const keys: string[] = [];
    for await (const key of await kv.keys()) keys.push(key);
    for (const key of keys) {
      const entry = await kv.get(key);
      if (entry && entry.operation === 'PUT') registry.records.set(key, decodeJson<ServerRecord>(entry.value));
    }
    return registry;
  }

  get(user: string, name: string): ServerRecord | undefined {
    return this.records.get(serverKey(user, name));
  }

  all(): ServerRecord[] {
    return [...this.records.values()];
  }

  private enqueue(key: string, write: () => Promise<unknown>): Promise<void> {
    const next = (this.queues.get(key) ?? Promise.resolve()).then(() => withRetry(write));
    this.queues.set(key, next.catch(() => undefined));
    return next.then(() => undefined);
  }

  /** Stores a copy; the in-memory view changes at once, the bucket in order. */
  save(record: ServerRecord): Promise<void> {
    const key = serverKey(record.user, record.name);
    const copy = structuredClone(record);
    this.records.set(key, copy);
    return this.enqueue(key, () => this.kv.put(key, encodeJson(copy)));
  }

  remove(user: string, name: string): Promise<void> {
    const key = serverKey(user, name);
    this.records.delete(key);
    return this.enqueue(key, () => this.kv.purge(key));
  }
}
