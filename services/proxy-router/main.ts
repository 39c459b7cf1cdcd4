// The proxy-router actor: owns the routing table (JetStream KV `hub_routes`). Wiring only.
import { runActor } from '../../shared/actor.js';
import { createGrpcClient, within } from '../../shared/grpc.js';
import { decodeJson } from '../../shared/nats.js';
import { grpcSocketPath } from '../../shared/paths.js';
import { configuredServices } from '../../shared/roles.js';
import { openRoutes, readRoutes, type Route } from '../../shared/routes.js';
import { parseEventSubject, subjects } from '../../shared/subjects.js';
import type { ServerFacts } from './desired.js';
import { createReconciler, reconcilePeriodically } from './reconciler.js';

/** A full comparison with the spawner's list this often; server events keep the table current in between. */
const RECONCILE_INTERVAL_MS = 60_000;
const LIST_PAGE_MAX = 10_000;

await runActor('proxy-router', async (ctx) => {
  /** The gateway never forwards to a URL carrying credentials (they would end up in logs and the API). */
  const withoutCredentials = (name: string, url: string | undefined): string | undefined => {
    if (!url || !/^[a-z]+:\/\/[^/]*@/i.test(url)) return url;
    ctx.log.warn({ event: 'proxy.service_not_routed', service: name }, 'service url carries credentials: not routed');
    return undefined;
  };
  const { ip, port, data_dir: dataDir } = ctx.config.Hub;
  const spawner = createGrpcClient('spawner', grpcSocketPath(dataDir, 'spawner'), ctx.rpcTimeoutMs);
  const kv = await openRoutes(ctx.nc);
  const reconciler = createReconciler({
    kv, log: ctx.log, audit: ctx.audit,
    // The gateway answers hub paths itself; the route's target says where the hub is reachable.
    hubTarget: `http://${ip === '0.0.0.0' || ip === '' ? '127.0.0.1' : ip}:${port}`,
    services: configuredServices(ctx.config).map((s) => ({ name: s.name, url: withoutCredentials(s.name, s.url) })),
    // Half the usual deadline: a reconciliation asked for over the API must answer within the caller's.
    listServers: async () => (await spawner.listServers({ ready_only: true }, within(ctx.rpcTimeoutMs / 2))).servers,
    initial: await readRoutes(kv, ctx.rpcTimeoutMs * 4),
  });

  // Events and reconciliations go through one queue, so a list taken before an event is applied before it.
  const periodic = reconcilePeriodically(reconciler, RECONCILE_INTERVAL_MS, ctx.log);
  const subs = [
    ctx.nc.subscribe(subjects.eventsOf('server'), {
      callback: (_e, m) => {
        const { change } = parseEventSubject(m.subject);
        reconciler.onServerEvent(change, decodeJson<ServerFacts>(m.data))
          .catch((err) => ctx.log.error({ event: 'proxy.server_event.failed', change, err: (err as Error).message }, 'server event not applied; the next reconciliation will'));
      },
    }),
    ctx.nc.subscribe(subjects.event('activity', 'proxy'), { callback: (_e, m) => reconciler.noteActivity(decodeJson<{ routes?: Record<string, string> }>(m.data)?.routes ?? {}) }),
    ctx.nc.subscribe(subjects.event('route', 'unreachable'), {
      // A gateway could not reach a target: maybe the server is gone and its stop event was missed.
      callback: () => periodic.soon('target unreachable'),
    }),
  ];

  return {
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
      spawner.close();
    },
  };
});
