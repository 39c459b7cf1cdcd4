// The gateway's front door: one uWS app, one dispatch. /hub/api answers JSON; other paths get pages.
// Every request the hub answers itself ends in one place (`finished`): its log line, its duration
// histogram, and the audit event of a refusal. Under Hub.base_url the prefix is taken off here, once, so
// the hub routes `/hub/...` whatever the base (URLs it gives out get it back: shared/urls.ts); a path
// outside the base is sent into it.
import { API_VERSION, HUB_VERSION, type ActorContext } from '../../shared/actor.js';
import { asHubError, errors, type HubError } from '../../shared/errors.js';
import { cap, levelForStatus } from '../../shared/log.js';
import { secondsSince } from '../../shared/metrics.js';
import { hasScope } from '../../shared/scopes.js';
import type { Identity } from './caches.js';
import type { createHealthChecker } from './health.js';
import { checkRequestText, compileHeaders, type BaseHeaders, errorPage, hasBody, readBody, Reply, requestContext, snapshot, wantsHtml, type RequestInfo } from './http.js';
import { requestDuration, type Scraper } from './metrics.js';
import type { Proxy } from './proxy/index.js';
import { missingCredentials } from './api/router.js';
import { securityHeaders, STATIC_ASSETS } from './web/html.js';
import { baseUrl, hubUrl, intoBase, withinBase } from '../../shared/urls.js';
import { HSTS } from '../../shared/tls.js';
import type { Mount } from './front-door.js';
import type { HubConfig } from '../../shared/config.js';
import { drain } from './drain.js';

export interface GatewayDeps {
  ctx: ActorContext;
  health: ReturnType<typeof createHealthChecker>;
  api: (info: RequestInfo, reply: Reply, body: Buffer | null) => Promise<void>;
  /** the hub's own pages under /hub/; false when there is no such page */
  pages: (info: RequestInfo, reply: Reply, body: Buffer | null) => Promise<boolean>;
  /** paths outside /hub: forwarded to their route's target (HTTP and WebSocket) */
  proxy: Proxy;
  /** who a request comes from (token or login cookie), as the API identifies it */
  identify: (info: RequestInfo) => Promise<Identity | null>;
  scraper: Scraper;
}

type Handler = (info: RequestInfo, reply: Reply, body: Buffer | null) => Promise<void> | void;

/** The hub's stylesheet and page scripts, from memory; URLs carry a content version, so they may be cached long. */
function serveStatic(info: RequestInfo, reply: Reply): void {
  info.route = '/hub/static/*';
  const asset = STATIC_ASSETS.get(info.path.slice('/hub/static/'.length));
  if (!asset) throw errors.notFound(`No such file: ${cap(info.path, 100)}`);
  const headers = { 'Content-Type': asset.type, ETag: asset.etag, 'Cache-Control': 'public, max-age=86400' };
  if (info.headers['if-none-match'] === asset.etag) return reply.send(304, '', headers);
  reply.send(200, asset.body, headers); // a HEAD gets the headers only (Reply.headOnly)
}

/**
 * The version every answer the hub gives itself names, as the established hub's do: under our name and under the one
 * its clients read (jupyterhub-singleuser compares it with its own at start). Hub.extra_headers may replace them.
 */
function versionHeaders(extra: Readonly<Record<string, string>>): Record<string, string> {
  const configured = new Set(Object.keys(extra).map((k) => k.toLowerCase()));
  return Object.fromEntries(['X-Hub-Version', 'X-JupyterHub-Version'].filter((k) => !configured.has(k.toLowerCase())).map((k) => [k, API_VERSION]));
}

/** Status codes as label values, made once. */
const STATUS_LABEL: string[] = [];
const statusLabel = (status: number) => (STATUS_LABEL[status] ??= String(status));

/** Answers that are polled all day (health checks, scrapes) log at debug when they succeed. */
const QUIET_ROUTES = new Set(['/hub/health', '/hub/metrics']);

