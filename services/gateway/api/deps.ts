// What the API handlers need, and small helpers they share.
import type { Subdomains } from '../../../shared/subdomains.js';
import type { AuditPublisher } from '../../../shared/audit.js';
import type { HubConfig } from '../../../shared/config.js';
import { errors } from '../../../shared/errors.js';
import type { AuthClient, ProxyRouterClient, SpawnerClient, TokensClient } from '../../../shared/contracts/index.js';
import type { ConfiguredRole, ServiceConfig } from '../../../shared/roles.js';
import type { ServiceDirectory } from '../../../shared/runtime-services.js';
import { expandScopes, type Resource } from '../../../shared/scopes.js';
import type { IdentityCache, UserCache } from '../caches.js';
import type { ServerMirror } from '../servers.js';
import type { TokenActivity } from '../token-activity.js';
import type { WebSessions } from '../web/sessions.js';
import type { NatsConnection } from '../../../shared/nats.js';
import type { ApiRequest } from './router.js';

export interface ApiDeps {
  config: HubConfig;
  auth: AuthClient;
  tokens: TokensClient;
  users: UserCache;
  /** forgotten at once by the gateway that made a change; other gateways learn it from the event */
  identities: IdentityCache;
  spawner: SpawnerClient;
  /** GET/POST/PATCH /hub/api/proxy: the routing table and its reconciliation */
  router: ProxyRouterClient;
  /** the spawner's registry, as this gateway last heard it */
  servers: ServerMirror;
  /** browser logins (the `hub-hub-login` cookie) */
  web: WebSessions;
  nc: NatsConnection;
  book: Map<string, ConfiguredRole>;
  /** every service by name: configured and added at run time (`directory.all`, kept current) */
  services: ReadonlyMap<string, ServiceConfig>;
  directory: ServiceDirectory;
  /** tokens' last_activity, recorded per use and sent to the tokens actor in batches */
  tokenUse: TokenActivity;
  /** for the refusals the gateway decides itself (OAuth grants, access denials) */
  audit: AuditPublisher;
  /** Hub.subdomain_host's hosts (shared/subdomains.ts), or null: servers' URLs in models and pages name their user's host */
  subdomains: Subdomains | null;
}

/** The JSON body (parsed once, by the dispatcher's limits); absent or empty is `undefined`. Anything but JSON is a 400. */
export function jsonBody(req: ApiRequest): unknown {
  return req.json();
}

export const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export function stringList(v: unknown, what: string): string[] {
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'string')) throw errors.badRequest(`${what} must be a list of strings`);
  return v;
}

/** A list of names from a body, at most Hub.max_names_per_request of them (413 beyond, naming the limit). */
export function nameList(v: unknown, what: string, limit: number): string[] {
  const names = stringList(v, what);
  if (names.length > limit) throw errors.tooManyNames(names.length, what, limit);
  return names;
}

/** Only these keys may appear in the body; their types are checked by the caller. */
export function onlyKeys(body: Record<string, unknown>, allowed: string[]): void {
  const extra = Object.keys(body).filter((k) => !allowed.includes(k));
  if (extra.length) throw errors.badRequest(`Invalid JSON keys: ${extra.map((k) => JSON.stringify(k.slice(0, 40))).join(', ')}`);
}

/** The user resource of a path, with the groups that `!group=` filters need. */
export function userResource(deps: ApiDeps) {
  return async (params: Record<string, string>): Promise<Resource> => {
    const user = await deps.users.get(params.name);
    return { kind: 'user', name: params.name, groups: user?.groups ?? [] };
  };
}

export const groupResource = (params: Record<string, string>): Resource => ({ kind: 'group', name: params.name });
export const serviceResource = (params: Record<string, string>): Resource => ({ kind: 'service', name: params.name });

const adminScopesOf = new WeakMap<Map<string, ConfiguredRole>, Set<string>>();

/** Holds every scope the admin role gives: only such a requester may make (or change) an admin. */
export function holdsAdminScopes(held: ReadonlySet<string>, book: Map<string, ConfiguredRole>): boolean {
  let admin = adminScopesOf.get(book);
  if (!admin) adminScopesOf.set(book, (admin = expandScopes(book.get('admin')!.scopes)));
  for (const s of admin) if (!held.has(s)) return false;
  return true;
}
