// The tokens actor's own store: API tokens as prefix + salted hash, and the shares and share codes that add
// to a grantee's scopes. The only file with SQL for them.
import { Store, type Migration, type StoreLocation } from '../../shared/store.js';

// Tokens that left (revoked, expired, their owner deleted), remembered a while so the gateway can tell a revoked
// token of this hub from a token that never was one (a server's own) and refuse it at the front door while
// servers may still hold its answer in their caches. Every way a token row goes passes through a trigger.
const REVOKED_TOKENS = `CREATE TABLE revoked_tokens (
     prefix TEXT NOT NULL,
     hashed TEXT NOT NULL,
     revoked_at TEXT NOT NULL
   );
   CREATE INDEX revoked_tokens_by_prefix ON revoked_tokens(prefix);
   CREATE INDEX revoked_tokens_by_time ON revoked_tokens(revoked_at);`;

const MIGRATIONS: Migration[] = [
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
  // Shares keep scope *bases*: the filter (!server=<owner>/<server>) follows from the row, so a rename cannot leave it stale.
  `CREATE TABLE shares (
     id INTEGER PRIMARY KEY,
     owner TEXT NOT NULL,
     server_name TEXT NOT NULL,
     grantee_kind TEXT NOT NULL CHECK (grantee_kind IN ('user', 'group')),
     grantee TEXT NOT NULL,
     scopes TEXT NOT NULL,            -- JSON list of scope bases
     created_at TEXT NOT NULL,
     created_by TEXT NOT NULL,
     expires_at TEXT,                 -- a share from a code ends with the code
     UNIQUE (owner, server_name, grantee_kind, grantee)
   );
   CREATE INDEX shares_by_grantee ON shares(grantee_kind, grantee);
   CREATE INDEX shares_by_expiry ON shares(expires_at) WHERE expires_at IS NOT NULL;
   CREATE TABLE share_codes (
     id INTEGER PRIMARY KEY,
     prefix TEXT NOT NULL,
     hashed TEXT NOT NULL,
     owner TEXT NOT NULL,
     server_name TEXT NOT NULL,
     scopes TEXT NOT NULL,            -- JSON list of scope bases
     created_at TEXT NOT NULL,
     created_by TEXT NOT NULL,
     expires_at TEXT NOT NULL,
     exchange_count INTEGER NOT NULL DEFAULT 0,
     last_exchanged_at TEXT
   );
   CREATE INDEX share_codes_by_prefix ON share_codes(prefix);
   CREATE INDEX share_codes_by_server ON share_codes(owner, server_name);`,
  { sqlite: `${REVOKED_TOKENS}
   CREATE TRIGGER tokens_remember_revoked AFTER DELETE ON tokens BEGIN
     INSERT INTO revoked_tokens (prefix, hashed, revoked_at) VALUES (old.prefix, old.hashed, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
   END;`,
  postgres: `${REVOKED_TOKENS}
   CREATE FUNCTION tokens_remember_revoked() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
     INSERT INTO revoked_tokens (prefix, hashed, revoked_at)
       VALUES (old.prefix, old.hashed, to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
     RETURN old;
   END $$;
   CREATE TRIGGER tokens_remember_revoked AFTER DELETE ON tokens FOR EACH ROW EXECUTE FUNCTION tokens_remember_revoked();` },
];

export interface ShareRow {
  id: number; owner: string; server_name: string; grantee_kind: 'user' | 'group'; grantee: string; scopes: string;
  created_at: string; created_by: string; expires_at: string | null;
}

export interface ShareCodeRow {
  id: number; prefix: string; hashed: string; owner: string; server_name: string; scopes: string; created_at: string;
  created_by: string; expires_at: string; exchange_count: number; last_exchanged_at: string | null;
}

const LIVE = '(expires_at IS NULL OR expires_at > ?)';

export interface TokenRow {
  id: number; prefix: string; hashed: string; owner_kind: 'user' | 'service'; owner_name: string; scopes: string;
  note: string; created: string; last_activity: string | null; expires_at: string | null; session_id: string | null;
  oauth_client: string; source: string;
}

export type NewToken = Omit<TokenRow, 'id' | 'last_activity'>;

