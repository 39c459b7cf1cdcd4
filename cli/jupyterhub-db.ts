// Reads the established hub's database (a SQLite file or a postgresql:// URL) into plain rows for `hub import
// jupyterhub`: never writes to it. Its schema is the one its alembic revision names; columns that later releases
// added are read only where they exist, so a 4.x, 5.x or 6.x database reads the same way. Times come out as this
// hub writes them (ISO 8601 in UTC with a Z): the established hub stores naive UTC datetimes.
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { CliError } from './hub.js';

/** The alembic revisions of the established hub's releases this import knows the schema of (head of each). */
export const KNOWN_REVISIONS: Readonly<Record<string, string>> = Object.freeze({
  '0eee8c825d24': '4.x',
  '3c2384c5aae1': '5.x',
  '4621fec11365': '5.x',
  'be8ecf03ddac': '5.x–6.x',
  'afd65840b69e': '5.x–6.x',
  'ff1860e38070': '6.x',
  'f460b0348206': '6.1',
});

export interface JhUser {
  id: number; name: string; admin: boolean; created: string; last_activity: string | null;
  /** a Fernet token (JUPYTERHUB_CRYPT_KEY), or null */
  encrypted_auth_state: Buffer | null;
  user_info: string | null;
}
export interface JhGroup { id: number; name: string; properties: Record<string, unknown>; members: string[] }
export interface JhRole {
  name: string; description: string; scopes: string[]; users: string[]; groups: string[]; services: string[];
}
export interface JhService {
  name: string; admin: boolean; url: string | null; display: boolean | null; oauth_no_confirm: boolean | null;
  oauth_client_id: string | null; oauth_client_allowed_scopes: string[] | null; info: Record<string, unknown> | null;
}
export interface JhToken {
  id: number; hashed: string; prefix: string; owner_kind: 'user' | 'service'; owner_name: string; scopes: string[];
  note: string; created: string; last_activity: string | null; expires_at: string | null; session_id: string | null;
  client_id: string;
}
export interface JhServer {
  user: string; name: string; display_name: string | null; started: string | null; last_activity: string | null;
  user_options: Record<string, unknown>;
}
export interface JhShare {
  owner: string; server_name: string; grantee_kind: 'user' | 'group'; grantee: string; scopes: string[];
  created_at: string; expires_at: string | null;
}
export interface JhShareCode {
  prefix: string; hashed: string; owner: string; server_name: string; scopes: string[]; created_at: string;
  expires_at: string; exchange_count: number; last_exchanged_at: string | null;
}
export interface JhOAuthClient {
  identifier: string; description: string; secret: string; redirect_uri: string; allowed_scopes: string[]; service: string | null;
}

export interface JupyterhubData {
  revision: string;
  release: string;
  users: JhUser[];
  groups: JhGroup[];
  roles: JhRole[];
  services: JhService[];
  tokens: JhToken[];
  servers: JhServer[];
  shares: JhShare[];
  shareCodes: JhShareCode[];
  oauthClients: JhOAuthClient[];
  /** what was left out and why (expired rows, rows whose owner is gone), one line each */
  skipped: string[];
}

type Row = Record<string, unknown>;
interface Source {
  all(sql: string): Promise<Row[]>;
  /** every row of `table` (these columns; a binary one as hex text), in `order` */
  select(table: string, columns: readonly string[], order: string): Promise<Row[]>;
  tables(): Promise<Set<string>>;
  columns(table: string): Promise<Set<string>>;
  close(): Promise<void>;
}

async function openSqlite(path: string): Promise<Source> {
  if (!existsSync(path)) throw new CliError(`--db: no such file ${path}`);
  const sqlite3 = (await import('sqlite3')).default;
  const db = await new Promise<InstanceType<typeof sqlite3.Database>>((ok, fail) => {
    const d = new sqlite3.Database(path, sqlite3.OPEN_READONLY, (e) => (e ? fail(new CliError(`--db: cannot open ${path}: ${e.message}`)) : ok(d)));
  });
  const all = (sql: string) => new Promise<Row[]>((ok, fail) => db.all(sql, (e, rows) => (e ? fail(e) : ok(rows as Row[]))));
  // one snapshot for every read: the established hub may still be writing (it should be stopped, see the command)
  await all('BEGIN');
  return {
    all,
    // one JSON text per table: the driver makes a JS object per row at ~14 µs, JSON.parse is ~20 times faster
    select: async (table, columns, order) => {
      const list = columns.map((c) => (c === 'encrypted_auth_state' ? `hex(${c})` : c)).join(', ');
      const [row] = await all(`SELECT json_group_array(json_array(${list})) AS rows FROM (SELECT ${columns.join(', ')} FROM ${table} ORDER BY ${order})`);
      return (JSON.parse(String(row.rows)) as unknown[][]).map((values) => Object.fromEntries(columns.map((c, i) => [c, values[i]])));
    },
    tables: async () => new Set((await all("SELECT name FROM sqlite_master WHERE type = 'table'")).map((r) => String(r.name))),
    columns: async (table) => new Set((await all(`PRAGMA table_info(${table})`)).map((r) => String(r.name))),
    close: async () => {
      await all('COMMIT').catch(() => undefined);
      await new Promise<void>((ok) => db.close(() => ok()));
    },
  };
}

