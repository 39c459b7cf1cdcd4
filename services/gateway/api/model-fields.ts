// Which keys of a user, group or service model a requester sees: one table per model, scope → fields
// (the established hub's vertical filtering). The scope checks themselves are shared/scopes.ts's.
import { hasScope, hasScopeOnSomeServerOf, type Resource } from '../../../shared/scopes.js';


export type UserModelField =
  | 'kind'
  | 'name'
  | 'admin'
  | 'roles'
  | 'groups'
  | 'servers'
  | 'pending'
  | 'server'
  | 'last_activity'
  | 'created'
  | 'auth_state'
  | 'user_info';
export type GroupModelField = 'kind' | 'name' | 'users' | 'properties' | 'roles';
export type ServiceModelField =
  | 'kind'
  | 'name'
  | 'admin'
  | 'roles'
  | 'url'
  | 'prefix'
  | 'command'
  | 'pid'
  | 'info'
  | 'display';

const USER_FIELDS: Readonly<Record<string, readonly UserModelField[]>> = {
  'read:users': ['kind', 'name', 'admin', 'roles', 'groups', 'server', 'pending', 'created', 'last_activity', 'user_info'],
  'read:users:name': ['kind', 'name', 'admin', 'user_info'],
  'read:users:groups': ['kind', 'name', 'groups'],
  'read:users:activity': ['kind', 'name', 'last_activity'],
  'read:servers': ['kind', 'name', 'servers'],
  'read:roles:users': ['kind', 'name', 'roles', 'admin'],
  'admin:auth_state': ['kind', 'name', 'auth_state'],
};

const GROUP_FIELDS: Readonly<Record<string, readonly GroupModelField[]>> = {
  'read:groups': ['kind', 'name', 'properties', 'users'],
  'read:groups:name': ['kind', 'name'],
  'read:roles:groups': ['kind', 'name', 'roles'],
};

const SERVICE_FIELDS: Readonly<Record<string, readonly ServiceModelField[]>> = {
  'read:services': ['kind', 'name', 'admin', 'url', 'prefix', 'command', 'pid', 'info', 'display'],
  'read:services:name': ['kind', 'name', 'admin'],
  'read:roles:services': ['kind', 'name', 'roles', 'admin'],
};

function visibleFields<F>(held: ReadonlySet<string>, table: Readonly<Record<string, readonly F[]>>, resource: Resource): Set<F> {
  const fields = new Set<F>();
  for (const [scope, keys] of Object.entries(table)) {
    if (hasScope(held, scope, resource)) for (const key of keys) fields.add(key);
  }
  return fields;
}

/** Holding a server filter for one of the user's servers shows that user's `servers` (checked per server). */
const readsSomeServerOf = (held: ReadonlySet<string>, user: string) => hasScopeOnSomeServerOf(held, 'read:servers', user);

/**
 * Each key of a user model is shown only to holders of a scope that reveals it for that user;
 * an empty set means the user is skipped. Filter `servers` entries with hasScope per server.
 */
export function userModelFields(held: ReadonlySet<string>, user: { name: string; groups: string[] }): Set<UserModelField> {
  const fields = visibleFields(held, USER_FIELDS, { kind: 'user', name: user.name, groups: user.groups });
  if (readsSomeServerOf(held, user.name)) for (const key of USER_FIELDS['read:servers']!) fields.add(key);
  return fields;
}

/** Group models are cut down the same way as user models. */
export function groupModelFields(held: ReadonlySet<string>, group: string): Set<GroupModelField> {
  return visibleFields(held, GROUP_FIELDS, { kind: 'group', name: group });
}

/** Service models are cut down the same way as user models. */
export function serviceModelFields(held: ReadonlySet<string>, service: string): Set<ServiceModelField> {
  return visibleFields(held, SERVICE_FIELDS, { kind: 'service', name: service });
}

