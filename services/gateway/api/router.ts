// The /hub/api route table: each route declares its method, path pattern, the scopes that allow it
// (any one suffices) and the resource its path names. The router identifies the requester, applies
// the scope check with 403-vs-404 semantics, and runs the handler. Declared scopes are checked
// against the vocabulary when the table is built, so a typo fails at start, not on a request.
import type { CallOptions } from '../../../shared/contracts/index.js';
import { errors, type HubError } from '../../../shared/errors.js';
import { accessDecision, parseScope, type Resource } from '../../../shared/scopes.js';
import type { Identity } from '../caches.js';
import type { Reply, RequestInfo } from '../http.js';

export interface ApiRequest {
  info: RequestInfo;
  reply: Reply;
  params: Record<string, string>;
  query: URLSearchParams;
  body: Buffer | null;
  /** the body as JSON (undefined when empty), parsed once with the hub's limits; a 400 when it is not */
  json: () => unknown;
  /** null for anonymous requests (only routes with `scopes: 'none'` see them) */
  identity: Identity | null;
  held: ReadonlySet<string>;
  /** `user:<name>` / `service:<name>`, for audit lines */
  who: string;
  /** options for calls to actors made for this request: it travels with them (id, who, client address) */
  call: CallOptions;
}

export type Access =
  | 'none'          // anyone
  | 'identified'    // any valid credential
  | 'in-handler'    // the handler decides (e.g. POST /users/<u>/tokens)
  | 'list'          // the handler filters by a list scope
  | string[];       // any one of these, for the path's resource

export interface Route {
  method: string;
  path: string;     // e.g. '/users/:name/tokens/:id'
  access: Access;
  /** the resource named by the path, for filtered scopes; may need a lookup (a user's groups) */
  resource?: (params: Record<string, string>) => Promise<Resource | undefined> | Resource | undefined;
  handle: (req: ApiRequest) => Promise<void> | void;
}

interface CompiledRoute extends Route {
  segments: string[];
  /** `/hub/api/users/:name`: the label of its metrics and log lines */
  pattern: string;
}

const EMPTY: ReadonlySet<string> = new Set();

export function compileRoutes(routes: Route[]): CompiledRoute[] {
  for (const r of routes) {
    if (Array.isArray(r.access)) {
      for (const s of r.access) if (!parseScope(s)) throw new Error(`route ${r.method} ${r.path}: unknown scope ${s}`);
    }
  }
  return routes.map((r) => ({ ...r, segments: r.path.split('/').filter(Boolean), pattern: `/hub/api${r.path === '/' ? '' : r.path}` }));
}

/**
 * Path segments after /hub/api, percent-decoded once; null when a segment does not decode. A trailing slash
 * leaves a last empty segment: it names the default server where a route ends in `:server`
 * (`/shares/alice/` is alice's default server, `/shares/alice` all her servers), and is ignored elsewhere.
 */
export function apiSegments(path: string): string[] | null {
  const raw = path.slice('/hub/api'.length).split('/').slice(1);
  try {
    return raw.map((s) => decodeURIComponent(s));
  } catch {
    return null;
  }
}

/** Only a server name may be empty (the default server); any other empty segment matches no parameter. */
const MAY_BE_EMPTY = ':server';

function match(route: CompiledRoute, segments: string[]): Record<string, string> | null {
  if (route.segments.length !== segments.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < segments.length; i++) {
    const want = route.segments[i];
    if (want.startsWith(':')) {
      if (segments[i] === '' && want !== MAY_BE_EMPTY) return null;
      params[want.slice(1)] = segments[i];
    } else if (want !== segments[i]) return null;
  }
  return params;
}

/** The route for a path and method; throws 404 (no such path) or 405 (path known, method not). */
export function findRoute(routes: CompiledRoute[], method: string, segments: string[]): { route: CompiledRoute; params: Record<string, string> } {
  let pathKnown = false;
  // the path as written first; then, after a trailing slash, the path without it
  const tries = segments.length && segments[segments.length - 1] === '' ? [segments, segments.slice(0, -1)] : [segments];
  for (const candidate of tries) {
    for (const route of routes) {
      const params = match(route, candidate);
      if (!params) continue;
      pathKnown = true;
      if (route.method === method) return { route, params };
    }
  }
  throw pathKnown ? errors.methodNotAllowed() : errors.notFound('Not Found');
}

export const missingCredentials = (): HubError => errors.forbidden('Missing or invalid credentials.', 'HUB_ERR_AUTH_MISSING');

/** Reference semantics: 403 without credentials; allow; 404 when only other resources are covered; else 403. */
export async function authorize(route: CompiledRoute, params: Record<string, string>, identity: Identity | null): Promise<ReadonlySet<string>> {
  if (route.access === 'none') return identity?.scopes ?? EMPTY;
  if (!identity) throw missingCredentials();
  if (!Array.isArray(route.access)) return identity.scopes;
  const resource = await route.resource?.(params);
  const decision = accessDecision(identity.scopes, route.access, resource);
  if (decision === 'allow') return identity.scopes;
  if (decision === 'not-found') throw errors.notFound('No access to resources or resources not found', 'HUB_ERR_NO_ACCESS');
  throw errors.forbidden(`Action is not authorized with current scopes; requires any of [${route.access.join(', ')}]`);
}
