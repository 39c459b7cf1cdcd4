// The gateway's front door: one uWS app, one dispatch. /hub/api answers JSON; other paths get pages.
import uWS from 'uWebSockets.js';
import { HUB_VERSION, type ActorContext } from '../../shared/actor.js';
import { asHubError, errors, type HubError } from '../../shared/errors.js';
import { cap } from '../../shared/log.js';
import type { createHealthChecker } from './health.js';
import { errorPage, hasBody, readBody, Reply, snapshot, wantsHtml, type RequestInfo } from './http.js';
import type { Proxy } from './proxy/index.js';
import { securityHeaders, STATIC_ASSETS } from './web/html.js';

export interface GatewayDeps {
  ctx: ActorContext;
  health: ReturnType<typeof createHealthChecker>;
  api: (info: RequestInfo, reply: Reply, body: Buffer | null) => Promise<void>;
  /** the hub's own pages under /hub/; false when there is no such page */
  pages: (info: RequestInfo, reply: Reply, body: Buffer | null) => Promise<boolean>;
  /** paths outside /hub: forwarded to their route's target (HTTP and WebSocket) */
  proxy: Proxy;
}

type Handler = (info: RequestInfo, reply: Reply, body: Buffer | null) => Promise<void> | void;

/** The hub's stylesheet and page scripts, from memory; URLs carry a content version, so they may be cached long. */
function serveStatic(info: RequestInfo, reply: Reply): void {
  const asset = STATIC_ASSETS.get(info.path.slice('/hub/static/'.length));
  if (!asset) throw errors.notFound(`No such file: ${cap(info.path, 100)}`);
  const headers = { 'Content-Type': asset.type, ETag: asset.etag, 'Cache-Control': 'public, max-age=86400' };
  if (info.headers['if-none-match'] === asset.etag) return reply.send(304, '', headers);
  reply.send(200, info.method === 'HEAD' ? '' : asset.body, headers);
}

export function createApp({ ctx, health, api, pages, proxy }: GatewayDeps): uWS.TemplatedApp {
  const maxBody = ctx.config.Hub.max_body_size;
  const log = ctx.log;

  const base = securityHeaders(ctx.config);
  const toHub: Handler = (_i, reply) => reply.send(302, '', { Location: '/hub/' });
  const routes: Record<string, Record<string, Handler>> = {
    '/': { GET: toHub, HEAD: toHub },
    '/hub/health': {
      GET: async (_i, reply) => {
        const report = await health.check();
        if (report.healthy) reply.json(200, { status: 'ok', version: HUB_VERSION, actors: report.actors });
        else reply.json(503, { status: 503, message: `actors not answering: ${report.missing.join(', ')}`, missing: report.missing, actors: report.actors });
      },
    },
  };

  function fail(info: RequestInfo, reply: Reply, err: HubError): void {
    if (err.status >= 500) log.error({ event: 'http.error', method: info.method, path: cap(info.path), status: err.status, err: err.cause ?? err }, 'request failed');
    if (wantsHtml(info)) reply.send(err.status, errorPage(err), { 'Content-Type': 'text/html; charset=utf-8', ...err.headers });
    else reply.error(err);
  }

  async function dispatch(info: RequestInfo, reply: Reply): Promise<void> {
    // The body limit is enforced before routing, so no path can be made to buffer an oversized body.
    const body = hasBody(info) ? await readBody(reply, info, maxBody) : null;
    // the OAuth provider's endpoints are pages (HTML errors, form bodies), though they live under /hub/api
    if (info.path.startsWith('/hub/api/oauth2/') && (await pages(info, reply, body))) return;
    if (info.path === '/hub/api' || info.path.startsWith('/hub/api/')) return api(info, reply, body);
    if (info.path.startsWith('/hub/static/') && (info.method === 'GET' || info.method === 'HEAD')) return serveStatic(info, reply);
    const path = info.path.length > 1 && info.path.endsWith('/') ? info.path.slice(0, -1) : info.path;
    const route = routes[path];
    if (!route && info.path.startsWith('/hub') && (await pages(info, reply, body))) return;
    if (!route) throw errors.notFound(`No such endpoint: ${cap(info.path, 100)}`);
    const handler = route[info.method];
    if (!handler) throw errors.methodNotAllowed(`${info.method} is not allowed on ${cap(info.path, 100)}`);
    await handler(info, reply, body);
  }

  return uWS.App().ws('/*', proxy.websocket).any('/*', (res, req) => {
    if (proxy.handle(res, req)) return;
    const reply = new Reply(res);
    reply.base = base;
    const info = snapshot(req, res);
    dispatch(info, reply).catch((e) => fail(info, reply, asHubError(e)));
  });
}
