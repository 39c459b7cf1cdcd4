// The reconciler: one change to the table at a time (a full reconciliation, or one server event),
// each written to the `hub_routes` bucket, logged and audited. It keeps its own copy of the table,
// being the bucket's only writer.
import type { KV } from 'nats';
import type { AuditPublisher } from '../../shared/audit.js';
import type { Logger } from '../../shared/log.js';
import { gauge, HotCounter, HotHistogram, jupyterhubHistogram, secondsSince, SLOW_BUCKETS } from '../../shared/metrics.js';
import { deleteRoute, putRoute, type Route } from '../../shared/routes.js';
import { desiredRoutes, planChanges, type Plan, type ServiceFacts } from './desired.js';

/** Bucket writes in flight at once: a first reconciliation of many routes should not wait on each write in turn. */
const WRITE_CONCURRENCY = 64;

const routeChanges = new HotCounter('hub_proxy_route_changes_total', 'Changes to the routing table, by change (add, repoint, remove)', ['change']);
// the established hub's families: its check_routes (the same measurement), and its proxy poll, which here is
// reading the table and working out what differs (the table is this actor's own, in memory: no proxy to ask)
const establishedCheckRoutes = jupyterhubHistogram('check_routes_duration_seconds', 'Full reconciliations of the routing table').child();
const establishedPoll = jupyterhubHistogram('proxy_poll_duration_seconds', 'Reading the whole routing table to compare it with what should be routed').child();
const reconcileDuration = new HotHistogram('hub_check_routes_duration_seconds', 'Full reconciliations of the routing table', [], SLOW_BUCKETS,
  { also: () => establishedCheckRoutes });

export interface ReconcilerDeps {
  kv: KV;
  log: Logger;
  audit: AuditPublisher;
  hubTarget: string;
  /** the services to route as they stand now (configured ones and those added at run time) */
  services(): ServiceFacts[];
  /** the routes of running servers, from the server registry (gateways route them from the same registry) */
  serverRoutes(): Map<string, Route>;
  /** the table as it stands in the bucket at start */
  initial: Map<string, Route>;
}

export interface Outcome {
  added: number;
  repointed: number;
  removed: number;
}