async function openPostgres(url: string): Promise<Source> {
  const pg = (await import('pg')).default;
  // `timestamp without time zone` as its text: the established hub's naive UTC, not this machine's local time
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000, types: { getTypeParser: (oid: number, format?: string) => (oid === 1114 ? (v: string) => v : (pg.types.getTypeParser as (o: number, f?: string) => (v: string) => unknown)(oid, format)) } as never });
  try {
    await client.connect();
  } catch (e) {
    throw new CliError(`--db: cannot connect to ${redactUrl(url)}: ${(e as Error).message}`);
  }
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
  const all = async (sql: string) => (await client.query(sql)).rows as Row[];
  return {
    all,
    select: (table, columns, order) => all(`SELECT ${columns.map((c) => (c === 'encrypted_auth_state' ? `encode(${c}, 'hex') AS ${c}` : `"${c}"`)).join(', ')} FROM ${table} ORDER BY ${order}`),
    tables: async () => new Set((await all("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")).map((r) => String(r.table_name))),
    columns: async (table) => new Set((await client.query('SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1', [table])).rows.map((r) => String(r.column_name))),
    close: async () => {
      await client.query('COMMIT').catch(() => undefined);
      await client.end().catch(() => undefined);
    },
  };
}

/** A database URL for messages: never its password. */
export function redactUrl(url: string): string {
  return url.replace(/(\/\/[^:/@]*:)[^@]*@/, '$1***@');
}

/** `sqlite:///path`, a path, or `postgresql://…` (also `postgres://`, `postgresql+psycopg2://`). */
export function describeSource(db: string, cwd = process.cwd()): { kind: 'sqlite'; path: string } | { kind: 'postgres'; url: string } {
  const pgMatch = /^postgres(?:ql)?(?:\+[a-z0-9]+)?:\/\//i.exec(db);
  if (pgMatch) return { kind: 'postgres', url: `postgresql://${db.slice(pgMatch[0].length)}` };
  // SQLAlchemy's form: sqlite:///relative/path, sqlite:////absolute/path
  if (/^sqlite:\/\/\//i.test(db)) return { kind: 'sqlite', path: resolve(cwd, db.slice('sqlite:///'.length)) };
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(db)) throw new CliError(`--db: ${redactUrl(db)}: only SQLite files and postgresql:// URLs are read`);
  return { kind: 'sqlite', path: resolve(cwd, db) };
}

/** The established hub's naive UTC datetime (or a driver's Date) as ISO 8601 with Z, or null. */
const NAIVE = /^(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?$/;

export function isoFromJh(value: unknown): string | null {
  if (value === null || value === undefined || value === '') return null;
  if (value instanceof Date) return value.toISOString();
  // the common case without a Date: "2026-11-25 14:31:20.124343" → "2026-11-25T14:31:20.124Z"
  const m = typeof value === 'string' ? NAIVE.exec(value) : null;
  if (m) return `${m[1]}T${m[2]}.${(m[3] ?? '').padEnd(3, '0').slice(0, 3)}Z`;
  const s = String(value).trim().replace(' ', 'T');
  const ms = Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(s) ? s : `${s}Z`);
  return Number.isFinite(ms) ? new Date(ms).toISOString() : null;
}

function json<T>(value: unknown, fallback: T): T {
  if (value === null || value === undefined || value === '') return fallback;
  if (typeof value !== 'string') return value as T;
  try {
    return JSON.parse(value) as T;
  } catch {
    return fallback;
  }
}

const bool = (v: unknown) => v === true || v === 1 || v === '1' || v === 't';
const str = (v: unknown) => (v === null || v === undefined ? '' : String(v));

/** Everything the import brings over, read in one snapshot of the source. */
export async function readJupyterhubDb(db: string): Promise<JupyterhubData> {
  const where = describeSource(db);
  const src = where.kind === 'sqlite' ? await openSqlite(where.path) : await openPostgres(where.url);
  try {
    return await readAll(src);
  } finally {
    await src.close();
  }
}

