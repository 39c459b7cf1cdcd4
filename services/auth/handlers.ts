// The auth actor's operations on users and groups. Every change is validated first, written in one
// transaction, then announced (hub.evt.user.* / hub.evt.group.*) and audited.
import type { AuditPublisher } from '../../shared/audit.js';
import { errors, HubError } from '../../shared/errors.js';
import { parseJson } from '../../shared/json.js';
import { invalidNameReason, normalizeUsername } from '../../shared/names.js';
import { isoNow, parseTimestamp } from '../../shared/time.js';
import type { AuthStore, GroupRow, UserRow } from './store.js';
import { parseSort } from '../../shared/lists.js';
import { collectAfterBurst } from '../../shared/idle-gc.js';

export interface UserModel { name: string; admin: boolean; groups: string[]; created: string; last_activity: string; user_info_json: string; managed_roles: string[] }
export interface GroupModel { name: string; users: string[]; properties_json: string; member_count: number; more_members_after: number }

/** A group model lists at most this many members; a bigger group's others are read a page at a time (GroupMembers). */
export const GROUP_MEMBERS_INLINE = 10_000;
/** Users whose login state the auth actor remembers (the oldest forgotten first): a few MB at most. */
const LOGIN_MEMORY_USERS = 50_000;
/** Users one audit event of a bulk create names (`details.users`). */
const BULK_AUDIT_USERS = 1000;
/** The largest page of GroupMembers, and the most names one group event carries (several events beyond). */
export const GROUP_MEMBERS_PAGE = 10_000;

/** Who changed what, for the events caches and the tokens actor listen to. */
import type { Announce } from '../../shared/nats.js';

export interface AuthDeps {
  store: AuthStore;
  audit: AuditPublisher;
  announce: Announce;
  /** how often buffered activity is written */
  activityFlushMs: number;
  /** Hub.max_json_depth: group properties are bounded like any JSON from outside */
  maxJsonDepth: number;
  /** Authenticator.username_map, as it is now (`hub reload` may change it) */
  usernameMap: () => Readonly<Record<string, string>>;
}

function checkName(kind: string, name: string): void {
  const why = invalidNameReason(name);
  if (why) throw errors.badRequest(`Invalid ${kind} name ${JSON.stringify(name.slice(0, 100))}: ${why}`, 'HUB_ERR_NAME_INVALID');
}

