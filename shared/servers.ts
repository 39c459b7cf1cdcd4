// Single-user servers as every actor sees them: the record the spawner keeps in the JetStream KV
// bucket `hub_servers` (watched by gateways), its key, and the URLs derived from names.
import { BUCKETS } from './subjects.js';
import { createHash } from 'node:crypto';
import { isIP } from 'node:net';

import type { KvMirror } from './kv-mirror.js';
import type { Logger } from './log.js';
import type { NatsConnection } from './nats.js';
import { hubUrl } from './urls.js';

export const SERVERS_BUCKET = BUCKETS.servers;

/**
 * A live copy of the registry (shared/kv-mirror.ts), for every actor that reads it. The NATS client is imported
 * here, not at the top: the supervisor reads this file's names (servicePrefix) and never connects (~7 MB less).
 */
export async function mirrorServers(nc: NatsConnection, log: Logger, loadTimeoutMs: number): Promise<KvMirror<ServerRecord>> {
  const [{ mirrorKv }, { decodeJson }] = await Promise.all([import('./kv-mirror.js'), import('./nats.js')]);
  return mirrorKv<ServerRecord>(nc, {
    bucket: SERVERS_BUCKET, log, loadTimeoutMs, decode: (key, value) => (parseServerKey(key) ? decodeJson<ServerRecord>(value) : null),
  });
}

export interface ProgressEvent {
  progress: number;
  message: string;
  html_message?: string;
  ready?: boolean;
  failed?: boolean;
  url?: string;
}

/**
 * `spawn` starting, `running` serving, `stop` stopping; then, kept as the established hub keeps them (with
 * their user_options, until removed): `failed` (the last start failed; its progress says why) or `stopped`.
 */
export type ServerState = 'spawn' | 'running' | 'stop' | 'failed' | 'stopped';

export interface ServerRecord {
  user: string;
  name: string;
  state: ServerState;
  url: string;
  target: string;
  /** a local process id, for display (0 when the backend runs no local process) */
  pid: number;
  /** the backend (`Hub.spawner_class`) that started it, and what that backend needs to find it again */
  spawner_class: string;
  spawner_state: Record<string, unknown>;
  started: string;
  last_activity: string;
  user_options: Record<string, unknown>;
  /** a human-readable name for pages (any text; the API name stays strict) */
  display_name?: string;
  instance: string;
  /** the node (`Hub.node_name`) whose spawner started it; absent in records older than nodes */
  node?: string;
  token_id: string;
  progress: ProgressEvent[];
  /**
   * set when another node's spawner marked it stopped because its node was gone (Spawner.node_lost_timeout):
   * what it was, so its node adopts it again if it comes back with the server running
   */
  lost?: { at: string; state: ServerState; target: string };
  /**
   * on a stopped server whose end nobody asked for (its process exited, its container or batch job ended, its
   * node was lost): when, and why; cleared by a stop someone asked for and by the next start
   */
  ended?: { at: string; reason: string };
}

/** KV keys allow only [-/_=.a-zA-Z0-9]: names are encoded. */
export function serverKey(user: string, name: string): string {
  return `s.${Buffer.from(JSON.stringify([user, name])).toString('base64url')}`;
}

/** A short id safe in file names and cgroup names: readable prefix plus a hash of the key. */
export function serverId(user: string, name: string): string {
  const readable = `${user}${name ? `-${name}` : ''}`.toLowerCase().replace(/[^a-z0-9_.-]/g, '_').slice(0, 40);
  return `${readable}-${createHash('sha256').update(serverKey(user, name)).digest('hex').slice(0, 10)}`;
}

export function parseServerKey(key: string): { user: string; name: string } | null {
  try {
    const [user, name] = JSON.parse(Buffer.from(key.slice(2), 'base64url').toString());
    return typeof user === 'string' && typeof name === 'string' ? { user, name } : null;
  } catch {
    return null;
  }
}

