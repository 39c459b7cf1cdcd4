// The oauth actor's own store: OAuth clients (secrets hashed) and authorization codes (kept only as
// SHA-256 digests). The only file with SQL for them.
import { randomUUID } from 'node:crypto';
import { Store, type Migration, type StoreLocation } from '../../shared/store.js';
import { isoNow } from '../../shared/time.js';

const OIDC_CODES_AND_TABLES = `ALTER TABLE codes ADD COLUMN oidc_scopes TEXT NOT NULL DEFAULT '[]';
   ALTER TABLE codes ADD COLUMN nonce TEXT NOT NULL DEFAULT '';
   CREATE TABLE oidc_grants (
     token_id TEXT PRIMARY KEY,       -- the access token's id (a12) at the tokens actor
     client_id TEXT NOT NULL,
     user_name TEXT NOT NULL,
     oidc_scopes TEXT NOT NULL,       -- JSON list
     session_id TEXT NOT NULL,
     expires_at INTEGER NOT NULL      -- ms: the access token's expiry
   );
   CREATE INDEX oidc_grants_by_expiry ON oidc_grants(expires_at);
   CREATE TABLE refresh_tokens (
     token_hash TEXT PRIMARY KEY,     -- SHA-256: the token itself is never stored
     family TEXT NOT NULL,            -- the first token's hash: a reused one revokes the whole line
     client_id TEXT NOT NULL,
     user_name TEXT NOT NULL,
     scopes TEXT NOT NULL,            -- JSON list of hub scopes
     oidc_scopes TEXT NOT NULL,       -- JSON list
     session_id TEXT NOT NULL,
     access_token_id TEXT NOT NULL,   -- the access token issued with it
     expires_at INTEGER NOT NULL,     -- ms
     used_at INTEGER,                 -- ms: rotated (a second presentation revokes the family)
     revoked INTEGER NOT NULL DEFAULT 0
   );
   CREATE INDEX refresh_by_family ON refresh_tokens(family);
   CREATE INDEX refresh_by_access ON refresh_tokens(access_token_id);
   CREATE INDEX refresh_by_session ON refresh_tokens(session_id);
   CREATE INDEX refresh_by_expiry ON refresh_tokens(expires_at);`;

const MIGRATIONS: Migration[] = [
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
  // OpenID Connect: clients that are not services (Hub.oauth_clients, kind 'tool': several redirect URIs, maybe
  // public), the OIDC scopes and nonce a code carries, what each access token was granted (userinfo), refresh tokens.
  {
    sqlite: `CREATE TABLE clients_v2 (
     client_id TEXT PRIMARY KEY,
     secret_hash TEXT NOT NULL,       -- shared/secrets.ts format; '' for a public client
     kind TEXT NOT NULL CHECK (kind IN ('server', 'service', 'tool')),
     description TEXT NOT NULL,
     redirect_uri TEXT NOT NULL,      -- the first of redirect_uris
     allowed_scopes TEXT NOT NULL,
     no_confirm INTEGER NOT NULL DEFAULT 0,
     user_name TEXT NOT NULL DEFAULT '',
     server_name TEXT NOT NULL DEFAULT '',
     service TEXT NOT NULL DEFAULT '',
     created TEXT NOT NULL,
     redirect_uris TEXT NOT NULL DEFAULT '[]',             -- JSON list, every registered one
     post_logout_redirect_uris TEXT NOT NULL DEFAULT '[]', -- JSON list
     public INTEGER NOT NULL DEFAULT 0,
     require_nonce INTEGER NOT NULL DEFAULT 0
   );
   INSERT INTO clients_v2 (client_id, secret_hash, kind, description, redirect_uri, allowed_scopes, no_confirm, user_name, server_name, service, created, redirect_uris)
     SELECT client_id, secret_hash, kind, description, redirect_uri, allowed_scopes, no_confirm, user_name, server_name, service, created, json_array(redirect_uri) FROM clients;
   DROP TABLE clients;
   ALTER TABLE clients_v2 RENAME TO clients;
${OIDC_CODES_AND_TABLES}`,
    // the same columns added in place (PostgreSQL alters a CHECK and adds columns without a rebuild)
    postgres: `ALTER TABLE clients DROP CONSTRAINT clients_kind_check;
   ALTER TABLE clients ADD CONSTRAINT clients_kind_check CHECK (kind IN ('server', 'service', 'tool'));
   ALTER TABLE clients ADD COLUMN redirect_uris TEXT NOT NULL DEFAULT '[]';
   ALTER TABLE clients ADD COLUMN post_logout_redirect_uris TEXT NOT NULL DEFAULT '[]';
   ALTER TABLE clients ADD COLUMN public INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE clients ADD COLUMN require_nonce INTEGER NOT NULL DEFAULT 0;
   UPDATE clients SET redirect_uris = json_build_array(redirect_uri)::text;
${OIDC_CODES_AND_TABLES}`,
  },
  // the OIDC signing keys, when the oauth actors of several nodes share this store (else a file in the data dir)
  `CREATE TABLE signing_keys (
     slot INTEGER PRIMARY KEY CHECK (slot = 1),
     keys TEXT NOT NULL,              -- JSON: the key file (private keys)
     version TEXT NOT NULL            -- changes with every write (compare-and-set)
   );`,
  // a service client's secret hash brought over by `hub import jupyterhub` (its api_token is not in the config):
  // kept while the service is configured without an api_token; a configured api_token replaces it
  'ALTER TABLE clients ADD COLUMN imported INTEGER NOT NULL DEFAULT 0;',
];

