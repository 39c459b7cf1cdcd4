// An actor's own SQLite store: WAL, a busy timeout, and numbered schema migrations tracked in user_version.
// Only an actor's store.ts uses this; no actor opens another actor's file.
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import sqlite3 from 'sqlite3';

export type Row = Record<string, unknown>;
export type Param = string | number | bigint | null | Buffer;

export class Store {
  /** Transactions are serialised: one sqlite connection cannot interleave two of them. */
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(private readonly db: sqlite3.Database) {}

  static async open(path: string, migrations: readonly string[]): Promise<Store> {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    const db = await new Promise<sqlite3.Database>((resolve, reject) => {
      const d = new sqlite3.Database(path, (e) => (e ? reject(e) : resolve(d)));
    });
    const store = new Store(db);
    await store.exec('PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;');
    await store.migrate(migrations);
    return store;
  }

  /**
   * A second, read-only connection to an actor's store, for a long read that must see one snapshot while the
   * actor goes on writing through its own connection (WAL lets readers and a writer work at once).
   */
  static async openReadOnly(path: string): Promise<Store> {
    const db = await new Promise<sqlite3.Database>((resolve, reject) => {
      const d = new sqlite3.Database(path, sqlite3.OPEN_READONLY, (e) => (e ? reject(e) : resolve(d)));
    });
    const store = new Store(db);
    await store.exec('PRAGMA busy_timeout = 5000;');
    return store;
  }

  /**
   * A consistent copy of a store (what its write-ahead log holds included) written to `to`: `hub import` changes
   * the copy and renames it into place, so the original is never half changed.
   */
  static async copy(from: string, to: string): Promise<void> {
    const source = await Store.openReadOnly(from);
    try {
      await source.run('VACUUM INTO ?', [to]);
    } finally {
      await source.close();
    }
  }

  /** migrations[i] takes the schema from version i to i+1; each runs in its own transaction. */
  private async migrate(migrations: readonly string[]): Promise<void> {
    const row = await this.get<{ user_version: number }>('PRAGMA user_version');
    const current = row?.user_version ?? 0;
    if (current > migrations.length) throw new Error(`store schema version ${current} is newer than this code (${migrations.length})`);
    for (let v = current; v < migrations.length; v++) {
      await this.transaction(async () => {
        await this.exec(migrations[v]);
        await this.exec(`PRAGMA user_version = ${v + 1}`);
      });
    }
  }

  exec(sql: string): Promise<void> {
    return new Promise((resolve, reject) => this.db.exec(sql, (e) => (e ? reject(e) : resolve())));
  }

  run(sql: string, params: Param[] = []): Promise<{ changes: number; lastID: number }> {
    return new Promise((resolve, reject) =>
      this.db.run(sql, params, function (this: sqlite3.RunResult, e: Error | null) {
        if (e) reject(e);
        else resolve({ changes: this.changes, lastID: this.lastID });
      }));
  }

  get<T = Row>(sql: string, params: Param[] = []): Promise<T | undefined> {
    return new Promise((resolve, reject) => this.db.get(sql, params, (e, row) => (e ? reject(e) : resolve(row as T | undefined))));
  }

  all<T = Row>(sql: string, params: Param[] = []): Promise<T[]> {
    return new Promise((resolve, reject) => this.db.all(sql, params, (e, rows) => (e ? reject(e) : resolve(rows as T[]))));
  }

  /** Runs `work` inside BEGIN IMMEDIATE … COMMIT, rolled back if it throws; concurrent callers wait their turn. */
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

  /**
   * One statement on its own, in the queue of transactions: atomic by itself (no BEGIN/COMMIT, a third of the
   * round trips of a transaction), and never run inside another caller's open transaction.
   */
  runAlone(sql: string, params: Param[] = []): Promise<{ changes: number; lastID: number }> {
    const next = this.queue.then(() => this.run(sql, params));
    this.queue = next.catch(() => undefined);
    return next;
  }

  close(): Promise<void> {
    return new Promise((resolve, reject) => this.db.close((e) => (e ? reject(e) : resolve())));
  }
}
