// The oauth actor's own store: OAuth clients (secrets hashed) and authorization codes (kept only as
// SHA-256 digests). The only file with SQL for them.
import { Store } from '../../shared/store.js';

const MIGRATIONS = [
  `CREATE TABLE clients (
     client_id TEXT PRIMARY KEY,
     secret_hash TEXT NOT NULL,       -- shared/secrets.ts format
     kind TEXT NOT NULL CHECK (kind IN ('server', 'service')),
     description TEXT NOT NULL,
     redirect_uri TEXT NOT NULL,
     allowed_scopes TEXT NOT NULL,    -- JSON list
     no_confirm INTEGER NOT NULL DEFAULT 0,
     user_name TEXT NOT NULL DEFAULT '',
     server_name TEXT NOT NULL DEFAULT '',
     service TEXT NOT NULL DEFAULT '',
     created TEXT NOT NULL
   );
   CREATE TABLE codes (
     code_hash TEXT PRIMARY KEY,      -- SHA-256 of the code: the code itself is never stored
     client_id TEXT NOT NULL,
     user_name TEXT NOT NULL,
     scopes TEXT NOT NULL,            -- JSON list
     redirect_uri TEXT NOT NULL,
     session_id TEXT NOT NULL,
     code_challenge TEXT NOT NULL,
     code_challenge_method TEXT NOT NULL,
     expires_at INTEGER NOT NULL,     -- ms since the epoch
     used_at INTEGER,                 -- ms; set by the one exchange that redeemed it
     reused INTEGER NOT NULL DEFAULT 0,
     token_ids TEXT NOT NULL DEFAULT '[]'
   );
   CREATE INDEX codes_by_expiry ON codes(expires_at);`,
];

export interface ClientRow {
  client_id: string; secret_hash: string; kind: 'server' | 'service'; description: string; redirect_uri: string;
  allowed_scopes: string; no_confirm: number; user_name: string; server_name: string; service: string; created: string;
}

export interface CodeRow {
  code_hash: string; client_id: string; user_name: string; scopes: string; redirect_uri: string; session_id: string;
  code_challenge: string; code_challenge_method: string; expires_at: number; used_at: number | null; reused: number; token_ids: string;
}

export class OAuthStore {
  private constructor(private readonly db: Store) {}

  static async open(path: string): Promise<OAuthStore> {
    return new OAuthStore(await Store.open(path, MIGRATIONS));
  }

  close(): Promise<void> {
    return this.db.close();
  }

  client(clientId: string): Promise<ClientRow | undefined> {
    return this.db.get<ClientRow>('SELECT * FROM clients WHERE client_id = ?', [clientId]);
  }

  clientsOfKind(kind: 'server' | 'service'): Promise<ClientRow[]> {
    return this.db.all<ClientRow>('SELECT * FROM clients WHERE kind = ?', [kind]);
  }

  async putClient(c: ClientRow): Promise<void> {
    await this.db.run(
      `INSERT INTO clients (client_id, secret_hash, kind, description, redirect_uri, allowed_scopes, no_confirm, user_name, server_name, service, created)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT(client_id) DO UPDATE SET secret_hash = excluded.secret_hash, kind = excluded.kind, description = excluded.description,
         redirect_uri = excluded.redirect_uri, allowed_scopes = excluded.allowed_scopes, no_confirm = excluded.no_confirm,
         user_name = excluded.user_name, server_name = excluded.server_name, service = excluded.service`,
      [c.client_id, c.secret_hash, c.kind, c.description, c.redirect_uri, c.allowed_scopes, c.no_confirm, c.user_name, c.server_name, c.service, c.created]);
  }

  /** The client and its codes go together. */
  async deleteClient(clientId: string): Promise<boolean> {
    return this.db.transaction(async () => {
      await this.db.run('DELETE FROM codes WHERE client_id = ?', [clientId]);
      return (await this.db.run('DELETE FROM clients WHERE client_id = ?', [clientId])).changes > 0;
    });
  }

  async insertCode(c: Omit<CodeRow, 'used_at' | 'reused' | 'token_ids'>): Promise<void> {
    await this.db.run(
      `INSERT INTO codes (code_hash, client_id, user_name, scopes, redirect_uri, session_id, code_challenge, code_challenge_method, expires_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [c.code_hash, c.client_id, c.user_name, c.scopes, c.redirect_uri, c.session_id, c.code_challenge, c.code_challenge_method, c.expires_at]);
  }

  code(codeHash: string): Promise<CodeRow | undefined> {
    return this.db.get<CodeRow>('SELECT * FROM codes WHERE code_hash = ?', [codeHash]);
  }

  /** True for exactly one caller per code: the exchange that redeems it. */
  async claimCode(codeHash: string, nowMs: number): Promise<boolean> {
    return (await this.db.run('UPDATE codes SET used_at = ? WHERE code_hash = ? AND used_at IS NULL', [nowMs, codeHash])).changes === 1;
  }

  /** Marks a redeemed code as presented again; returns the token ids it yielded so far. */
  async markReused(codeHash: string): Promise<string[]> {
    return this.db.transaction(async () => {
      await this.db.run('UPDATE codes SET reused = 1 WHERE code_hash = ?', [codeHash]);
      const row = await this.code(codeHash);
      return row ? (JSON.parse(row.token_ids) as string[]) : [];
    });
  }

  /** Records the token a code yielded; says whether the code was presented again meanwhile. */
  async recordToken(codeHash: string, tokenId: string): Promise<{ reused: boolean }> {
    return this.db.transaction(async () => {
      const row = await this.code(codeHash);
      if (!row) return { reused: false };
      await this.db.run('UPDATE codes SET token_ids = ? WHERE code_hash = ?', [JSON.stringify([...JSON.parse(row.token_ids), tokenId]), codeHash]);
      return { reused: row.reused === 1 };
    });
  }

  /** Codes past their expiry by more than `keepMs` (used ones are kept that long to catch reuse). */
  async deleteCodesExpiredBefore(cutoffMs: number): Promise<number> {
    return (await this.db.run('DELETE FROM codes WHERE expires_at < ?', [cutoffMs])).changes;
  }
}