export function createReconciler(deps: ReconcilerDeps) {
  const { kv, log, audit } = deps;
  const actual = new Map(deps.initial);
  /** newest activity the gateways reported per routespec (kept here, not written per request to the bucket) */
  const activity = new Map<string, string>();
  let queue: Promise<unknown> = Promise.resolve();
  let lastReconciled = '';
  gauge('hub_proxy_routes', 'Routes in the routing table', [], (g) => g.set(actual.size));

  function serially<T>(work: () => Promise<T>): Promise<T> {
    const run = queue.then(work);
    queue = run.catch(() => undefined);
    return run;
  }

  async function write(route: Route, verb: 'add' | 'repoint', reason: string): Promise<void> {
    const before = actual.get(route.routespec);
    await putRoute(kv, route);
    actual.set(route.routespec, route);
    routeChanges.inc(verb);
    log.info({ event: `route.${verb}`, routespec: route.routespec, target: route.target, previous: before?.target, reason }, `route ${verb}`);
    void audit.publish('route', verb, { who: 'actor:proxy-router', what: route.routespec, outcome: 'ok', target: route.target, reason });
  }

  async function remove(route: Route, reason: string): Promise<void> {
    await deleteRoute(kv, route.routespec);
    actual.delete(route.routespec);
    activity.delete(route.routespec);
    routeChanges.inc('remove');
    log.info({ event: 'route.remove', routespec: route.routespec, target: route.target, reason }, 'route remove');
    void audit.publish('route', 'remove', { who: 'actor:proxy-router', what: route.routespec, outcome: 'ok', target: route.target, reason });
  }

  async function apply(plan: Plan, reason: string): Promise<void> {
    const jobs = [
      ...plan.add.map((r) => () => write(r, 'add', reason)),
      ...plan.repoint.map((r) => () => write(r, 'repoint', reason)),
      ...plan.remove.map((r) => () => remove(r, reason)),
    ];
    for (let i = 0; i < jobs.length; i += WRITE_CONCURRENCY) await Promise.all(jobs.slice(i, i + WRITE_CONCURRENCY).map((j) => j()));
  }

  return {
    /** Compares what should exist with the table and makes the difference. */
    reconcile: (reason: string): Promise<Outcome> => serially(async () => {
      const start = performance.now();
      const plan = planChanges(desiredRoutes(deps.hubTarget, deps.services()), actual);
      establishedPoll.observe(secondsSince(start));
      await apply(plan, reason);
      lastReconciled = new Date().toISOString();
      reconcileDuration.observe([], secondsSince(start));
      const outcome = { added: plan.add.length, repointed: plan.repoint.length, removed: plan.remove.length };
      if (plan.add.length || plan.repoint.length || plan.remove.length) log.info({ event: 'proxy.reconciled', reason, ...outcome }, 'routing table reconciled');
      return outcome;
    }),

    /** hub.evt.activity.proxy from any gateway: newest time per route. */
    noteActivity(routes: Record<string, string>): void {
      for (const [spec, at] of Object.entries(routes)) {
        if (typeof at === 'string' && at > (activity.get(spec) ?? '')) activity.set(spec, at);
      }
    },

    /** A page of the whole table (bucket routes and running servers) ordered by routespec, each with its newest activity. */
    list(offset: number, limit: number): { routes: Route[]; total: number } {
      const all = new Map([...actual, ...deps.serverRoutes()]);
      const specs = [...all.keys()].sort();
      for (const spec of activity.keys()) if (!all.has(spec)) activity.delete(spec); // routes gone since
      const routes = specs.slice(offset, offset + limit).map((spec) => withActivity(all.get(spec)!));
      return { routes, total: specs.length };
    },

    size: () => actual.size,
    lastReconciled: () => lastReconciled,
  };

  function withActivity(route: Route): Route {
    const seen = activity.get(route.routespec);
    const stored = typeof route.data.last_activity === 'string' ? route.data.last_activity : '';
    return seen && seen > stored ? { ...route, data: { ...route.data, last_activity: seen } } : route;
  }
}

export type Reconciler = ReturnType<typeof createReconciler>;

/**
 * Reconciles now, then every `intervalMs`; sooner (with backoff) while the bucket refuses writes, and soon after `soon()` (a gateway found a target unreachable).
 */
export function reconcilePeriodically(reconciler: Reconciler, intervalMs: number, log: Logger) {
  const RETRY_FIRST_MS = 500;
  const RETRY_MAX_MS = 30_000;
  let retryMs = RETRY_FIRST_MS;
  let timer: NodeJS.Timeout | undefined;
  let due = Infinity;
  let stopped = false;

  function at(ms: number, reason: string): void {
    if (stopped || Date.now() + ms >= due) return;
    clearTimeout(timer);
    due = Date.now() + ms;
    timer = setTimeout(() => void run(reason), ms);
    timer.unref();
  }

  async function run(reason: string): Promise<void> {
    due = Infinity;
    let settled = false;
    try {
      await reconciler.reconcile(reason);
      settled = true;
    } catch (e) {
      log.error({ event: 'proxy.reconcile.failed', reason, err: (e as Error).message }, 'reconciliation failed, will retry');
    }
    if (settled) {
      retryMs = RETRY_FIRST_MS;
      at(intervalMs, 'periodic');
    } else {
      at(retryMs * (0.75 + Math.random() / 2), 'retry');
      retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
    }
  }

  void run('start');
  return {
    soon: (reason: string) => at(1000, reason),
    /** at once (a service added or removed: its route should follow the API's answer closely) */
    now: (reason: string) => at(0, reason),
    stop(): void {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
