// The auth actor's own store: users, groups and memberships, passwords, login sessions (with what each login
// said, sealed), auth state (encrypted) and login failures. The only file with SQL for them.
import { Store, type Param, type StoreLocation } from '../../shared/store.js';
import type { UserSort } from '../../shared/lists.js';
import { UserIndex } from './user-index.js';

const MIGRATIONS = [
  `CREATE TABLE users (
     id INTEGER PRIMARY KEY,
     name TEXT NOT NULL UNIQUE,
     admin INTEGER NOT NULL DEFAULT 0,
     created TEXT NOT NULL,
     last_activity TEXT
   );
   CREATE TABLE groups (
     id INTEGER PRIMARY KEY,
     name TEXT NOT NULL UNIQUE,
     properties TEXT NOT NULL DEFAULT '{}'
   );
   CREATE TABLE group_members (
     group_id INTEGER NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
     user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
     PRIMARY KEY (group_id, user_id)
   );
   CREATE INDEX group_members_by_user ON group_members(user_id);`,
  `CREATE TABLE passwords (
     user_id INTEGER PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
     hashed TEXT NOT NULL
   );
   CREATE TABLE sessions (
     id TEXT PRIMARY KEY,
     user_name TEXT NOT NULL,
     created TEXT NOT NULL,
     refreshed TEXT NOT NULL,
     revoked INTEGER NOT NULL DEFAULT 0
   );
   CREATE INDEX sessions_by_user ON sessions(user_name);
   -- failed logins, per user and per client address, kept across restarts for lockouts
   CREATE TABLE login_failures (
     key TEXT NOT NULL,
     at INTEGER NOT NULL
   );
   CREATE INDEX login_failures_by_key ON login_failures(key, at);`,
  // the external identity provider's tokens of a login session, sealed (never stored in the clear)
  `CREATE TABLE external_tokens (
     session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
     sealed TEXT NOT NULL
   );`,
  // a million users: pages by activity while the index loads, active-user counts and the admin count are index ranges
  `CREATE INDEX users_by_activity ON users(last_activity);
   CREATE INDEX users_admins ON users(admin) WHERE admin = 1;`,
  // Authenticator.enable_auth_state: what a login returned, encrypted under HUB_CRYPT_KEY (a rename keeps it)
  `CREATE TABLE auth_states (
     user_id INTEGER PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
     encrypted TEXT NOT NULL
   );`,
  // what a login said, sealed, in its session's own row: a login is one INSERT. The provider tokens kept before
  // were sealed another way; those logins are asked to sign in again at their next refresh.
  `ALTER TABLE sessions ADD COLUMN state TEXT;
   DROP TABLE external_tokens;`,
  // what the authenticator says of the person to show (the established hub 6's user_info), JSON or NULL
  `ALTER TABLE users ADD COLUMN user_info TEXT;`,
  // Authenticator.manage_roles: the role names the authenticator gave at the last login or refresh, JSON or NULL
  `ALTER TABLE users ADD COLUMN managed_roles TEXT;`,
];

export interface SessionRow { id: string; user_name: string; created: string; refreshed: string; revoked: number }
/** A session's columns without the login's sealed state (read only where a refresh needs it). */
const SESSION = 'id, user_name, created, refreshed, revoked';

export interface UserRow { id: number; name: string; admin: number; created: string; last_activity: string | null; groups_json: string; user_info: string | null; managed_roles: string | null }

/**
 * A user row with its group names (JSON, in group id order) from one correlated subquery: a page of users is one
 * statement, not two round trips through the driver's thread pool.
 */
const USER_COLUMNS = {
  sqlite: `users.*, (SELECT json_group_array(name) FROM (SELECT g.name FROM group_members m JOIN groups g ON g.id = m.group_id
  WHERE m.user_id = users.id ORDER BY g.id)) AS groups_json`,
  postgres: `users.*, (SELECT coalesce(json_agg(g.name ORDER BY g.id), '[]')::text FROM group_members m JOIN groups g ON g.id = m.group_id
  WHERE m.user_id = users.id) AS groups_json`,
};
export interface GroupRow { id: number; name: string; properties: string }

/** Restricts a list to named users and members of named groups (a caller with filtered list scopes). */
export interface Restriction { names: string[]; groups: string[] }

