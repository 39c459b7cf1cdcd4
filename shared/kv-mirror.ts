// One way to keep a JetStream KV bucket in memory, for every reader (the gateway's servers and routes,
// the spawner's registry, the proxy-router's listing, the oauth actor's start-up check):
//   - the initial load is a watch's initial state, bounded in time: a mirror that cannot load throws, loudly;
//   - then every change, in bucket order, with its revision (so a caller can wait until it has seen a write);
//   - after a NATS reconnect (changes may have been missed) or a watch that ends, a fresh copy is loaded and
//     swapped in whole, with backoff; the old copy keeps answering meanwhile;
//   - `staleMs()` says how long the copy may have been behind (0 while the watch is live);
//   - a NATS cluster member that dies may take the watch's consumer with it while this process's own connection
//     is fine: reads by direct get (PROBE_MS, and at once when someone waits for a revision it lacks) keep the
//     copy current meanwhile, and the watch is made again after WATCH_HEARTBEAT_MS × 2–3 (see watchBucket).
import { consumerOpts, DeliverPolicy, type ConsumerInfo, type JsMsg, type KV } from 'nats';
import type { Logger } from './log.js';
import { encodeJson, jetStreamReplicas, openKv, type NatsConnection } from './nats.js';

const RETRY_FIRST_MS = 250;
// a reload that fails (the bucket's stream electing a leader after a member died) is tried again within 2 s at most
const RETRY_MAX_MS = 2000;
/**
 * How often a watch's consumer says it is alive while nothing changes. The consumer lives on one member of a NATS
 * cluster; when that member dies nothing tells this process (it may be connected to another member), so the
 * client counts missed heartbeats: two missed and it makes the consumer again, from the next revision. (nats.js's
 * own KV watch fixes 5 s.) Making it again needs the cluster's meta leader, which may have died too: until then
 * the probe below keeps the copy current.
 */
export const WATCH_HEARTBEAT_MS = 1000;
/**
 * How often a mirror of a bucket kept on several members (Hub.nats_replicas > 1) asks the bucket's stream, by a
 * direct get, for anything after its revision: one small request (answered "nothing newer" while the watch is
 * live) that bounds how far behind a copy can be when its watch is lost, whatever the cluster is doing (any member
 * with a replica answers).
 */
export const PROBE_MS = 1000;
/** deadline of one JetStream API call of a watch or a catch-up read: retried with backoff while a stream elects its leader */
const WATCH_API_TIMEOUT_MS = 1000;
/** catch-up reads per round at most (one per change since the copy's revision); the next probe goes on from there */
const CATCH_UP_MAX_READS = 10_000;

/** One change of a bucket as a watch or a catch-up read delivers it. */
export interface BucketEntry { key: string; operation: 'PUT' | 'DEL' | 'PURGE'; value: Uint8Array; revision: number }

/** A stored message of `$KV.<bucket>.<key>` as a change of that key (its operation is in the KV-Operation header). */
function toEntry(bucket: string, subject: string, operation: string | undefined, value: Uint8Array, revision: number): BucketEntry {
  return { key: subject.slice(`$KV.${bucket}.`.length), operation: operation === 'DEL' || operation === 'PURGE' ? operation : 'PUT', value, revision };
}

/**
 * The first change of the bucket after `revision`, by a direct get (`$JS.API.DIRECT.GET`: any member holding a
 * replica of a KV bucket's stream answers, leader or not); null when there is none.
 */
async function readAfter(nc: NatsConnection, bucket: string, revision: number): Promise<BucketEntry | null> {
  const m = await nc.request(`$JS.API.DIRECT.GET.KV_${bucket}`, encodeJson({ seq: revision + 1, next_by_subj: `$KV.${bucket}.>` }), { timeout: WATCH_API_TIMEOUT_MS });
  const h = m.headers;
  if (h?.hasError && h.code === 404) return null;
  if (!h || h.hasError) throw new Error(`direct get of ${bucket} answered ${h ? `${h.code} ${h.description}` : 'without headers'}`);
  return toEntry(bucket, h.get('Nats-Subject'), h.get('KV-Operation'), m.data, Number(h.get('Nats-Sequence')));
}

