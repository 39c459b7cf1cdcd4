// The /hub/api dispatcher: route lookup, requester identification, scope check, handler.
import { errors } from '../../../shared/errors.js';
import type { Reply, RequestInfo } from '../http.js';
import type { ApiDeps } from './deps.js';
import { groupRoutes } from './groups.js';
import { serverRoutes } from './servers.js';
import { hubRoutes } from './hub.js';
import { passwordRoutes } from './passwords.js';
import { proxyRoutes } from './proxy.js';
import { shareRoutes } from './shares.js';
import { apiSegments, authorize, compileRoutes, findRoute } from './router.js';
import { tokenRoutes } from './tokens.js';
import { userRoutes } from './users.js';

const AUTH_HEADER = /^(?:token|bearer)\s+(\S+)$/i;
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** `Authorization: token X`, `Authorization: bearer X`, or `?token=X`. */
export function requestToken(info: RequestInfo, query: URLSearchParams): string | null {
  const header = info.headers.authorization;
  if (header !== undefined) return AUTH_HEADER.exec(header.trim())?.[1] ?? null;
  return query.get('token');
}

export function createApi(deps: ApiDeps) {
  const { identities } = deps;
  const routes = compileRoutes([...hubRoutes(deps), ...userRoutes(deps), ...serverRoutes(deps), ...groupRoutes(deps), ...tokenRoutes(deps), ...proxyRoutes(deps), ...passwordRoutes(deps), ...shareRoutes(deps)]);

  return async function handleApi(info: RequestInfo, reply: Reply, body: Buffer | null): Promise<void> {
    const segments = apiSegments(info.path);
    if (!segments) throw errors.notFound('Not Found');
    if (info.method === 'OPTIONS') return reply.send(200, '', { 'Content-Type': 'application/json' });
    const { route, params } = findRoute(routes, info.method === 'HEAD' ? 'GET' : info.method, segments);
    const query = new URLSearchParams(info.query);
    const token = requestToken(info, query);
    let identity = token ? await identities.resolve(token) : null;
    if (!token) {
      // A browser: the login cookie identifies it; then every write needs the session's XSRF token.
      identity = await deps.web.identify(info);
      if (identity && !SAFE_METHODS.has(info.method) && !deps.web.xsrfValid(info, deps.web.xsrfFor(identity.sessionId))) {
        throw errors.forbidden(`'_xsrf' argument missing or invalid for ${info.method}`, 'HUB_ERR_XSRF');
      }
    }
    const held = await authorize(route, params, identity);
    const who = identity ? `${identity.owner.kind}:${identity.owner.name}` : 'anonymous';
    await route.handle({ info, reply, params, query, body, identity, held, who });
  };
}