/** What a list of users is narrowed by (all parts optional, combined with AND) and its order. */
export interface UserListQuery {
  /** named users and members of named groups (a caller with filtered list scopes) */
  only?: Restriction;
  /** names left out (a small set, e.g. users with servers) */
  exclude?: string[];
  sort?: UserSort;
  /** case-insensitive substring of the name (the API's `name_filter`) */
  nameFilter?: string;
}


/** Rows read per statement while the index loads: short steps, so requests are answered in between. */
const LOAD_CHUNK = 5_000;

/** What a transaction changes in memory, applied when it commits: users added, other index changes, groups counted. */
interface Staged { added: { id: number; name: string }[]; index: IndexChange[]; groups: number }

/** One change to the in-memory index; each sets a user's state, so replaying one the index already has is harmless. */
type IndexChange =
  | { kind: 'add'; users: { id: number; name: string }[] }
  | { kind: 'remove'; id: number }
  | { kind: 'rename'; id: number; name: string }
  | { kind: 'touch'; id: number; at: string }
  /** a user another auth actor (on another node, same database) deleted: known here by name only */
  | { kind: 'removeName'; name: string };

/** `ORDER BY` of each sort when pages come from SQL (while the index loads): the same order as the index's. */
const SQL_ORDER: Record<UserSort['key'], [string, string]> = {
  id: ['id', 'id DESC'],
  name: ['name', 'name DESC'],
  last_activity: ['last_activity, id', 'last_activity DESC, id DESC'],
};

export class AuthStore {
  /**
   * Every user in id, name and activity order (see user-index.ts), so a page at any offset is a slice, never
   * an OFFSET scan; its size is the total. It loads in the background after the store opens (a million users
   * take seconds): until then unfiltered pages come from SQL and searches wait for it, and every change is
   * queued and replayed onto it when it is whole. Changes made inside a transaction apply when it commits.
   */
  private readonly index = new UserIndex();
  private queued: IndexChange[] | null = [];
  /** settles when the index is whole; a failure to load it is fatal to the actor (see open) */
  readonly indexLoaded: Promise<void>;
  private groupCount = 0;
  private staged: Staged | null = null;
  /** set by close(): a load under way stops at its next step */
  closing = false;
  /**
   * Every key (user:… or addr:…) with a failed login row: a login whose name and address are in none asks no query
   * about lockouts. It only grows between prunes (a cleared key stays until then, costing a query, never a miss).
   */
  private failing = new Set<string>();

  /** A user row's columns with its groups (USER_COLUMNS) in this store's dialect. */
  private readonly USER: string;

  private constructor(private readonly db: Store) {
    this.USER = db.pick(USER_COLUMNS);
    this.indexLoaded = this.loadIndex();
    // handled here too: a store closed while loading (a CLI verb) is no failure; the actor watches indexLoaded itself
    this.indexLoaded.catch(() => undefined);
  }

  /**
   * The established hub's users, groups, memberships and auth state (`hub import jupyterhub`), in one transaction
   * on a store no actor has open (the import's copy). Users and groups are the same when their names are: a second
   * import updates them (admin flag, created, activity moving forward only, properties; each imported group's
   * members made exactly the established hub's), never adds them again. `auth_state` is sealed under this hub's key.
   */
  static async importJupyterhub(path: string, rows: {
    users: { name: string; admin: boolean; created: string; last_activity: string | null; user_info: string | null }[];
    groups: { name: string; properties: string; members: string[] }[];
    authStates: { name: string; encrypted: string }[];
  }): Promise<Record<string, { added: number; updated: number }>> {
    const db = await Store.open(path, MIGRATIONS);
    try {
      return await db.transaction(async () => {
        const users = JSON.stringify(rows.users);
        const groups = JSON.stringify(rows.groups.map((g) => ({ name: g.name, properties: g.properties })));
        const members = JSON.stringify(rows.groups.flatMap((g) => g.members.map((m) => [g.name, m])));
        const J = (f: string) => `json_extract(j.value, '$.${f}')`;
        const known = async (table: string, param: string) =>
          (await db.get<{ n: number }>(`SELECT count(*) AS n FROM json_each(?) j WHERE ${J('name')} IN (SELECT name FROM ${table})`, [param]))!.n;
        const usersKnown = await known('users', users);
        await db.run(
          `INSERT INTO users (name, admin, created, last_activity, user_info)
           SELECT ${J('name')}, ${J('admin')}, ${J('created')}, ${J('last_activity')}, ${J('user_info')} FROM json_each(?) j WHERE true
           ON CONFLICT (name) DO UPDATE SET admin = excluded.admin, created = excluded.created, user_info = coalesce(excluded.user_info, users.user_info),
             last_activity = CASE WHEN users.last_activity IS NULL OR excluded.last_activity > users.last_activity THEN excluded.last_activity ELSE users.last_activity END`,
          [users]);
        const groupsKnown = await known('groups', groups);
        await db.run(
          `INSERT INTO groups (name, properties) SELECT ${J('name')}, ${J('properties')} FROM json_each(?) j WHERE true
           ON CONFLICT (name) DO UPDATE SET properties = excluded.properties`, [groups]);
        await db.run(`DELETE FROM group_members WHERE group_id IN (SELECT id FROM groups WHERE name IN (SELECT ${J('name')} FROM json_each(?) j))`, [groups]);
        await db.run(
          `INSERT OR IGNORE INTO group_members (group_id, user_id)
           SELECT g.id, u.id FROM json_each(?) j JOIN groups g ON g.name = json_extract(j.value, '$[0]') JOIN users u ON u.name = json_extract(j.value, '$[1]')`,
          [members]);
        await db.run(
          `INSERT INTO auth_states (user_id, encrypted) SELECT u.id, ${J('encrypted')} FROM json_each(?) j JOIN users u ON u.name = ${J('name')} WHERE true
           ON CONFLICT (user_id) DO UPDATE SET encrypted = excluded.encrypted`, [JSON.stringify(rows.authStates)]);
        return {
          users: { added: rows.users.length - usersKnown, updated: usersKnown },
          groups: { added: rows.groups.length - groupsKnown, updated: groupsKnown },
        };
      });
    } finally {
      await db.close();
    }
  }