interface BucketWatch {
  stop(): void;
  /** resolves when the watch ends (stopped, or its subscription closed); with the error when it failed */
  ended: Promise<Error | undefined>;
}

/**
 * Watches every key of a bucket: the last value of each first (`initialized` once they are all delivered), then
 * every change in bucket order. An ordered push consumer with WATCH_HEARTBEAT_MS heartbeats: nats.js re-creates
 * it from the next stream sequence after a gap or two missed heartbeats (so it survives its member's death).
 */
async function watchBucket(nc: NatsConnection, bucket: string, onEntry: (e: BucketEntry) => void, initialized: () => void): Promise<BucketWatch> {
  const prefix = `$KV.${bucket}.`;
  let pendingInit: (() => void) | undefined = initialized;
  const markInitialized = () => {
    pendingInit?.();
    pendingInit = undefined;
  };
  let received = 0;
  let expected = -1; // messages of the initial state, once known from the consumer's creation
  let endWith!: (e: Error | undefined) => void;
  const ended = new Promise<Error | undefined>((resolve) => { endWith = resolve; });
  const opts = consumerOpts({
    deliver_policy: DeliverPolicy.LastPerSubject, filter_subject: `${prefix}>`, idle_heartbeat: WATCH_HEARTBEAT_MS * 1_000_000,
  });
  opts.bindStream(`KV_${bucket}`);
  opts.orderedConsumer();
  opts.callback((err, jm: JsMsg | null) => {
    if (err) return endWith(err);
    if (!jm) return;
    onEntry(toEntry(bucket, jm.subject, jm.headers?.get('KV-Operation'), jm.data, jm.seq));
    received++;
    if (pendingInit && (jm.info.pending === 0 || (expected >= 0 && received >= expected))) markInitialized();
  });
  const sub = await nc.jetstream({ timeout: WATCH_API_TIMEOUT_MS }).subscribe(`${prefix}>`, opts);
  // the consumer as created (nats.js keeps it on the subscription, untyped): how many messages the initial
  // state holds (some may have arrived already)
  const last = (sub as unknown as { info?: { last?: ConsumerInfo } }).info?.last;
  expected = last ? last.num_pending + last.delivered.consumer_seq : 0;
  if (received >= expected) markInitialized();
  void sub.closed.then(() => endWith(undefined), (e) => endWith(e as Error));
  return { stop: () => sub.unsubscribe(), ended };
}

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

/** One copy of the bucket: its map and the newest revision applied to it (each load makes its own). */
interface Copy<V> { map: Map<string, V>; revision: number }

