// The auth actor's own store: users, groups and memberships, passwords, login sessions (with an external
// provider's sealed tokens) and login failures. The only file with SQL for them.
import { Store } from '../../shared/store.js';

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
];

export interface SessionRow { id: string; user_name: string; created: string; refreshed: string; revoked: number }

export interface UserRow { id: number; name: string; admin: number; created: string; last_activity: string | null }
export interface GroupRow { id: number; name: string; properties: string }

/** Restricts a list to named users and members of named groups (a caller with filtered list scopes). */
export interface Restriction { names: string[]; groups: string[] }

const placeholders = (n: number) => Array(n).fill('?').join(',');

/** First index in sorted `ids` whose value is >= id. */
function lowerBound(ids: number[], id: number): number {
  let lo = 0;
  let hi = ids.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ids[mid] < id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export class AuthStore {
  /**
   * Every user id in order, so a page at any offset starts with an index seek (O(limit)), never an
   * OFFSET scan; its length is the total. Changes made inside a transaction apply when it commits.
   */
  private userIds: number[] = [];
  private groupCount = 0;
  private staged: { addUsers: number[]; removeUsers: number[]; groups: number } | null = null;

  private constructor(private readonly db: Store) {}

  static async open(path: string): Promise<AuthStore> {
    const s = new AuthStore(await Store.open(path, MIGRATIONS));
    s.userIds = (await s.db.all<{ id: number }>('SELECT id FROM users ORDER BY id')).map((r) => r.id);
    s.groupCount = (await s.db.get<{ n: number }>('SELECT count(*) AS n FROM groups'))!.n;
    return s;
  }

  close(): Promise<void> {
    return this.db.close();
  }

  async transaction<T>(work: () => Promise<T>): Promise<T> {
    let staged = { addUsers: [] as number[], removeUsers: [] as number[], groups: 0 };
    const result = await this.db.transaction(async () => {
      staged = this.staged = { addUsers: [], removeUsers: [], groups: 0 };
      try {
        return await work();
      } finally {
        this.staged = null;
      }
    });
    for (const id of staged.addUsers) this.userIds.splice(lowerBound(this.userIds, id), 0, id);
    for (const id of staged.removeUsers) {
      const i = lowerBound(this.userIds, id);
      if (this.userIds[i] === id) this.userIds.splice(i, 1);
    }
    this.groupCount += staged.groups;
    return result;
  }

  private stage(): { addUsers: number[]; removeUsers: number[]; groups: number } {
    if (!this.staged) throw new Error('auth store: writes happen inside transaction()');
    return this.staged;
  }

  // ---- users ----

  getUser(name: string): Promise<UserRow | undefined> {
    return this.db.get<UserRow>('SELECT * FROM users WHERE name = ?', [name]);
  }

  async getUsers(names: string[]): Promise<UserRow[]> {
    if (!names.length) return [];
    return this.db.all<UserRow>(`SELECT * FROM users WHERE name IN (${placeholders(names.length)})`, names);
  }

  /** `only`: named users and members of named groups; `exclude`: names left out (a small set, e.g. users with servers). */
  async listUsers(offset: number, limit: number, only?: Restriction, exclude: string[] = []): Promise<{ rows: UserRow[]; total: number }> {
    if (!only && !exclude.length) {
      if (offset >= this.userIds.length) return { rows: [], total: this.userIds.length };
      const rows = await this.db.all<UserRow>('SELECT * FROM users WHERE id >= ? ORDER BY id LIMIT ?', [this.userIds[offset], limit]);
      return { rows, total: this.userIds.length };
    }
    const conditions: string[] = [];
    const params: string[] = [];
    if (only) {
      conditions.push(`(name IN (${placeholders(only.names.length)}) OR id IN (SELECT m.user_id FROM group_members m JOIN groups g ON g.id = m.group_id WHERE g.name IN (${placeholders(only.groups.length)})))`);
      params.push(...only.names, ...only.groups);
    }
    if (exclude.length) {
      conditions.push(`name NOT IN (${placeholders(exclude.length)})`);
      params.push(...exclude);
    }
    const where = conditions.join(' AND ');
    const rows = await this.db.all<UserRow>(`SELECT * FROM users WHERE ${where} ORDER BY id LIMIT ? OFFSET ?`, [...params, limit, offset]);
    const total = (await this.db.get<{ n: number }>(`SELECT count(*) AS n FROM users WHERE ${where}`, params))!.n;
    return { rows, total };
  }

  /** Group names of each user id, for one page of users at a time. */
  async groupsOfUsers(userIds: number[]): Promise<Map<number, string[]>> {
    const out = new Map<number, string[]>(userIds.map((id) => [id, []]));
    if (!userIds.length) return out;
    const rows = await this.db.all<{ user_id: number; name: string }>(
      `SELECT m.user_id, g.name FROM group_members m JOIN groups g ON g.id = m.group_id WHERE m.user_id IN (${placeholders(userIds.length)}) ORDER BY g.id`, userIds);
    for (const r of rows) out.get(r.user_id)!.push(r.name);
    return out;
  }

  async insertUser(name: string, admin: boolean, created: string): Promise<void> {
    const staged = this.stage();
    const { lastID } = await this.db.run('INSERT INTO users (name, admin, created) VALUES (?, ?, ?)', [name, admin ? 1 : 0, created]);
    staged.addUsers.push(lastID);
  }

  async updateUser(name: string, changes: { name?: string; admin?: boolean }): Promise<void> {
    if (changes.name !== undefined) await this.db.run('UPDATE users SET name = ? WHERE name = ?', [changes.name, name]);
    if (changes.admin !== undefined) await this.db.run('UPDATE users SET admin = ? WHERE name = ?', [changes.admin ? 1 : 0, changes.name ?? name]);
  }

  async deleteUser(name: string): Promise<boolean> {
    const staged = this.stage();
    const row = await this.getUser(name);
    if (!row) return false;
    await this.db.run('DELETE FROM users WHERE id = ?', [row.id]);
    staged.removeUsers.push(row.id);
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

  async membersOf(groupIds: number[]): Promise<Map<number, string[]>> {
    const out = new Map<number, string[]>(groupIds.map((id) => [id, []]));
    if (!groupIds.length) return out;
    const rows = await this.db.all<{ group_id: number; name: string }>(
      `SELECT m.group_id, u.name FROM group_members m JOIN users u ON u.id = m.user_id WHERE m.group_id IN (${placeholders(groupIds.length)}) ORDER BY u.id`, groupIds);
    for (const r of rows) out.get(r.group_id)!.push(r.name);
    return out;
  }

  async listGroups(offset: number, limit: number, onlyNames?: string[]): Promise<{ rows: GroupRow[]; total: number }> {
    if (!onlyNames) {
      return { rows: await this.db.all<GroupRow>('SELECT * FROM groups ORDER BY id LIMIT ? OFFSET ?', [limit, offset]), total: this.groupCount };
    }
    const inList = `name IN (${placeholders(onlyNames.length)})`;
    const rows = await this.db.all<GroupRow>(`SELECT * FROM groups WHERE ${inList} ORDER BY id LIMIT ? OFFSET ?`, [...onlyNames, limit, offset]);
    const total = (await this.db.get<{ n: number }>(`SELECT count(*) AS n FROM groups WHERE ${inList}`, onlyNames))!.n;
    return { rows, total };
  }

  async insertGroup(name: string): Promise<number> {
    const staged = this.stage();
    const { lastID } = await this.db.run('INSERT INTO groups (name) VALUES (?)', [name]);
    staged.groups++;
    return lastID;
  }

  async deleteGroup(id: number): Promise<void> {
    const staged = this.stage();
    const { changes } = await this.db.run('DELETE FROM groups WHERE id = ?', [id]);
    staged.groups -= changes;
  }

  async addMembers(groupId: number, userNames: string[]): Promise<void> {
    if (!userNames.length) return;
    await this.db.run(`INSERT OR IGNORE INTO group_members (group_id, user_id) SELECT ?, id FROM users WHERE name IN (${placeholders(userNames.length)})`, [groupId, ...userNames]);
  }

  async removeMembers(groupId: number, userNames: string[]): Promise<void> {
    if (!userNames.length) return;
    await this.db.run(`DELETE FROM group_members WHERE group_id = ? AND user_id IN (SELECT id FROM users WHERE name IN (${placeholders(userNames.length)}))`, [groupId, ...userNames]);
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

  async insertSession(s: Omit<SessionRow, 'revoked'>): Promise<void> {
    await this.db.run('INSERT INTO sessions (id, user_name, created, refreshed) VALUES (?, ?, ?, ?)', [s.id, s.user_name, s.created, s.refreshed]);
  }

  getSession(id: string): Promise<SessionRow | undefined> {
    return this.db.get<SessionRow>('SELECT * FROM sessions WHERE id = ?', [id]);
  }

  /** An ended session keeps no provider token: it can never be used again. */
  async revokeSession(id: string): Promise<void> {
    await this.db.run('UPDATE sessions SET revoked = 1 WHERE id = ?', [id]);
    await this.db.run('DELETE FROM external_tokens WHERE session_id = ?', [id]);
  }

  async revokeSessionsOf(name: string): Promise<string[]> {
    const ids = (await this.db.all<{ id: string }>('SELECT id FROM sessions WHERE user_name = ? AND revoked = 0', [name])).map((r) => r.id);
    await this.db.run('UPDATE sessions SET revoked = 1 WHERE user_name = ?', [name]);
    await this.db.run('DELETE FROM external_tokens WHERE session_id IN (SELECT id FROM sessions WHERE user_name = ?)', [name]);
    return ids;
  }

  async putExternalToken(sessionId: string, sealed: string): Promise<void> {
    await this.db.run('INSERT INTO external_tokens (session_id, sealed) VALUES (?, ?) ON CONFLICT(session_id) DO UPDATE SET sealed = excluded.sealed', [sessionId, sealed]);
  }

  /** A renewed token replaces the old one only while the session lives (a logout may have come in between). */
  async renewExternalToken(sessionId: string, sealed: string): Promise<void> {
    await this.db.run('UPDATE external_tokens SET sealed = ? WHERE session_id = ?', [sealed, sessionId]);
  }

  async externalTokenOf(sessionId: string): Promise<string | undefined> {
    return (await this.db.get<{ sealed: string }>('SELECT sealed FROM external_tokens WHERE session_id = ?', [sessionId]))?.sealed;
  }

  async touchSession(id: string, refreshed: string): Promise<void> {
    await this.db.run('UPDATE sessions SET refreshed = ? WHERE id = ?', [refreshed, id]);
  }

  async recordFailure(keys: string[], atMs: number): Promise<void> {
    for (const key of keys) await this.db.run('INSERT INTO login_failures (key, at) VALUES (?, ?)', [key, atMs]);
  }

  async failuresSince(key: string, sinceMs: number): Promise<{ n: number; last: number }> {
    const r = await this.db.get<{ n: number; last: number | null }>('SELECT count(*) AS n, max(at) AS last FROM login_failures WHERE key = ? AND at >= ?', [key, sinceMs]);
    return { n: r?.n ?? 0, last: r?.last ?? 0 };
  }

  async clearFailures(key: string): Promise<void> {
    await this.db.run('DELETE FROM login_failures WHERE key = ?', [key]);
  }

  async pruneFailures(beforeMs: number): Promise<void> {
    await this.db.run('DELETE FROM login_failures WHERE at < ?', [beforeMs]);
  }

  async setProperties(groupId: number, json: string): Promise<void> {
    await this.db.run('UPDATE groups SET properties = ? WHERE id = ?', [json, groupId]);
  }
}
