// The /hub/api dispatcher: route lookup, requester identification, scope check, handler.
import { errors } from '../../../shared/errors.js';
import { parseJson } from '../../../shared/json.js';
import type { Identity } from '../caches.js';
import { requestContext, tokenOfAuthorization, type Reply, type RequestInfo } from '../http.js';
import type { ApiDeps } from './deps.js';
import { groupRoutes } from './groups.js';
import { serverRoutes } from './servers.js';
import { hubRoutes } from './hub.js';
import { serviceRoutes } from './services.js';
import { passwordRoutes } from './passwords.js';
import { proxyRoutes } from './proxy.js';
import { shareRoutes } from './shares.js';
import { apiSegments, authorize, compileRoutes, findRoute, type Route } from './router.js';
import { tokenRoutes } from './tokens.js';
import { userRoutes } from './users.js';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** `Authorization: token X`, `Authorization: bearer X`, or `?token=X` (unless Hub.allow_token_in_url is false). */
export function requestToken(info: RequestInfo, query: URLSearchParams, inUrl = true): string | null {
  const header = info.headers.authorization;
  if (header !== undefined) return tokenOfAuthorization(header);
  return inUrl ? query.get('token') : null;
}

/** `user:<name>` / `service:<name>` / `anonymous`: how audit events and logs name a requester. */
export const whoOf = (identity: Identity | null): string => (identity ? `${identity.owner.kind}:${identity.owner.name}` : 'anonymous');

/**
 * Who a request comes from: a token (header or `?token=`), else the browser's login cookie, whose writes
 * must carry the session's XSRF token. Records who it is on the request (logs, audit).
 */
export function createIdentify(deps: Pick<ApiDeps, 'identities' | 'web' | 'tokenUse' | 'config'>) {
  const inUrl = deps.config.Hub.allow_token_in_url;
  return async function identify(info: RequestInfo, query = new URLSearchParams(info.query)): Promise<Identity | null> {
    const token = requestToken(info, query, inUrl);
    let identity: Identity | null;
    if (token) {
      identity = await deps.identities.resolve(token, info.requestId);
      if (identity) deps.tokenUse.touch(identity.tokenId);
    } else {
      identity = await deps.web.identify(info);
      if (identity && !SAFE_METHODS.has(info.method) && !deps.web.xsrfValid(info, deps.web.xsrfFor(identity.sessionId))) {
        info.who = whoOf(identity);
        throw errors.forbidden(`'_xsrf' argument missing or invalid for ${info.method}`, 'HUB_ERR_XSRF');
      }
    }
    info.who = whoOf(identity);
    return identity;
  };
}

/** Every /hub/api route (the fuzz test drives each one it lists). */
export function apiRoutes(deps: ApiDeps): Route[] {
  return [...hubRoutes(deps), ...userRoutes(deps), ...serverRoutes(deps), ...groupRoutes(deps), ...tokenRoutes(deps), ...proxyRoutes(deps), ...passwordRoutes(deps), ...shareRoutes(deps), ...serviceRoutes(deps)];
}

export function createApi(deps: ApiDeps) {
  const maxJsonDepth = deps.config.Hub.max_json_depth;
  const routes = compileRoutes(apiRoutes(deps));
  const identify = createIdentify(deps);

  return async function handleApi(info: RequestInfo, reply: Reply, body: Buffer | null): Promise<void> {
    const segments = apiSegments(info.path);
    if (!segments) throw errors.notFound('Not Found');
    if (info.method === 'OPTIONS') return reply.send(200, '', { 'Content-Type': 'application/json' });
    const { route, params } = findRoute(routes, info.method === 'HEAD' ? 'GET' : info.method, segments);
    info.route = route.pattern;
    const query = new URLSearchParams(info.query);
    const identity = await identify(info, query);
    const held = await authorize(route, params, identity);
    let parsed: { value: unknown } | undefined;
    // the body is UTF-8 (checked at the door); only its shape is left to check, once, with the depth bound
    const json = () => (parsed ??= { value: body?.length ? parseJson(body.toString('utf8'), maxJsonDepth) : undefined }).value;
    await route.handle({ info, reply, params, query, body, json, identity, held, who: info.who, call: { request: requestContext(info) } });
  };
}