  /** Opens the store at once; the user index loads behind it (`indexLoaded`). */
  static async open(where: string | StoreLocation): Promise<AuthStore> {
    const db = await Store.open(where, MIGRATIONS);
    const s = new AuthStore(db);
    s.groupCount = (await s.db.get<{ n: number }>('SELECT count(*) AS n FROM groups'))!.n;
    await s.loadFailingKeys();
    return s;
  }

  /** Reads every user from one snapshot of a second connection, then replays the changes made meanwhile. */
  private async loadIndex(): Promise<void> {
    const byName = await this.db.snapshot(async (reader) => {
      const size = await reader.get<{ n: number; maxId: number | null; bytes: number | null }>(
        `SELECT count(*) AS n, max(id) AS "maxId", sum(${reader.pick({ sqlite: 'length(CAST(name AS BLOB))', postgres: 'octet_length(name)' })}) AS bytes FROM users`);
      this.index.reserve(size?.n ?? 0, size?.maxId ?? 0, size?.bytes ?? 0);
      let lastId = 0;
      for (;;) {
        if (this.closing) throw new Error('auth store: closed while loading the user index');
        const rows = await reader.all<{ id: number; name: string; last_activity: string | null }>(
          'SELECT id, name, last_activity FROM users WHERE id > ? ORDER BY id LIMIT ?', [lastId, LOAD_CHUNK]);
        if (!rows.length) break;
        this.index.loadRows(rows);
        lastId = rows[rows.length - 1].id;
      }
      const byName = new Int32Array(this.index.size);
      let n = 0;
      let lastName: string | null = null;
      for (;;) {
        if (this.closing) throw new Error('auth store: closed while loading the user index');
        const rows: { id: number; name: string }[] = lastName === null
          ? await reader.all('SELECT id, name FROM users ORDER BY name LIMIT ?', [LOAD_CHUNK])
          : await reader.all('SELECT id, name FROM users WHERE name > ? ORDER BY name LIMIT ?', [lastName, LOAD_CHUNK]);
        if (!rows.length) break;
        for (const r of rows) byName[n++] = r.id;
        lastName = rows[rows.length - 1].name;
      }
      if (n !== byName.length) throw new Error(`auth store: ${byName.length} users by id but ${n} by name in one snapshot`);
      return byName;
    });
    this.index.finishLoad(byName);
    const queued = this.queued ?? [];
    this.queued = null;
    for (const change of queued) this.applyToIndex(change);
  }

  /** Whether pages come from the index yet (false for the first seconds after a start with many users). */
  get indexReady(): boolean {
    return this.queued === null;
  }

  /** The index's size in bytes (arrays, arenas, cached searches). */
  get indexBytes(): number {
    return this.index.bytes;
  }

