// What the routing table should hold, and what must change to get there. Pure functions.
//   /                    → the hub itself (the gateway serves hub pages; the route marks "hub")
//   /services/<name>/    → each configured service with a `url` (at `<service host>/services/<name>/` with Hub.subdomain_host)
// User servers are not here: gateways route them from the server registry itself (shared/routes.ts serverRoute),
// and routes of servers left in the bucket by an older hub are removed as not desired.
import type { Logger } from '../../shared/log.js';
import { serverRoute, type Route } from '../../shared/routes.js';
import type { ServerRecord } from '../../shared/servers.js';
import { servicePrefix } from '../../shared/servers.js';
import type { ServiceConfig } from '../../shared/roles.js';
import type { Subdomains } from '../../shared/subdomains.js';

export const HUB_ROUTESPEC = '/';

export interface ServiceFacts {
  name: string;
  url?: string;
  /** its own host with per-user subdomains ('' without) */
  host?: string;
}

export const hubRoute = (hubTarget: string): Route => ({ routespec: HUB_ROUTESPEC, target: hubTarget, data: { hub: true } });

export const serviceRoute = (name: string, url: string, host = ''): Route => ({ routespec: host + servicePrefix(name), target: url, data: { service: name } });

/** The routes that should be in the bucket: the hub itself and every service with a `url`. */
export function desiredRoutes(hubTarget: string, services: ServiceFacts[]): Map<string, Route> {
  const want = new Map<string, Route>();
  const add = (r: Route) => want.set(r.routespec, r);
  add(hubRoute(hubTarget));
  for (const s of services) if (s.url) add(serviceRoute(s.name, s.url, s.host));
  return want;
}

/** Same target and owner; `last_activity` is bookkeeping, not a reason to rewrite a route. */
export function sameRoute(a: Route, b: Route): boolean {
  if (a.target !== b.target) return false;
  const { last_activity: _a, ...da } = a.data;
  const { last_activity: _b, ...db } = b.data;
  const ka = Object.keys(da);
  return ka.length === Object.keys(db).length && ka.every((k) => da[k] === db[k]);
}

export interface Plan {
  add: Route[];
  repoint: Route[];
  remove: Route[];
}

export function planChanges(desired: ReadonlyMap<string, Route>, actual: ReadonlyMap<string, Route>): Plan {
  const plan: Plan = { add: [], repoint: [], remove: [] };
  for (const [spec, want] of desired) {
    const have = actual.get(spec);
    if (!have) plan.add.push(want);
    else if (!sameRoute(want, have)) plan.repoint.push(want);
  }
  for (const [spec, have] of actual) if (!desired.has(spec)) plan.remove.push(have);
  return plan;
}

/** Services as routed: the gateway never forwards to a URL carrying credentials (they would end up in logs and the API). */
export function routableServices(services: ServiceConfig[], log: Logger, sub: Subdomains | null = null): ServiceFacts[] {
  return services.map((s) => {
    if (!s.url || !/^[a-z]+:\/\/[^/]*@/i.test(s.url)) return { name: s.name, url: s.url, host: sub?.serviceHost(s.name) ?? '' };
    log.warn({ event: 'proxy.service_not_routed', service: s.name }, 'service url carries credentials: not routed');
    return { name: s.name, url: undefined };
  });
}

/** The routes of the running servers in the registry, for listing (gateways build the same from their own copy). */
export function serverRoutes(records: Iterable<ServerRecord>, sub: Subdomains | null = null): Map<string, Route> {
  const routes = new Map<string, Route>();
  for (const s of records) {
    const r = serverRoute(s, sub?.userHost(s.user) ?? '');
    if (r) routes.set(r.routespec, r);
  }
  return routes;
}
