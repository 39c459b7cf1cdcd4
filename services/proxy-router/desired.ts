// What the routing table should hold, and what must change to get there. Pure functions.
//   /                    → the hub itself (the gateway serves hub pages; the route marks "hub")
//   /services/<name>/    → each configured service with a `url`
//   /user/<name>/[<s>/]  → each ready single-user server, at its `url`, to its `target`
import type { Route } from '../../shared/routes.js';
import { serviceUrl } from '../../shared/servers.js';

export const HUB_ROUTESPEC = '/';

/** A server as the spawner describes it (proto `Server`, also the body of hub.evt.server.* events). */
export interface ServerFacts {
  user: string;
  name: string;
  url: string;
  target: string;
  last_activity?: string;
}

export interface ServiceFacts {
  name: string;
  url?: string;
}

export const hubRoute = (hubTarget: string): Route => ({ routespec: HUB_ROUTESPEC, target: hubTarget, data: { hub: true } });

export const serviceRoute = (name: string, url: string): Route => ({ routespec: serviceUrl(name), target: url, data: { service: name } });

/** Null while the server has nowhere to be reached, or when its url is not a path. */
export function serverRoute(s: ServerFacts): Route | null {
  if (!s.target || !s.url?.startsWith('/') || !s.url.endsWith('/')) return null;
  return { routespec: s.url, target: s.target, data: { user: s.user, server_name: s.name, last_activity: s.last_activity || null } };
}

export const isServerRoute = (r: Route): boolean => typeof r.data.user === 'string';

/**
 * The routes that should exist. `servers` is null when the spawner did not answer: the server routes
 * already in the table then stand as they are (never wipe routes because nobody answered).
 */
export function desiredRoutes(hubTarget: string, services: ServiceFacts[], servers: ServerFacts[] | null, actual: ReadonlyMap<string, Route>): Map<string, Route> {
  const want = new Map<string, Route>();
  const add = (r: Route | null) => { if (r) want.set(r.routespec, r); };
  add(hubRoute(hubTarget));
  for (const s of services) if (s.url) add(serviceRoute(s.name, s.url));
  if (servers) for (const s of servers) add(serverRoute(s));
  else for (const r of actual.values()) if (isServerRoute(r)) add(r);
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