/** A token of the established hub as the import brings it: its hash as that hub stored it, `scopes` JSON. */
export type NewImportedToken = Omit<TokenRow, 'last_activity' | 'source'> & { last_activity: string | null };
export type NewImportedShare = Omit<ShareRow, 'id' | 'created_by'>;
export type NewImportedCode = Omit<ShareCodeRow, 'id' | 'created_by'>;
/** Rows the import added, and rows already here (from an earlier import) it updated, per kind. */
export type ImportCounts = Record<string, { added: number; updated: number }>;

export class TokenStore {
  private constructor(private readonly db: Store) {}

  static async open(where: string | StoreLocation): Promise<TokenStore> {
    return new TokenStore(await Store.open(where, MIGRATIONS));
  }

  close(): Promise<void> {
    return this.db.close();
  }

  byPrefix(prefix: string): Promise<TokenRow[]> {
    return this.db.all<TokenRow>('SELECT * FROM tokens WHERE prefix = ?', [prefix]);
  }

  /** Hashes of tokens with this prefix that left since `since` (ISO), expired rows still here included. */
  async goneByPrefix(prefix: string, since: string, now: string): Promise<string[]> {
    const rows = await this.db.all<{ hashed: string }>(
      `SELECT hashed FROM revoked_tokens WHERE prefix = ? AND revoked_at > ?
       UNION ALL SELECT hashed FROM tokens WHERE prefix = ? AND expires_at IS NOT NULL AND expires_at <= ?`, [prefix, since, prefix, now]);
    return rows.map((r) => r.hashed);
  }