  private applyToIndex(change: IndexChange): void {
    if (this.queued) {
      this.queued.push(change);
      return;
    }
    if (change.kind === 'add') this.index.add(change.users);
    else if (change.kind === 'remove') this.index.remove(change.id);
    else if (change.kind === 'rename') this.index.rename(change.id, change.name);
    else if (change.kind === 'removeName') this.index.remove(this.index.idOf(change.name));
    else this.index.touch(change.id, change.at);
  }

  close(): Promise<void> {
    this.closing = true;
    return this.indexLoaded.catch(() => undefined).then(() => this.db.close());
  }

  async transaction<T>(work: () => Promise<T>): Promise<T> {
    let staged: Staged = { added: [], index: [], groups: 0 };
    const result = await this.db.transaction(async () => {
      staged = this.staged = { added: [], index: [], groups: 0 };
      try {
        return await work();
      } finally {
        this.staged = null;
      }
    });
    if (staged.added.length) this.applyToIndex({ kind: 'add', users: staged.added });
    for (const change of staged.index) this.applyToIndex(change);
    this.groupCount += staged.groups;
    return result;
  }

  private stage(): Staged {
    if (!this.staged) throw new Error('auth store: writes happen inside transaction()');
    return this.staged;
  }

  /**
   * Whether other auth actors write this store too (a shared PostgreSQL, or the actor `hub restart` replaces while it
   * finishes its calls: `othersWrite`): then `followEvent` keeps this one's memory in line.
   */
  get shared(): boolean {
    return this.db.dialect === 'postgres' || this.othersWrite;
  }

  othersWrite = false;

  /** Keys another auth actor recorded failures of while this one did not look (added, never dropped: see `failing`). */
  async learnFailingKeys(): Promise<void> {
    for (const { key } of await this.db.all<{ key: string }>('SELECT DISTINCT key FROM login_failures')) this.failing.add(key);
  }

  /**
   * A user or group event, maybe from another auth actor on the same database: the user index and the group count
   * follow it. Each step sets a state read from the database, so this actor's own events change nothing again.
   */
  async followEvent(entity: 'user' | 'group', change: string, body: { name?: string; last_activity?: string }): Promise<void> {
    const name = body.name;
    if (entity === 'group') {
      if (change === 'created' || change === 'deleted') this.groupCount = (await this.db.get<{ n: number }>('SELECT count(*) AS n FROM groups'))!.n;
      return;
    }
    if (!name) return;
    if (change === 'created') {
      const row = await this.db.get<{ id: number; name: string }>('SELECT id, name FROM users WHERE name = ?', [name]);
      if (row) this.applyToIndex({ kind: 'add', users: [row] });
    } else if (change === 'deleted') {
      // gone from the database (not deleted and made again meanwhile): gone from the index
      if (!await this.db.get('SELECT id FROM users WHERE name = ?', [name])) this.applyToIndex({ kind: 'removeName', name });
    } else if (change === 'activity' && body.last_activity && this.indexReady) {
      const id = this.index.idOf(name);
      if (id) this.index.touch(id, body.last_activity);
    }
  }

  // ---- users ----

  getUser(name: string): Promise<UserRow | undefined> {
    return this.db.get<UserRow>(`SELECT ${this.USER} FROM users WHERE name = ?`, [name]);
  }

  /** How many users there are, and how many were active since each of `since` (ISO times): index ranges, no scan of rows. */
  async userCounts(since: string[]): Promise<{ total: number; active: number[] }> {
    const total = (await this.db.get<{ n: number }>('SELECT count(*) AS n FROM users'))?.n ?? 0;
    const active: number[] = [];
    for (const t of since) active.push((await this.db.get<{ n: number }>('SELECT count(*) AS n FROM users WHERE last_activity >= ?', [t]))?.n ?? 0);
    return { total, active };
  }

  /** Which of these names are users (50,000 checked at once: the name index only, no row or group read). */
  async existingNames(names: string[]): Promise<Set<string>> {
    if (!names.length) return new Set();
    const rows = await this.db.all<{ name: string }>(`SELECT name FROM users WHERE ${this.db.inList('name')}`, [names]);
    return new Set(rows.map((r) => r.name));
  }

  async getUsers(names: string[]): Promise<UserRow[]> {
    if (!names.length) return [];
    return this.db.all<UserRow>(`SELECT ${this.USER} FROM users WHERE ${this.db.inList('name')}`, [names]);
  }