/** Percent-encodes all but unreserved characters and `@~`, as the established hub escapes names in URLs. */
export function escapeName(name: string): string {
  return encodeURIComponent(name).replace(/%40/g, '@').replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** A service's URL prefix under Hub.base_url, `/services/<name>/` (its route, its HUB_SERVICE_PREFIX, its links). */
export function servicePrefix(name: string): string {
  return hubUrl(`/services/${escapeName(name)}/`);
}

/** `/user/<user>[/<server>]/` without Hub.base_url: where the hub's page about the server lives under /hub. */
const serverPath = (user: string, name: string) => (name ? `/user/${escapeName(user)}/${escapeName(name)}/` : `/user/${escapeName(user)}/`);

/** A server's URL prefix under Hub.base_url (its record's `url`, its route, its HUB_SERVICE_PREFIX). */
export function serverUrl(user: string, name: string): string {
  return hubUrl(serverPath(user, name));
}

/** `/hub/<verb>/<user>[/<server>]` (the hub's pages about one server) under Hub.base_url, with the names escaped as everywhere else. */
export const hubServerPath = (prefix: string, user: string, name: string) => hubUrl(`/hub/${prefix}/${escapeName(user)}${name ? `/${escapeName(name)}` : ''}`);

/** The hub's page for a server that is not running (where the proxy sends a browser without a route). */
export const serverPageUrl = (user: string, name: string) => hubUrl(`/hub${serverPath(user, name)}`);
/** The hub's page that starts a server (GET: the form, POST: start). */
export const spawnUrl = (user: string, name: string) => hubServerPath('spawn', user, name);
/** The hub's page that follows a start. */
export const spawnPendingUrl = (user: string, name: string) => hubServerPath('spawn-pending', user, name);

/** Percent-encoded down to characters a cookie name may hold (`@` too, unlike escapeName). */
const cookieSafe = (name: string) => encodeURIComponent(name).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

/** A server's OAuth client id (also its HUB_CLIENT_ID and its token cookie's name): `hub-user-<user>[-<server>]`. */
export function serverClientId(user: string, name: string): string {
  return name ? `hub-user-${cookieSafe(user)}-${cookieSafe(name)}` : `hub-user-${cookieSafe(user)}`;
}

export function progressUrl(user: string, name: string): string {
  return hubUrl(name ? `/hub/api/users/${escapeName(user)}/servers/${escapeName(name)}/progress` : `/hub/api/users/${escapeName(user)}/server/progress`);
}

export const isActive = (r: ServerRecord) => r.state === 'spawn' || r.state === 'running' || r.state === 'stop';

/** How a server whose node was lost ended (the record's `ended.reason`). */
export const nodeLostReason = (node: string) => `its node ${node} was lost`;

/**
 * How a server that is not running last ended, when a person should hear of it: the failed start's last event, or
 * the end nobody asked for (`ended`); null after a stop someone asked for, or while it starts, runs or stops. The
 * progress stream answers with it and the home page shows its message (one fact for both).
 */
export function lastOutcome(r: ServerRecord): ProgressEvent | null {
  if (r.state === 'failed') {
    for (let i = r.progress.length - 1; i >= 0; i--) if (r.progress[i].failed) return r.progress[i];
    return { progress: 100, failed: true, message: 'The last start failed' };
  }
  if (r.state === 'stopped' && r.ended) return { progress: 100, failed: true, message: `Your server stopped: ${r.ended.reason}` };
  return null;
}

/**
 * The server model of the API (seed "Server model", reference §5.2); `state` only for admin:server_state; `origin`:
 * the user's host with per-user subdomains (shared/subdomains.ts), making `url` whole as the established hub's.
 */
export function serverModel(r: ServerRecord, o: { state?: boolean; origin?: string } = {}): Record<string, unknown> {
  const ready = r.state === 'running';
  return {
    name: r.name,
    full_name: `${r.user}/${r.name}`,
    display_name: r.display_name || r.name,
    ready,
    pending: r.state === 'spawn' ? 'spawn' : r.state === 'stop' ? 'stop' : null,
    stopped: !isActive(r),
    url: o.origin ? o.origin + r.url : r.url,
    progress_url: progressUrl(r.user, r.name),
    started: r.started || null,
    last_activity: r.last_activity || null,
    user_options: r.user_options,
    ...(o.state ? { state: isActive(r) ? r.spawner_state : {} } : {}),
  };
}

/** Server names: 1–30 lowercase letters, digits and single hyphens, starting with a letter (reference §2.5). */
export function invalidServerNameReason(name: string): string | null {
  return /^[a-z](?:[a-z0-9]|-(?!-)){0,28}[a-z0-9]$|^[a-z]$/.test(name) ? null : 'server names are 1 to 30 lowercase letters, digits and single hyphens, starting with a letter and ending with a letter or digit';
}

/**
 * What a server reports about where it listens (POST …/location): a host name or an IP address, and a port.
 * Why it cannot be used, or null. The spawner and the gateway both check it (one rule).
 */
export function invalidLocationReason(host: unknown, port: unknown): string | null {
  if (typeof host !== 'string' || host === '') return 'host must be a non-empty string (a host name or an IP address)';
  if (!(isIP(host) || /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/.test(host))) {
    return `host ${JSON.stringify(host.slice(0, 60))} is neither a host name nor an IP address`;
  }
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) return 'port must be an integer from 1 to 65535';
  return null;
}

/** The target the gateway forwards to, for a reported location (IPv6 in brackets). */
export function locationTarget(host: string, port: number): string {
  return `http://${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
}
