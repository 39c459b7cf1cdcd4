// One way to keep a JetStream KV bucket in memory, for every reader (the gateway's servers and routes,
// the spawner's registry, the proxy-router's listing, the oauth actor's start-up check):
//   - the initial load is a watch's initial state, bounded in time: a mirror that cannot load throws, loudly;
//   - then every change, in bucket order, with its revision (so a caller can wait until it has seen a write);
//   - after a NATS reconnect (changes may have been missed) or a watch that ends, a fresh copy is loaded and
//     swapped in whole, with backoff; the old copy keeps answering meanwhile;
//   - `staleMs()` says how long the copy may have been behind (0 while the watch is live).
import type { KV, KvEntry, QueuedIterator } from 'nats';
import type { Logger } from './log.js';
import { openKv, type NatsConnection } from './nats.js';

const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 10_000;

export interface KvMirrorOptions<V> {
  bucket: string;
  /** the value for a key, or null to ignore the entry (not ours, unreadable) */
  decode(key: string, value: Uint8Array): V | null;
  /** the first load must complete within this time */
  loadTimeoutMs: number;
  log: Logger;
  /** bucket options when the mirror is the one that creates it */
  history?: number;
}

export type MirrorListener<V> =
  | { kind: 'put'; key: string; value: V; revision: number }
  | { kind: 'delete'; key: string; previous: V | undefined; revision: number }
  /** a fresh copy replaced the whole map (after a reconnect): listeners should rebuild from `entries()` */
  | { kind: 'reset' };

export interface KvMirror<V> {
  readonly kv: KV;
  get(key: string): V | undefined;
  entries(): IterableIterator<[string, V]>;
  values(): IterableIterator<V>;
  readonly size: number;
  /** the newest bucket revision this copy has applied */
  readonly revision: number;
  /** resolves true once this copy has applied `revision` (false after `timeoutMs`) */
  waitForRevision(revision: number, timeoutMs: number): Promise<boolean>;
  /** every change after the load; returns the unsubscribe */
  listen(fn: (change: MirrorListener<V>) => void): () => void;
  /** ms the copy may be behind the bucket: 0 while its watch is live, else since the watch was lost */
  staleMs(): number;
  /** loads a fresh copy (after a NATS reconnect); the old one serves meanwhile */
  reload(): Promise<void>;
  stop(): void;
}

