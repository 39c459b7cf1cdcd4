// What every authenticator shares, once, above the backends (./authenticators/): turning what a backend says into
// a hub user — the name (lower-cased, Authenticator.username_map), who may come in (allow_all, allowed_users,
// the backend's allowed_groups, allow_existing_users; admins always), who is admin (admin_users, or the backend's
// admin_groups), the user's groups when the authenticator manages them, and the auth state kept encrypted.
import type { AuditPublisher } from '../../shared/audit.js';
import type { HubConfig } from '../../shared/config.js';
import type { Logger } from '../../shared/log.js';
import { invalidNameReason, normalizeUsername } from '../../shared/names.js';
import { DEFAULT_ROLES } from '../../shared/roles.js';
import type { AuthStateCrypt } from './auth-state.js';
import type { Authenticator, Identity } from './authenticators/contract.js';
import type { AuthStore } from './store.js';

/** Words a person understands, for the usual refusals (a backend's own `message` wins). */
export const MESSAGES = {
  invalid: 'Wrong name or password.',
  notAllowed: 'Your account is not allowed to use this hub.',
  notInGroup: 'Your account is not in a group allowed to use this hub.',
  unavailable: 'The sign-in service is not answering right now. Please try again in a minute.',
  badName: 'That name cannot be used on this hub.',
} as const;

export type Judgement =
  | { ok: true; name: string; admin: boolean | undefined; groups: string[] | undefined }
  | { ok: false; name: string; reason: string; message: string };

export interface IdentityDeps {
  config: HubConfig;
  store: AuthStore;
  audit: AuditPublisher;
  log: Logger;
  authenticator: Authenticator;
  /** with Authenticator.enable_auth_state; null otherwise */
  crypt: AuthStateCrypt | null;
  /** the user exists afterwards; `admin` set when given (undefined: left as it is, false for a new user) */
  ensureUser: (name: string, admin: boolean | undefined) => Promise<void>;
  /** the user's groups become exactly `groups` (manage_groups), groups created when missing */
  setUserGroups: (name: string, groups: string[], by: string) => Promise<void>;
  /** what clients show of the person (user_info) */
  setUserInfo: (name: string, info: Record<string, string>) => Promise<void>;
  /** the user's roles become exactly `roles` (manage_roles) */
  setUserRoles: (name: string, roles: string[], by: string) => Promise<void>;
}

/** user_info keys the established hub's clients read (JupyterLab's user menu), each a short string. */
const USER_INFO_KEYS = ['name', 'display_name', 'initials', 'avatar_url', 'color'] as const;

export function createIdentity({ config, store, audit, log, authenticator, crypt, ensureUser, setUserGroups, setUserInfo, setUserRoles }: IdentityDeps) {
  const A = config.Authenticator;
  const O = config.OAuthenticator;
  const viaProvider = config.Hub.authenticator_class === 'oauth';
  const normalize = (name: string) => normalizeUsername(name.trim(), A.username_map);
  // the provider's own lists are the same lists, as the established hub's oauthenticator merges them
  const adminUsers = new Set([...A.admin_users, ...(viaProvider ? O.admin_users : [])].map(normalize));
  const allowedUsers = new Set([...A.allowed_users, ...(viaProvider ? O.allowed_users : [])].map(normalize));
  const blockedUsers = new Set(A.blocked_users.map(normalize));
  const anyAllowRule = A.allow_all || allowedUsers.size > 0 || authenticator.hasAllowRule || A.allow_existing_users;
  const admitsAll = A.allow_all || (!anyAllowRule && authenticator.admitsAllByDefault);
  if (!anyAllowRule && !authenticator.admitsAllByDefault) {
    log.warn({ event: 'auth.nobody_allowed', authenticator: config.Hub.authenticator_class },
      'no allow option is set (allow_all, allowed_users, allowed_groups, allow_existing_users): only admins can log in');
  }

  /**
   * Roles an authenticator names must be roles of the hub (Hub.load_roles, or the default ones): the established hub
   * would create an unknown one with no scopes, which gives nothing; it is left out, and said.
   */
  const roleNames = new Set([...DEFAULT_ROLES.map((r) => r.name), ...(config.Hub.load_roles as { name: string }[]).map((r) => r.name)]);
  function knownRoles(name: string, roles: string[]): string[] {
    const unknown = roles.filter((r) => !roleNames.has(r));
    if (unknown.length) log.warn({ event: 'auth.unknown_roles', user: name, roles: unknown.slice(0, 20) }, 'the authenticator names roles the hub does not define (Hub.load_roles): left out');
    return roles.filter((r) => roleNames.has(r));
  }

  /** Who this is on the hub, and whether they may come in. */
  async function judge(identity: Identity): Promise<Judgement> {
    const name = normalize(identity.name ?? '');
    const why = invalidNameReason(name);
    if (!name || why) return { ok: false, name: name.slice(0, 100), reason: `unusable user name: ${why || 'empty'}`, message: MESSAGES.badName };
    if (blockedUsers.has(name)) return { ok: false, name, reason: 'a blocked user (Authenticator.blocked_users)', message: MESSAGES.notAllowed };
    const admin = adminUsers.has(name) ? true : identity.admin;
    const groups = identity.groups?.map((g) => g.trim()).filter((g) => g && !invalidNameReason(g));
    const allowed = identity.allowed !== false && (admin === true || admitsAll || allowedUsers.has(name) || identity.allowed === true
      || (A.allow_existing_users && (await store.getUser(name)) !== undefined));
    if (!allowed) {
      const byGroups = authenticator.hasAllowRule;
      return { ok: false, name, reason: byGroups ? 'not in an allowed group nor an allowed user' : 'not an allowed user', message: byGroups ? MESSAGES.notInGroup : MESSAGES.notAllowed };
    }
    return { ok: true, name, admin, groups };
  }

  /** A judged-in person becomes the hub's user: created, admin as said, groups as the authenticator says, auth state kept. */
  async function admit(j: Extract<Judgement, { ok: true }>, identity: Identity, by: string): Promise<void> {
    await ensureUser(j.name, j.admin);
    if (A.manage_groups && j.groups) await setUserGroups(j.name, j.groups, by);
    if (A.manage_roles && identity.roles) await setUserRoles(j.name, knownRoles(j.name, identity.roles), by);
    if (identity.userInfo) {
      const info: Record<string, string> = {};
      for (const k of USER_INFO_KEYS) {
        const v = identity.userInfo[k];
        if (typeof v === 'string' && v && v.length <= 1024) info[k] = v;
      }
      if (Object.keys(info).length) await setUserInfo(j.name, info);
    }
    if (crypt && identity.authState) await store.transaction(() => store.putAuthState(j.name, crypt.encrypt(identity.authState!)));
  }

  return {
    normalize,
    judge,
    admit,

    /** The user's auth state, decrypted; null when none is kept (or auth state is off, or no key opens it). */
    async authStateOf(name: string): Promise<Record<string, unknown> | null> {
      return crypt ? crypt.decrypt(await store.authStateOf(name)) : null;
    },

    /** An admin's PATCH of auth_state: null clears it. */
    async setAuthState(name: string, state: Record<string, unknown> | null, by: string): Promise<void> {
      if (!crypt) return;
      await store.transaction(() => (state ? store.putAuthState(name, crypt.encrypt(state)) : store.clearAuthState(name)));
      void audit.publish('user', 'set_auth_state', { who: by, what: name, outcome: 'ok' });
    },
  };
}

export type IdentityPolicy = ReturnType<typeof createIdentity>;