export type ClientKind = 'server' | 'service' | 'tool';

export interface ClientRow {
  client_id: string; secret_hash: string; kind: ClientKind; description: string; redirect_uri: string;
  allowed_scopes: string; no_confirm: number; user_name: string; server_name: string; service: string; created: string;
  redirect_uris: string; post_logout_redirect_uris: string; public: number; require_nonce: number; imported: number;
}

/** A service's OAuth client as the established hub stored it (its secret: the hash of the service's api_token). */
export interface ImportedServiceClient {
  client_id: string; service: string; secret_hash: string; description: string; redirect_uri: string; allowed_scopes: string[];
}

export interface CodeRow {
  code_hash: string; client_id: string; user_name: string; scopes: string; redirect_uri: string; session_id: string;
  code_challenge: string; code_challenge_method: string; expires_at: number; used_at: number | null; reused: number; token_ids: string;
  oidc_scopes: string; nonce: string;
}

export interface GrantRow { token_id: string; client_id: string; user_name: string; oidc_scopes: string; session_id: string; expires_at: number }

export interface RefreshRow {
  token_hash: string; family: string; client_id: string; user_name: string; scopes: string; oidc_scopes: string; session_id: string;
  access_token_id: string; expires_at: number; used_at: number | null; revoked: number;
}

export class OAuthStore {
  private constructor(private readonly db: Store) {}

  static async open(where: string | StoreLocation): Promise<OAuthStore> {
    return new OAuthStore(await Store.open(where, MIGRATIONS));
  }

  close(): Promise<void> {
    return this.db.close();
  }

  /** Whether the oauth actors of other nodes use this store too (Hub.db_url on PostgreSQL). */
  get shared(): boolean {
    return this.db.dialect === 'postgres';
  }

  // ---- the OIDC signing keys of a shared store (signing-keys.ts storeKeySource) ----

  async signingKeysVersion(): Promise<string | null> {
    return (await this.db.get<{ version: string }>('SELECT version FROM signing_keys WHERE slot = 1'))?.version ?? null;
  }

  async signingKeys(): Promise<string | null> {
    return (await this.db.get<{ keys: string }>('SELECT keys FROM signing_keys WHERE slot = 1'))?.keys ?? null;
  }