  /**
   * A page of users in `sort` order (see UserListQuery). Pages without `only`/`exclude` are slices of the
   * in-memory index (or of its cached search): O(limit) at any offset.
   */
  async listUsers(offset: number, limit: number, { only, exclude = [], sort = { key: 'id', desc: false }, nameFilter = '' }: UserListQuery = {}): Promise<{ rows: UserRow[]; total: number }> {
    if (!this.indexReady) {
      if (!only && !nameFilter) return this.listUsersFromSql(offset, limit, exclude, sort);
      await this.indexLoaded;
    }
    if (!only && !exclude.length) {
      if (!nameFilter) {
        const ids = this.index.page(sort, offset, limit);
        return { rows: sort.key === 'id' ? await this.usersInIdRange(ids, sort.desc) : await this.usersByIds(ids), total: this.index.size };
      }
      const ids = this.index.matching(nameFilter, sort);
      return { rows: await this.usersByIds(Array.from(ids.subarray(offset, offset + limit))), total: ids.length };
    }
    if (!only && !nameFilter) {
      // everyone but a few (e.g. ?state=inactive): a walk of the index, O(offset + limit + excluded)
      const excluded = new Set((await this.db.all<{ id: number }>(`SELECT id FROM users WHERE ${this.db.inList('name')}`, [exclude])).map((r) => r.id));
      return { rows: await this.usersByIds(this.index.pageExcept(sort, offset, limit, excluded)), total: this.index.size - excluded.size };
    }
    const conditions: string[] = [];
    const params: Param[] = [];
    if (only) {
      conditions.push(`(${this.db.inList('name')} OR id IN (SELECT m.user_id FROM group_members m JOIN groups g ON g.id = m.group_id WHERE ${this.db.inList('g.name')}))`);
      params.push(only.names, only.groups);
    }
    if (exclude.length) {
      conditions.push(`NOT ${this.db.inList('name')}`);
      params.push(exclude);
    }
    if (nameFilter) {
      // SQLite's lower() folds ASCII only ('ÉMILE' must find 'émile'): the index matches, SQL gets one JSON array
      conditions.push(this.db.inList('id'));
      params.push(Array.from(this.index.matching(nameFilter, { key: 'id', desc: false })));
    }
    const where = conditions.join(' AND ');
    if (sort.key === 'id') {
      const rows = await this.db.all<UserRow>(`SELECT ${this.USER} FROM users WHERE ${where} ORDER BY id ${sort.desc ? 'DESC' : ''} LIMIT ? OFFSET ?`, [...params, limit, offset]);
      const total = (await this.db.get<{ n: number }>(`SELECT count(*) AS n FROM users WHERE ${where}`, params))!.n;
      return { rows, total };
    }
    // other orders include activity not yet written: the index knows it, SQL does not
    const ids = (await this.db.all<{ id: number }>(`SELECT id FROM users WHERE ${where}`, params)).map((r) => r.id);
    return { rows: await this.usersByIds(this.index.sort(ids, sort).slice(offset, offset + limit)), total: ids.length };
  }

  /** Pages while the index loads: SQLite's own indexes (id, name, last_activity), OFFSET scans for a few seconds. */
  private async listUsersFromSql(offset: number, limit: number, exclude: string[], sort: UserSort): Promise<{ rows: UserRow[]; total: number }> {
    const where = exclude.length ? `WHERE NOT ${this.db.inList('name')}` : '';
    const params = exclude.length ? [exclude] : [];
    const order = SQL_ORDER[sort.key][sort.desc ? 1 : 0];
    const rows = await this.db.all<UserRow>(`SELECT ${this.USER} FROM users ${where} ORDER BY ${order} LIMIT ? OFFSET ?`, [...params, limit, offset]);
    const total = (await this.db.get<{ n: number }>(`SELECT count(*) AS n FROM users ${where}`, params))!.n;
    return { rows, total };
  }

  /**
   * A page in id order holds every user between its first and last id (the index has them all), so it is read
   * as a range: two parameters instead of one per row, which SQLite prepares far faster on every page.
   */
  private async usersInIdRange(ids: number[], desc: boolean): Promise<UserRow[]> {
    if (!ids.length) return [];
    const [lo, hi] = desc ? [ids[ids.length - 1], ids[0]] : [ids[0], ids[ids.length - 1]];
    return this.db.all<UserRow>(`SELECT ${this.USER} FROM users WHERE id BETWEEN ? AND ? ORDER BY id ${desc ? 'DESC' : ''} LIMIT ?`, [lo, hi, ids.length]);
  }

