// /hub/api/proxy (reference §2.9): the routing table as the proxy-router keeps it, and a way to make
// it reconcile now. The hub's proxy is built in, so PATCH cannot point it somewhere else.
import { errors, type HubError } from '../../../shared/errors.js';
import { isPlainObject, jsonBody, type ApiDeps } from './deps.js';
import { pageBody, parsePage } from './pagination.js';
import type { ApiRequest, Route } from './router.js';

export function proxyRoutes(deps: ApiDeps): Route[] {
  const { router, config } = deps;

  async function reconcile(req: ApiRequest): Promise<void> {
    await router.reconcile({ by: req.who });
    req.reply.send(200, '', { 'Content-Type': 'application/json' });
  }

  return [
    {
      method: 'GET', path: '/proxy', access: ['proxy'],
      async handle(req) {
        const page = parsePage(req.info, req.query, config.Hub.api_page_default_limit, config.Hub.api_page_max_limit);
        const r = await router.listRoutes({ offset: page.offset, limit: page.limit });
        const items: Record<string, unknown> = {};
        for (const route of r.routes) items[route.routespec] = { routespec: route.routespec, target: route.target, data: JSON.parse(route.data_json) };
        req.reply.json(200, pageBody(req.info, req.query, page, items, r.total));
      },
    },
    { method: 'POST', path: '/proxy', access: ['proxy'], handle: reconcile },
    {
      method: 'PATCH', path: '/proxy', access: ['proxy'],
      async handle(req) {
        if (!req.body?.length) throw errors.badRequest('need JSON body');
        let body: unknown;
        try {
          body = jsonBody(req);
        } catch (e) {
          // the established hub's wording for JSON it cannot read; a body nested too deep keeps its own message
          if ((e as HubError).code === 'HUB_ERR_REQUEST_INVALID') throw errors.badRequest('Request body must be JSON dict');
          throw e;
        }
        if (!isPlainObject(body)) throw errors.badRequest('Request body must be JSON dict');
        if ('api_url' in body || 'auth_token' in body) {
          throw errors.badRequest("This hub's proxy is built in (the gateway and the proxy-router): there is no external proxy API to point at, so api_url and auth_token do not apply");
        }
        await reconcile(req); // other keys are ignored, as the reference does
      },
    },
  ];
}
