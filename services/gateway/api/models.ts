// The JSON models of the API, cut down to what the requester's scopes reveal (reference §5).
import type { Reply } from '../../../shared/contracts/index.js';
import type { ConfiguredRole, ServiceConfig } from '../../../shared/roles.js';
import { rolesOfService, rolesOfUser } from '../../../shared/roles.js';
import { hasScope } from '../../../shared/scopes.js';
import { groupModelFields, serviceModelFields, userModelFields } from './model-fields.js';
import { isActive, serverModel, servicePrefix, type ServerRecord } from '../../../shared/servers.js';
import type { Subdomains } from '../../../shared/subdomains.js';
import type { UserRecord } from '../caches.js';

const orNull = (s: string | undefined) => (s ? s : null);

function pick<T extends Record<string, unknown>>(full: T, keys: ReadonlySet<string>): Partial<T> {
  const out: Partial<T> = {};
  for (const k of Object.keys(full)) if (keys.has(k)) (out as Record<string, unknown>)[k] = full[k];
  return out;
}

/** The user model; null when the requester may see nothing of this user (skipped in lists). */
export function userModel(held: ReadonlySet<string>, user: UserRecord, book: Map<string, ConfiguredRole>, records: ServerRecord[], o: { includeStopped?: boolean; subdomains?: Subdomains | null } = {}): Record<string, unknown> | null {
  const keys = userModelFields(held, user) as ReadonlySet<string>;
  if (!keys.size) return null;
  // built field by field in the model's order, each only when shown: this runs for every user of a list page
  const out: Record<string, unknown> = {};
  const dflt = keys.has('server') || keys.has('pending') ? records.find((r) => r.name === '' && isActive(r)) : undefined;
  if (keys.has('kind')) out.kind = 'user';
  if (keys.has('name')) out.name = user.name;
  if (keys.has('admin')) out.admin = user.admin;
  if (keys.has('roles')) out.roles = rolesOfUser(book, user);
  if (keys.has('groups')) out.groups = user.groups;
  // with per-user subdomains a server's URL names its user's host, as the established hub's models do
  const origin = o.subdomains && records.length ? o.subdomains.userOrigin(user.name) : undefined;
  if (keys.has('server')) out.server = dflt?.state === 'running' ? (origin ?? '') + dflt.url : null;
  if (keys.has('pending')) out.pending = dflt?.state === 'spawn' ? 'spawn' : dflt?.state === 'stop' ? 'stop' : null;
  if (keys.has('created')) out.created = user.created;
  if (keys.has('last_activity')) out.last_activity = orNull(user.last_activity);
  if (keys.has('servers')) {
    const servers: Record<string, unknown> = {};
    // each server is shown only to a requester who may read that server; stopped ones only when asked for
    for (const r of records) {
      if (!o.includeStopped && !isActive(r)) continue;
      const resource = { kind: 'server' as const, user: user.name, name: r.name, groups: user.groups };
      if (hasScope(held, 'read:servers', resource)) servers[r.name] = serverModel(r, { state: hasScope(held, 'admin:server_state', resource), origin });
    }
    out.servers = servers;
  }
  if (keys.has('auth_state')) out.auth_state = null;
  if (keys.has('user_info')) out.user_info = user.user_info_json ? JSON.parse(user.user_info_json) as unknown : null;
  return out;
}

/** A group as the auth actor gives it: `users` is every member unless `more_members_after` says more follow. */
export interface GroupRecord { name: string; users: string[]; properties_json: string; more_members_after?: number }

export function groupRoles(book: Map<string, ConfiguredRole>, group: string): string[] {
  return [...book.values()].filter((r) => r.groups.includes(group)).map((r) => r.name);
}

export function groupModel(held: ReadonlySet<string>, group: GroupRecord, book: Map<string, ConfiguredRole>): Record<string, unknown> | null {
  const keys = groupModelFields(held, group.name) as ReadonlySet<string>;
  if (!keys.size) return null;
  return pick({
    kind: 'group', name: group.name, users: group.users, roles: groupRoles(book, group.name),
    properties: JSON.parse(group.properties_json || '{}'),
  }, keys);
}

export function serviceModel(held: ReadonlySet<string>, svc: ServiceConfig, book: Map<string, ConfiguredRole>, extraKeys: string[] = []): Record<string, unknown> | null {
  const shown = serviceModelFields(held, svc.name) as ReadonlySet<string>;
  const keys = extraKeys.length ? new Set([...shown, ...extraKeys]) : shown;
  if (!keys.size) return null;
  const command = svc.command === undefined ? [] : Array.isArray(svc.command) ? svc.command : [svc.command];
  return pick({
    kind: 'service', name: svc.name, admin: Boolean(svc.admin), roles: rolesOfService(book, svc), url: svc.url ?? '',
    prefix: svc.url ? servicePrefix(svc.name) : '', command, pid: 0, info: svc.info ?? {}, display: svc.display ?? true,
  }, keys);
}

export type TokenRecord = Reply<'tokens', 'GetToken'>;

export function tokenModel(t: TokenRecord): Record<string, unknown> {
  return {
    [t.owner!.kind]: t.owner!.name, id: t.id, kind: 'api_token', roles: [], scopes: t.scopes, note: t.note, created: t.created,
    last_activity: orNull(t.last_activity), expires_at: orNull(t.expires_at), session_id: orNull(t.session_id), oauth_client: t.oauth_client,
  };
}