  /** Rows of these ids, in this order. */
  private async usersByIds(ids: number[]): Promise<UserRow[]> {
    if (!ids.length) return [];
    const rows = await this.db.all<UserRow>(`SELECT ${this.USER} FROM users WHERE ${this.db.inList('id')}`, [ids]);
    const byId = new Map(rows.map((r) => [r.id, r]));
    return ids.map((id) => byId.get(id)).filter((r): r is UserRow => r !== undefined);
  }

  /** Activity not yet written still orders `sort=last_activity` pages at once. */
  noteActivity(id: number, at: string): void {
    this.applyToIndex({ kind: 'touch', id, at });
  }

  async insertUser(name: string, admin: boolean, created: string): Promise<void> {
    const staged = this.stage();
    const id = await this.db.insert('INSERT INTO users (name, admin, created) VALUES (?, ?, ?)', [name, admin ? 1 : 0, created]);
    staged.added.push({ id, name });
  }

  /** Many new users in a few multi-row INSERTs (a bulk create of thousands: one statement per 500, not per user). */
  async insertUsers(names: string[], admin: boolean, created: string): Promise<void> {
    const staged = this.stage();
    for (let i = 0; i < names.length; i += 500) {
      const chunk = names.slice(i, i + 500);
      const rows = await this.db.all<{ id: number; name: string }>(
        `INSERT INTO users (name, admin, created) VALUES ${chunk.map(() => '(?, ?, ?)').join(',')} RETURNING id, name`,
        chunk.flatMap((n) => [n, admin ? 1 : 0, created]));
      for (const r of rows) staged.added.push(r);
    }
  }

  /** Whether it changed (a login that says the same again writes nothing). */
  async setUserInfo(name: string, json: string): Promise<boolean> {
    return (await this.db.run('UPDATE users SET user_info = ? WHERE name = ? AND user_info IS DISTINCT FROM ?', [json, name, json])).changes > 0;
  }

  /** Authenticator.manage_roles: true when the roles changed. */
  async setManagedRoles(name: string, json: string): Promise<boolean> {
    return (await this.db.run('UPDATE users SET managed_roles = ? WHERE name = ? AND managed_roles IS DISTINCT FROM ?', [json, name, json])).changes > 0;
  }

  async updateUser(name: string, changes: { name?: string; admin?: boolean }): Promise<void> {
    if (changes.name !== undefined && changes.name !== name) {
      const staged = this.stage();
      const row = await this.getUser(name);
      await this.db.run('UPDATE users SET name = ? WHERE name = ?', [changes.name, name]);
      if (row) staged.index.push({ kind: 'rename', id: row.id, name: changes.name });
    }
    if (changes.admin !== undefined) await this.db.run('UPDATE users SET admin = ? WHERE name = ?', [changes.admin ? 1 : 0, changes.name ?? name]);
  }

  async deleteUser(name: string): Promise<boolean> {
    const staged = this.stage();
    const row = await this.getUser(name);
    if (!row) return false;
    await this.db.run('DELETE FROM users WHERE id = ?', [row.id]);
    staged.index.push({ kind: 'remove', id: row.id });
    return true;
  }

  /** Activity only moves forward. */
  async recordActivity(entries: Map<string, string>): Promise<void> {
    for (const [name, at] of entries) {
      await this.db.run('UPDATE users SET last_activity = ? WHERE name = ? AND (last_activity IS NULL OR last_activity < ?)', [at, name, at]);
    }
  }

  // ---- groups ----

  getGroup(name: string): Promise<GroupRow | undefined> {
    return this.db.get<GroupRow>('SELECT * FROM groups WHERE name = ?', [name]);
  }

  /**
   * Each group's members in user-id order: every one of a group of at most `inline`, else its first `inline`
   * (a group of a million is read on with membersPage). `lastId` is the id of the last member listed.
   */
  async membersOf(groupIds: number[], inline: number): Promise<Map<number, { users: string[]; count: number; lastId: number }>> {
    const out = new Map<number, { users: string[]; count: number; lastId: number }>(groupIds.map((id) => [id, { users: [], count: 0, lastId: 0 }]));
    if (!groupIds.length) return out;
    const counts = await this.db.all<{ group_id: number; n: number }>(
      `SELECT group_id, count(*) AS n FROM group_members WHERE ${this.db.inList('group_id')} GROUP BY group_id`, [groupIds]);
    const small: number[] = [];
    for (const c of counts) {
      out.get(c.group_id)!.count = c.n;
      if (c.n <= inline) small.push(c.group_id);
      else {
        const page = await this.membersPage(c.group_id, 0, inline);
        Object.assign(out.get(c.group_id)!, { users: page.map((m) => m.name), lastId: page.length ? page[page.length - 1].id : 0 });
      }
    }
    if (small.length) {
      const rows = await this.db.all<{ group_id: number; id: number; name: string }>(
        `SELECT m.group_id, u.id, u.name FROM group_members m JOIN users u ON u.id = m.user_id WHERE ${this.db.inList('m.group_id')} ORDER BY m.group_id, m.user_id`, [small]);
      for (const r of rows) {
        const g = out.get(r.group_id)!;
        g.users.push(r.name);
        g.lastId = r.id;
      }
    }
    return out;
  }

