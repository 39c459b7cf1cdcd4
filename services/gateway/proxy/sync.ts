// The gateway's routing table, one fact from one source each: the proxy-router's routes (the hub itself,
// services, routes added over the API) from the `hub_routes` bucket, and user servers straight from the
// server registry the gateway already mirrors. A server is routed here from the moment this gateway's copy
// of the registry says it runs, so "ready" in the model this gateway serves always means "routed" here.
// A reload (after a NATS reconnect) builds a fresh table and swaps it in whole; the old one serves meanwhile.
import type { Logger } from '../../../shared/log.js';
import { mirrorKv } from '../../../shared/kv-mirror.js';
import type { NatsConnection } from '../../../shared/nats.js';
import { decodeRoute, ROUTES_BUCKET, serverRoute, type Route } from '../../../shared/routes.js';
import type { Subdomains } from '../../../shared/subdomains.js';
import type { ServerMirror } from '../servers.js';
import { RouteTable } from './table.js';

export async function createRouting(nc: NatsConnection, servers: ServerMirror, log: Logger, loadTimeoutMs: number, subdomains: Subdomains | null = null) {
  // with per-user subdomains a server's route is on its user's host only
  const hostOf = (user: string) => subdomains?.userHost(user) ?? '';
  const routes = await mirrorKv<Route>(nc, { bucket: ROUTES_BUCKET, decode: decodeRoute, loadTimeoutMs, log });

  function fill(t: RouteTable, route: Route): void {
    if (!t.set(route)) log.warn({ event: 'proxy.route_unusable', routespec: route.routespec, target: route.target }, 'route ignored: not a [host]/path routespec with an http(s) target');
  }
  function build(): RouteTable {
    const t = new RouteTable(subdomains?.portSuffix);
    for (const r of routes.values()) fill(t, r);
    for (const s of servers.all()) {
      const r = serverRoute(s, hostOf(s.user));
      if (r) fill(t, r);
    }
    log.info({ event: 'proxy.routes_loaded', routes: t.size }, 'routing table loaded');
    return t;
  }
  let table = build();

  const unlisten = [
    routes.listen((c) => {
      if (c.kind === 'reset') table = build();
      else if (c.kind === 'put') fill(table, c.value);
      else if (c.previous) table.delete(c.previous.routespec);
    }),
    servers.listen((record, previous) => {
      if (record === null) return void (table = build());
      const route = serverRoute(record, hostOf(record.user));
      if (route) fill(table, route);
      else table.delete(hostOf(record.user) + (previous ?? record).url);
    }),
  ];

  return {
    /** The current table; read it per request (a reload replaces it). */
    get table(): RouteTable {
      return table;
    },
    /** After a NATS reconnect changes may have been missed: load everything again. */
    reload: () => routes.reload(),
    stop(): void {
      for (const u of unlisten) u();
      routes.stop();
    },
  };
}

export type Routing = Awaited<ReturnType<typeof createRouting>>;
