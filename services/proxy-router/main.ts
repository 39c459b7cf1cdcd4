// The proxy-router actor: owns the routing table (JetStream KV `hub_routes`). Wiring only.
import { runActor } from '../../shared/actor.js';
import type { CallContext } from '../../shared/contracts/index.js';
import { errors } from '../../shared/errors.js';
import { Lease, leaseKey } from '../../shared/lease.js';
import { mirrorKv } from '../../shared/kv-mirror.js';
import { decodeJson } from '../../shared/nats.js';
import { configuredServices } from '../../shared/roles.js';
import { mirrorRuntimeServices, serviceDirectory } from '../../shared/runtime-services.js';
import { decodeRoute, ROUTES_BUCKET, type Route } from '../../shared/routes.js';
import { mirrorServers } from '../../shared/servers.js';
import { hubInternalUrl } from '../../shared/config.js';
import { subjects } from '../../shared/subjects.js';
import { subdomainsOf } from '../../shared/subdomains.js';
import { routableServices, serverRoutes } from './desired.js';
import { createReconciler, reconcilePeriodically, type Reconciler } from './reconciler.js';

/** A full comparison of the bucket with the services this often (and at start, and at once when a service comes or goes). */
const RECONCILE_INTERVAL_MS = 60_000;
const LIST_PAGE_MAX = 10_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

await runActor('proxy-router', async (ctx) => {
  const loadTimeoutMs = ctx.rpcTimeoutMs * 4;
  // One router writes the bucket: the holder of the lease proxy-router.reconcile (routers on other nodes wait to
  // take over). Every router keeps a live copy: the writer starts from it, the others list routes from it.
  const bucket = await mirrorKv<Route>(ctx.nc, { bucket: ROUTES_BUCKET, decode: decodeRoute, loadTimeoutMs, log: ctx.log });
  // Running servers are listed from the registry the gateways route them from.
  const servers = await mirrorServers(ctx.nc, ctx.log, loadTimeoutMs);
  // with Hub.subdomain_host, services and servers are routed at hosts of their own
  const subdomains = subdomainsOf(ctx.config);
  // configured services and, live, those added at run time (each change reconciles at once)
  let configured = routableServices(configuredServices(ctx.config), ctx.log, subdomains);
  const services = serviceDirectory(ctx.config, await mirrorRuntimeServices(ctx.nc, ctx.log, loadTimeoutMs), ctx.log);
  const routesNow = () => serverRoutes(servers.values(), subdomains);
  /** The writer's part while this router holds the lease: a reconciler from a fresh copy of the bucket, run now and periodically. */
  let writer: { reconciler: Reconciler; periodic: ReturnType<typeof reconcilePeriodically> } | null = null;
  let generation = 0;
  async function becomeWriter(): Promise<void> {
    const mine = ++generation;
    await bucket.reload(); // what the last holder wrote up to its end
    if (mine !== generation) return;
    const reconciler = createReconciler({
      kv: bucket.kv, log: ctx.log, audit: ctx.audit,
      // The gateway answers hub paths itself; the route's target says where the hub is reachable.
      hubTarget: hubInternalUrl(ctx.config),
      services: () => [...configured, ...[...services.all.values()].filter((s) => !services.fromConfig(s.name)).map((s) => ({ name: s.name, url: s.url, host: subdomains?.serviceHost(s.name) ?? '' }))],
      serverRoutes: routesNow,
      initial: new Map([...bucket.values()].map((r) => [r.routespec, r])),
    });
    // Events and reconciliations go through one queue, so a list taken before an event is applied before it.
    writer = { reconciler, periodic: reconcilePeriodically(reconciler, RECONCILE_INTERVAL_MS, ctx.log) };
  }
  function stopWriting(): void {
    generation++;
    writer?.periodic.stop();
    writer = null;
  }
  const lease = await Lease.start(ctx.nc, leaseKey('proxy-router', 'reconcile'), {
    holder: `${ctx.instance}@${ctx.config.Hub.node_name}`, log: ctx.log,
    onChange: (held) => (held ? void becomeWriter().catch((err) => ctx.log.error({ event: 'proxy.writer.failed', err }, 'could not take over the routing table')) : stopWriting()),
  });

  // while the router `hub restart` replaces lets go of the lease (and a lease retry after it is gone), Reconcile waits
  let handingOver = ctx.predecessor.running;
  void ctx.predecessor.gone.then(() => setTimeout(() => { handingOver = false; }, 2000).unref());
  services.onChange((name) => writer?.periodic.now(name ? `service ${name} added or removed` : 'services reloaded'));
  const subs = [
    ctx.nc.subscribe(subjects.event('activity', 'proxy'), { callback: (_e, m) => writer?.reconciler.noteActivity(decodeJson<{ routes?: Record<string, string> }>(m.data)?.routes ?? {}) }),
    ctx.nc.subscribe(subjects.event('route', 'unreachable'), {
      // A gateway could not reach a target: maybe a service moved; look again soon.
      callback: () => writer?.periodic.soon('target unreachable'),
    }),
  ];
  /** A page of routes as the bucket holds them (a router that does not write), in the writer's order. */
  const listFromCopy = (offset: number, limit: number) => {
    const all = new Map([...[...bucket.values()].map((r): [string, Route] => [r.routespec, r]), ...routesNow()]);
    const specs = [...all.keys()].sort();
    return { routes: specs.slice(offset, offset + limit).map((spec) => all.get(spec)!), total: specs.length };
  };

  ctx.onNatsStatus((type) => {
    if (type === 'reconnect') {
      void servers.reload();
      void services.reload();
    }
  });

  return {
    // `hub reload`: the configured services' routes (the reconciler reads them at each pass)
    reload: (next) => {
      configured = routableServices(configuredServices(next), ctx.log, subdomains);
      services.useConfig(next);
    },
    grpc: {
      ListRoutes: (req: { offset: number; limit: number }) => {
        const [offset, limit] = [Math.max(0, req.offset), Math.min(Math.max(1, req.limit), LIST_PAGE_MAX)];
        const page = writer ? writer.reconciler.list(offset, limit) : listFromCopy(offset, limit);
        return { total: page.total, routes: page.routes.map((r: Route) => ({ routespec: r.routespec, target: r.target, data_json: JSON.stringify(r.data) })) };
      },
      Reconcile: async (req: { by: string }, call: CallContext) => {
        // the lease passes from a router `hub restart` replaces to its successor within a second: wait for it (bounded)
        for (let i = 0; !writer && i < 40 && handingOver && Date.now() + 250 < call.deadline; i++) await sleep(100);
        if (!writer) throw errors.unavailable('The routing table\'s writer (the proxy-router holding the lease, on another node)');
        return writer.reconciler.reconcile(`requested by ${req.by || 'api'}`);
      },
    },
    details: () => ({
      routes: String(writer ? writer.reconciler.size() : bucket.size), last_reconciled: writer?.reconciler.lastReconciled() ?? '', writer: String(writer !== null),
    }),
    // replaced by `hub restart`: the lease goes at once, so the successor takes over writing within a second
    stopIntake: async () => {
      stopWriting();
      await lease.stop();
    },
    close: async () => {
      stopWriting();
      await lease.stop();
      bucket.stop();
      for (const s of subs) s.unsubscribe();
      servers.stop();
      services.stop();
    },
  };
});
