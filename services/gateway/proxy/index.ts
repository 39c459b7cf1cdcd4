// The gateway's proxy: every path outside the hub's own (<base_url>hub/) is looked up in the routing table
// and forwarded to its route's target; <base_url>user/<name>/… with no route goes to the hub's page for that
// server. Routes carry whole paths (Hub.base_url included), so a request is matched and forwarded as it came.
// Nothing is ever forwarded for a path without a route, and nowhere but to a route's registered target.
// With per-user subdomains (Hub.subdomain_host) a request to a host under the hub's is answered here whatever
// its path: that host's own routes, else a redirect (its user's server page, or a hub page, on the hub's host)
// or a 404; the hub never serves its pages or reads its cookies there. On the hub's host, <base_url>user/<name>/…
// goes to that user's host.
import type uWS from 'uWebSockets.js';
import { errors } from '../../../shared/errors.js';
import { cap, type Logger } from '../../../shared/log.js';
import { encodeJson, type NatsConnection } from '../../../shared/nats.js';
import { subjects } from '../../../shared/subjects.js';
import { baseUrl, hubUrl } from '../../../shared/urls.js';
import { upstreamConnectionsGauge } from '../metrics.js';
import type { ActivityRecorder } from './activity.js';
import { answerError, forwardHttp, type ForwardOptions } from './forward.js';
import { forwardPath, normalizePath, type NormalPath } from './path.js';
import { hostnameOf, type Subdomains } from '../../../shared/subdomains.js';
import type { HostRoutes, RouteEntry, RouteTable } from './table.js';
import type { TokenGate } from './token-gate.js';
import { UpstreamPool } from './upstream.js';
import { webSocketBehavior, type Bridge } from './websocket.js';

/** One unreachable report per route per this long is plenty for the proxy-router. */
const UNREACHABLE_REPORT_MS = 5000;

export interface ProxyDeps {
  routes: () => RouteTable;
  activity: ActivityRecorder;
  nc: NatsConnection;
  log: Logger;
  connectTimeoutMs: number;
  idleTimeoutMs: number;
  /** idle pooled connections to targets close after this */
  keepAliveTimeoutMs: number;
  /** revocation at the front door: a hub token a request carries is judged before forwarding (token-gate.ts) */
  gate: TokenGate['check'];
  /** Hub.subdomain_host's hosts, or null (every route on every host, as without) */
  subdomains?: Subdomains | null;
}

/** A Host that is the hub's own (its name, or one not under it, such as an address), or one under it without routes. */
const HUB_HOST = 'hub' as const;
const NO_ROUTES = 'none' as const;

