// The registry of servers: a JetStream KV bucket, so it survives any spawner process and every
// gateway can watch it. Each node's spawner writes its own node's records and keeps a live copy of all.
import { createHash } from 'node:crypto';
import { errors } from '../../shared/errors.js';
import type { KvMirror, MirrorListener } from '../../shared/kv-mirror.js';
import { decodeJson, encodeJson, type NatsConnection } from '../../shared/nats.js';
import type { Logger } from '../../shared/log.js';
import { isActive, mirrorServers, serverKey, type ServerRecord } from '../../shared/servers.js';

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
  /** this process's writes still on their way to the bucket, per key: the copy shows them already */
  private readonly pending = new Map<string, number>();
  /** the bucket revision of this process's last write of a key: an older change seen later is not applied */
  private readonly written = new Map<string, number>();
  /** the bucket revision each record was read at (for writes that must not race another spawner's) */
  private readonly revisions = new Map<string, number>();

  /** told of every record this process saves (the node's own journal of runs, services/spawner/runs.ts) */
  afterSave: ((r: ServerRecord) => void) | null = null;

  private constructor(private readonly mirror: KvMirror<ServerRecord>) {}

  /**
   * A live copy of the bucket: several spawner instances (one per node) share it, each writing its own node's
   * records, so every one sees the others' servers (placement, limits, lists). Its own writes show at once.
   */
  static async open(nc: NatsConnection, log: Logger, loadTimeoutMs: number): Promise<Registry> {
    const mirror = await mirrorServers(nc, log, loadTimeoutMs);
    const registry = new Registry(mirror);
    for (const [key, record] of mirror.entries()) registry.records.set(key, record);
    mirror.listen((c) => registry.apply(c));
    return registry;
  }

  /** Another writer's change (or the echo of ours), unless a write of ours to that key is newer or on its way. */
  private apply(c: MirrorListener<ServerRecord>): void {
    if (c.kind === 'reset') {
      for (const key of [...this.records.keys()]) if (!this.mirror.get(key) && !this.pending.get(key)) this.records.delete(key);
      for (const [key, record] of this.mirror.entries()) if (!this.pending.get(key)) this.records.set(key, record);
      return;
    }
    if (this.pending.get(c.key) || c.revision < (this.written.get(c.key) ?? 0)) return;
    if (c.kind === 'put') {
      this.records.set(c.key, c.value);
      this.revisions.set(c.key, c.revision);
    } else {
      this.records.delete(c.key);
      this.revisions.delete(c.key);
    }
  }

  stop(): void {
    this.mirror.stop();
  }

  /**
   * An id the same on every node of this hub and different for another hub (10 hex): from when the registry's
   * bucket was made, which every node shares and which outlives restarts. What names this hub's resources in a
   * system its nodes share (a Kubernetes cluster's pods).
   */
  async hubWideId(): Promise<string> {
    const status = await this.mirror.kv.status();
    return createHash('sha256').update(`${status.bucket} ${status.streamInfo.created}`).digest('hex').slice(0, 10);
  }

  /** ms this copy may be behind the bucket (0 while its watch is live) */
  staleMs(): number {
    return this.mirror.staleMs();
  }

  get(user: string, name: string): ServerRecord | undefined {
    return this.records.get(serverKey(user, name));
  }

  all(): ServerRecord[] {
    return [...this.records.values()];
  }

  private enqueue<T extends number | void>(key: string, write: () => Promise<T>): Promise<T> {
    this.pending.set(key, (this.pending.get(key) ?? 0) + 1);
    const next = (this.queues.get(key) ?? Promise.resolve()).then(() => withRetry(write)) as Promise<T>;
    const settled = next.then((revision) => {
      if (typeof revision === 'number') {
        this.written.set(key, Math.max(this.written.get(key) ?? 0, revision));
        this.revisions.set(key, revision);
      }
    }, () => undefined).finally(() => {
      const n = (this.pending.get(key) ?? 1) - 1;
      if (n > 0) this.pending.set(key, n);
      else this.pending.delete(key);
    });
    this.queues.set(key, settled);
    return next;
  }

  /** Stores a copy; the in-memory view changes at once, the bucket in order. Resolves with the bucket revision. */
  save(record: ServerRecord): Promise<number> {
    const key = serverKey(record.user, record.name);
    const previous = this.records.get(key);
    const copy = structuredClone(record);
    // activity never goes back within one run: a start's own record (saved at ready, at each progress step) was
    // taken before the activity reported while it started, which would otherwise be lost (an idle culler then
    // culled a server that was in use, the moment a slow start ended)
    if (previous && previous.started === copy.started && previous.last_activity > copy.last_activity) copy.last_activity = previous.last_activity;
    this.records.set(key, copy);
    this.afterSave?.(copy);
    const written = this.enqueue(key, () => this.mirror.kv.put(key, encodeJson(copy)));
    // A write JetStream never took (its leader moving after a NATS member died) must not stay in the copy: a start
    // refused with 503 would otherwise look pending forever to the next one. Back to what the bucket holds.
    written.catch(() => {
      if (this.records.get(key) !== copy) return;
      if (previous) this.records.set(key, previous);
      else this.records.delete(key);
    });
    return written;
  }

  /**
   * Writes `next(record)` only if the bucket still holds the revision this copy read (another spawner may be
   * doing the same: exactly one wins). Resolves with the record written, or null when the record had changed.
   */
  async saveIfUnchanged(user: string, name: string, next: (r: ServerRecord) => ServerRecord | null): Promise<ServerRecord | null> {
    const key = serverKey(user, name);
    let won: ServerRecord | null = null;
    await this.enqueue(key, async () => {
      won = null;
      const entry = await this.mirror.kv.get(key);
      if (!entry || entry.operation !== 'PUT') return 0;
      const record = next(decodeJson<ServerRecord>(entry.value)!);
      if (!record) return 0;
      try {
        const revision = await this.mirror.kv.update(key, encodeJson(record), entry.revision);
        this.records.set(key, record);
        won = record;
        return revision;
      } catch (e) {
        if (/wrong last sequence/i.test((e as Error).message)) return 0; // someone else wrote it first
        throw e;
      }
    });
    return won;
  }

  /**
   * A start's first write: `record` is written only if the bucket holds no active record of that server when it is
   * written (compare-and-set on the revision read), so two spawners (one replacing the other during `hub restart`, or
   * of two nodes) never both start one server. The copy shows it at once, as `save` does; when another start won,
   * the copy shows the bucket's record and this resolves false.
   */
  async claim(record: ServerRecord): Promise<boolean> {
    const key = serverKey(record.user, record.name);
    const previous = this.records.get(key);
    const copy = structuredClone(record);
    // activity never goes back within one run: a start's own record (saved at ready, at each progress step) was
    // taken before the activity reported while it started, which would otherwise be lost (an idle culler then
    // culled a server that was in use, the moment a slow start ended)
    if (previous && previous.started === copy.started && previous.last_activity > copy.last_activity) copy.last_activity = previous.last_activity;
    this.records.set(key, copy);
    let won = false;
    let found: ServerRecord | null = null;
    await this.enqueue(key, async () => {
      const entry = await this.mirror.kv.get(key);
      found = entry?.operation === 'PUT' ? decodeJson<ServerRecord>(entry.value) : null;
      if (found && isActive(found)) return 0;
      try {
        const revision = found ? await this.mirror.kv.update(key, encodeJson(copy), entry!.revision) : await this.mirror.kv.create(key, encodeJson(copy));
        won = true;
        return revision;
      } catch (e) {
        if (!/wrong last sequence/i.test((e as Error).message)) throw e;
        // another start wrote it first: what it wrote is what the copy shows
        const now = await this.mirror.kv.get(key);
        found = now?.operation === 'PUT' ? decodeJson<ServerRecord>(now.value) : null;
        return 0;
      }
    }).catch((e) => {
      if (this.records.get(key) === copy) {
        if (previous) this.records.set(key, previous);
        else this.records.delete(key);
      }
      throw e;
    });
    if (won) this.afterSave?.(copy);
    else if (this.records.get(key) === copy) {
      const now = found as ServerRecord | null;
      if (now) this.records.set(key, now);
      else this.records.delete(key);
    }
    return won;
  }

  remove(user: string, name: string): Promise<void> {
    const key = serverKey(user, name);
    this.records.delete(key);
    return this.enqueue(key, () => this.mirror.kv.purge(key)).then(() => undefined);
  }
}