  /** Members of a group after user id `after`, in id order (the primary key's order: an index range). */
  membersPage(groupId: number, after: number, limit: number): Promise<{ id: number; name: string }[]> {
    return this.db.all<{ id: number; name: string }>(
      'SELECT u.id, u.name FROM group_members m JOIN users u ON u.id = m.user_id WHERE m.group_id = ? AND m.user_id > ? ORDER BY m.user_id LIMIT ?',
      [groupId, after, limit]);
  }

  async listGroups(offset: number, limit: number, onlyNames?: string[]): Promise<{ rows: GroupRow[]; total: number }> {
    if (!onlyNames) {
      return { rows: await this.db.all<GroupRow>('SELECT * FROM groups ORDER BY id LIMIT ? OFFSET ?', [limit, offset]), total: this.groupCount };
    }
    const rows = await this.db.all<GroupRow>(`SELECT * FROM groups WHERE ${this.db.inList('name')} ORDER BY id LIMIT ? OFFSET ?`, [onlyNames, limit, offset]);
    const total = (await this.db.get<{ n: number }>(`SELECT count(*) AS n FROM groups WHERE ${this.db.inList('name')}`, [onlyNames]))!.n;
    return { rows, total };
  }

  async insertGroup(name: string): Promise<number> {
    const staged = this.stage();
    const id = await this.db.insert('INSERT INTO groups (name) VALUES (?)', [name]);
    staged.groups++;
    return id;
  }

  async deleteGroup(id: number): Promise<void> {
    const staged = this.stage();
    const { changes } = await this.db.run('DELETE FROM groups WHERE id = ?', [id]);
    staged.groups -= changes;
  }

  async addMembers(groupId: number, userNames: string[]): Promise<void> {
    if (!userNames.length) return;
    await this.db.run(`INSERT OR IGNORE INTO group_members (group_id, user_id) SELECT CAST(? AS BIGINT), id FROM users WHERE ${this.db.inList('name')}`, [groupId, userNames]);
  }

  async removeMembers(groupId: number, userNames: string[]): Promise<void> {
    if (!userNames.length) return;
    await this.db.run(`DELETE FROM group_members WHERE group_id = ? AND user_id IN (SELECT id FROM users WHERE ${this.db.inList('name')})`, [groupId, userNames]);
  }

  // ---- passwords, sessions, login failures ----

  async adminCount(): Promise<number> {
    return ((await this.db.get<{ n: number }>('SELECT COUNT(*) AS n FROM users WHERE admin = 1'))?.n) ?? 0;
  }

  async passwordOf(name: string): Promise<string | undefined> {
    return (await this.db.get<{ hashed: string }>('SELECT p.hashed FROM passwords p JOIN users u ON u.id = p.user_id WHERE u.name = ?', [name]))?.hashed;
  }

  async setPassword(name: string, hashed: string): Promise<boolean> {
    const user = await this.getUser(name);
    if (!user) return false;
    await this.db.run('INSERT INTO passwords (user_id, hashed) VALUES (?, ?) ON CONFLICT(user_id) DO UPDATE SET hashed = excluded.hashed', [user.id, hashed]);
    return true;
  }

  /** A login session with what the login said (`state`, sealed: the backend's identity and tokens, for refreshes). */
  async insertSession(s: Omit<SessionRow, 'revoked'>, state: string, { alone = false } = {}): Promise<void> {
    const sql = 'INSERT INTO sessions (id, user_name, created, refreshed, state) VALUES (?, ?, ?, ?, ?)';
    const params = [s.id, s.user_name, s.created, s.refreshed, state];
    // alone: outside any transaction, as one statement in their queue (a login with nothing else to write)
    await (alone ? this.db.runAlone(sql, params) : this.db.run(sql, params));
  }