  /** Writes the keys unless they changed since `expected` (null: none yet); false when another writer came first. */
  async putSigningKeys(json: string, expected: string | null): Promise<boolean> {
    const version = randomUUID();
    const { changes } = expected === null
      ? await this.db.run('INSERT OR IGNORE INTO signing_keys (slot, keys, version) VALUES (1, ?, ?)', [json, version])
      : await this.db.run('UPDATE signing_keys SET keys = ?, version = ? WHERE slot = 1 AND version = ?', [json, version, expected]);
    return changes === 1;
  }

  client(clientId: string): Promise<ClientRow | undefined> {
    return this.db.get<ClientRow>('SELECT * FROM clients WHERE client_id = ?', [clientId]);
  }

  clientsOfKind(kind: ClientKind): Promise<ClientRow[]> {
    return this.db.all<ClientRow>('SELECT * FROM clients WHERE kind = ?', [kind]);
  }

  async putClient(c: ClientRow): Promise<void> {
    await this.db.run(
      `INSERT INTO clients (client_id, secret_hash, kind, description, redirect_uri, allowed_scopes, no_confirm, user_name, server_name, service, created,
         redirect_uris, post_logout_redirect_uris, public, require_nonce, imported)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT(client_id) DO UPDATE SET secret_hash = excluded.secret_hash, kind = excluded.kind, description = excluded.description,
         redirect_uri = excluded.redirect_uri, allowed_scopes = excluded.allowed_scopes, no_confirm = excluded.no_confirm,
         user_name = excluded.user_name, server_name = excluded.server_name, service = excluded.service,
         redirect_uris = excluded.redirect_uris, post_logout_redirect_uris = excluded.post_logout_redirect_uris,
         public = excluded.public, require_nonce = excluded.require_nonce, imported = excluded.imported`,
      [c.client_id, c.secret_hash, c.kind, c.description, c.redirect_uri, c.allowed_scopes, c.no_confirm, c.user_name, c.server_name, c.service, c.created,
        c.redirect_uris, c.post_logout_redirect_uris, c.public, c.require_nonce, c.imported]);
  }

  /**
   * `hub import jupyterhub`, into a copy of this store: each service's client with the secret hash the established
   * hub stored. A client id held here by a server, a tool or another service is left as it is and named in `refused`.
   */
  async importServiceClients(clients: ImportedServiceClient[]): Promise<{ added: number; updated: number; refused: string[] }> {
    return this.db.transaction(async () => {
      const out = { added: 0, updated: 0, refused: [] as string[] };
      for (const c of clients) {
        const here = await this.client(c.client_id);
        if (here && (here.kind !== 'service' || here.service !== c.service)) {
          out.refused.push(c.client_id);
          continue;
        }
        await this.putClient({
          client_id: c.client_id, secret_hash: c.secret_hash, kind: 'service', description: c.description, redirect_uri: c.redirect_uri,
          allowed_scopes: JSON.stringify(c.allowed_scopes), no_confirm: 0, user_name: '', server_name: '', service: c.service,
          created: here?.created ?? isoNow(), redirect_uris: JSON.stringify([c.redirect_uri]), post_logout_redirect_uris: '[]',
          public: 0, require_nonce: 0, imported: 1,
        });
        if (here) out.updated++;
        else out.added++;
      }
      return out;
    });
  }

  /** The client and its codes, grants and refresh tokens go together. */
  async deleteClient(clientId: string): Promise<boolean> {
    return this.db.transaction(async () => {
      await this.db.run('DELETE FROM codes WHERE client_id = ?', [clientId]);
      await this.db.run('DELETE FROM oidc_grants WHERE client_id = ?', [clientId]);
      await this.db.run('DELETE FROM refresh_tokens WHERE client_id = ?', [clientId]);
      return (await this.db.run('DELETE FROM clients WHERE client_id = ?', [clientId])).changes > 0;
    });
  }

