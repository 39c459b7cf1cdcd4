// The gateway's copy of the routing table: a trie with one map per path segment, so finding the
// longest matching route costs one map lookup per segment of the request path, however many routes
// there are. Routes with a host (`alice.hub.example.org/user/alice/`, Hub.subdomain_host) live in a trie of
// their host's own, found by one map lookup on the Host header as browsers send it: a request to one host
// never matches another host's routes, nor the host-less ones.
import type { Route } from '../../../shared/routes.js';
import { routespecSegments, splitRoutespec } from './path.js';

/** A route ready to forward to, plus the activity bookkeeping the gateway keeps per route. */
export interface RouteEntry {
  readonly route: Route;
  /** the hub's own route: the gateway answers these paths itself */
  readonly hub: boolean;
  readonly protocol: 'http:' | 'https:';
  readonly hostname: string;
  readonly port: number;
  /** `host[:port]` of the target, for a request whose client sent no Host */
  readonly host: string;
  /** the target's upstream connection pool key (`http://host:port`), made once rather than per request */
  readonly poolKey: string;
  /** the target URL's path without its trailing slash, prefixed to forwarded paths ('' usually) */
  readonly basePath: string;
  /** ms of the latest forwarded traffic not yet published, 0 when none */
  lastActivity: number;
  /** ms when this gateway last told the proxy-router the target was unreachable */
  reportedUnreachable: number;
}

interface Node {
  children?: Map<string, Node>;
  entry?: RouteEntry;
}

/** Null when the target is not an http(s) URL: such a route is never forwarded to. */
export function toEntry(route: Route): RouteEntry | null {
  let url: URL;
  try {
    url = new URL(route.target);
  } catch {
    return null;
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.username || url.password) return null;
  const hostname = url.hostname.replace(/^\[|\]$/g, '');
  const port = Number(url.port) || (url.protocol === 'https:' ? 443 : 80);
  const host = `${hostname.includes(':') ? `[${hostname}]` : hostname}:${port}`;
  return {
    route,
    hub: route.data.hub === true,
    protocol: url.protocol,
    hostname,
    port,
    host,
    poolKey: `${url.protocol}//${host}`,
    basePath: url.pathname.replace(/\/+$/, ''),
    lastActivity: 0,
    reportedUnreachable: 0,
  };
}

/** The trie of one host. */
export type HostRoutes = Node;

export class RouteTable {
  private readonly root: Node = {};
  /** host → its trie, under its name and under `name:port` (the Host header browsers send for a non-default port) */
  private readonly hosts = new Map<string, Node>();
  private count = 0;

  /** `portSuffix`: `:8443` when the hub's public port is not the scheme's default, so Host headers match as sent. */
  constructor(private readonly portSuffix = '') {}

  get size(): number {
    return this.count;
  }

  /** The trie of a host (a Host header as sent, or a lower-case name without port), or undefined when it has no route. */
  host(hostHeader: string): HostRoutes | undefined {
    return this.hosts.get(hostHeader);
  }

  private rootOf(host: string, create: boolean): Node | undefined {
    if (!host) return this.root;
    let node = this.hosts.get(host);
    if (!node && create) {
      node = {};
      this.hosts.set(host, node);
      if (this.portSuffix) this.hosts.set(host + this.portSuffix, node);
    }
    return node;
  }

  /** Adds or replaces the route at its routespec; false when the route cannot be used (bad spec or target). */
  set(route: Route): boolean {
    const segs = routespecSegments(route.routespec);
    const entry = toEntry(route);
    if (!segs || !entry) return false;
    const { host } = splitRoutespec(route.routespec);
    let node = this.rootOf(host, true)!;
    for (const s of segs) {
      node.children ??= new Map();
      let next = node.children.get(s);
      if (!next) node.children.set(s, (next = {}));
      node = next;
    }
    if (!node.entry) this.count++;
    node.entry = entry;
    return true;
  }

  /** Removes the route and prunes the branches it leaves empty, so churn does not grow the trie. */
  delete(routespec: string): void {
    const segs = routespecSegments(routespec);
    if (!segs) return;
    const { host } = splitRoutespec(routespec);
    const root = this.rootOf(host, false);
    if (!root) return;
    const path: Node[] = [root];
    for (const s of segs) {
      const next = path[path.length - 1].children?.get(s);
      if (!next) return;
      path.push(next);
    }
    const node = path[path.length - 1];
    if (node.entry?.route.routespec !== routespec) return; // another spelling of the same path owns it now
    node.entry = undefined;
    this.count--;
    for (let i = segs.length; i > 0; i--) {
      const n = path[i];
      if (n.entry || n.children?.size) break;
      path[i - 1].children!.delete(segs[i - 1]);
    }
    if (host && !root.entry && !root.children?.size) {
      this.hosts.delete(host);
      if (this.portSuffix) this.hosts.delete(host + this.portSuffix);
    }
  }

  /** The route with the longest prefix of `segments` (whole segments only) among the host-less ones, or among a host's. */
  match(segments: readonly string[], root: Node = this.root): RouteEntry | null {
    let node: Node | undefined = root;
    let best = node.entry ?? null;
    for (let i = 0; i < segments.length; i++) {
      node = node.children?.get(segments[i]);
      if (!node) break;
      if (node.entry) best = node.entry;
    }
    return best;
  }

  get(routespec: string): RouteEntry | null {
    const segs = routespecSegments(routespec);
    if (!segs) return null;
    let node: Node | undefined = this.rootOf(splitRoutespec(routespec).host, false);
    if (!node) return null;
    for (const s of segs) if (!(node = node.children?.get(s))) return null;
    return node.entry ?? null;
  }
}