export async function mirrorKv<V>(nc: NatsConnection, options: KvMirrorOptions<V>): Promise<KvMirror<V>> {
  const { decode, log, bucket } = options;
  const kv = await openKv(nc, bucket, { history: options.history ?? 1, timeoutMs: Math.max(options.loadTimeoutMs, 30_000), log });
  let live: Copy<V> = { map: new Map(), revision: 0 };
  let generation = 0;
  let stopped = false;
  let lostSince = 0; // 0 = live
  let retryMs = RETRY_FIRST_MS;
  let retryTimer: NodeJS.Timeout | undefined;
  let reloading: Promise<void> | undefined;
  let catching: Promise<void> | undefined;
  let iter: BucketWatch | null = null;
  const listeners = new Set<(c: MirrorListener<V>) => void>();
  const waiters = new Set<{ revision: number; resolve: (ok: boolean) => void; timer: NodeJS.Timeout }>();

  const emit = (c: MirrorListener<V>) => {
    for (const l of listeners) l(c);
  };
  const settleWaiters = () => {
    for (const w of waiters) {
      if (w.revision <= live.revision) {
        clearTimeout(w.timer);
        waiters.delete(w);
        w.resolve(true);
      }
    }
  };

  /**
   * Applies one change to a copy, announced when that copy is the live one. Changes reach a copy from its watch and
   * from catch-up reads, each in bucket order from at most the copy's revision + 1: one already applied is skipped.
   */
  function applyTo(copy: Copy<V>, e: BucketEntry): void {
    // (a loading copy is fed by its watch alone: its first state, one entry per key, is taken whatever its order)
    if (stopped || (copy === live && e.revision <= copy.revision)) return;
    const previous = copy.map.get(e.key);
    const value = e.operation === 'PUT' ? decode(e.key, e.value) : null;
    if (value === null) copy.map.delete(e.key);
    else copy.map.set(e.key, value);
    copy.revision = Math.max(copy.revision, e.revision);
    if (copy !== live) return;
    emit(value === null ? { kind: 'delete', key: e.key, previous, revision: e.revision } : { kind: 'put', key: e.key, value, revision: e.revision });
    settleWaiters();
  }

  /**
   * Reads what the live copy lacks straight from the bucket's stream (direct gets, answered by any member holding
   * a replica): no consumer is needed, so this works while the watch's consumer is lost with its member and the
   * cluster cannot yet make another. One at a time; bounded by what was written since.
   */
  function catchUp(): Promise<void> {
    return (catching ??= (async () => {
      const copy = live;
      try {
        for (let i = 0; i < CATCH_UP_MAX_READS && copy === live && !stopped; i++) {
          const next = await readAfter(nc, bucket, copy.revision);
          if (!next) break;
          applyTo(copy, next);
        }
      } catch (e) {
        // the next probe tries again
        log.debug({ event: 'kv_mirror.catch_up_failed', bucket, err: (e as Error).message }, 'bucket catch-up read failed');
      } finally {
        catching = undefined;
      }
    })());
  }

  /** Watches from scratch; resolves when the fresh copy is in place. */
  async function load(timeoutMs: number): Promise<void> {
    const mine = ++generation;
    const copy: Copy<V> = { map: new Map(), revision: 0 };
    let markLoaded!: () => void;
    const initialized = new Promise<void>((resolve) => { markLoaded = resolve; });
    // this load's watch feeds its own copy: while loading (the live copy keeps its own watch meanwhile), then live
    const feeding = () => !stopped && (copy === live || mine === generation);
    const w = await watchBucket(nc, bucket, (e) => { if (feeding()) applyTo(copy, e); }, () => markLoaded());
    void w.ended.then((err) => {
      if (copy !== live || stopped) return;
      if (err) log.warn({ event: 'kv_mirror.watch_failed', bucket, err: err.message }, 'bucket watch failed');
      lostSince ||= Date.now();
      log.warn({ event: 'kv_mirror.watch_ended', bucket }, 'bucket watch ended: reloading');
      retryLater();
    });

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
    if (mine !== generation || stopped) return void w.stop(); // a newer load overtook this one
    iter?.stop();
    iter = w;
    live = copy;
    lostSince = 0;
    retryMs = RETRY_FIRST_MS;
    emit({ kind: 'reset' }); // nobody listens yet on the first load
    settleWaiters();
    void catchUp(); // what was written while the old copy served and this one's watch was being made
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

  // Only a bucket kept on several members can lose its watch's consumer while the bucket itself stays readable:
  // one NATS server alone (a single node) loses both together, and the reconnect's reload covers that.
  const probe = jetStreamReplicas(nc) > 1 ? setInterval(() => void catchUp(), PROBE_MS) : undefined;
  probe?.unref();

  return {
    kv,
    get: (key) => live.map.get(key),
    entries: () => live.map.entries(),
    values: () => live.map.values(),
    get size() {
      return live.map.size;
    },
    get revision() {
      return live.revision;
    },
    waitForRevision(wanted, timeoutMs) {
      if (wanted <= live.revision) return Promise.resolve(true);
      // someone says `wanted` is written: read it now rather than wait for the watch (it may be a consumer short)
      void catchUp();
      return new Promise((resolve) => {
        const w = {
          revision: wanted, resolve, timer: setTimeout(() => {
            waiters.delete(w);
            resolve(false);
            // Someone wrote `wanted` and neither the watch nor a catch-up read brought it: load afresh.
            if (wanted > live.revision && !stopped && !reloading) {
              log.warn({ event: 'kv_mirror.behind', bucket, revision: live.revision, wanted }, 'bucket copy behind a known write: reloading');
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
      clearInterval(probe);
      iter?.stop();
      for (const w of waiters) {
        clearTimeout(w.timer);
        w.resolve(false);
      }
      waiters.clear();
    },
  };
}
