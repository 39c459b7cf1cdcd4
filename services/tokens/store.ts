// The tokens actor's own store: API tokens as prefix + salted hash. The only file with SQL for them.
import { Store } from '../../shared/store.js';

const MIGRATIONS = [
  `CREATE TABLE tokens (
     id INTEGER PRIMARY KEY,
     prefix TEXT NOT NULL,
     hashed TEXT NOT NULL,
     owner_kind TEXT NOT NULL CHECK (owner_kind IN ('user', 'service')),
     owner_name TEXT NOT NULL,
     scopes TEXT NOT NULL,            -- JSON list, as requested (effective scopes are computed per use)
     note TEXT NOT NULL DEFAULT '',
     created TEXT NOT NULL,
     last_activity TEXT,
     expires_at TEXT,
     session_id TEXT,
     oauth_client TEXT NOT NULL DEFAULT 'hub',
     source TEXT NOT NULL DEFAULT 'api' -- api | config | cli
   );
   CREATE INDEX tokens_by_prefix ON tokens(prefix);
   CREATE INDEX tokens_by_owner ON tokens(owner_kind, owner_name);`,
];

export interface TokenRow {
  id: number; prefix: string; hashed: string; owner_kind: 'user' | 'service'; owner_name: string; scopes: string;
  note: string; created: string; last_activity: string | null; expires_at: string | null; session_id: string | null;
  oauth_client: string; source: string;
}

export type NewToken = Omit<TokenRow, 'id' | 'last_activity'>;

export class TokenStore {
  private constructor(private readonly db: Store) {}

  static async open(path: string): Promise<TokenStore> {
    return new TokenStore(await Store.open(path, MIGRATIONS));
  }

  close(): Promise<void> {
    return this.db.close();
  }

  byPrefix(prefix: string): Promise<TokenRow[]> {
    return this.db.all<TokenRow>('SELECT * FROM tokens WHERE prefix = ?', [prefix]);
  }

  byId(id: number): Promise<TokenRow | undefined> {
    return this.db.get<TokenRow>('SELECT * FROM tokens WHERE id = ?', [id]);
  }

  byOwner(kind: string, name: string): Promise<TokenRow[]> {
    return this.db.all<TokenRow>('SELECT * FROM tokens WHERE owner_kind = ? AND owner_name = ? ORDER BY coalesce(last_activity, created), id', [kind, name]);
  }

  bySource(source: string): Promise<TokenRow[]> {
    return this.db.all<TokenRow>('SELECT * FROM tokens WHERE source = ?', [source]);
  }

  async insert(t: NewToken): Promise<number> {
    const { lastID } = await this.db.run(
      `INSERT INTO tokens (prefix, hashed, owner_kind, owner_name, scopes, note, created, expires_at, session_id, oauth_client, source)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [t.prefix, t.hashed, t.owner_kind, t.owner_name, t.scopes, t.note, t.created, t.expires_at, t.session_id, t.oauth_client, t.source]);
    return lastID;
  }

  async delete(id: number): Promise<boolean> {
    return (await this.db.run('DELETE FROM tokens WHERE id = ?', [id])).changes > 0;
  }

  /** Removes an owner's tokens and says which ids went. */
  async deleteOwner(kind: string, name: string): Promise<number[]> {
    const ids = (await this.db.all<{ id: number }>('SELECT id FROM tokens WHERE owner_kind = ? AND owner_name = ?', [kind, name])).map((r) => r.id);
    await this.db.run('DELETE FROM tokens WHERE owner_kind = ? AND owner_name = ?', [kind, name]);
    return ids;
  }

  async deleteBySession(ownerName: string, sessionId: string): Promise<number[]> {
    const ids = (await this.db.all<{ id: number }>("SELECT id FROM tokens WHERE owner_kind = 'user' AND owner_name = ? AND session_id = ?", [ownerName, sessionId])).map((r) => r.id);
    await this.db.run("DELETE FROM tokens WHERE owner_kind = 'user' AND owner_name = ? AND session_id = ?", [ownerName, sessionId]);
    return ids;
  }

  /** Removes every token an OAuth client issued and says which went (with their owners, for the events). */
  async deleteByClient(client: string): Promise<{ id: number; owner_kind: string; owner_name: string }[]> {
    const rows = await this.db.all<{ id: number; owner_kind: string; owner_name: string }>('SELECT id, owner_kind, owner_name FROM tokens WHERE oauth_client = ?', [client]);
    await this.db.run('DELETE FROM tokens WHERE oauth_client = ?', [client]);
    return rows;
  }

  async renameOwner(kind: string, from: string, to: string): Promise<void> {
    await this.db.run('UPDATE tokens SET owner_name = ? WHERE owner_kind = ? AND owner_name = ?', [to, kind, from]);
  }

  async deleteExpired(nowIso: string): Promise<number[]> {
    const ids = (await this.db.all<{ id: number }>('SELECT id FROM tokens WHERE expires_at IS NOT NULL AND expires_at <= ?', [nowIso])).map((r) => r.id);
    await this.db.run('DELETE FROM tokens WHERE expires_at IS NOT NULL AND expires_at <= ?', [nowIso]);
    return ids;
  }

  async recordActivity(entries: Map<number, string>): Promise<void> {
    await this.db.transaction(async () => {
      for (const [id, at] of entries) {
        await this.db.run('UPDATE tokens SET last_activity = ? WHERE id = ? AND (last_activity IS NULL OR last_activity < ?)', [at, id, at]);
      }
    });
  }
}
