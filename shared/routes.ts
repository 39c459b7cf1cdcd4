// The routing table as the proxy-router (its only writer) and every gateway (readers) share it:
// a JetStream key-value bucket `hub_routes`, one key per route. Watching the bucket delivers the
// whole current table first, then every change, so a gateway that starts or reconnects is complete
// before it relies on the table, and a change reaches all gateways through NATS fan-out.
import type { KV, KvEntry, QueuedIterator } from 'nats';
import { decodeJson, encodeJson, type NatsConnection } from './nats.js';

export const ROUTES_BUCKET = 'hub_routes';

/** Reference §5.8: `data` marks the owner (`{hub: true}`, `{user, server_name}`, `{service}`) and may carry `last_activity`. */
export interface Route {
  routespec: string;
  target: string;
  data: Record<string, unknown>;
}

/** KV keys allow only [-/_=.a-zA-Z0-9]: the routespec is encoded. */
export function routeKey(routespec: string): string {
  return `r.${Buffer.from(routespec).toString('base64url')}`;
}

export function routespecOfKey(key: string): string {
  return Buffer.from(key.slice(2), 'base64url').toString();
}

export function openRoutes(nc: NatsConnection): Promise<KV> {
  return nc.jetstream().views.kv(ROUTES_BUCKET, { history: 1 });
}

export const putRoute = (kv: KV, route: Route): Promise<number> => kv.put(routeKey(route.routespec), encodeJson(route));
export const deleteRoute = (kv: KV, routespec: string): Promise<void> => kv.delete(routeKey(routespec));

function isRoute(v: unknown): v is Route {
  const r = v as Route;
  return typeof r?.routespec === 'string' && typeof r.target === 'string' && typeof r.data === 'object' && r.data !== null;
}

export interface RouteListener {
  /** the whole table as it stands when the watch starts */
  initial(routes: Map<string, Route>): void;
  put(route: Route): void;
  remove(routespec: string): void;
  /** the watch ended (NATS closed, consumer lost); the owner decides whether to watch again */
  ended(err?: unknown): void;
}

export interface RouteWatch {
  stop(): void;
}

/**
 * Watches the bucket: `initial` once with the complete table, then `put`/`remove` per change.
 * Resolves once the initial table is delivered; rejects (and stops) if that takes longer than `timeoutMs`.
 */
export async function watchRoutes(kv: KV, listener: RouteListener, timeoutMs: number): Promise<RouteWatch> {
  const loading = new Map<string, Route>();
  let loaded = false;
  let stopped = false;
  let markLoaded!: () => void;
  const initialized = new Promise<void>((resolve) => { markLoaded = resolve; });
  const iter: QueuedIterator<KvEntry> = await kv.watch({
    // runs in order with the entries: everything before it is the initial table
    initializedFn: () => {
      loaded = true;
      listener.initial(loading);
      markLoaded();
    },
  });
  void (async () => {
    try {
      for await (const e of iter) apply(e);
      if (!stopped) listener.ended();
    } catch (err) {
      if (!stopped) listener.ended(err);
    }
  })();

  function apply(e: KvEntry): void {
    const routespec = routespecOfKey(e.key);
    if (e.operation !== 'PUT') {
      if (loaded) listener.remove(routespec);
      else loading.delete(routespec);
      return;
    }
    const route = decodeJson<unknown>(e.value);
    if (!isRoute(route) || route.routespec !== routespec) return; // not written by the proxy-router: ignored
    if (loaded) listener.put(route);
    else loading.set(routespec, route);
  }

  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the routing table did not load within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    await Promise.race([initialized, timedOut]);
  } catch (e) {
    stopped = true;
    iter.stop();
    throw e;
  } finally {
    clearTimeout(timer);
  }
  return {
    stop: () => {
      stopped = true;
      iter.stop();
    },
  };
}

/** The table as it stands now, read once. */
export async function readRoutes(kv: KV, timeoutMs: number): Promise<Map<string, Route>> {
  let table = new Map<string, Route>();
  const watch = await watchRoutes(kv, { initial: (routes) => { table = routes; }, put: () => undefined, remove: () => undefined, ended: () => undefined }, timeoutMs);
  watch.stop();
  return table;
}