export function createAuthHandlers({ store, audit, announce: publishEvent, activityFlushMs, maxJsonDepth, usernameMap }: AuthDeps) {
  const normalize = (name: string) => normalizeUsername(name, usernameMap());
  // What a login last found or wrote of a user (admin, user_info): a returning user's login then reads and writes
  // nothing of the user row. Kept only while this actor is its store's one writer (not `store.shared`): each change
  // it makes to a user is announced, and the announcement forgets the name; another writer's change would not.
  const atLogin = new Map<string, { admin: boolean; info?: string }>();
  const remembered = (name: string) => (store.shared ? undefined : atLogin.get(name));
  const remember = (name: string, what: { admin: boolean; info?: string }) => {
    if (store.shared) return;
    if (atLogin.size >= LOGIN_MEMORY_USERS) atLogin.delete(atLogin.keys().next().value!);
    atLogin.set(name, what);
  };
  const announce: Announce = (entity, change, body) => {
    if (entity === 'user' && change !== 'activity') {
      if (typeof body.name === 'string') atLogin.delete(body.name);
      else atLogin.clear();
    }
    publishEvent(entity, change, body);
  };
  // Activity arrives often (every single-user server's heartbeat): it is announced at once (gateways update
  // their cached models in place), ordered in the list index at once, and written to the store at most once
  // per flush interval; reads merge what is not written yet.
  const pendingActivity = new Map<string, string>();
  const flushTimer = setInterval(() => void flushActivity(), activityFlushMs);
  flushTimer.unref();

  async function flushActivity(): Promise<void> {
    if (!pendingActivity.size) return;
    const batch = new Map(pendingActivity);
    pendingActivity.clear();
    await store.transaction(() => store.recordActivity(batch));
  }

  function latest(name: string, stored: string | null): string {
    const pending = pendingActivity.get(name);
    return pending && (!stored || pending > stored) ? pending : stored ?? '';
  }

  async function userModels(rows: UserRow[]): Promise<UserModel[]> {
    return rows.map((r) => ({ name: r.name, admin: r.admin === 1, groups: JSON.parse(r.groups_json) as string[], created: r.created, last_activity: latest(r.name, r.last_activity), user_info_json: r.user_info ?? '',
      managed_roles: r.managed_roles ? JSON.parse(r.managed_roles) as string[] : [] }));
  }

  async function groupModels(rows: GroupRow[]): Promise<GroupModel[]> {
    const members = await store.membersOf(rows.map((r) => r.id), GROUP_MEMBERS_INLINE);
    return rows.map((r) => {
      const m = members.get(r.id)!;
      return { name: r.name, users: m.users, properties_json: r.properties, member_count: m.count, more_members_after: m.users.length < m.count ? m.lastId : 0 };
    });
  }

  /** Every member's name, a page at a time (a group being deleted: its members must hear of it). */
  async function allMembers(groupId: number): Promise<string[]> {
    const out: string[] = [];
    for (let after = 0; ;) {
      const page = await store.membersPage(groupId, after, GROUP_MEMBERS_PAGE);
      for (const m of page) out.push(m.name);
      if (page.length < GROUP_MEMBERS_PAGE) return out;
      after = page[page.length - 1].id;
    }
  }

  /** A group change with the members it touched, in events of at most GROUP_MEMBERS_PAGE names (NATS bounds a message). */
  function announceGroup(change: 'created' | 'updated' | 'deleted', name: string, users: readonly string[]): void {
    if (!users.length) announce('group', change, { name, users: [] });
    for (let i = 0; i < users.length; i += GROUP_MEMBERS_PAGE) announce('group', change, { name, users: users.slice(i, i + GROUP_MEMBERS_PAGE) });
  }

  async function mustGetUser(name: string): Promise<UserRow> {
    const row = await store.getUser(name);
    if (!row) throw errors.notFound(`No such user: ${name}`, 'HUB_ERR_USER_NOT_FOUND');
    return row;
  }

  async function mustGetGroup(name: string): Promise<GroupRow> {
    const row = await store.getGroup(name);
    if (!row) throw errors.notFound(`No such group: ${name}`, 'HUB_ERR_GROUP_NOT_FOUND');
    return row;
  }

  async function userModel(name: string): Promise<UserModel> {
    return (await userModels([await mustGetUser(name)]))[0];
  }

  async function groupModel(name: string): Promise<GroupModel> {
    return (await groupModels([await mustGetGroup(name)]))[0];
  }

  async function requireUsersExist(names: string[]): Promise<void> {
    const found = await store.existingNames(names);
    const missing = names.filter((n) => !found.has(n));
    if (missing.length) {
      const named = missing.slice(0, 20).join(', ') + (missing.length > 20 ? ` and ${missing.length - 20} more` : '');
      throw errors.badRequest(`No such user: ${named}`, 'HUB_ERR_MEMBER_NOT_FOUND');
    }
  }

  const handlers = {
    flushActivity,
    stop: () => clearInterval(flushTimer),

    getUser: (r: { name: string }) => userModel(r.name),

    async getUsers(r: { names: string[] }) {
      const rows = await store.getUsers(r.names);
      const byName = new Map(rows.map((row) => [row.name, row]));
      return { users: await userModels(r.names.map((n) => byName.get(n)).filter((x): x is UserRow => !!x)) };
    },

    async listUsers(r: { offset: number; limit: number; restricted: boolean; names: string[]; groups: string[]; exclude_names: string[]; sort?: string; name_filter?: string }) {
      const { rows, total } = await store.listUsers(r.offset, r.limit, {
        only: r.restricted ? { names: r.names, groups: r.groups } : undefined, exclude: r.exclude_names, sort: parseSort(r.sort || 'id'), nameFilter: r.name_filter ?? '',
      });
      return { users: await userModels(rows), total };
    },

    /** Bulk create: invalid names refuse the whole request; existing ones are skipped; all existing → 409. */
    async createUsers(r: { names: string[]; admin: boolean; by: string }) {
      const names = [...new Set(r.names.map(normalize))];
      if (!names.length) throw errors.badRequest('Must specify at least one user to create');
      const invalid = names.filter((n) => invalidNameReason(n));
      if (invalid.length) throw errors.badRequest(`Invalid username${invalid.length > 1 ? 's' : ''}: ${invalid.map((n) => JSON.stringify(n.slice(0, 100))).join(', ')}`, 'HUB_ERR_NAME_INVALID');
      const created = await store.transaction(async () => {
        const existing = await store.existingNames(names);
        const fresh = names.filter((n) => !existing.has(n));
        if (!fresh.length) throw errors.conflict(`All ${names.length} users already exist`, 'HUB_ERR_USER_EXISTS');
        const now = isoNow();
        await store.insertUsers(fresh, r.admin, now);
        return fresh;
      });
      for (const name of created) announce('user', 'created', { name });
      // Behind the answer, one audit event per 1,000 users created at once (their names in `users`): an event per user
      // made a million-user import a million stored messages, which NATS holds in memory and reads at every start
      const events = [];
      for (let i = 0; i < created.length; i += BULK_AUDIT_USERS) {
        const users = created.slice(i, i + BULK_AUDIT_USERS);
        events.push(created.length === 1 ? { who: r.by, what: users[0], outcome: 'ok' as const, admin: r.admin } : { who: r.by, what: '', outcome: 'ok' as const, admin: r.admin, users });
      }
      void audit.publishMany('user', 'create', events);
      if (created.length > 1000) collectAfterBurst();
      return { users: await userModels(await store.getUsers(created)) };
    },

    async createUser(r: { name: string; admin: boolean; by: string }) {
      checkName('user', r.name);
      await store.transaction(async () => {
        if (await store.getUser(r.name)) throw errors.conflict(`User ${r.name} already exists`, 'HUB_ERR_USER_EXISTS');
        await store.insertUser(r.name, r.admin, isoNow());
      });
      announce('user', 'created', { name: r.name });
      void audit.publish('user', 'create', { who: r.by, what: r.name, outcome: 'ok', admin: r.admin });
      return userModel(r.name);
    },

    async updateUser(r: { name: string; new_name?: string; admin?: boolean; by: string }) {
      if (r.new_name !== undefined) checkName('user', r.new_name);
      const row = await mustGetUser(r.name);
      const rename = r.new_name !== undefined && r.new_name !== r.name ? r.new_name : undefined;
      await store.transaction(async () => {
        if (rename && (await store.getUser(rename))) {
          throw errors.badRequest(`User ${rename} already exists, username must be unique`, 'HUB_ERR_RENAME_TAKEN');
        }
        await store.updateUser(r.name, { name: rename, admin: r.admin });
      });
      const name = rename ?? r.name;
      if (rename) {
        pendingActivity.delete(r.name);
        announce('user', 'deleted', { name: r.name, renamed_to: rename, by: r.by });
        announce('user', 'created', { name: rename, renamed_from: r.name });
      } else {
        announce('user', 'updated', { name });
      }
      void audit.publish('user', 'update', { who: r.by, what: r.name, outcome: 'ok', new_name: rename, admin: r.admin, was_admin: row.admin === 1 });
      return userModel(name);
    },

    async deleteUser(r: { name: string; by: string }) {
      if (!(await store.transaction(() => store.deleteUser(r.name)))) throw errors.notFound(`No such user: ${r.name}`, 'HUB_ERR_USER_NOT_FOUND');
      pendingActivity.delete(r.name);
      announce('user', 'deleted', { name: r.name, by: r.by });
      void audit.publish('user', 'delete', { who: r.by, what: r.name, outcome: 'ok' });
      return {};
    },

    async recordActivity(r: { name: string; last_activity: string }) {
      const at = parseTimestamp(r.last_activity);
      if (!at) throw errors.badRequest(`Not a valid timestamp: ${r.last_activity.slice(0, 60)}`);
      const row = await mustGetUser(r.name);
      const iso = at.toISOString();
      if (iso > latest(r.name, row.last_activity)) {
        pendingActivity.set(r.name, iso);
        store.noteActivity(row.id, iso);
        announce('user', 'activity', { name: r.name, last_activity: iso });
      }
      return {};
    },

    getGroup: (r: { name: string }) => groupModel(r.name),

    async groupMembers(r: { name: string; after: number; limit: number }) {
      const group = await mustGetGroup(r.name);
      const limit = Math.min(Math.max(1, r.limit || GROUP_MEMBERS_PAGE), GROUP_MEMBERS_PAGE);
      const page = await store.membersPage(group.id, Math.max(0, r.after), limit);
      return { users: page.map((m) => m.name), next_after: page.length === limit ? page[page.length - 1].id : 0 };
    },

    async listGroups(r: { offset: number; limit: number; restricted: boolean; groups: string[] }) {
      const { rows, total } = await store.listGroups(r.offset, r.limit, r.restricted ? r.groups : undefined);
      return { groups: await groupModels(rows), total };
    },

    /** Creates groups in order with the same members; stops at the first existing one (those before stay). */
    async createGroups(r: { names: string[]; users: string[]; by: string }) {
      if (!r.names.length) throw errors.badRequest('Must specify at least one group to create');
      for (const n of r.names) checkName('group', n);
      const users = [...new Set(r.users.map(normalize))];
      await requireUsersExist(users);
      const created: string[] = [];
      let conflict: Error | undefined;
      for (const name of r.names) {
        try {
          await store.transaction(async () => {
            if (await store.getGroup(name)) throw errors.conflict(`Group ${name} already exists`, 'HUB_ERR_GROUP_EXISTS');
            const id = await store.insertGroup(name);
            await store.addMembers(id, users);
          });
        } catch (e) {
          conflict = e as Error;
          break;
        }
        created.push(name);
        announceGroup('created', name, users);
        void audit.publish('group', 'create', { who: r.by, what: name, outcome: 'ok', users });
      }
      if (conflict) throw conflict;
      return { groups: await Promise.all(created.map(groupModel)) };
    },

    async deleteGroup(r: { name: string; by: string }) {
      const members = await allMembers((await mustGetGroup(r.name)).id);
      await store.transaction(async () => store.deleteGroup((await mustGetGroup(r.name)).id));
      announceGroup('deleted', r.name, members);
      void audit.publish('group', 'delete', { who: r.by, what: r.name, outcome: 'ok' });
      return {};
    },

    async changeGroupMembers(r: { name: string; users: string[]; add: boolean; by: string }) {
      const users = [...new Set(r.users.map(normalize))];
      if (!users.length) throw errors.badRequest(`Must specify users to ${r.add ? 'add' : 'delete'}`);
      const group = await mustGetGroup(r.name);
      await requireUsersExist(users);
      await store.transaction(() => (r.add ? store.addMembers(group.id, users) : store.removeMembers(group.id, users)));
      announceGroup('updated', r.name, users);
      void audit.publish('group', r.add ? 'add_members' : 'remove_members', { who: r.by, what: r.name, outcome: 'ok', users });
      return groupModel(r.name);
    },

    /**
     * Authenticator.manage_groups: the user's groups become exactly `groups` (what the authenticator says at a
     * login or refresh); groups it names that do not exist yet are created. Each change is an event and an audit line.
     */
    async setUserGroups(name: string, groups: string[], by: string): Promise<void> {
      const user = await mustGetUser(name);
      const current = new Set(JSON.parse(user.groups_json) as string[]);
      const wanted = new Set(groups.filter((g) => !invalidNameReason(g)));
      for (const g of wanted) {
        if (current.has(g)) continue;
        const created = await store.transaction(async () => {
          const existing = await store.getGroup(g);
          const id = existing?.id ?? (await store.insertGroup(g));
          await store.addMembers(id, [name]);
          return !existing;
        });
        announceGroup(created ? 'created' : 'updated', g, [name]);
        if (created) void audit.publish('group', 'create', { who: by, what: g, outcome: 'ok', users: [] });
        void audit.publish('group', 'add_members', { who: by, what: g, outcome: 'ok', users: [name] });
      }
      for (const g of current) {
        if (wanted.has(g)) continue;
        const row = await store.getGroup(g);
        if (!row) continue;
        await store.transaction(() => store.removeMembers(row.id, [name]));
        announceGroup('updated', g, [name]);
        void audit.publish('group', 'remove_members', { who: by, what: g, outcome: 'ok', users: [name] });
      }
    },

    /**
     * Authenticator.manage_roles: the user's roles become exactly `roles` (names the authenticator gave at a login or
     * refresh). A change is an event (the tokens actor recomputes the user's scopes, gateways forget the user) and an audit line.
     */
    async setUserRoles(name: string, roles: string[], by: string): Promise<void> {
      const sorted = [...new Set(roles)].sort();
      if (!(await store.transaction(() => store.setManagedRoles(name, JSON.stringify(sorted))))) return;
      announce('user', 'updated', { name });
      void audit.publish('user', 'set_roles', { who: by, what: name, outcome: 'ok', roles: sorted });
    },

    /** What the authenticator says of the person to show (user_info), kept when it changes; gateways hear of it. */
    async setUserInfo(name: string, info: Record<string, string>): Promise<void> {
      const json = JSON.stringify(info);
      const known = remembered(name);
      if (known?.info === json) return;
      if (await store.transaction(() => store.setUserInfo(name, json))) announce('user', 'updated', { name });
      if (known) remember(name, { ...known, info: json });
    },

    /**
     * At a login: the user exists afterwards (created at first login); `admin`, when the authenticator or
     * admin_users says, is set (undefined leaves it as it is: an admin made through the API stays one).
     */
    async ensureLoginUser(name: string, admin: boolean | undefined): Promise<void> {
      const known = remembered(name);
      if (known && (admin === undefined || admin === known.admin)) return;
      // the row alone: a returning user's login needs no user model (groups, servers, roles)
      const existing = await store.getUser(name);
      if (!existing) {
        // two first logins of one user at once: the second finds the user made by the first
        await handlers.createUser({ name, admin: admin ?? false, by: 'actor:auth (login)' }).catch((e: unknown) => {
          if (!(e instanceof HubError && e.code === 'HUB_ERR_USER_EXISTS')) throw e;
        });
        return;
      }
      if (admin !== undefined && admin !== (existing.admin === 1)) {
        await handlers.updateUser({ name, admin, by: 'actor:auth (login)' });
        return;
      }
      remember(name, { admin: existing.admin === 1, info: existing.user_info ?? undefined });
    },

    async setGroupProperties(r: { name: string; properties_json: string; by: string }) {
      const properties = parseJson(r.properties_json, maxJsonDepth, 'Group properties');
      if (typeof properties !== 'object' || properties === null || Array.isArray(properties)) throw errors.badRequest('Group properties must be a JSON object');
      const group = await mustGetGroup(r.name);
      await store.transaction(() => store.setProperties(group.id, r.properties_json));
      announce('group', 'updated', { name: r.name, users: [] });
      void audit.publish('group', 'set_properties', { who: r.by, what: r.name, outcome: 'ok' });
      return groupModel(r.name);
    },
  };
  return handlers;
}
