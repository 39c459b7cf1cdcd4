// Which keys of a user, group or service model a requester sees: one table per model, scope → fields
// (the established hub's vertical filtering). The scope checks themselves are shared/scopes.ts's.
import { hasScope, hasScopeOnSomeServerOf, scopeReach, type Resource } from '../../../shared/scopes.js';


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

type FieldTable<F> = Readonly<Record<string, readonly F[]>>;

/**
 * What one scope set reveals of one model, worked out once per set (one per cached identity): the fields its
 * unfiltered scopes show for every resource, and the filtered scopes still to check per resource. An admin's
 * or a server's token then costs no scope check per model on a hot read.
 */
interface FieldPlan<F> {
  everywhere: ReadonlySet<F>;
  perResource: [scope: string, keys: readonly F[]][];
  /** the last resource's answer: a person's own token asks about the same user on every whoami */
  last?: { key: string; fields: ReadonlySet<F> };
}
const plans = new WeakMap<ReadonlySet<string>, Map<FieldTable<unknown>, { size: number; plan: FieldPlan<unknown> }>>();

function fieldPlan<F>(held: ReadonlySet<string>, table: FieldTable<F>): FieldPlan<F> {
  let byTable = plans.get(held);
  if (!byTable) plans.set(held, (byTable = new Map()));
  const memo = byTable.get(table);
  if (memo && memo.size === held.size) return memo.plan as FieldPlan<F>;
  const everywhere = new Set<F>();
  const perResource: [string, readonly F[]][] = [];
  for (const [scope, keys] of Object.entries(table)) {
    const reach = scopeReach(held, scope);
    if (reach === 'all') for (const key of keys) everywhere.add(key);
    else if (reach === 'some') perResource.push([scope, keys]);
  }
  const plan = { everywhere, perResource };
  byTable.set(table, { size: held.size, plan });
  return plan;
}

/** The fields shown; the set may be shared between calls, so callers only read it. */
function visibleFields<F>(held: ReadonlySet<string>, table: FieldTable<F>, resource: Resource, more?: readonly F[]): ReadonlySet<F> {
  const plan = fieldPlan(held, table);
  const { everywhere, perResource } = plan;
  if (!perResource.length && !more?.length) return everywhere;
  const key = `${resource.name}\n${more?.length ?? 0}\n${'groups' in resource ? resource.groups.join('\n') : ''}`;
  if (plan.last?.key === key) return plan.last.fields;
  let fields: Set<F> | undefined;
  for (const [scope, keys] of perResource) {
    if (!hasScope(held, scope, resource)) continue;
    fields ??= new Set(everywhere);
    for (const key of keys) fields.add(key);
  }
  if (more?.length) {
    fields ??= new Set(everywhere);
    for (const key of more) fields.add(key);
  }
  plan.last = { key, fields: fields ?? everywhere };
  return plan.last.fields;
}

/** Holding a server filter for one of the user's servers shows that user's `servers` (checked per server). */
const readsSomeServerOf = (held: ReadonlySet<string>, user: string) => hasScopeOnSomeServerOf(held, 'read:servers', user);

/**
 * Each key of a user model is shown only to holders of a scope that reveals it for that user;
 * an empty set means the user is skipped. Filter `servers` entries with hasScope per server.
 */
export function userModelFields(held: ReadonlySet<string>, user: { name: string; groups: string[] }): ReadonlySet<UserModelField> {
  const more = readsSomeServerOf(held, user.name) ? USER_FIELDS['read:servers'] : undefined;
  return visibleFields(held, USER_FIELDS, { kind: 'user', name: user.name, groups: user.groups }, more);
}

/** Group models are cut down the same way as user models. */
export function groupModelFields(held: ReadonlySet<string>, group: string): ReadonlySet<GroupModelField> {
  return visibleFields(held, GROUP_FIELDS, { kind: 'group', name: group });
}

/** Service models are cut down the same way as user models. */
export function serviceModelFields(held: ReadonlySet<string>, service: string): ReadonlySet<ServiceModelField> {
  return visibleFields(held, SERVICE_FIELDS, { kind: 'service', name: service });
}