  /** Forgets tokens that left before `before` (ISO). */
  async pruneRevoked(before: string): Promise<number> {
    return (await this.db.run('DELETE FROM revoked_tokens WHERE revoked_at <= ?', [before])).changes;
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

  /** The owners of a kind that hold tokens of a source (runtime services' tokens, swept at start). */
  async ownersOfSource(kind: string, source: string): Promise<string[]> {
    return (await this.db.all<{ owner_name: string }>('SELECT DISTINCT owner_name FROM tokens WHERE owner_kind = ? AND source = ?', [kind, source])).map((r) => r.owner_name);
  }

  async insert(t: NewToken): Promise<number> {
    return this.db.insert(
      `INSERT INTO tokens (prefix, hashed, owner_kind, owner_name, scopes, note, created, expires_at, session_id, oauth_client, source)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [t.prefix, t.hashed, t.owner_kind, t.owner_name, t.scopes, t.note, t.created, t.expires_at, t.session_id, t.oauth_client, t.source]);
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

  // ---- the established hub's rows (`hub import jupyterhub`) ---------------

  /**
   * Its tokens, shares and share codes, in one transaction. A token or code is the same one when its stored hash
   * is (its prefix and salted SHA-512 are this store's own format): a second import updates it, never adds it
   * again. A token keeps its id (`a<id>`, as the established hub names it) when no token here has that id.
   */
  importJupyterhub(rows: { tokens: NewImportedToken[]; shares: NewImportedShare[]; codes: NewImportedCode[] }): Promise<ImportCounts> {
    // rows travel as one JSON array of arrays per statement (read by position: no field names to parse per row)
    const pack = <T>(list: T[], fields: readonly (keyof T)[]) => JSON.stringify(list.map((r) => fields.map((f) => r[f])));
    const at = (fields: readonly string[]) => (f: string) => `j.value->>${fields.indexOf(f)}`;
    if (this.db.dialect !== 'sqlite') throw new Error('the import writes a copy of a SQLite store');
    return this.db.transaction(async () => {
      const count = async (sql: string, param: string) => (await this.db.get<{ n: number }>(sql, [param]))!.n;
      const TOKEN = ['id', 'prefix', 'hashed', 'owner_kind', 'owner_name', 'scopes', 'note', 'created', 'last_activity', 'expires_at', 'session_id', 'oauth_client'] as const;
      const tokens = pack(rows.tokens, TOKEN);
      const T = at(TOKEN);
      // only an earlier import can hold the same hash (each is salted): without one, nothing to match
      const earlier = (await this.db.get<{ n: number }>("SELECT count(*) AS n FROM tokens WHERE source = 'jupyterhub'"))!.n > 0;
      const sameToken = `EXISTS (SELECT 1 FROM tokens t WHERE t.prefix = ${T('prefix')} AND t.hashed = ${T('hashed')})`;
      let tokensKnown = 0;
      if (earlier) {
        tokensKnown = await count(`SELECT count(*) AS n FROM json_each(?) j WHERE ${sameToken}`, tokens);
        await this.db.run(
          `UPDATE tokens SET owner_kind = j.owner_kind, owner_name = j.owner_name, scopes = j.scopes, note = j.note, created = j.created,
             expires_at = j.expires_at, session_id = j.session_id, oauth_client = j.oauth_client,
             last_activity = CASE WHEN tokens.last_activity IS NULL OR j.last_activity > tokens.last_activity THEN j.last_activity ELSE tokens.last_activity END
           FROM (SELECT ${TOKEN.map((f) => `${T(f)} AS ${f}`).join(', ')} FROM json_each(?) j) AS j
           WHERE tokens.prefix = j.prefix AND tokens.hashed = j.hashed`, [tokens]);
      }
      const columns = 'prefix, hashed, owner_kind, owner_name, scopes, note, created, last_activity, expires_at, session_id, oauth_client, source';
      const values = `${TOKEN.slice(1).map(T).join(', ')}, 'jupyterhub'`;
      const isNew = earlier ? `NOT ${sameToken}` : 'true';
      // first the ones whose id is free, then the rest numbered on (two statements: no new id can take a kept one)
      const { changes } = await this.db.run(`INSERT INTO tokens (id, ${columns}) SELECT ${T('id')}, ${values} FROM json_each(?) j
        WHERE ${isNew} AND NOT EXISTS (SELECT 1 FROM tokens t WHERE t.id = ${T('id')})`, [tokens]);
      if (tokensKnown + changes < rows.tokens.length) await this.db.run(`INSERT INTO tokens (${columns}) SELECT ${values} FROM json_each(?) j WHERE NOT ${sameToken}`, [tokens]);

      const SHARE = ['owner', 'server_name', 'grantee_kind', 'grantee', 'scopes', 'created_at', 'expires_at'] as const;
      const shares = pack(rows.shares, SHARE);
      const S = at(SHARE);
      const sharesKnown = await count(`SELECT count(*) AS n FROM json_each(?) j WHERE EXISTS (SELECT 1 FROM shares s
        WHERE s.owner = ${S('owner')} AND s.server_name = ${S('server_name')} AND s.grantee_kind = ${S('grantee_kind')} AND s.grantee = ${S('grantee')})`, shares);
      await this.db.run(
        `INSERT INTO shares (owner, server_name, grantee_kind, grantee, scopes, created_at, created_by, expires_at)
         SELECT ${['owner', 'server_name', 'grantee_kind', 'grantee', 'scopes', 'created_at', 'owner', 'expires_at'].map(S).join(', ')} FROM json_each(?) j WHERE true
         ON CONFLICT (owner, server_name, grantee_kind, grantee) DO UPDATE SET scopes = excluded.scopes, created_at = excluded.created_at, expires_at = excluded.expires_at`, [shares]);

      const CODE = ['prefix', 'hashed', 'owner', 'server_name', 'scopes', 'created_at', 'expires_at', 'exchange_count', 'last_exchanged_at'] as const;
      const codes = pack(rows.codes, CODE);
      const C = at(CODE);
      const sameCode = `EXISTS (SELECT 1 FROM share_codes c WHERE c.prefix = ${C('prefix')} AND c.hashed = ${C('hashed')})`;
      const codesKnown = await count(`SELECT count(*) AS n FROM json_each(?) j WHERE ${sameCode}`, codes);
      await this.db.run(
        `UPDATE share_codes SET owner = j.owner, server_name = j.server_name, scopes = j.scopes, created_at = j.created_at, expires_at = j.expires_at,
           exchange_count = max(share_codes.exchange_count, j.exchange_count), last_exchanged_at = coalesce(j.last_exchanged_at, share_codes.last_exchanged_at)
         FROM (SELECT ${CODE.map((f) => `${C(f)} AS ${f}`).join(', ')} FROM json_each(?) j) AS j
         WHERE share_codes.prefix = j.prefix AND share_codes.hashed = j.hashed`, [codes]);
      await this.db.run(
        `INSERT INTO share_codes (prefix, hashed, owner, server_name, scopes, created_at, created_by, expires_at, exchange_count, last_exchanged_at)
         SELECT ${['prefix', 'hashed', 'owner', 'server_name', 'scopes', 'created_at', 'owner', 'expires_at', 'exchange_count', 'last_exchanged_at'].map(C).join(', ')}
         FROM json_each(?) j WHERE NOT ${sameCode}`, [codes]);
      return {
        tokens: { added: rows.tokens.length - tokensKnown, updated: tokensKnown },
        shares: { added: rows.shares.length - sharesKnown, updated: sharesKnown },
        share_codes: { added: rows.codes.length - codesKnown, updated: codesKnown },
      };
    });
  }

  // ---- shares ------------------------------------------------------------

  /** Shares not expired at `now`, of one server or of all an owner's servers. */
  sharesOf(owner: string, serverName: string | null, now: string): Promise<ShareRow[]> {
    return serverName === null
      ? this.db.all<ShareRow>(`SELECT * FROM shares WHERE owner = ? AND ${LIVE} ORDER BY server_name, created_at, id`, [owner, now])
      : this.db.all<ShareRow>(`SELECT * FROM shares WHERE owner = ? AND server_name = ? AND ${LIVE} ORDER BY created_at, id`, [owner, serverName, now]);
  }

  /** Shares granted to a user directly or to any of the given groups, not expired at `now`. */
  async sharesFor(user: string | null, groups: readonly string[], now: string): Promise<ShareRow[]> {
    const clauses: string[] = [];
    const params: (string | readonly string[])[] = [];
    if (user !== null) {
      clauses.push("(grantee_kind = 'user' AND grantee = ?)");
      params.push(user);
    }
    if (groups.length) {
      // one list parameter: a person may be in more groups than SQLite takes parameters
      clauses.push(`(grantee_kind = 'group' AND ${this.db.inList('grantee')})`);
      params.push(groups);
    }
    if (!clauses.length) return [];
    return this.db.all<ShareRow>(`SELECT * FROM shares WHERE (${clauses.join(' OR ')}) AND ${LIVE} ORDER BY created_at, id`, [...params, now]);
  }

  share(owner: string, serverName: string, kind: string, grantee: string, now: string): Promise<ShareRow | undefined> {
    return this.db.get<ShareRow>(`SELECT * FROM shares WHERE owner = ? AND server_name = ? AND grantee_kind = ? AND grantee = ? AND ${LIVE}`,
      [owner, serverName, kind, grantee, now]);
  }

  /**
   * Creates the share or merges scopes into it, in one transaction. `expiresAt` null makes it permanent; a later expiry
   * extends an expiring one. An expired row left behind counts as absent.
   */
  upsertShare(s: Omit<ShareRow, 'id' | 'scopes'> & { scopes: string[] }): Promise<ShareRow> {
    return this.db.transaction(async () => {
      const key = [s.owner, s.server_name, s.grantee_kind, s.grantee];
      const old = await this.db.get<ShareRow>('SELECT * FROM shares WHERE owner = ? AND server_name = ? AND grantee_kind = ? AND grantee = ?', key);
      const live = old && (old.expires_at === null || old.expires_at > s.created_at);
      if (old && live) {
        const scopes = [...new Set([...JSON.parse(old.scopes) as string[], ...s.scopes])].sort();
        const expires = old.expires_at === null || s.expires_at === null ? null : (old.expires_at > s.expires_at ? old.expires_at : s.expires_at);
        await this.db.run('UPDATE shares SET scopes = ?, expires_at = ? WHERE id = ?', [JSON.stringify(scopes), expires, old.id]);
      } else {
        if (old) await this.db.run('DELETE FROM shares WHERE id = ?', [old.id]);
        await this.db.run(
          'INSERT INTO shares (owner, server_name, grantee_kind, grantee, scopes, created_at, created_by, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
          [...key, JSON.stringify([...new Set(s.scopes)].sort()), s.created_at, s.created_by, s.expires_at]);
      }
      return (await this.db.get<ShareRow>('SELECT * FROM shares WHERE owner = ? AND server_name = ? AND grantee_kind = ? AND grantee = ?', key))!;
    });
  }

  async setShareScopes(id: number, scopes: string[]): Promise<void> {
    await this.db.run('UPDATE shares SET scopes = ? WHERE id = ?', [JSON.stringify(scopes), id]);
  }

  async deleteShare(id: number): Promise<void> {
    await this.db.run('DELETE FROM shares WHERE id = ?', [id]);
  }

  /** Deletes the rows `where` selects and returns them (for the events and the audit). */
  private async takeShares(where: string, params: string[]): Promise<ShareRow[]> {
    return this.db.transaction(async () => {
      const rows = await this.db.all<ShareRow>(`SELECT * FROM shares WHERE ${where}`, params);
      if (rows.length) await this.db.run(`DELETE FROM shares WHERE ${where}`, params);
      return rows;
    });
  }

  deleteSharesOfServer(owner: string, serverName: string): Promise<ShareRow[]> {
    return this.takeShares('owner = ? AND server_name = ?', [owner, serverName]);
  }

  /** Everything a user takes along when deleted: shares of their servers and shares granted to them. */
  deleteSharesOfUser(user: string): Promise<ShareRow[]> {
    return this.takeShares("owner = ? OR (grantee_kind = 'user' AND grantee = ?)", [user, user]);
  }

  deleteSharesToGroup(group: string): Promise<ShareRow[]> {
    return this.takeShares("grantee_kind = 'group' AND grantee = ?", [group]);
  }

  deleteExpiredShares(now: string): Promise<ShareRow[]> {
    return this.takeShares('expires_at IS NOT NULL AND expires_at <= ?', [now]);
  }

  /** The earliest expiry of a share or code still to come, or null. */
  async nextExpiry(now: string): Promise<string | null> {
    const row = await this.db.get<{ at: string | null }>(
      `SELECT min(at) AS at FROM (SELECT min(expires_at) AS at FROM shares WHERE expires_at > ?
         UNION ALL SELECT min(expires_at) AS at FROM share_codes WHERE expires_at > ?) AS e`, [now, now]);
    return row?.at ?? null;
  }

  async renameInShares(from: string, to: string): Promise<void> {
    await this.db.transaction(async () => {
      await this.db.run('UPDATE shares SET owner = ? WHERE owner = ?', [to, from]);
      await this.db.run("UPDATE shares SET grantee = ? WHERE grantee_kind = 'user' AND grantee = ?", [to, from]);
      await this.db.run('UPDATE share_codes SET owner = ? WHERE owner = ?', [to, from]);
    });
  }

  // ---- share codes -------------------------------------------------------

  async insertCode(c: Omit<ShareCodeRow, 'id' | 'exchange_count' | 'last_exchanged_at'>): Promise<number> {
    return this.db.insert(
      'INSERT INTO share_codes (prefix, hashed, owner, server_name, scopes, created_at, created_by, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
      [c.prefix, c.hashed, c.owner, c.server_name, c.scopes, c.created_at, c.created_by, c.expires_at]);
  }

  codeById(id: number): Promise<ShareCodeRow | undefined> {
    return this.db.get<ShareCodeRow>('SELECT * FROM share_codes WHERE id = ?', [id]);
  }

  codesByPrefix(prefix: string, now: string): Promise<ShareCodeRow[]> {
    return this.db.all<ShareCodeRow>('SELECT * FROM share_codes WHERE prefix = ? AND expires_at > ?', [prefix, now]);
  }

  codesOf(owner: string, serverName: string | null, now: string): Promise<ShareCodeRow[]> {
    return serverName === null
      ? this.db.all<ShareCodeRow>('SELECT * FROM share_codes WHERE owner = ? AND expires_at > ? ORDER BY server_name, created_at, id', [owner, now])
      : this.db.all<ShareCodeRow>('SELECT * FROM share_codes WHERE owner = ? AND server_name = ? AND expires_at > ? ORDER BY created_at, id', [owner, serverName, now]);
  }

  async deleteCode(id: number): Promise<boolean> {
    return (await this.db.run('DELETE FROM share_codes WHERE id = ?', [id])).changes > 0;
  }

  async deleteCodesOfServer(owner: string, serverName: string): Promise<number> {
    return (await this.db.run('DELETE FROM share_codes WHERE owner = ? AND server_name = ?', [owner, serverName])).changes;
  }

  async deleteCodesOfOwner(owner: string): Promise<number> {
    return (await this.db.run('DELETE FROM share_codes WHERE owner = ?', [owner])).changes;
  }

  async deleteExpiredCodes(now: string): Promise<number> {
    return (await this.db.run('DELETE FROM share_codes WHERE expires_at <= ?', [now])).changes;
  }

  async recordExchange(id: number, at: string): Promise<void> {
    await this.db.run('UPDATE share_codes SET exchange_count = exchange_count + 1, last_exchanged_at = ? WHERE id = ?', [at, id]);
  }
}
