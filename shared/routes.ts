// The routing table as the proxy-router (its only writer) and every gateway (readers, through
// shared/kv-mirror.ts) share it: a JetStream key-value bucket `hub_routes`, one key per route (the hub,
// services, routes added over the API). User servers are not in it: gateways route them from the server
// registry (`serverRoute` below), so a server's route and its "ready" are one fact.
import { BUCKETS } from './subjects.js';
import type { KV } from 'nats';
import type { ServerRecord } from './servers.js';
import { decodeJson, encodeJson, openKv, type NatsConnection } from './nats.js';

export const ROUTES_BUCKET = BUCKETS.routes;

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
  return openKv(nc, ROUTES_BUCKET);
}

export const putRoute = (kv: KV, route: Route): Promise<number> => kv.put(routeKey(route.routespec), encodeJson(route));
export const deleteRoute = (kv: KV, routespec: string): Promise<void> => kv.delete(routeKey(routespec));

function isRoute(v: unknown): v is Route {
  const r = v as Route;
  return typeof r?.routespec === 'string' && typeof r.target === 'string' && typeof r.data === 'object' && r.data !== null;
}

/** A bucket entry as a route, or null when it is not one the proxy-router wrote (ignored by readers). */
export function decodeRoute(key: string, value: Uint8Array): Route | null {
  if (!key.startsWith('r.')) return null;
  const route = decodeJson<unknown>(value);
  return isRoute(route) && route.routespec === routespecOfKey(key) ? route : null;
}

/**
 * The route of a running single-user server (its `url` to its `target`), or null while it has none. `host`: its
 * user's host with per-user subdomains (shared/subdomains.ts), making the routespec `<host>/user/<name>/` as the
 * established hub's; '' without.
 */
export function serverRoute(s: Pick<ServerRecord, 'user' | 'name' | 'url' | 'target' | 'state' | 'last_activity'>, host = ''): Route | null {
  if (s.state !== 'running' || !s.target || !s.url?.startsWith('/') || !s.url.endsWith('/')) return null;
  return { routespec: `${host}${s.url}`, target: s.target, data: { user: s.user, server_name: s.name, last_activity: s.last_activity || null } };
}
