// What the Kubernetes backend knows of its pods and their events, kept by watching rather than asking: one LIST,
// then one WATCH from the list's resourceVersion, for all of this hub's server pods (by label; in one namespace, or
// in all with per-user namespaces). A closed watch resumes from the last version seen; a 410 (the version is too
// old) or any error lists again, after a bounded backoff. poll() and every waiting start read the copy kept here:
// the number of servers or of polls never adds a request. Our own loop, as KubeSpawner keeps its own: the client
// library's informer does not recover reliably after errors.
import type { CoreV1Event, KubeConfig, V1Pod, Watch } from '@kubernetes/client-node';
import type { Logger } from '../../../shared/log.js';

/** A watch lasts this long at most (the API server ends it), then resumes from the last version. */
const WATCH_SECONDS = 300;
const BACKOFF_MIN_MS = 250;
const BACKOFF_MAX_MS = 30_000;

interface Listed<T> {
  items: T[];
  metadata?: { resourceVersion?: string };
}

interface WatchEvent<T> {
  type: string;
  object: T & { code?: number; message?: string; metadata?: { resourceVersion?: string } };
}

/** The API's own words for a failed call (its Status message), else the transport's. */
export function apiMessage(e: unknown): string {
  const err = e as { code?: number; body?: unknown; message?: string };
  let body = err.body;
  if (typeof body === 'string') try { body = JSON.parse(body); } catch { /* plain text */ }
  const said = typeof body === 'object' && body && typeof (body as { message?: unknown }).message === 'string' ? (body as { message: string }).message : '';
  if (said) return said;
  return (err.message ?? String(e)).split('\n')[0].trim();
}

const sleep = (ms: number, signal: AbortSignal) => new Promise<void>((resolve) => {
  const timer = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
});

/**
 * Runs LIST + WATCH until stopped: `onList` gets each full list, `onEvent` each change after it. `fromNow` lists
 * one item only (to learn the current version): for streams whose past is not wanted (events).
 */
async function listAndWatch<T>(o: {
  what: string;
  log: Logger;
  watch: Watch;
  path: string;
  query: Record<string, string>;
  list: (query: Record<string, string | number>) => Promise<Listed<T>>;
  onList: (items: T[]) => void;
  onEvent: (type: 'ADDED' | 'MODIFIED' | 'DELETED', obj: T) => void;
  /** why the last LIST or WATCH failed (the API's words and its HTTP status), or null once a LIST succeeds */
  onError: (why: string | null, code?: number) => void;
  fromNow?: boolean;
  /** how long one watch lasts (the API server ends it, then it resumes from the last version) */
  watchSeconds?: number;
  signal: AbortSignal;
}): Promise<void> {
  let backoff = BACKOFF_MIN_MS;
  let version = '';
  while (!o.signal.aborted) {
    try {
      if (!version) {
        const listed = await o.list({ ...o.query, ...(o.fromNow ? { limit: 1 } : {}) });
        version = listed.metadata?.resourceVersion ?? '';
        if (!o.fromNow) o.onList(listed.items);
        o.onError(null);
      }
      // one watch, until the server ends it (WATCH_SECONDS), the connection breaks, or it says 410
      const ended = await new Promise<'closed' | 'gone'>((resolve, reject) => {
        let controller: AbortController | undefined;
        const onAbort = () => controller?.abort();
        o.signal.addEventListener('abort', onAbort, { once: true });
        const finish = (f: () => void) => {
          o.signal.removeEventListener('abort', onAbort);
          f();
        };
        let gone = false;
        o.watch.watch(o.path, { ...o.query, resourceVersion: version, allowWatchBookmarks: true, timeoutSeconds: o.watchSeconds ?? WATCH_SECONDS }, (type, obj: WatchEvent<T>['object']) => {
          if (type === 'ERROR') {
            // 410 Gone: our version is older than the server keeps; anything else: list again too
            gone = true;
            o.log.info({ event: 'kubernetes.watch.error', what: o.what, code: obj.code, message: obj.message }, 'watch ended by the API server: listing again');
            controller?.abort();
            return;
          }
          if (obj.metadata?.resourceVersion) version = obj.metadata.resourceVersion;
          backoff = BACKOFF_MIN_MS;
          if (type === 'ADDED' || type === 'MODIFIED' || type === 'DELETED') o.onEvent(type, obj as T);
        }, (err: unknown) => finish(() => (gone ? resolve('gone') : err && !(o.signal.aborted) && (err as Error).name !== 'AbortError' ? reject(err) : resolve('closed'))))
          .then((c) => { controller = c; if (o.signal.aborted) c.abort(); }, (e) => finish(() => reject(e)));
      });
      if (ended === 'gone') version = '';
    } catch (e) {
      if (o.signal.aborted) break;
      const code = (e as { code?: number }).code;
      const why = `${apiMessage(e)}${code ? ` (HTTP ${code})` : ''}`;
      o.onError(why, code);
      o.log.warn({ event: 'kubernetes.watch.failed', what: o.what, err: why, retry_ms: backoff }, 'list or watch failed: listing again');
      version = '';
      await sleep(backoff, o.signal);
      backoff = Math.min(BACKOFF_MAX_MS, backoff * 2);
    }
  }
}

export type PodListener = (pod: V1Pod, deleted: boolean) => void;
export const podKey = (namespace: string, name: string) => `${namespace}/${name}`;

/** This hub's server pods as the API server last said they are. */
export class PodReflector {
  private readonly pods = new Map<string, V1Pod>();
  private readonly listeners = new Set<PodListener>();
  private readonly stopping = new AbortController();
  private lastError: string | null = null;
  /** the API refused the LIST (401, 403): no use waiting for it */
  private refused = false;
  private markSynced!: () => void;
  /** settles once the first LIST is in */
  readonly synced = new Promise<void>((r) => { this.markSynced = r; });