export function createProxy(deps: ProxyDeps) {
  const { routes, activity, log } = deps;
  // Hub.base_url is set before the proxy is made: the hub's own paths and where user servers start, once
  const base = baseUrl();
  const hubPrefix = hubUrl('/hub/');
  const hubExact = hubPrefix.slice(0, -1);
  const isHubPath = (raw: string) => raw.startsWith(hubPrefix) || raw === hubExact;
  const userSegment = base.split('/').filter(Boolean).length;
  const pool = new UpstreamPool({ connectTimeoutMs: deps.connectTimeoutMs, idleTimeoutMs: deps.idleTimeoutMs, keepAliveMs: deps.keepAliveTimeoutMs });
  upstreamConnectionsGauge(() => pool.counts);

  function onUnreachable(entry: RouteEntry): void {
    const now = Date.now();
    if (now - entry.reportedUnreachable < UNREACHABLE_REPORT_MS) return;
    entry.reportedUnreachable = now;
    deps.nc.publish(subjects.event('route', 'unreachable'), encodeJson({ routespec: entry.route.routespec, target: entry.route.target }));
  }

  const forwardOptions: ForwardOptions = { log, onUnreachable, gate: deps.gate, touch: (entry) => activity.touch(entry) };

  /** The route to forward to, or null for paths the hub answers (its own, and those without a route). */
  function routeOf(n: NormalPath): RouteEntry | null {
    if (n.segments[userSegment] === 'hub' && n.path.startsWith(base)) return null;
    const entry = routes().match(n.segments);
    return entry && !entry.hub ? entry : null;
  }

  /** `<base>user/<name>/…` without a running server: the hub's page for it offers to start it. */
  function redirectToHub(res: uWS.HttpResponse, n: NormalPath, query: string): void {
    redirect(res, `${sub?.hubOrigin ?? ''}${hubUrl(`/hub${n.path.slice(base.length - 1)}`)}${query ? `?${query}` : ''}`);
  }

  function redirect(res: uWS.HttpResponse, location: string): void {
    res.cork(() => res.writeStatus('302 Found').writeHeader('Location', location).end());
  }

  const sub = deps.subdomains ?? null;
  /** the Host header browsers send to the hub's own host (`hub.example.org[:port]`): compared as sent, no parsing */
  const hubHostHeader = sub ? sub.domain + sub.portSuffix : '';

  /**
   * Where a Host header points: the hub, a host with routes (its trie), or a host under the hub's without any.
   * The hub's host and a host with routes, spelled as browsers send them, cost one compare or one map lookup;
   * any other spelling (capitals, a trailing dot, another port) is parsed.
   */
  function siteOf(hostHeader: string): HostRoutes | typeof HUB_HOST | typeof NO_ROUTES {
    if (hostHeader === hubHostHeader) return HUB_HOST;
    const table = routes();
    const found = table.host(hostHeader);
    if (found) return found;
    const name = hostnameOf(hostHeader);
    if (!sub!.isUnder(name)) return HUB_HOST;
    return table.host(name) ?? NO_ROUTES;
  }

  /** `<base>user/<name>/…` or `<base>services/<name>/…`: that name (decoded), else null. */
  function nameUnder(n: NormalPath, space: 'user' | 'services'): string | null {
    const name = n.segments[userSegment + 1];
    return n.segments[userSegment] === space && name && n.path.startsWith(base) ? name : null;
  }

  /**
   * A request to a host under the hub's: only that host's routes. Without one: a user's server that is not running
   * → the hub's page for it; a hub page (GET) → the same page on the hub's host; anything else a 404 naming the hub.
   */
  function handleOnSubdomain(res: uWS.HttpResponse, req: uWS.HttpRequest, raw: string, site: HostRoutes | typeof NO_ROUTES, hostHeader: string): void {
    const n = normalizePath(raw);
    // Accept is read only for an error, never on the forwarding path
    if (!n) return answerError(res, errors.badRequest('Invalid request path'), req.getHeader('accept').includes('text/html'));
    const entry = site === NO_ROUTES ? null : routes().match(n.segments, site);
    if (entry && !entry.hub) {
      return forwardHttp(res, req, entry, forwardPath(n, entry.route.routespec), pool, forwardOptions);
    }
    const query = req.getQuery();
    const user = nameUnder(n, 'user');
    if (user !== null && sub!.userHost(user) === hostnameOf(hostHeader)) return redirectToHub(res, n, query);
    const method = req.getCaseSensitiveMethod().toUpperCase();
    if (isHubPath(n.path) && (method === 'GET' || method === 'HEAD')) return redirect(res, `${sub!.hubOrigin}${n.path}${query ? `?${query}` : ''}`);
    answerError(res, errors.notFound(`Nothing at ${cap(n.path, 100)} on ${cap(hostHeader, 100)}: this host serves only its own servers; the hub is at ${sub!.hubOrigin}${hubPrefix}`), req.getHeader('accept').includes('text/html'));
  }

  return {
    /** True when the proxy answered (forwarded, redirected or refused); false leaves the request to the hub. */
    handle(res: uWS.HttpResponse, req: uWS.HttpRequest): boolean {
      const raw = req.getUrl();
      if (sub) {
        const hostHeader = req.getHeader('host');
        const site = siteOf(hostHeader);
        if (site !== HUB_HOST) {
          handleOnSubdomain(res, req, raw, site, hostHeader);
          return true;
        }
      }
      if (isHubPath(raw)) return false;
      const n = normalizePath(raw);
      if (!n) {
        answerError(res, errors.badRequest('Invalid request path'), req.getHeader('accept').includes('text/html'));
        return true;
      }
      const entry = routeOf(n);
      if (entry) {
        forwardHttp(res, req, entry, forwardPath(n, entry.route.routespec), pool, forwardOptions);
        return true;
      }
      const user = nameUnder(n, 'user');
      if (user !== null) {
        // with subdomains, a server is at its user's host (its route there, or the hub's page for it)
        const query = req.getQuery();
        if (sub) redirect(res, `${sub.userOrigin(user)}${n.path}${query ? `?${query}` : ''}`);
        else redirectToHub(res, n, query);
        return true;
      }
      const service = sub ? nameUnder(n, 'services') : null;
      if (service !== null) {
        // a service is at its own host
        const query = req.getQuery();
        redirect(res, `${sub!.serviceOrigin(service)}${n.path}${query ? `?${query}` : ''}`);
        return true;
      }
      return false;
    },

    websocket: webSocketBehavior({
      connectTimeoutMs: deps.connectTimeoutMs,
      log,
      routeFor(req: uWS.HttpRequest) {
        const raw = req.getUrl();
        if (sub) {
          const site = siteOf(req.getHeader('host'));
          if (site !== HUB_HOST) {
            const n = normalizePath(raw);
            const entry = n && site !== NO_ROUTES ? routes().match(n.segments, site) : null;
            // no route: the HTTP handler answers (redirect or 404)
            return entry && !entry.hub ? { entry, path: forwardPath(n!, entry.route.routespec) } : null;
          }
        }
        if (isHubPath(raw)) return null;
        const n = normalizePath(raw);
        const entry = n && routeOf(n);
        return entry ? { entry, path: forwardPath(n, entry.route.routespec) } : null;
      },
      touch: (entry) => activity.touch(entry),
      onUnreachable,
      gate: deps.gate,
    }) satisfies uWS.WebSocketBehavior<Bridge>,

    close(): void {
      pool.destroy();
    },
  };
}

export type Proxy = ReturnType<typeof createProxy>;
