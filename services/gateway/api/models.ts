// The JSON models of the API, cut down to what the requester's scopes reveal (reference §5).
import type { Reply } from '../../../shared/contracts/index.js';
import type { ConfiguredRole, ServiceConfig } from '../../../shared/roles.js';
import { rolesOfService, rolesOfUser } from '../../../shared/roles.js';
import { hasScope } from '../../../shared/scopes.js';
import { groupModelFields, serviceModelFields, userModelFields } from './model-fields.js';
import { isActive, serverModel, servicePrefix, type ServerRecord } from '../../../shared/servers.js';
import type { UserRecord } from '../caches.js';

const orNull = (s: string | undefined) => (s ? s : null);

function pick<T extends Record<string, unknown>>(full: T, keys: Set<string>): Partial<T> {
  const out: Partial<T> = {};
  for (const k of Object.keys(full)) if (keys.has(k)) (out as Record<string, unknown>)[k] = full[k];
  return out;
}

/** The user model; null when the requester may see nothing of this user (skipped in lists). */
export function userModel(held: ReadonlySet<string>, user: UserRecord, book: Map<string, ConfiguredRole>, records: ServerRecord[], o: { includeStopped?: boolean } = {}): Record<string, unknown> | null {
  const keys = userModelFields(held, user) as Set<string>;
  if (!keys.size) return null;
  const active = records.filter(isActive);
  const servers: Record<string, unknown> = {};
  // each server is shown only to a requester who may read that server; stopped ones only when asked for
  for (const r of o.includeStopped ? records : active) {
    const resource = { kind: 'server' as const, user: user.name, name: r.name, groups: user.groups };
    if (hasScope(held, 'read:servers', resource)) servers[r.name] = serverModel(r, { state: hasScope(held, 'admin:server_state', resource) });
  }
  const dflt = active.find((r) => r.name === '');
  return pick({
    kind: 'user',
    name: user.name,
    admin: user.admin,
    roles: rolesOfUser(book, user),
    groups: user.groups,
    server: dflt?.state === 'running' ? dflt.url : null,
    pending: dflt?.state === 'spawn' ? 'spawn' : dflt?.state === 'stop' ? 'stop' : null,
    created: user.created,
    last_activity: orNull(user.last_activity),
    servers,
    auth_state: null,
    user_info: null,
  }, keys);
}

export interface GroupRecord { name: string; users: string[]; properties_json: string }

export function groupRoles(book: Map<string, ConfiguredRole>, group: string): string[] {
  return [...book.values()].filter((r) => r.groups.includes(group)).map((r) => r.name);
}

export function groupModel(held: ReadonlySet<string>, group: GroupRecord, book: Map<string, ConfiguredRole>): Record<string, unknown> | null {
  const keys = groupModelFields(held, group.name) as Set<string>;
  if (!keys.size) return null;
  return pick({
    kind: 'group', name: group.name, users: group.users, roles: groupRoles(book, group.name),
    properties: JSON.parse(group.properties_json || '{}'),
  }, keys);
}

export function serviceModel(held: ReadonlySet<string>, svc: ServiceConfig, book: Map<string, ConfiguredRole>, extraKeys: string[] = []): Record<string, unknown> | null {
  const keys = serviceModelFields(held, svc.name) as Set<string>;
  for (const k of extraKeys) keys.add(k);
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
