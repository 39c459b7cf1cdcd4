// /hub/api/, /info, /user (whoami) and /services.
import { HUB_VERSION } from '../../../shared/actor.js';
import { errors } from '../../../shared/errors.js';
import { identifyScopes, listFilter, expandScopes } from '../../../shared/scopes.js';
import { serviceResource, type ApiDeps } from './deps.js';
import { serviceModel, userModel } from './models.js';
import type { Route } from './router.js';

export function hubRoutes(deps: ApiDeps): Route[] {
  const { config, users, book, services, servers } = deps;
  /**
   * whoami is what every single-user server and service asks on each cache miss: its scope set (with
   * the identify scopes) and the sorted list are computed once per cached identity, not per request.
   */
  const whoamiScopes = new WeakMap<ReadonlySet<string>, { held: Set<string>; sorted: string[] }>();
  const forWhoami = (held: ReadonlySet<string>, owner: { kind: 'user' | 'service'; name: string }) => {
    let w = whoamiScopes.get(held);
    if (!w) whoamiScopes.set(held, (w = { held: new Set([...held, ...expandScopes(identifyScopes(owner), owner)]), sorted: [...held].sort() }));
    return w;
  };
  return [
    {
      method: 'GET', path: '/', access: 'none',
      handle: (req) => req.reply.json(200, { version: HUB_VERSION }, { 'Access-Control-Allow-Origin': '*' }),
    },
    {
      method: 'GET', path: '/info', access: ['read:hub'],
      handle: (req) => req.reply.json(200, {
        version: HUB_VERSION, node: process.version, sys_executable: process.execPath,
        spawner: { class: config.Hub.spawner_class, version: HUB_VERSION },
        authenticator: { class: config.Hub.authenticator_class, version: HUB_VERSION },
      }),
    },
    {
      // whoami: what a single-user server or service asks to learn who holds a token
      method: 'GET', path: '/user', access: 'identified',
      async handle(req) {
        const id = req.identity!;
        // identify scopes are added for this answer only, so the model always names the requester
        const { held, sorted } = forWhoami(req.held, id.owner);
        const extra = { scopes: sorted, token_id: id.tokenId || null, session_id: id.sessionId || null };
        if (id.owner.kind === 'service') {
          const svc = services.get(id.owner.name);
          if (!svc) throw errors.forbidden();
          req.reply.json(200, { ...serviceModel(held, svc, book), ...extra });
          return;
        }
        const user = await users.get(id.owner.name);
        if (!user) throw errors.forbidden();
        req.reply.json(200, { ...userModel(held, user, book, servers.of(user.name)), ...extra });
      },
    },
    {
      method: 'GET', path: '/services', access: 'list',
      handle(req) {
        const filter = listFilter(req.held, 'list:services');
        if (!filter) throw errors.forbidden('Action is not authorized with current scopes; requires any of [list:services]');
        const out: Record<string, unknown> = {};
        for (const svc of services.values()) {
          if (filter !== 'all' && !filter.services.has(svc.name)) continue;
          const model = serviceModel(req.held, svc, book);
          if (model) out[svc.name] = model;
        }
        req.reply.json(200, out);
      },
    },
    {
      method: 'GET', path: '/services/:name', access: ['read:services', 'read:services:name', 'read:roles:services'], resource: serviceResource,
      handle(req) {
        const svc = services.get(req.params.name);
        if (!svc) throw errors.notFound(`No such service: ${req.params.name}`, 'HUB_ERR_SERVICE_NOT_FOUND');
        req.reply.json(200, serviceModel(req.held, svc, book));
      },
    },
  ];
}
