// Keeps the gateway's RouteTable equal to the `hub_routes` bucket. A (re)load builds a fresh table
// from the watch's initial state and swaps it in whole, so requests never see a half-loaded table;
// until then the previous table keeps serving.
import type { KV } from 'nats';
import type { Logger } from '../../../shared/log.js';
import { watchRoutes, type Route, type RouteWatch } from '../../../shared/routes.js';
import { RouteTable } from './table.js';

const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 10_000;

export function createRouteSync(kv: KV, log: Logger, loadTimeoutMs: number) {
  let table = new RouteTable();
  let watch: RouteWatch | null = null;
  let generation = 0;
  let stopped = false;
  let retryMs = RETRY_FIRST_MS;
  let retryTimer: NodeJS.Timeout | undefined;

  function fill(t: RouteTable, route: Route): void {
    if (!t.set(route)) log.warn({ event: 'proxy.route_unusable', routespec: route.routespec, target: route.target }, 'route ignored: not a path routespec with an http(s) target');
  }

  /** Watches from scratch; resolves when the new table is in place. */
  async function load(): Promise<void> {
    const mine = ++generation;
    const next = new RouteTable();
    const started = Date.now();
    const w = await watchRoutes(kv, {
      initial: (routes) => {
        for (const r of routes.values()) fill(next, r);
      },
      put: (r) => fill(next, r),
      remove: (spec) => next.delete(spec),
      ended: (err) => {
        if (mine !== generation || stopped) return;
        log.warn({ event: 'proxy.routes_watch_ended', err: (err as Error | undefined)?.message }, 'routing table watch ended: reloading');
        retryLater();
      },
    }, loadTimeoutMs);
    if (mine !== generation || stopped) return void w.stop(); // a newer load overtook this one
    watch?.stop();
    watch = w;
    table = next;
    retryMs = RETRY_FIRST_MS;
    log.info({ event: 'proxy.routes_loaded', routes: next.size, ms: Date.now() - started }, 'routing table loaded');
  }

  function retryLater(): void {
    clearTimeout(retryTimer);
    retryTimer = setTimeout(() => void reload(), retryMs * (0.75 + Math.random() / 2));
    retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
  }

  async function reload(): Promise<void> {
    if (stopped) return;
    try {
      await load();
    } catch (e) {
      log.warn({ event: 'proxy.routes_load_failed', err: (e as Error).message }, 'routing table not loaded: retrying');
      retryLater();
    }
  }

  return {
    /** The current table; read it per request (a reload replaces it). */
    get table(): RouteTable {
      return table;
    },
    /** The first load, retried with backoff within `budgetMs`: the gateway serves only with a complete table. */
    async start(budgetMs: number): Promise<void> {
      const deadline = Date.now() + budgetMs;
      for (let delay = RETRY_FIRST_MS; ; delay = Math.min(delay * 2, RETRY_MAX_MS)) {
        try {
          return await load();
        } catch (e) {
          if (Date.now() + delay > deadline) throw e;
          log.warn({ event: 'proxy.routes_load_failed', err: (e as Error).message }, 'routing table not loaded yet: retrying');
          await new Promise((r) => setTimeout(r, delay));
        }
      }
    },
    /** After a NATS reconnect changes may have been missed: load everything again. */
    reload,
    stop(): void {
      stopped = true;
      clearTimeout(retryTimer);
      watch?.stop();
    },
  };
}

export type RouteSync = ReturnType<typeof createRouteSync>;
