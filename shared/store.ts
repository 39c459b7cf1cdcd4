// An actor's own store, in one of two places (Hub.db_url): a SQLite file in the data dir (WAL, a busy timeout,
// schema version in user_version), or its own schema of a shared PostgreSQL database (a pool, versions in a
// migrations table, migrations under an advisory lock so several nodes may start at once). Every actor's
// store.ts writes its queries once, with `?` placeholders, in SQL both accept; this file turns them into the
// other dialect (placeholders, INSERT OR IGNORE, list parameters, ids of new rows). Only an actor's store.ts
// uses this; no actor reads another actor's file or schema.
import { AsyncLocalStorage } from 'node:async_hooks';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import sqlite3 from 'sqlite3';
import type pgTypes from 'pg';
import { errors } from './errors.js';
import { storePath } from './paths.js';

export type Row = Record<string, unknown>;
/** A list (for `inList`) travels as one parameter: a JSON array to SQLite, an array to PostgreSQL. */
export type Param = string | number | bigint | null | Buffer | readonly (string | number)[];
export type Dialect = 'sqlite' | 'postgres';

/**
 * A migration in SQL both engines take, or one text per engine (a SQLite table rebuild, a trigger). PostgreSQL
 * DDL is adjusted on the way (see postgresDdl): ids become identities, integers 64-bit, text compared bytewise.
 */
export type Migration = string | { sqlite: string; postgres: string };

/** Where an actor's store lives: a SQLite file, or a schema of a PostgreSQL database. */
export type StoreLocation =
  | { kind: 'sqlite'; path: string }
  | { kind: 'postgres'; url: string; schema: string; options?: PostgresOptions };

/** Hub.db_url with PostgreSQL: a postgresql:// URL (anything else is SQLite files in the data dir). */
export const usesPostgres = (dbUrl: string) => /^postgres(ql)?:\/\//.test(dbUrl);

/** An actor's store from Hub.db_url: its SQLite file in the data dir, or its schema (hub_<actor>) of the shared database. */
export function storeLocation(hub: { data_dir: string; db_url: string; db_kwargs: Record<string, unknown> }, actor: 'auth' | 'tokens' | 'oauth'): StoreLocation {
  return usesPostgres(hub.db_url)
    ? { kind: 'postgres', url: hub.db_url, schema: `hub_${actor}`, options: hub.db_kwargs as PostgresOptions }
    : { kind: 'sqlite', path: storePath(hub.data_dir, actor) };
}

/** Hub.db_kwargs for PostgreSQL: the pool's size and time limits (TLS comes with the URL's sslmode). */
export interface PostgresOptions {
  max?: number;
  connectionTimeoutMillis?: number;
  idleTimeoutMillis?: number;
  statement_timeout?: number;
  /** ms a session may sit in an open transaction without a statement before PostgreSQL ends it (0 = never) */
  idle_in_transaction_session_timeout?: number;
}

/**
 * A node that dies in the middle of a transaction (its machine gone: no socket closes) would hold its row locks
 * until TCP gives up, hours later, and every other node's write of those rows would wait: PostgreSQL ends such a
 * session after this long. The hub's transactions run their statements back to back (milliseconds).
 */
export const IDLE_IN_TRANSACTION_MS = 10_000;

/** PostgreSQL error codes a transaction is tried again for (bounded): a deadlock, a serialisation failure. */
const RETRIED = new Set(['40P01', '40001']);
const TRANSACTION_TRIES = 3;

