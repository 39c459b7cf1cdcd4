// A database of the established hub with many rows, for `hub import jupyterhub` tests and its benchmark: the schema
// made by the established hub's own code (jupyterhub 6.1.1's orm from the test venv, stamped with its alembic head),
// then users, a group, API tokens and named servers inserted in bulk. Token hashes are its format (sha512, 1 round,
// a hex salt: what it stores for the tokens it generates), made here so the token strings are known.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import sqlite3 from 'sqlite3';
import { REPO } from '../harness.js';
import { hashSecret } from '../../shared/secrets.js';

export const VENV_PYTHON = join(REPO, '.cache', 'jupyter-6.1', 'bin', 'python');

/** The established hub's empty schema at its head revision, by its own orm (as its first start makes it). */
export function makeJupyterhubSchema(dbUrl: string): void {
  const r = spawnSync(VENV_PYTHON, ['-c', [
    'import sys',
    'from jupyterhub import orm',
    'db = orm.new_session_factory(sys.argv[1])()',
    "db.add(orm.OAuthClient(identifier='jupyterhub', description='JupyterHub', redirect_uri='/hub/oauth_callback'))",
    'db.commit()',
  ].join('\n'), dbUrl], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`the established hub's orm could not make its schema at ${dbUrl} (${VENV_PYTHON}): ${r.stderr || r.error?.message}`);
}

export interface Fixture {
  /** user name -> one of their token strings, for a few users */
  sample: Map<string, string>;
  users: number;
  tokens: number;
}

const run = (db: sqlite3.Database, sql: string, params: unknown[] = []) =>
  new Promise<void>((ok, fail) => db.run(sql, params, (e) => (e ? fail(e) : ok())));

/**
 * `users` users (user-0 …, every 100th an admin), `tokensPerUser` tokens each, all in group `everyone`; a named
 * server `lab` with options for every 10th.
 */
export async function makeJupyterhubDb(path: string, { users, tokensPerUser }: { users: number; tokensPerUser: number }): Promise<Fixture> {
  makeJupyterhubSchema(`sqlite:///${path}`);
  const db = await new Promise<sqlite3.Database>((ok, fail) => { const d = new sqlite3.Database(path, (e) => (e ? fail(e) : ok(d))); });
  const sample = new Map<string, string>();
  const when = '2026-11-01 09:30:00.123456';
  try {
    await run(db, 'BEGIN');
    await run(db, "INSERT INTO groups (id, name, properties) VALUES (1, 'everyone', '{\"all\": true}')");
    const CHUNK = 10_000;
    let tokenId = 0;
    for (let start = 0; start < users; start += CHUNK) {
      const rows: unknown[] = [];
      const tokens: unknown[] = [];
      const servers: unknown[] = [];
      for (let i = start; i < Math.min(users, start + CHUNK); i++) {
        const id = i + 1;
        rows.push([id, `user-${i}`, i % 100 === 0 ? 1 : 0, when, i % 3 === 0 ? null : when, randomBytes(16).toString('hex')]);
        for (let k = 0; k < tokensPerUser; k++) {
          const token = randomBytes(16).toString('hex');
          if (k === 0 && (i === 0 || i === users - 1 || i % 10_007 === 0)) sample.set(`user-${i}`, token);
          tokens.push([++tokenId, id, token.slice(0, 4), hashSecret(token, 1), `token ${k}`, '["inherit"]', when]);
        }
        if (i % 10 === 0) servers.push([id, 'lab', `{"image": "python-${i % 7}"}`, when]);
      }
      await run(db, `INSERT INTO users (id, name, admin, created, last_activity, cookie_id)
        SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5 FROM json_each(?)`, [JSON.stringify(rows)]);
      await run(db, 'INSERT INTO user_group_map (user_id, group_id) SELECT value->>0, 1 FROM json_each(?)', [JSON.stringify(rows)]);
      await run(db, `INSERT INTO api_tokens (id, user_id, prefix, hashed, note, scopes, created, client_id)
        SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, 'jupyterhub' FROM json_each(?)`, [JSON.stringify(tokens)]);
      await run(db, `INSERT INTO spawners (user_id, name, user_options, last_activity)
        SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each(?)`, [JSON.stringify(servers)]);
    }
    await run(db, 'COMMIT');
    return { sample, users, tokens: tokenId };
  } finally {
    await new Promise<void>((ok) => db.close(() => ok()));
  }
}
