// The auth actor's own store: users, groups and memberships. The only file with SQL for them.
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
];

export interface UserRow { id: number; name: string; admin: number; created: string; last_activity: string | null }
export interface GroupRow { id: number; name: string; properties: string }

/** Restricts a list to named users and members of named groups (a caller with filtered list scopes). */
export interface Restriction { names: string[]; groups: string[] }

const placeholders = (n: number) => Array(n).fill('?').join(',');

export class AuthStore {
  private userCount = 0;
  private groupCount = 0;

  private constructor(private readonly db: Store) {}

  static async open(path: string): Promise<AuthStore> {
    const s = new AuthStore(await Store.open(path, MIGRATIONS));
    // Totals are kept in memory so a page costs O(limit), not a count over the whole table.
    s.userCount = (await s.db.get<{ n: number }>('SELECT count(*) AS n FROM users'))!.n;
    s.groupCount = (await s.db.get<{ n: number }>('SELECT count(*) AS n FROM groups'))!.n;
    return s;
  }

  close(): Promise<void> {
    return this.db.close();
  }

  transaction<T>(work: () => Promise<T>): Promise<T> {
    return this.db.transaction(work);
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
      const rows = await this.db.all<UserRow>('SELECT * FROM users ORDER BY id LIMIT ? OFFSET ?', [limit, offset]);
      return { rows, total: this.userCount };
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
    await this.db.run('INSERT INTO users (name, admin, created) VALUES (?, ?, ?)', [name, admin ? 1 : 0, created]);
    this.userCount++;
  }

  async updateUser(name: string, changes: { name?: string; admin?: boolean }): Promise<void> {
    if (changes.name !== undefined) await this.db.run('UPDATE users SET name = ? WHERE name = ?', [changes.name, name]);
    if (changes.admin !== undefined) await this.db.run('UPDATE users SET admin = ? WHERE name = ?', [changes.admin ? 1 : 0, changes.name ?? name]);
  }

  async deleteUser(name: string): Promise<boolean> {
    const { changes } = await this.db.run('DELETE FROM users WHERE name = ?', [name]);
    this.userCount -= changes;
    return changes > 0;
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
    const { lastID } = await this.db.run('INSERT INTO groups (name) VALUES (?)', [name]);
    this.groupCount++;
    return lastID;
  }

  async deleteGroup(id: number): Promise<void> {
    const { changes } = await this.db.run('DELETE FROM groups WHERE id = ?', [id]);
    this.groupCount -= changes;
  }

  async addMembers(groupId: number, userNames: string[]): Promise<void> {
    if (!userNames.length) return;
    await this.db.run(`INSERT OR IGNORE INTO group_members (group_id, user_id) SELECT ?, id FROM users WHERE name IN (${placeholders(userNames.length)})`, [groupId, ...userNames]);
  }

  async removeMembers(groupId: number, userNames: string[]): Promise<void> {
    if (!userNames.length) return;
    await this.db.run(`DELETE FROM group_members WHERE group_id = ? AND user_id IN (SELECT id FROM users WHERE name IN (${placeholders(userNames.length)}))`, [groupId, ...userNames]);
  }

  async setProperties(groupId: number, json: string): Promise<void> {
    await this.db.run('UPDATE groups SET properties = ? WHERE id = ?', [json, groupId]);
  }
}