/** Refusals audited per second at most, per gateway: a flood of bad requests must not become a flood of stored events. */
const DENIALS_PER_SECOND = 200;

/** The gateway's routes, put on each app the front door opens (front-door.ts: plain, HTTPS, a new certificate's). */
export function createApp({ ctx, health, api, pages, proxy, identify, scraper }: GatewayDeps): Mount & { useConfig(next: HubConfig): void } {
  const maxBody = ctx.config.Hub.max_body_size;
  const { log, audit } = ctx;

  // over HTTPS every answer also tells browsers to come back only over HTTPS (HSTS); Hub.extra_headers may replace it
  const hsts = { 'Strict-Transport-Security': HSTS };
  /** the header blocks of pages and API answers, plain and secure; compiled again when `hub reload` changes extra_headers */
  // (indexed plain, secure, then the same with `Connection: close` for a draining gateway: drain.ts)
  const headerBlocks = (config: HubConfig) => {
    const versions = versionHeaders(config.Hub.extra_headers);
    const variants = (headers: Record<string, string>) => [
      compileHeaders({ ...versions, ...headers }), compileHeaders({ ...versions, ...hsts, ...headers }),
      compileHeaders({ ...versions, ...headers, Connection: 'close' }), compileHeaders({ ...versions, ...hsts, ...headers, Connection: 'close' }),
    ];
    return { page: variants(securityHeaders(config)), api: variants(securityHeaders(config, { api: true })) };
  };
  let blocks = headerBlocks(ctx.config);
  const toHub: Handler = (_i, reply) => reply.send(302, '', { Location: hubUrl('/hub/') });
  const prefix = baseUrl();
  const routes: Record<string, Record<string, Handler>> = {
    '/': { GET: toHub, HEAD: toHub },
    '/hub/health': {
      GET: async (_i, reply) => {
        const report = await health.check();
        if (report.healthy) reply.json(200, { status: 'ok', version: HUB_VERSION, actors: report.actors });
        else reply.json(503, { status: 503, message: `actors not answering: ${report.missing.join(', ')}`, missing: report.missing, actors: report.actors });
      },
    },
    '/hub/metrics': {
      GET: async (info, reply) => {
        if (ctx.config.Hub.authenticate_prometheus) {
          const id = await identify(info);
          if (!id) throw missingCredentials();
          if (!hasScope(id.scopes, 'read:metrics')) throw errors.forbidden('Action is not authorized with current scopes; requires any of [read:metrics]');
        }
        reply.send(200, await scraper.scrape(), { 'Content-Type': scraper.contentType });
      },
    },
  };

  function fail(info: RequestInfo, reply: Reply, err: HubError): void {
    info.error = err;
    if (err.status >= 500) log.error({ event: 'http.error', reqId: info.requestId, method: info.method, path: cap(info.path), status: err.status, err: err.cause ?? err }, 'request failed');
    if (wantsHtml(info)) reply.send(err.status, errorPage(err), { 'Content-Type': 'text/html; charset=utf-8', ...err.headers });
    else reply.error(err);
  }

  let denialWindow = 0;
  let denialsInWindow = 0;
  let suppressed = 0;

  /** A refusal (403, or a 404 that hides a resource the requester may not see) is a security decision: audited. */
  function auditDenial(info: RequestInfo, status: number): void {
    const now = Date.now();
    if (now - denialWindow >= 1000) {
      if (suppressed) log.warn({ event: 'audit.denials_suppressed', count: suppressed }, 'refusals not audited (rate limit)');
      denialWindow = now;
      denialsInWindow = 0;
      suppressed = 0;
    }
    if (++denialsInWindow > DENIALS_PER_SECOND) {
      suppressed++;
      return;
    }
    void audit.publish('access', 'denied', {
      who: info.who, what: `${info.method} ${info.route}`, outcome: 'denied',
      reason: cap(info.denyReason ?? info.error?.message ?? `status ${status}`, 200),
      request: requestContext(info), path: cap(info.path, 200), status, code: info.error?.code,
    });
  }

  function finished(info: RequestInfo, reply: Reply): void {
    const status = reply.status || (reply.aborted ? 499 : 0);
    const seconds = secondsSince(info.start);
    requestDuration.child(info.method, info.route, statusLabel(status)).observe(seconds);
    const level = status < 400 && QUIET_ROUTES.has(info.route) ? 'debug' : levelForStatus(status);
    if (log.isLevelEnabled(level)) {
      log[level]({
        event: 'http.request', method: info.method, route: info.route, path: cap(info.path), status,
        ms: Math.round(seconds * 1e4) / 10, reqId: info.requestId, user: info.who,
      }, 'request');
    }
    if (!info.audited && (status === 403 || info.error?.code === 'HUB_ERR_NO_ACCESS')) auditDenial(info, status);
  }

  async function dispatch(info: RequestInfo, reply: Reply): Promise<void> {
    // The body limit is enforced before routing, so no path can be made to buffer an oversized body.
    const body = hasBody(info) ? await readBody(reply, info, maxBody) : null;
    checkRequestText(info, body);
    // the OAuth provider's endpoints are pages (HTML errors, form bodies), though they live under /hub/api
    if (info.path.startsWith('/hub/api/oauth2/') && (await pages(info, reply, body))) return;
    if (info.path === '/hub/api' || info.path.startsWith('/hub/api/')) return api(info, reply, body);
    if (info.path.startsWith('/hub/static/') && (info.method === 'GET' || info.method === 'HEAD')) return serveStatic(info, reply);
    const path = info.path.length > 1 && info.path.endsWith('/') ? info.path.slice(0, -1) : info.path;
    const route = routes[path];
    if (!route && info.path.startsWith('/hub') && (await pages(info, reply, body))) return;
    if (!route) throw errors.notFound(`No such endpoint: ${cap(info.path, 100)}`);
    info.route = path;
    const handler = route[info.method];
    if (!handler) throw errors.methodNotAllowed(`${info.method} is not allowed on ${cap(info.path, 100)}`);
    await handler(info, reply, body);
  }

  /** A request outside Hub.base_url: a browser is sent into it (`/` → `<base>hub/`), as the established hub does. */
  function outsideBase(info: RequestInfo, reply: Reply, pageHeaders: BaseHeaders): void {
    info.route = 'outside-base';
    reply.base = pageHeaders;
    reply.headOnly = info.method === 'HEAD';
    if (info.method === 'GET' || info.method === 'HEAD') reply.send(302, '', { Location: intoBase(info.path) + (info.query ? `?${info.query}` : '') });
    else reply.error(errors.notFound(`No such endpoint: the hub is served under ${prefix}`));
    finished(info, reply);
  }

  const mount: Mount = (app, secure) => {
    const which = secure ? 1 : 0;
    return app.ws('/*', proxy.websocket).any('/*', (res, req) => {
      if (proxy.handle(res, req)) return;
      const reply = new Reply(res);
      const info = snapshot(req, res);
      const pageHeaders = blocks.page[drain.draining ? which + 2 : which];
      const apiHeaders = blocks.api[drain.draining ? which + 2 : which];
      if (prefix !== '/') {
        const inside = withinBase(info.path);
        if (inside === null) return outsideBase(info, reply, pageHeaders);
        info.path = inside;
      }
      // the OAuth provider's endpoints under /hub/api/oauth2/ are pages
      reply.base = info.path.startsWith('/hub/api/') && !info.path.startsWith('/hub/api/oauth2/') ? apiHeaders : pageHeaders;
      reply.headOnly = info.method === 'HEAD';
      drain.begin();
      dispatch(info, reply).then(
        () => { finished(info, reply); drain.end(); },
        (e) => {
          fail(info, reply, asHubError(e));
          finished(info, reply);
          drain.end();
        });
    });
  };
  return Object.assign(mount, { useConfig: (next: HubConfig) => { blocks = headerBlocks(next); } });
}