export async function mirrorKv<V>(nc: NatsConnection, options: KvMirrorOptions<V>): Promise<KvMirror<V>> {
  const { decode, log, bucket } = options;
  const kv = await openKv(nc, bucket, { history: options.history ?? 1, timeoutMs: Math.max(options.loadTimeoutMs, 30_000), log });
  let map = new Map<string, V>();
  let revision = 0;
  let generation = 0;
  let stopped = false;
  let lostSince = 0; // 0 = live
  let retryMs = RETRY_FIRST_MS;
  let retryTimer: NodeJS.Timeout | undefined;
  let reloading: Promise<void> | undefined;
  let iter: QueuedIterator<KvEntry> | null = null;
  const listeners = new Set<(c: MirrorListener<V>) => void>();
  const waiters = new Set<{ revision: number; resolve: (ok: boolean) => void; timer: NodeJS.Timeout }>();

  const emit = (c: MirrorListener<V>) => {
    for (const l of listeners) l(c);
  };
  const settleWaiters = () => {
    for (const w of waiters) {
      if (w.revision <= revision) {
        clearTimeout(w.timer);
        waiters.delete(w);
        w.resolve(true);
      }
    }
  };

  /** Watches from scratch; resolves when the fresh copy is in place. */
  async function load(timeoutMs: number): Promise<void> {
    const mine = ++generation;
    const next = new Map<string, V>();
    let nextRevision = 0;
    let markLoaded!: () => void;
    const initialized = new Promise<void>((resolve) => { markLoaded = resolve; });
    const w = await kv.watch({ initializedFn: () => markLoaded() });
    const current = () => mine === generation && !stopped;

    // Entries always go into this generation's map; once it is the live one (swapped in) they are announced.
    const apply = (e: KvEntry) => {
      if (!current()) return;
      const live = map === next;
      const previous = next.get(e.key);
      const value = e.operation === 'PUT' ? decode(e.key, e.value) : null;
      if (value === null) next.delete(e.key);
      else next.set(e.key, value);
      if (!live) {
        nextRevision = Math.max(nextRevision, e.revision);
        return;
      }
      revision = Math.max(revision, e.revision);
      emit(value === null ? { kind: 'delete', key: e.key, previous, revision: e.revision } : { kind: 'put', key: e.key, value, revision: e.revision });
      settleWaiters();
    };
    void (async () => {
      try {
        for await (const e of w) apply(e);
      } catch (err) {
        if (current()) log.warn({ event: 'kv_mirror.watch_failed', bucket, err: (err as Error).message }, 'bucket watch failed');
      }
      if (current()) {
        lostSince ||= Date.now();
        log.warn({ event: 'kv_mirror.watch_ended', bucket }, 'bucket watch ended: reloading');
        retryLater();
      }
    })();

    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([initialized, new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the ${bucket} bucket did not load within ${timeoutMs} ms`)), timeoutMs);
      })]);
    } catch (e) {
      w.stop();
      throw e;
    } finally {
      clearTimeout(timer);
    }
    if (!current()) return void w.stop(); // a newer load overtook this one
    iter?.stop();
    iter = w;
    map = next;
    revision = Math.max(revision, nextRevision);
    lostSince = 0;
    retryMs = RETRY_FIRST_MS;
    emit({ kind: 'reset' }); // nobody listens yet on the first load
    settleWaiters();
  }

  function retryLater(): void {
    if (stopped) return;
    clearTimeout(retryTimer);
    retryTimer = setTimeout(() => void reload(), retryMs * (0.75 + Math.random() / 2));
    retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
  }

  async function reload(): Promise<void> {
    if (stopped) return;
    lostSince ||= Date.now();
    try {
      await load(options.loadTimeoutMs);
    } catch (e) {
      log.warn({ event: 'kv_mirror.load_failed', bucket, err: (e as Error).message }, 'bucket copy not loaded: retrying');
      retryLater();
    }
  }

  // The first load is retried with backoff within the budget; beyond it the caller fails loudly.
  const deadline = Date.now() + options.loadTimeoutMs;
  for (let delay = RETRY_FIRST_MS; ; delay = Math.min(delay * 2, RETRY_MAX_MS)) {
    try {
      await load(Math.max(100, deadline - Date.now()));
      break;
    } catch (e) {
      if (Date.now() + delay > deadline) throw e;
      log.warn({ event: 'kv_mirror.load_failed', bucket, err: (e as Error).message }, 'bucket not loaded yet: retrying');
      await new Promise((r) => setTimeout(r, delay));
    }
  }

  return {
    kv,
    get: (key) => map.get(key),
    entries: () => map.entries(),
    values: () => map.values(),
    get size() {
      return map.size;
    },
    get revision() {
      return revision;
    },
    waitForRevision(wanted, timeoutMs) {
      if (wanted <= revision) return Promise.resolve(true);
      return new Promise((resolve) => {
        const w = {
          revision: wanted, resolve, timer: setTimeout(() => {
            waiters.delete(w);
            resolve(false);
            // Someone wrote `wanted` and this copy never saw it: the watch may be stalled without a reconnect (its
            // consumer lived on a NATS cluster member that died; the client notices only after two missed
            // heartbeats, ~10 s, and then re-creates it slowly while the cluster moves leaders). Load afresh now.
            if (wanted > revision && !stopped && !reloading) {
              log.warn({ event: 'kv_mirror.behind', bucket, revision, wanted }, 'bucket copy behind a known write: reloading');
              reloading = reload().finally(() => { reloading = undefined; });
            }
          }, timeoutMs),
        };
        waiters.add(w);
      });
    },
    listen(fn) {
      listeners.add(fn);
      return () => void listeners.delete(fn);
    },
    staleMs: () => (lostSince ? Date.now() - lostSince : 0),
    reload,
    stop() {
      stopped = true;
      clearTimeout(retryTimer);
      iter?.stop();
      for (const w of waiters) {
        clearTimeout(w.timer);
        w.resolve(false);
      }
      waiters.clear();
    },
  };
}