  async insertCode(c: Omit<CodeRow, 'used_at' | 'reused' | 'token_ids'>): Promise<void> {
    await this.db.run(
      `INSERT INTO codes (code_hash, client_id, user_name, scopes, redirect_uri, session_id, code_challenge, code_challenge_method, expires_at, oidc_scopes, nonce)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [c.code_hash, c.client_id, c.user_name, c.scopes, c.redirect_uri, c.session_id, c.code_challenge, c.code_challenge_method, c.expires_at, c.oidc_scopes, c.nonce]);
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

  /** Codes past their expiry by more than `keepMs` (used ones are kept that long to catch reuse); grants and refresh tokens past theirs. */
  async deleteCodesExpiredBefore(cutoffMs: number): Promise<number> {
    await this.db.run('DELETE FROM oidc_grants WHERE expires_at < ?', [Date.now()]);
    await this.db.run('DELETE FROM refresh_tokens WHERE expires_at < ?', [cutoffMs]);
    return (await this.db.run('DELETE FROM codes WHERE expires_at < ?', [cutoffMs])).changes;
  }

  // ---- OpenID Connect: grants (what an access token may read at userinfo) and refresh tokens ----

  async insertGrant(g: GrantRow): Promise<void> {
    await this.db.run(
      `INSERT INTO oidc_grants (token_id, client_id, user_name, oidc_scopes, session_id, expires_at) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (token_id) DO UPDATE SET client_id = excluded.client_id, user_name = excluded.user_name, oidc_scopes = excluded.oidc_scopes,
         session_id = excluded.session_id, expires_at = excluded.expires_at`,
      [g.token_id, g.client_id, g.user_name, g.oidc_scopes, g.session_id, g.expires_at]);
  }

  grant(tokenId: string): Promise<GrantRow | undefined> {
    return this.db.get<GrantRow>('SELECT * FROM oidc_grants WHERE token_id = ?', [tokenId]);
  }

  async insertRefresh(r: Omit<RefreshRow, 'used_at' | 'revoked'>): Promise<void> {
    await this.db.run(
      `INSERT INTO refresh_tokens (token_hash, family, client_id, user_name, scopes, oidc_scopes, session_id, access_token_id, expires_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [r.token_hash, r.family, r.client_id, r.user_name, r.scopes, r.oidc_scopes, r.session_id, r.access_token_id, r.expires_at]);
  }

  refresh(tokenHash: string): Promise<RefreshRow | undefined> {
    return this.db.get<RefreshRow>('SELECT * FROM refresh_tokens WHERE token_hash = ?', [tokenHash]);
  }

  /** True for exactly one caller per refresh token: the refresh that rotates it. */
  async claimRefresh(tokenHash: string, nowMs: number): Promise<boolean> {
    return (await this.db.run('UPDATE refresh_tokens SET used_at = ? WHERE token_hash = ? AND used_at IS NULL AND revoked = 0', [nowMs, tokenHash])).changes === 1;
  }

  /** Revokes every refresh token of the families named (directly, or through one of their access tokens or sessions); returns the access token ids they gave. */
  async revokeFamilies(by: { families?: string[]; accessTokenIds?: string[]; sessionId?: string }): Promise<string[]> {
    return this.db.transaction(async () => {
      const families = new Set(by.families ?? []);
      for (const id of by.accessTokenIds ?? []) {
        for (const r of await this.db.all<{ family: string }>('SELECT family FROM refresh_tokens WHERE access_token_id = ?', [id])) families.add(r.family);
      }
      if (by.sessionId) {
        for (const r of await this.db.all<{ family: string }>('SELECT DISTINCT family FROM refresh_tokens WHERE session_id = ? AND revoked = 0', [by.sessionId])) families.add(r.family);
      }
      const tokenIds: string[] = [];
      for (const family of families) {
        const rows = await this.db.all<{ access_token_id: string }>('SELECT access_token_id FROM refresh_tokens WHERE family = ? AND revoked = 0', [family]);
        for (const r of rows) tokenIds.push(r.access_token_id);
        await this.db.run('UPDATE refresh_tokens SET revoked = 1 WHERE family = ?', [family]);
      }
      return tokenIds;
    });
  }
}