async function readAll(src: Source): Promise<JupyterhubData> {
  const tables = await src.tables();
  if (!tables.has('alembic_version') || !tables.has('users')) {
    throw new CliError('--db: not a database of the established hub (no alembic_version or users table)');
  }
  const versions = (await src.all('SELECT version_num FROM alembic_version')).map((r) => String(r.version_num));
  const revision = versions[0] ?? '';
  if (versions.length !== 1 || !Object.hasOwn(KNOWN_REVISIONS, revision)) {
    throw new CliError(`--db: unknown schema revision ${JSON.stringify(versions.join(',') || '(none)')}: this import reads the established hub's 4.x, 5.x and 6.x schemas (${Object.keys(KNOWN_REVISIONS).join(', ')}); \`jupyterhub upgrade-db\` with its 6.1 takes an older database there`);
  }
  const skipped: string[] = [];
  const now = new Date().toISOString();
  const has = async (table: string, column: string) => tables.has(table) && (await src.columns(table)).has(column);

  const userCols = await src.columns('users');
  const present = (cols: Set<string>, wanted: string[]) => wanted.filter((c) => cols.has(c));
  const users: JhUser[] = (await src.select('users', present(userCols, ['id', 'name', 'admin', 'created', 'last_activity', 'encrypted_auth_state', 'user_info']), 'id'))
    .map((r) => ({
      id: Number(r.id), name: str(r.name), admin: bool(r.admin), created: isoFromJh(r.created) ?? now,
      last_activity: isoFromJh(r.last_activity),
      encrypted_auth_state: r.encrypted_auth_state ? Buffer.from(String(r.encrypted_auth_state), 'hex') : null,
      user_info: r.user_info === null || r.user_info === undefined ? null : str(r.user_info),
    }));
  const userName = new Map(users.map((u) => [u.id, u.name]));

  const groupRows = await src.all(`SELECT id, name, ${(await has('groups', 'properties')) ? 'properties' : 'NULL AS properties'} FROM groups ORDER BY id`);
  const groupName = new Map(groupRows.map((g) => [Number(g.id), str(g.name)]));
  const members = new Map<number, string[]>();
  for (const m of await src.select('user_group_map', ['user_id', 'group_id'], 'group_id, user_id')) {
    const name = userName.get(Number(m.user_id));
    if (name !== undefined) (members.get(Number(m.group_id)) ?? members.set(Number(m.group_id), []).get(Number(m.group_id))!).push(name);
  }
  const groups: JhGroup[] = groupRows.map((g) => ({
    id: Number(g.id), name: str(g.name), properties: json<Record<string, unknown>>(g.properties, {}), members: members.get(Number(g.id)) ?? [],
  }));

  const serviceRows = tables.has('services') ? await src.all('SELECT * FROM services ORDER BY id') : [];
  const serviceName = new Map(serviceRows.map((s) => [Number(s.id), str(s.name)]));
  const services: JhService[] = serviceRows.map((s) => ({
    name: str(s.name), admin: bool(s.admin), url: s.url ? str(s.url) : null,
    display: s.display === null || s.display === undefined ? null : bool(s.display),
    oauth_no_confirm: s.oauth_no_confirm === null || s.oauth_no_confirm === undefined ? null : bool(s.oauth_no_confirm),
    oauth_client_id: s.oauth_client_id ? str(s.oauth_client_id) : null,
    oauth_client_allowed_scopes: s.oauth_client_allowed_scopes ? json<string[]>(s.oauth_client_allowed_scopes, []) : null,
    info: s.info ? json<Record<string, unknown>>(s.info, {}) : null,
  }));

  const roles: JhRole[] = [];
  if (tables.has('roles')) {
    const byRole = new Map<number, JhRole>();
    for (const r of await src.all('SELECT id, name, description, scopes FROM roles ORDER BY id')) {
      const role = { name: str(r.name), description: str(r.description), scopes: json<string[]>(r.scopes, []), users: [], groups: [], services: [] };
      byRole.set(Number(r.id), role);
      roles.push(role);
    }
    const maps: [string, string, keyof Pick<JhRole, 'users' | 'groups' | 'services'>, Map<number, string>][] = [
      ['user_role_map', 'user_id', 'users', userName], ['group_role_map', 'group_id', 'groups', groupName], ['service_role_map', 'service_id', 'services', serviceName],
    ];
    for (const [table, column, field, names] of maps) {
      if (!tables.has(table)) continue;
      for (const m of await src.all(`SELECT ${column} AS who, role_id FROM ${table} ORDER BY role_id, ${column}`)) {
        const name = names.get(Number(m.who));
        const role = byRole.get(Number(m.role_id));
        if (name !== undefined && role) role[field].push(name);
      }
    }
  }

  const tokens: JhToken[] = [];
  let expiredTokens = 0;
  const tokenCols = ['id', 'user_id', 'service_id', 'hashed', 'prefix', 'client_id', 'session_id', 'created', 'expires_at', 'last_activity', 'note', 'scopes'];
  for (const t of await src.select('api_tokens', present(await src.columns('api_tokens'), tokenCols), 'id')) {
    const expires = isoFromJh(t.expires_at);
    if (expires && expires <= now) {
      expiredTokens++;
      continue;
    }
    const owner = t.user_id !== null && t.user_id !== undefined ? { kind: 'user' as const, name: userName.get(Number(t.user_id)) }
      : { kind: 'service' as const, name: serviceName.get(Number(t.service_id)) };
    if (owner.name === undefined) continue; // cascaded away with its owner
    tokens.push({
      id: Number(t.id), hashed: str(t.hashed), prefix: str(t.prefix), owner_kind: owner.kind, owner_name: owner.name,
      scopes: json<string[]>(t.scopes, []), note: str(t.note), created: isoFromJh(t.created) ?? now, last_activity: isoFromJh(t.last_activity),
      expires_at: expires, session_id: t.session_id ? str(t.session_id) : null, client_id: str(t.client_id) || 'jupyterhub',
    });
  }
  if (expiredTokens) skipped.push(`${expiredTokens} expired API token${expiredTokens === 1 ? '' : 's'} (the established hub would purge them)`);

  const spawnerCols = await src.columns('spawners');
  const spawnerRows = await src.select('spawners', present(spawnerCols, ['id', 'user_id', 'name', 'started', 'last_activity', 'user_options', 'display_name']), 'id');
  const spawnerOf = new Map<number, { user: string; name: string }>();
  const servers: JhServer[] = [];
  for (const s of spawnerRows) {
    const user = userName.get(Number(s.user_id));
    if (user === undefined) continue;
    const name = str(s.name);
    spawnerOf.set(Number(s.id), { user, name });
    if (name === '') continue; // the default server is every user's; only named ones are records to bring over
    servers.push({
      user, name, display_name: s.display_name ? str(s.display_name) : null, started: isoFromJh(s.started),
      last_activity: isoFromJh(s.last_activity), user_options: json<Record<string, unknown>>(s.user_options, {}) ?? {},
    });
  }

  const bases = (scopes: unknown) => [...new Set(json<string[]>(scopes, []).map((s) => s.split('!')[0]))].sort();
  const shares: JhShare[] = [];
  if (tables.has('shares')) {
    for (const s of await src.all('SELECT * FROM shares ORDER BY id')) {
      const server = spawnerOf.get(Number(s.spawner_id));
      const expires = isoFromJh(s.expires_at);
      if (!server || (expires && expires <= now)) continue;
      const grantee = s.user_id !== null && s.user_id !== undefined ? { kind: 'user' as const, name: userName.get(Number(s.user_id)) }
        : { kind: 'group' as const, name: groupName.get(Number(s.group_id)) };
      if (grantee.name === undefined) continue;
      shares.push({
        owner: server.user, server_name: server.name, grantee_kind: grantee.kind, grantee: grantee.name, scopes: bases(s.scopes),
        created_at: isoFromJh(s.created_at) ?? now, expires_at: expires,
      });
    }
  }
  const shareCodes: JhShareCode[] = [];
  if (tables.has('share_codes')) {
    for (const c of await src.all('SELECT * FROM share_codes ORDER BY id')) {
      const server = spawnerOf.get(Number(c.spawner_id));
      const expires = isoFromJh(c.expires_at);
      if (!server || !expires || expires <= now) continue;
      shareCodes.push({
        prefix: str(c.prefix), hashed: str(c.hashed), owner: server.user, server_name: server.name, scopes: bases(c.scopes),
        created_at: isoFromJh(c.created_at) ?? now, expires_at: expires, exchange_count: Number(c.exchange_count ?? 0),
        last_exchanged_at: isoFromJh(c.last_exchanged_at),
      });
    }
  }

  const serviceOfClient = new Map(services.filter((s) => s.oauth_client_id).map((s) => [s.oauth_client_id!, s.name]));
  const oauthClients: JhOAuthClient[] = [];
  if (tables.has('oauth_clients')) {
    for (const c of await src.all('SELECT * FROM oauth_clients ORDER BY id')) {
      const service = serviceOfClient.get(str(c.identifier)) ?? null;
      if (!service) continue; // the hub's own and each server's client: this hub makes its own
      oauthClients.push({
        identifier: str(c.identifier), description: str(c.description), secret: str(c.secret), redirect_uri: str(c.redirect_uri),
        allowed_scopes: json<string[]>(c.allowed_scopes, []), service,
      });
    }
  }

  return {
    revision, release: KNOWN_REVISIONS[revision], users, groups, roles, services, tokens, servers, shares, shareCodes, oauthClients, skipped,
  };
}
