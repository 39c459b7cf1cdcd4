// Role assignment: which roles a user or service holds, from the default roles and `Hub.load_roles`.
// Pure, so the tokens actor (which turns roles into scopes for every decision) and the gateway
// (which shows role names in models) cannot disagree.
import type { HubConfig } from './config.js';
import { expandScopes, type RoleSpec, type ScopeOwner } from './scopes.js';

/** Created at startup; `admin` keeps its scopes whatever the configuration says. */
export const DEFAULT_ROLES: readonly RoleSpec[] = Object.freeze(
  [
    { name: 'user', description: 'Standard user privileges', scopes: ['self'] },
    {
      name: 'admin',
      description: 'Elevated privileges (can do anything)',
      scopes: [
        'admin-ui',
        'admin:users',
        'admin:servers',
        'admin:services',
        'tokens',
        'admin:groups',
        'list:services',
        'read:services',
        'read:hub',
        'proxy',
        'shutdown',
        'access:services',
        'access:servers',
        'read:roles',
        'read:metrics',
        'shares',
      ],
    },
    {
      name: 'server',
      description: 'Post activity only',
      scopes: ['users:activity!user', 'access:servers!server'],
    },
    { name: 'token', description: 'Token with same permissions as its owner', scopes: ['inherit'] },
  ].map((role) => Object.freeze({ ...role, scopes: Object.freeze(role.scopes) as string[] })),
);

const ROLE_NAME = /^[a-z][a-z0-9\-_~.]{1,253}[a-z0-9]$/;

/** Role names end up in URLs and config; the same rule as the established hub keeps them portable. */
export function isValidRoleName(name: string): boolean {
  return ROLE_NAME.test(name);
}


export interface ConfiguredRole extends RoleSpec {
  users: string[];
  groups: string[];
  services: string[];
}

export interface ServiceConfig {
  name: string;
  admin?: boolean;
  url?: string;
  api_token?: string;
  display?: boolean;
  oauth_no_confirm?: boolean;
  command?: string | string[];
  info?: Record<string, unknown>;
  [key: string]: unknown;
}

/** The default roles overlaid with configured ones (a configured role of the same name replaces its scopes, except admin's). */
export function roleBook(config: HubConfig): Map<string, ConfiguredRole> {
  const book = new Map<string, ConfiguredRole>(DEFAULT_ROLES.map((r) => [r.name, { ...r, scopes: [...r.scopes], users: [], groups: [], services: [] }]));
  for (const raw of config.Hub.load_roles as Partial<ConfiguredRole>[]) {
    const existing = book.get(raw.name!);
    book.set(raw.name!, {
      name: raw.name!,
      description: raw.description ?? existing?.description ?? '',
      scopes: raw.name === 'admin' ? existing!.scopes : [...(raw.scopes ?? existing?.scopes ?? [])],
      users: [...(raw.users ?? [])],
      groups: [...(raw.groups ?? [])],
      services: [...(raw.services ?? [])],
    });
  }
  // Hub.extra_user_scopes: more for every user, whatever load_roles says of the `user` role
  const user = book.get('user')!;
  user.scopes = [...new Set([...user.scopes, ...config.Hub.extra_user_scopes])];
  return book;
}

export function configuredServices(config: HubConfig): ServiceConfig[] {
  return config.Hub.services as ServiceConfig[];
}

export interface UserFacts { name: string; admin: boolean; groups: string[]; /** Authenticator.manage_roles: what the authenticator gave */ managed_roles?: string[] }

/** Role names of a user: `user` always, `admin` for admins, the authenticator's (manage_roles), and configured roles naming them or their groups. */
export function rolesOfUser(book: Map<string, ConfiguredRole>, user: UserFacts): string[] {
  const roles = new Set(['user']);
  if (user.admin) roles.add('admin');
  for (const r of user.managed_roles ?? []) if (book.has(r)) roles.add(r);
  for (const role of book.values()) {
    if (role.users.includes(user.name) || role.groups.some((g) => user.groups.includes(g))) roles.add(role.name);
  }
  return [...roles];
}

/** Role names of a service: `admin` for admin services, and configured roles naming it. */
export function rolesOfService(book: Map<string, ConfiguredRole>, service: ServiceConfig): string[] {
  const roles = new Set<string>();
  if (service.admin) roles.add('admin');
  for (const role of book.values()) if (role.services.includes(service.name)) roles.add(role.name);
  return [...roles];
}

/** The expanded scopes a set of roles gives its holder. */
export function scopesOfRoles(book: Map<string, ConfiguredRole>, roles: string[], owner: ScopeOwner): Set<string> {
  return expandScopes(roles.flatMap((r) => book.get(r)?.scopes ?? []), owner);
}
