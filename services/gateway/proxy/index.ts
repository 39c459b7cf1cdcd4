// The gateway's proxy: every path outside the hub's own (<base_url>hub/) is looked up in the routing table
// and forwarded to its route's target; <base_url>user/<name>/… with no route goes to the hub's page for that
// server. Routes carry whole paths (Hub.base_url included), so a request is matched and forwarded as it came.
// Nothing is ever forwarded for a path without a route, and nowhere but to a route's registered target.
import type uWS from 'uWebSockets.js';
import { errors } from '../../../shared/errors.js';
import type { Logger } from '../../../shared/log.js';
import { encodeJson, type NatsConnection } from '../../../shared/nats.js';
import { subjects } from '../../../shared/subjects.js';
import { baseUrl, hubUrl } from '../../../shared/urls.js';
import { upstreamConnectionsGauge } from '../metrics.js';
import type { ActivityRecorder } from './activity.js';
import { answerError, forwardHttp, type ForwardOptions } from './forward.js';
import { forwardPath, normalizePath, type NormalPath } from './path.js';
import type { RouteEntry, RouteTable } from './table.js';
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
}

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

  const forwardOptions: ForwardOptions = { log, onUnreachable, gate: deps.gate };

  /** The route to forward to, or null for paths the hub answers (its own, and those without a route). */
  function routeOf(n: NormalPath): RouteEntry | null {
    if (n.segments[userSegment] === 'hub' && n.path.startsWith(base)) return null;
    const entry = routes().match(n.segments);
    return entry && !entry.hub ? entry : null;
  }

  /** `<base>user/<name>/…` without a running server: the hub's page for it offers to start it. */
  function redirectToHub(res: uWS.HttpResponse, n: NormalPath, query: string): void {
    res.cork(() => res.writeStatus('302 Found').writeHeader('Location', `${hubUrl(`/hub${n.path.slice(base.length - 1)}`)}${query ? `?${query}` : ''}`).end());
  }

  return {
    /** True when the proxy answered (forwarded, redirected or refused); false leaves the request to the hub. */
    handle(res: uWS.HttpResponse, req: uWS.HttpRequest): boolean {
      const raw = req.getUrl();
      if (isHubPath(raw)) return false;
      const n = normalizePath(raw);
      if (!n) {
        answerError(res, errors.badRequest('Invalid request path'), req.getHeader('accept').includes('text/html'));
        return true;
      }
      const entry = routeOf(n);
      if (entry) {
        activity.touch(entry);
        forwardHttp(res, req, entry, forwardPath(n, entry.route.routespec), pool, forwardOptions);
        return true;
      }
      if (n.segments[userSegment] === 'user' && n.segments.length > userSegment + 1 && n.segments[userSegment + 1] !== '' && n.path.startsWith(base)) {
        redirectToHub(res, n, req.getQuery());
        return true;
      }
      return false;
    },

    websocket: webSocketBehavior({
      connectTimeoutMs: deps.connectTimeoutMs,
      log,
      routeFor(req: uWS.HttpRequest) {
        const raw = req.getUrl();
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
