// The proxy-router actor: owns the routing table (JetStream KV `hub_routes`). Wiring only.
import { runActor } from '../../shared/actor.js';
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
import { createReconciler, reconcilePeriodically } from './reconciler.js';

/** A full comparison of the bucket with the services this often (and at start, and at once when a service comes or goes). */
const RECONCILE_INTERVAL_MS = 60_000;
const LIST_PAGE_MAX = 10_000;

await runActor('proxy-router', async (ctx) => {
  const loadTimeoutMs = ctx.rpcTimeoutMs * 4;
  // The router is the bucket's only writer: its copy is read once, then kept by its own writes.
  const bucket = await mirrorKv<Route>(ctx.nc, { bucket: ROUTES_BUCKET, decode: decodeRoute, loadTimeoutMs, log: ctx.log });
  bucket.stop();
  // Running servers are listed from the registry the gateways route them from.
  const servers = await mirrorServers(ctx.nc, ctx.log, loadTimeoutMs);
  // with Hub.subdomain_host, services and servers are routed at hosts of their own
  const subdomains = subdomainsOf(ctx.config);
  // configured services and, live, those added at run time (each change reconciles at once)
  let configured = routableServices(configuredServices(ctx.config), ctx.log, subdomains);
  const services = serviceDirectory(ctx.config, await mirrorRuntimeServices(ctx.nc, ctx.log, loadTimeoutMs), ctx.log);
  const reconciler = createReconciler({
    kv: bucket.kv, log: ctx.log, audit: ctx.audit,
    // The gateway answers hub paths itself; the route's target says where the hub is reachable.
    hubTarget: hubInternalUrl(ctx.config),
    services: () => [...configured, ...[...services.all.values()].filter((s) => !services.fromConfig(s.name)).map((s) => ({ name: s.name, url: s.url, host: subdomains?.serviceHost(s.name) ?? '' }))],
    serverRoutes: () => serverRoutes(servers.values(), subdomains),
    initial: new Map([...bucket.values()].map((r) => [r.routespec, r])),
  });

  // Events and reconciliations go through one queue, so a list taken before an event is applied before it.
  const periodic = reconcilePeriodically(reconciler, RECONCILE_INTERVAL_MS, ctx.log);
  services.onChange((name) => periodic.now(name ? `service ${name} added or removed` : 'services reloaded'));
  const subs = [
    ctx.nc.subscribe(subjects.event('activity', 'proxy'), { callback: (_e, m) => reconciler.noteActivity(decodeJson<{ routes?: Record<string, string> }>(m.data)?.routes ?? {}) }),
    ctx.nc.subscribe(subjects.event('route', 'unreachable'), {
      // A gateway could not reach a target: maybe a service moved; look again soon.
      callback: () => periodic.soon('target unreachable'),
    }),
  ];

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
        const page = reconciler.list(Math.max(0, req.offset), Math.min(Math.max(1, req.limit), LIST_PAGE_MAX));
        return { total: page.total, routes: page.routes.map((r: Route) => ({ routespec: r.routespec, target: r.target, data_json: JSON.stringify(r.data) })) };
      },
      Reconcile: (req: { by: string }) => reconciler.reconcile(`requested by ${req.by || 'api'}`),
    },
    details: () => ({ routes: String(reconciler.size()), last_reconciled: reconciler.lastReconciled() }),
    close: () => {
      periodic.stop();
      for (const s of subs) s.unsubscribe();
      servers.stop();
      services.stop();
    },
  };
});
