// The two places an actor's store may live (Hub.db_url), for store tests that run once against each: a SQLite
// file in a temp dir, and a schema of a fresh database in a real PostgreSQL started once per test file.
import type { TestFn } from 'ava';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { StoreLocation } from '../shared/store.js';
import { startPostgres, type PostgresUnderTest } from './postgres.js';

export type Backend = 'sqlite' | 'postgres';
export const BACKENDS: readonly Backend[] = ['sqlite', 'postgres'];

/**
 * Registers the PostgreSQL's stop after the file's tests and returns `location(t, backend, actor)`: a store of
 * its own for one test (a new file, or a new database), removed when the test ends.
 */
export function storeBackends(test: TestFn) {
  let postgres: Promise<PostgresUnderTest> | undefined;
  test.after.always(async () => {
    if (postgres) await (await postgres).stop();
  });
  return {
    /** the PostgreSQL of this file (started at the first call) */
    postgres: () => (postgres ??= startPostgres()),
    async location(t: { teardown(fn: () => void | Promise<void>): void }, backend: Backend, actor: 'auth' | 'tokens' | 'oauth'): Promise<StoreLocation> {
      if (backend === 'sqlite') {
        const dir = mkdtempSync(join(tmpdir(), `hub-store-${actor}-`));
        t.teardown(() => rmSync(dir, { recursive: true, force: true }));
        return { kind: 'sqlite', path: join(dir, `${actor}.sqlite`) };
      }
      const pg = await (postgres ??= startPostgres());
      const database = `t_${randomBytes(6).toString('hex')}`;
      await pg.createDatabase(database);
      return { kind: 'postgres', url: pg.url(database), schema: `hub_${actor}` };
    },
  };
}