  /** `watchSeconds`: how long each watch lasts before it resumes (default 300; a test makes resumes happen sooner) */
  constructor(o: { kc: KubeConfig; watch: Watch; namespace: string | null; labelSelector: string; log: Logger; watchSeconds?: number }) {
    const path = o.namespace === null ? '/api/v1/pods' : `/api/v1/namespaces/${encodeURIComponent(o.namespace)}/pods`;
    void import('@kubernetes/client-node').then(({ CoreV1Api }) => {
      const core = o.kc.makeApiClient(CoreV1Api);
      return listAndWatch<V1Pod>({
        what: `pods ${o.labelSelector} in ${o.namespace ?? 'all namespaces'}`, log: o.log, watch: o.watch, path, query: { labelSelector: o.labelSelector }, signal: this.stopping.signal, watchSeconds: o.watchSeconds,
        list: (q) => (o.namespace === null ? core.listPodForAllNamespaces(q) : core.listNamespacedPod({ namespace: o.namespace, ...q })) as Promise<Listed<V1Pod>>,
        onList: (items) => {
          const seen = new Set<string>();
          for (const pod of items) {
            const key = podKey(pod.metadata!.namespace!, pod.metadata!.name!);
            seen.add(key);
            this.set(key, pod);
          }
          // gone while we were not watching
          for (const [key, pod] of this.pods) if (!seen.has(key)) this.remove(key, pod);
          this.markSynced();
        },
        onEvent: (type, pod) => {
          const key = podKey(pod.metadata!.namespace!, pod.metadata!.name!);
          if (type === 'DELETED') this.remove(key, pod);
          else this.set(key, pod);
        },
        onError: (why, code) => {
          this.lastError = why;
          this.refused = code === 401 || code === 403;
          if (this.refused) for (const fn of this.refusals) fn();
        },
      });
    });
  }

  private readonly refusals = new Set<() => void>();

  private set(key: string, pod: V1Pod): void {
    if (pod.metadata) delete pod.metadata.managedFields; // often most of a pod's size, and nothing the hub reads
    this.pods.set(key, pod);
    for (const fn of this.listeners) fn(pod, false);
  }

  private remove(key: string, pod: V1Pod): void {
    this.pods.delete(key);
    for (const fn of this.listeners) fn(pod, true);
  }

  /** The pod as last seen, or undefined when it does not exist (after the first list). */
  get(namespace: string, name: string): V1Pod | undefined {
    return this.pods.get(podKey(namespace, name));
  }

  all(): V1Pod[] {
    return [...this.pods.values()];
  }

  /**
   * Waits for the first list, at most `ms`; throws why the API could not be listed, at once when it refuses (the
   * hub's account lacks a right: the API's words name it). The watch keeps trying meanwhile: a right granted later counts.
   */
  async ready(ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    let onRefusal = () => undefined as void;
    const why = (prefix: string) => new Error(`${prefix}${this.lastError ? `: ${this.lastError}` : ''}`);
    await Promise.race([this.synced, new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(why(`the Kubernetes API did not list the server pods within ${ms / 1000} s`)), ms);
      onRefusal = () => reject(why('the Kubernetes API refuses to list the server pods'));
      this.refusals.add(onRefusal);
      if (this.refused) onRefusal();
    })]).finally(() => {
      clearTimeout(timer);
      this.refusals.delete(onRefusal);
    });
  }

  /** Calls `fn` with every change of any pod (and its deletion); returns the unsubscribe. */
  subscribe(fn: PodListener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  stop(): void {
    this.stopping.abort();
  }
}

export type EventListener = (event: CoreV1Event) => void;

/**
 * Kubernetes events of pods, from now on, while someone listens (a start waiting for its pod): the watch starts
 * with the first listener and ends with the last, so a hub with no start under way watches no events.
 */
export class PodEvents {
  private readonly listeners = new Set<EventListener>();
  private running: AbortController | null = null;

  constructor(private readonly o: { kc: KubeConfig; watch: Watch; namespace: string | null; log: Logger }) {}

  /** Events for which `match` holds, to `fn`, from now on (start following before creating the pod); returns the unsubscribe. */
  follow(match: (e: CoreV1Event) => boolean, fn: EventListener): () => void {
    const listener: EventListener = (e) => { if (match(e)) fn(e); };
    this.listeners.add(listener);
    this.run();
    return () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) {
        this.running?.abort();
        this.running = null;
      }
    };
  }

  private run(): void {
    if (this.running) return;
    const stopping = (this.running = new AbortController());
    const { kc, watch, namespace, log } = this.o;
    const path = namespace === null ? '/api/v1/events' : `/api/v1/namespaces/${encodeURIComponent(namespace)}/events`;
    void import('@kubernetes/client-node').then(({ CoreV1Api }) => {
      const core = kc.makeApiClient(CoreV1Api);
      return listAndWatch<CoreV1Event>({
        what: `pod events in ${namespace ?? 'all namespaces'}`, log, watch, path, query: { fieldSelector: 'involvedObject.kind=Pod' }, signal: stopping.signal, fromNow: true,
        list: (q) => (namespace === null ? core.listEventForAllNamespaces(q) : core.listNamespacedEvent({ namespace, ...q })) as Promise<Listed<CoreV1Event>>,
        onList: () => undefined,
        onEvent: (type, e) => { if (type !== 'DELETED') for (const fn of this.listeners) fn(e); },
        onError: () => undefined,
      });
    });
  }
}
