// The /hub/api dispatcher: route lookup, requester identification, scope check, handler.
import { errors } from '../../../shared/errors.js';
import type { Reply, RequestInfo } from '../http.js';
import type { ApiDeps } from './deps.js';
import { groupRoutes } from './groups.js';
import { serverRoutes } from './servers.js';
import { hubRoutes } from './hub.js';
import { apiSegments, authorize, compileRoutes, findRoute } from './router.js';
import { tokenRoutes } from './tokens.js';
import { userRoutes } from './users.js';

const AUTH_HEADER = /^(?:token|bearer)\s+(\S+)$/i;

/** `Authorization: token X`, `Authorization: bearer X`, or `?token=X`. */
export function requestToken(info: RequestInfo, query: URLSearchParams): string | null {
  const header = info.headers.authorization;
  if (header !== undefined) return AUTH_HEADER.exec(header.trim())?.[1] ?? null;
  return query.get('token');
}

export function createApi(deps: ApiDeps) {
  const { identities } = deps;
  const routes = compileRoutes([...hubRoutes(deps), ...userRoutes(deps), ...serverRoutes(deps), ...groupRoutes(deps), ...tokenRoutes(deps)]);

  return async function handleApi(info: RequestInfo, reply: Reply, body: Buffer | null): Promise<void> {
    const segments = apiSegments(info.path);
    if (!segments) throw errors.notFound('Not Found');
    if (info.method === 'OPTIONS') return reply.send(200, '', { 'Content-Type': 'application/json' });
    const { route, params } = findRoute(routes, info.method === 'HEAD' ? 'GET' : info.method, segments);
    const query = new URLSearchParams(info.query);
    const token = requestToken(info, query);
    const identity = token ? await identities.resolve(token) : null;
    const held = await authorize(route, params, identity);
    const who = identity ? `${identity.owner.kind}:${identity.owner.name}` : 'anonymous';
    await route.handle({ info, reply, params, query, body, identity, held, who });
  };
}
