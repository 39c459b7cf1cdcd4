// /hub/api/, /info, /user (whoami), /services and /shutdown.
import { API_VERSION, HUB_VERSION } from '../../../shared/actor.js';
import { errors } from '../../../shared/errors.js';
import { identifyScopes, listFilter, expandScopes } from '../../../shared/scopes.js';
import { requestJson } from '../../../shared/nats.js';
import { subjects } from '../../../shared/subjects.js';
import { isPlainObject, jsonBody, onlyKeys, serviceResource, type ApiDeps } from './deps.js';
import { serviceModel, userModel } from './models.js';
import { pageBody, parsePage } from './pagination.js';
import type { Route } from './router.js';
import type { Identity } from '../caches.js';

/** GET /hub/api, asked by every client that checks versions (and by load balancers): the answer is made once. */
const ROOT_ANSWER = JSON.stringify({ version: API_VERSION, hub_version: HUB_VERSION });
const ROOT_HEADERS = { 'Content-Type': 'application/json', 'Access-Control-Allow-Origin': '*' };
const JSON_TYPE = { 'Content-Type': 'application/json' };

export function hubRoutes(deps: ApiDeps): Route[] {
  const { config, users, book, services, servers, nc } = deps;
  // the established hub's keys (`python` names its interpreter: ours is Node.js), and our own release beside them
  const info = JSON.stringify({
    version: API_VERSION, hub_version: HUB_VERSION, python: `Node.js ${process.version}`, node: process.version, sys_executable: process.execPath,
    spawner: { class: config.Hub.spawner_class, version: HUB_VERSION },
    authenticator: { class: config.Hub.authenticator_class, version: HUB_VERSION },
  });
  /**
   * whoami is what every single-user server and service asks on each cache miss: its scope set (with
   * the identify scopes) and the sorted list, as JSON text, are made once per cached identity, not per request
   * (the list is most of the answer: 15 scopes for a person's own token, 60 for an admin's).
   */
  const whoamiScopes = new WeakMap<ReadonlySet<string>, { held: Set<string>; scopesJson: string }>();
  const forWhoami = (held: ReadonlySet<string>, owner: { kind: 'user' | 'service'; name: string }) => {
    let w = whoamiScopes.get(held);
    if (!w) whoamiScopes.set(held, (w = { held: new Set([...held, ...expandScopes(identifyScopes(owner), owner)]), scopesJson: JSON.stringify([...held].sort()) }));
    return w;
  };
  /** The model's JSON with `scopes`, `token_id` and `session_id` after its own keys, the list's text spliced in. */
  const whoamiBody = (model: Record<string, unknown> | null, scopesJson: string, id: Identity): string => {
    const m = JSON.stringify(model ?? {});
    return `${m.length > 2 ? `${m.slice(0, -1)},` : '{'}"scopes":${scopesJson},"token_id":${JSON.stringify(id.tokenId || null)},"session_id":${JSON.stringify(id.sessionId || null)}}`;
  };
  return [
    {
      method: 'GET', path: '/', access: 'none',
      handle: (req) => req.reply.send(200, ROOT_ANSWER, ROOT_HEADERS),
    },
    {
      method: 'GET', path: '/info', access: ['read:hub'],
      handle: (req) => req.reply.send(200, info, JSON_TYPE),
    },
    {
      // whoami: what a single-user server or service asks to learn who holds a token
      method: 'GET', path: '/user', access: 'identified',
      async handle(req) {
        const id = req.identity!;
        // identify scopes are added for this answer only, so the model always names the requester
        const { held, scopesJson } = forWhoami(req.held, id.owner);
        if (id.owner.kind === 'service') {
          const svc = services.get(id.owner.name);
          if (!svc) throw errors.forbidden();
          req.reply.send(200, whoamiBody(serviceModel(held, svc, book), scopesJson, id), JSON_TYPE);
          return;
        }
        const user = await users.get(id.owner.name);
        if (!user) throw errors.forbidden();
        req.reply.send(200, whoamiBody(userModel(held, user, book, servers.of(user.name), { subdomains: deps.subdomains }), scopesJson, id), JSON_TYPE);
      },
    },
    {
      // An object keyed by name, as the established hub answers (its OpenAPI file says array); a page of it in
      // configuration order with offset/limit, inside the envelope when the pagination media type is accepted.
      method: 'GET', path: '/services', access: 'list',
      handle(req) {
        const filter = listFilter(req.held, 'list:services');
        if (!filter) throw errors.forbidden('Action is not authorized with current scopes; requires any of [list:services]');
        const page = parsePage(req.info, req.query, config.Hub.api_page_default_limit, config.Hub.api_page_max_limit);
        const visible: [string, Record<string, unknown>][] = [];
        for (const svc of services.values()) {
          if (filter !== 'all' && !filter.services.has(svc.name)) continue;
          const model = serviceModel(req.held, svc, book);
          if (model) visible.push([svc.name, model]);
        }
        const items = Object.fromEntries(visible.slice(page.offset, page.offset + page.limit));
        req.reply.json(200, pageBody(req.info, req.query, page, items, visible.length));
      },
    },
    {
      // The supervisor stops the hub (children in reverse start order); `servers` overrides Hub.cleanup_servers
      // for this shutdown. The proxy is the gateway itself, so it always stops with the hub: `proxy` is only checked.
      method: 'POST', path: '/shutdown', access: ['shutdown'],
      async handle(req) {
        const body = jsonBody(req) ?? {};
        if (!isPlainObject(body)) throw errors.badRequest('Body must be a JSON object: {"servers": bool, "proxy": bool}');
        onlyKeys(body, ['servers', 'proxy']);
        for (const key of ['proxy', 'servers']) {
          if (body[key] !== undefined && typeof body[key] !== 'boolean') throw errors.badRequest(`${key} must be true or false, got ${JSON.stringify(body[key]).slice(0, 40)}`);
        }
        const servers = typeof body.servers === 'boolean' ? body.servers : config.Hub.cleanup_servers;
        await requestJson(nc, subjects.command('supervisor', 'shutdown'), { servers, by: req.who }, config.Hub.rpc_timeout * 1000);
        req.reply.json(202, { message: 'Shutting down Hub' });
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