interface Engine {
  readonly dialect: Dialect;
  exec(sql: string): Promise<void>;
  run(sql: string, params: Param[]): Promise<{ changes: number; lastID: number }>;
  all<T>(sql: string, params: Param[]): Promise<T[]>;
  insert(sql: string, params: Param[]): Promise<number>;
  transaction<T>(work: () => Promise<T>): Promise<T>;
  runAlone(sql: string, params: Param[]): Promise<{ changes: number; lastID: number }>;
  snapshot<T>(work: (reader: Store) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export class Store {
  private constructor(private readonly engine: Engine) {}

  /** A SQLite path (the CLI's and tests' way), or a location from storeLocation(). */
  static async open(where: string | StoreLocation, migrations: readonly Migration[]): Promise<Store> {
    const location: StoreLocation = typeof where === 'string' ? { kind: 'sqlite', path: where } : where;
    const engine = location.kind === 'sqlite'
      ? await SqliteEngine.open(location.path, migrations)
      : await PostgresEngine.open(location, migrations);
    return new Store(engine);
  }

  /**
   * A second, read-only connection to an actor's SQLite file, for a long read that must see one snapshot while
   * the actor goes on writing through its own connection (WAL lets readers and a writer work at once).
   */
  static async openReadOnly(path: string): Promise<Store> {
    return new Store(await SqliteEngine.openReadOnly(path));
  }

  /**
   * A consistent copy of a SQLite store (what its write-ahead log holds included) written to `to`: `hub import`
   * changes the copy and renames it into place, so the original is never half changed.
   */
  static async copy(from: string, to: string): Promise<void> {
    const source = await Store.openReadOnly(from);
    try {
      await source.run('VACUUM INTO ?', [to]);
    } finally {
      await source.close();
    }
  }

  get dialect(): Dialect {
    return this.engine.dialect;
  }

  /** The text for this store's engine, where the two cannot share one (kept to a few expressions). */
  pick(sql: { sqlite: string; postgres: string }): string {
    return sql[this.engine.dialect];
  }

  /** `column IN <list>` for a list of any length given as one parameter (no statement meets a parameter limit). */
  inList(column: string): string {
    return this.engine.dialect === 'sqlite' ? `${column} IN (SELECT value FROM json_each(?))` : `${column} = ANY(?)`;
  }

  exec(sql: string): Promise<void> {
    return this.engine.exec(sql);
  }

  run(sql: string, params: Param[] = []): Promise<{ changes: number; lastID: number }> {
    return this.engine.run(sql, params);
  }

  /** An INSERT of one row into a table with an `id` key; the new row's id. */
  insert(sql: string, params: Param[] = []): Promise<number> {
    return this.engine.insert(sql, params);
  }

  async get<T = Row>(sql: string, params: Param[] = []): Promise<T | undefined> {
    return (await this.engine.all<T>(sql, params))[0];
  }

  all<T = Row>(sql: string, params: Param[] = []): Promise<T[]> {
    return this.engine.all<T>(sql, params);
  }

  /**
   * Runs `work` in one transaction, rolled back if it throws; concurrent callers of this store wait their turn.
   * Statements `work` makes through this store belong to it.
   */
  transaction<T>(work: () => Promise<T>): Promise<T> {
    return this.engine.transaction(work);
  }

  /**
   * One statement on its own, in the queue of transactions: atomic by itself (no BEGIN/COMMIT, a third of the
   * round trips of a transaction), and never run inside another caller's open transaction.
   */
  runAlone(sql: string, params: Param[] = []): Promise<{ changes: number; lastID: number }> {
    return this.engine.runAlone(sql, params);
  }

  /** `work` reads through `reader`, which sees one snapshot of the store while writers go on. */
  snapshot<T>(work: (reader: Store) => Promise<T>): Promise<T> {
    return this.engine.snapshot(work);
  }

  close(): Promise<void> {
    return this.engine.close();
  }

  /** For the engines: a Store over an engine of their own (a snapshot's reader). */
  static wrap(engine: Engine): Store {
    return new Store(engine);
  }
}

/** Prepared statements a sqlite store keeps (its queries are a few dozen texts; lists travel as one JSON value). */
const SQLITE_STATEMENTS = 256;
/** A prepared statement, and while its prepare runs, how to fail the calls waiting for it. */
interface CachedStatement { statement: sqlite3.Statement; preparing: Set<(e: Error) => void> | null }

const sqliteParams = (params: Param[]) => params.map((p) => (Array.isArray(p) ? JSON.stringify(p) : p));

class SqliteEngine implements Engine {
  readonly dialect = 'sqlite' as const;
  /** Transactions are serialised: one sqlite connection cannot interleave two of them. */
  private queue: Promise<unknown> = Promise.resolve();
  /**
   * Prepared statements by query text, the least recently used finalized past SQLITE_STATEMENTS: a statement made per
   * call costs a prepare and a finalize on the thread pool besides its step, about half a query's time and CPU. A
   * statement runs one call at a time (the driver queues the others on it); `run` and `all` step it to the end, so it
   * holds no read transaction between calls; one that failed is finalized and made again at its next use.
   */
  private readonly statements = new Map<string, CachedStatement>();

  private constructor(private readonly db: sqlite3.Database, private readonly path: string) {}

  static async open(path: string, migrations: readonly Migration[]): Promise<SqliteEngine> {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    const db = await new Promise<sqlite3.Database>((resolve, reject) => {
      const d = new sqlite3.Database(path, (e) => (e ? reject(e) : resolve(d)));
    });
    const engine = new SqliteEngine(db, path);
    await engine.exec('PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;');
    await engine.migrate(migrations);
    return engine;
  }

  static async openReadOnly(path: string): Promise<SqliteEngine> {
    const db = await new Promise<sqlite3.Database>((resolve, reject) => {
      const d = new sqlite3.Database(path, sqlite3.OPEN_READONLY, (e) => (e ? reject(e) : resolve(d)));
    });
    const engine = new SqliteEngine(db, path);
    await engine.exec('PRAGMA busy_timeout = 5000;');
    return engine;
  }

  /** migrations[i] takes the schema from version i to i+1; each runs in its own transaction. */
  private async migrate(migrations: readonly Migration[]): Promise<void> {
    const [row] = await this.all<{ user_version: number }>('PRAGMA user_version', []);
    const current = row?.user_version ?? 0;
    if (current > migrations.length) throw new Error(`store schema version ${current} is newer than this code (${migrations.length})`);
    for (let v = current; v < migrations.length; v++) {
      const m = migrations[v];
      await this.transaction(async () => {
        await this.exec(typeof m === 'string' ? m : m.sqlite);
        await this.exec(`PRAGMA user_version = ${v + 1}`);
      });
    }
  }

  exec(sql: string): Promise<void> {
    return new Promise((resolve, reject) => this.db.exec(sql, (e) => (e ? reject(e) : resolve())));
  }

  /**
   * Runs `call` on the query's prepared statement (made at its first use). A statement that cannot be prepared drops
   * the calls queued on it without a word (the driver's way), so those fail here with the reason.
   */
  private withStatement<T>(sql: string, call: (statement: sqlite3.Statement, done: (e: Error | null, value?: T) => void) => void): Promise<T> {
    let entry = this.statements.get(sql);
    if (entry) {
      this.statements.delete(sql); // most recently used last
    } else {
      const made: CachedStatement = { statement: null as unknown as sqlite3.Statement, preparing: new Set() };
      made.statement = this.db.prepare(sql, (e: Error | null) => {
        const waiting = made.preparing;
        made.preparing = null;
        if (!e) return;
        // the driver finalized it already
        if (this.statements.get(sql) === made) this.statements.delete(sql);
        for (const fail of waiting ?? []) fail(e);
      });
      entry = made;
      if (this.statements.size >= SQLITE_STATEMENTS) this.forget(this.statements.keys().next().value!);
    }
    this.statements.set(sql, entry);
    const used = entry;
    return new Promise<T>((resolve, reject) => {
      used.preparing?.add(reject);
      call(used.statement, (e, value) => {
        used.preparing?.delete(reject);
        if (!e) return resolve(value as T);
        // a statement that failed may be left mid-way: made again at its next use
        this.forget(sql, used);
        reject(e);
      });
    });
  }

  /** Finalizes a cached statement (after the calls already queued on it); `only`: if it is still that one. */
  private forget(sql: string, only?: CachedStatement): void {
    const entry = this.statements.get(sql);
    if (!entry || (only && entry !== only)) return;
    this.statements.delete(sql);
    entry.statement.finalize();
  }

  run(sql: string, params: Param[]): Promise<{ changes: number; lastID: number }> {
    return this.withStatement(sql, (statement, done) =>
      statement.run(sqliteParams(params), function (this: sqlite3.RunResult, e: Error | null) {
        done(e, { changes: this.changes, lastID: this.lastID });
      }));
  }

  async insert(sql: string, params: Param[]): Promise<number> {
    return (await this.run(sql, params)).lastID;
  }

  all<T>(sql: string, params: Param[]): Promise<T[]> {
    return this.withStatement<T[]>(sql, (statement, done) => statement.all(sqliteParams(params), (e: Error | null, rows: unknown[]) => done(e, rows as T[])));
  }

  transaction<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(async () => {
      await this.exec('BEGIN IMMEDIATE');
      try {
        const result = await work();
        await this.exec('COMMIT');
        return result;
      } catch (e) {
        await this.exec('ROLLBACK').catch(() => undefined);
        throw e;
      }
    });
    this.queue = next.catch(() => undefined);
    return next;
  }

  runAlone(sql: string, params: Param[]): Promise<{ changes: number; lastID: number }> {
    const next = this.queue.then(() => this.run(sql, params));
    this.queue = next.catch(() => undefined);
    return next;
  }

  async snapshot<T>(work: (reader: Store) => Promise<T>): Promise<T> {
    const reader = await SqliteEngine.openReadOnly(this.path);
    try {
      await reader.exec('BEGIN');
      const result = await work(Store.wrap(reader));
      await reader.exec('COMMIT');
      return result;
    } finally {
      await reader.close();
    }
  }

  close(): Promise<void> {
    for (const sql of [...this.statements.keys()]) this.forget(sql);
    return new Promise((resolve, reject) => this.db.close((e) => (e ? reject(e) : resolve())));
  }
}

/**
 * A query's PostgreSQL text: `?` → `$n` (outside quoted text), `INSERT OR IGNORE` → `ON CONFLICT DO NOTHING`.
 * Kept per query text: a store has a few dozen.
 */
const translated = new Map<string, string>();
export function toPostgres(sql: string): string {
  let out = translated.get(sql);
  if (out !== undefined) return out;
  let n = 0;
  let quote: string | null = null;
  out = '';
  for (const ch of sql) {
    if (quote) {
      if (ch === quote) quote = null;
      out += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      out += ch;
    } else out += ch === '?' ? `$${++n}` : ch;
  }
  if (/^\s*INSERT OR IGNORE INTO/i.test(out)) out = `${out.replace(/^\s*INSERT OR IGNORE INTO/i, 'INSERT INTO')} ON CONFLICT DO NOTHING`;
  if (translated.size < 10_000) translated.set(sql, out);
  return out;
}

/**
 * A migration's DDL for PostgreSQL: `id INTEGER PRIMARY KEY` (SQLite's row id) → an identity column, INTEGER →
 * BIGINT (times in ms), TEXT compared byte by byte as SQLite does (the user index's order is the database's).
 */
export function postgresDdl(sql: string): string {
  return sql
    .replace(/\bid INTEGER PRIMARY KEY\b/g, 'id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY')
    .replace(/\bINTEGER\b/g, 'BIGINT')
    .replace(/\bTEXT\b/g, 'TEXT COLLATE "C"');
}

/**
 * Whether an error means the database cannot be reached now (down, restarting, out of connections) rather than
 * that the statement was wrong: such a request is answered 503 "try again shortly", and the pool reconnects by itself.
 */
export function databaseUnreachable(e: unknown): boolean {
  const { code, message } = (e ?? {}) as { code?: string; message?: string };
  if (code && (/^(08|57P0)/.test(code) || code === '53300' || ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH'].includes(code))) return true;
  return /Connection terminated|timeout exceeded when trying to connect|connection error and is not queryable|Client was closed/i.test(message ?? '');
}

const unreachableAsUnavailable = (e: unknown): never => {
  throw databaseUnreachable(e) ? errors.unavailable('The database', e) : e;
};

type PgPool = pgTypes.Pool;
type PgClient = pgTypes.PoolClient;

class PostgresEngine implements Engine {
  readonly dialect = 'postgres' as const;
  /** The client of the transaction the current async call chain runs in, if any. */
  private readonly inTransaction = new AsyncLocalStorage<PgClient>();
  /** Clients inside an open transaction: a timer set during one keeps its context but must not use its client. */
  private readonly open = new WeakSet<PgClient>();
  /** Transactions of one process are serialised, as with SQLite (actors stage in-memory changes per transaction). */
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(private readonly pool: PgPool) {}

  static async open(location: Extract<StoreLocation, { kind: 'postgres' }>, migrations: readonly Migration[]): Promise<PostgresEngine> {
    if (!/^[a-z_][a-z0-9_]*$/.test(location.schema)) throw new Error(`store schema name ${JSON.stringify(location.schema)}: lower-case letters, digits and _ only`);
    const { default: pg } = await import('pg');
    // 64-bit integers and numerics as numbers: ids, counts and times in ms all fit in 2^53
    const asNumber = (v: string) => Number(v);
    const types = { getTypeParser: ((oid: number, format?: 'text' | 'binary') => (oid === 20 || oid === 1700 ? asNumber : pg.types.getTypeParser(oid, format as 'text'))) as typeof pg.types.getTypeParser };
    const o = location.options ?? {};
    const idleInTransaction = o.idle_in_transaction_session_timeout ?? IDLE_IN_TRANSACTION_MS;
    const pool = new pg.Pool({
      connectionString: location.url,
      max: o.max ?? 10,
      connectionTimeoutMillis: o.connectionTimeoutMillis ?? 10_000,
      idleTimeoutMillis: o.idleTimeoutMillis ?? 30_000,
      ...(o.statement_timeout ? { statement_timeout: o.statement_timeout } : {}),
      ...(idleInTransaction ? { idle_in_transaction_session_timeout: idleInTransaction } : {}),
      options: `-c search_path=${location.schema}`,
      types,
      application_name: `hub-${location.schema}`,
    });
    // an idle client whose server went away is dropped by the pool; the next query opens another
    pool.on('error', () => undefined);
    const engine = new PostgresEngine(pool);
    try {
      await engine.migrate(location.schema, migrations);
    } catch (e) {
      await pool.end().catch(() => undefined);
      throw e;
    }
    return engine;
  }

  /**
   * Under a session advisory lock keyed by the schema, so nodes starting together migrate one after another:
   * the schema and its migrations table if missing, then each pending migration in its own transaction.
   */
  private async migrate(schema: string, migrations: readonly Migration[]): Promise<void> {
    const client = await this.pool.connect();
    try {
      await client.query("SELECT pg_advisory_lock(hashtext('hub-store:' || $1))", [schema]);
      try {
        await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
        await client.query('CREATE TABLE IF NOT EXISTS store_migrations (version BIGINT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())');
        const current = Number((await client.query<{ v: number | null }>('SELECT max(version) AS v FROM store_migrations')).rows[0]?.v ?? 0);
        if (current > migrations.length) throw new Error(`store schema ${schema} version ${current} is newer than this code (${migrations.length})`);
        for (let v = current; v < migrations.length; v++) {
          const m = migrations[v];
          await client.query('BEGIN');
          try {
            await client.query(postgresDdl(typeof m === 'string' ? m : m.postgres));
            await client.query('INSERT INTO store_migrations (version) VALUES ($1)', [v + 1]);
            await client.query('COMMIT');
          } catch (e) {
            await client.query('ROLLBACK').catch(() => undefined);
            throw new Error(`store schema ${schema}: migration ${v + 1} failed: ${(e as Error).message}`);
          }
        }
      } finally {
        await client.query("SELECT pg_advisory_unlock(hashtext('hub-store:' || $1))", [schema]).catch(() => undefined);
      }
    } finally {
      client.release();
    }
  }

  private runner(): PgPool | PgClient {
    const client = this.inTransaction.getStore();
    return client && this.open.has(client) ? client : this.pool;
  }

  /** Every statement goes through here: an unreachable database becomes a 503 for the caller. */
  private query<T extends pgTypes.QueryResultRow>(sql: string, params?: Param[]): Promise<pgTypes.QueryResult<T>> {
    return this.runner().query<T>(sql, params as unknown[] | undefined).catch(unreachableAsUnavailable);
  }

  async exec(sql: string): Promise<void> {
    await this.query(sql);
  }

  async run(sql: string, params: Param[]): Promise<{ changes: number; lastID: number }> {
    const r = await this.query(toPostgres(sql), params);
    return { changes: r.rowCount ?? 0, lastID: 0 };
  }

  async insert(sql: string, params: Param[]): Promise<number> {
    const r = await this.query<{ id: number }>(`${toPostgres(sql)} RETURNING id`, params);
    return r.rows[0].id;
  }

  async all<T>(sql: string, params: Param[]): Promise<T[]> {
    return (await this.query(toPostgres(sql), params)).rows as T[];
  }

  private connect(): Promise<PgClient> {
    return this.pool.connect().catch(unreachableAsUnavailable);
  }

  transaction<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(async () => {
      for (let attempt = 1; ; attempt++) {
        const client = await this.connect();
        let broken = false;
        try {
          await client.query('BEGIN').catch((e) => {
            broken = true; // not handed back to the pool: its connection may be gone
            return unreachableAsUnavailable(e);
          });
          this.open.add(client);
          try {
            const result = await this.inTransaction.run(client, work);
            await client.query('COMMIT').catch(unreachableAsUnavailable);
            return result;
          } catch (e) {
            await client.query('ROLLBACK').catch(() => { broken = true; });
            if (attempt < TRANSACTION_TRIES && RETRIED.has((e as { code?: string }).code ?? '')) continue;
            throw e;
          }
        } finally {
          this.open.delete(client);
          client.release(broken);
        }
      }
    });
    this.queue = next.catch(() => undefined);
    return next;
  }

  runAlone(sql: string, params: Param[]): Promise<{ changes: number; lastID: number }> {
    // one statement outside a transaction is atomic by itself in PostgreSQL; no need to wait for the queue
    return this.run(sql, params);
  }

  async snapshot<T>(work: (reader: Store) => Promise<T>): Promise<T> {
    const client = await this.connect();
    try {
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      this.open.add(client);
      const result = await this.inTransaction.run(client, () => work(Store.wrap(this)));
      await client.query('COMMIT');
      return result;
    } catch (e) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw e;
    } finally {
      this.open.delete(client);
      client.release();
    }
  }

  close(): Promise<void> {
    return this.pool.end();
  }
}