  getSession(id: string): Promise<SessionRow | undefined> {
    return this.db.get<SessionRow>(`SELECT ${SESSION} FROM sessions WHERE id = ?`, [id]);
  }

  /** An ended session keeps nothing of its login (no provider token): it can never be used again. */
  async revokeSession(id: string): Promise<void> {
    await this.db.run('UPDATE sessions SET revoked = 1, state = NULL WHERE id = ?', [id]);
  }

  async revokeSessionsOf(name: string): Promise<string[]> {
    const ids = (await this.db.all<{ id: string }>('SELECT id FROM sessions WHERE user_name = ? AND revoked = 0', [name])).map((r) => r.id);
    await this.db.run('UPDATE sessions SET revoked = 1, state = NULL WHERE user_name = ?', [name]);
    return ids;
  }

  /** A refreshed state replaces the old one only while the session lives (a logout may have come in between). */
  async renewLoginState(sessionId: string, sealed: string): Promise<void> {
    await this.db.run('UPDATE sessions SET state = ? WHERE id = ? AND revoked = 0', [sealed, sessionId]);
  }

  async loginStateOf(sessionId: string): Promise<string | undefined> {
    return (await this.db.get<{ state: string | null }>('SELECT state FROM sessions WHERE id = ?', [sessionId]))?.state ?? undefined;
  }

  /** The newest live login of a user (a spawn through the API refreshes with it). */
  async latestSessionOf(name: string): Promise<SessionRow | undefined> {
    return this.db.get<SessionRow>(`SELECT ${SESSION} FROM sessions WHERE user_name = ? AND revoked = 0 ORDER BY created DESC LIMIT 1`, [name]);
  }

  async putAuthState(name: string, encrypted: string): Promise<void> {
    await this.db.run('INSERT INTO auth_states (user_id, encrypted) SELECT id, ? FROM users WHERE name = ? ON CONFLICT(user_id) DO UPDATE SET encrypted = excluded.encrypted', [encrypted, name]);
  }

  async clearAuthState(name: string): Promise<void> {
    await this.db.run('DELETE FROM auth_states WHERE user_id = (SELECT id FROM users WHERE name = ?)', [name]);
  }

  async authStateOf(name: string): Promise<string | undefined> {
    return (await this.db.get<{ encrypted: string }>('SELECT a.encrypted FROM auth_states a JOIN users u ON u.id = a.user_id WHERE u.name = ?', [name]))?.encrypted;
  }

  async touchSession(id: string, refreshed: string): Promise<void> {
    await this.db.run('UPDATE sessions SET refreshed = ? WHERE id = ?', [refreshed, id]);
  }

  async recordFailure(keys: string[], atMs: number): Promise<void> {
    for (const key of keys) this.failing.add(key); // before the write: a concurrent check must not miss it
    for (const key of keys) await this.db.run('INSERT INTO login_failures (key, at) VALUES (?, ?)', [key, atMs]);
  }

  private async loadFailingKeys(): Promise<void> {
    const rows = await this.db.all<{ key: string }>('SELECT DISTINCT key FROM login_failures');
    this.failing = new Set(rows.map((r) => r.key));
  }

  /** Failed logins since `sinceMs` for each of `keys` (one query: a login's name and address together; none when neither ever failed). */
  async failuresSince(keys: string[], sinceMs: number): Promise<Map<string, { n: number; last: number }>> {
    if (!this.shared && !keys.some((k) => this.failing.has(k))) return new Map();
    const rows = await this.db.all<{ key: string; n: number; last: number }>(
      `SELECT key, count(*) AS n, max(at) AS last FROM login_failures WHERE ${this.db.inList('key')} AND at >= ? GROUP BY key`, [(keys), sinceMs]);
    return new Map(rows.map((r) => [r.key, { n: r.n, last: r.last }]));
  }

  async clearFailures(key: string): Promise<void> {
    await this.db.run('DELETE FROM login_failures WHERE key = ?', [key]);
  }

  async pruneFailures(beforeMs: number): Promise<void> {
    await this.db.run('DELETE FROM login_failures WHERE at < ?', [beforeMs]);
    // called in a transaction: recordFailure's (queued after it) cannot interleave with the reload
    await this.loadFailingKeys();
  }

  async setProperties(groupId: number, json: string): Promise<void> {
    await this.db.run('UPDATE groups SET properties = ? WHERE id = ?', [json, groupId]);
  }
}
