// A real PostgreSQL (Debian's postgresql 15) for a test: its own cluster in a temp dir, run as the postgres account,
// on a free port of 127.0.0.1 with a password (scram-sha-256). If it cannot start, the test fails saying why.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { freePort } from './harness.js';

const BIN = '/usr/lib/postgresql/15/bin';

export interface PostgresUnderTest {
  /** postgresql://postgres:…@127.0.0.1:<port>/<database> */
  url(database: string): string;
  /** CREATE DATABASE */
  createDatabase(name: string): Promise<void>;
  /** Stops the server (its data kept), as when PostgreSQL itself goes down; `resume` starts it again on the same port. */
  pause(): void;
  resume(): void;
  stop(): Promise<void>;
}

function asPostgres(args: string[], timeout = 60_000): void {
  const r = spawnSync('runuser', ['-u', 'postgres', '--', ...args], { encoding: 'utf8', timeout });
  if (r.status !== 0) throw new Error(`PostgreSQL: \`${args.join(' ')}\` failed: ${(r.stderr || r.stdout || r.error?.message || '').trim().split('\n').slice(-3).join(' ')}`);
}

export async function startPostgres(): Promise<PostgresUnderTest> {
  if (userInfo().uid !== 0) throw new Error('PostgreSQL for tests runs its cluster as the postgres account: the tests must run as root');
  const dir = mkdtempSync(join(tmpdir(), 'hub-pg-'));
  const pg = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
  if (pg.status !== 0) throw new Error('PostgreSQL: no postgres account (apt-get install -y postgresql)');
  const uid = Number(pg.stdout.trim());
  const gid = Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout.trim());
  chownSync(dir, uid, gid);
  chmodSync(dir, 0o700);
  const password = randomBytes(12).toString('hex');
  const pwfile = join(dir, 'pw');
  writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
  chownSync(pwfile, uid, gid);
  const data = join(dir, 'data');
  const port = await freePort();
  const start = () => asPostgres([join(BIN, 'pg_ctl'), '-D', data, '-l', join(dir, 'log'), '-o', `-c listen_addresses=127.0.0.1 -p ${port} -k ${dir} -c fsync=off`, '-w', '-t', '30', 'start']);
  try {
    asPostgres([join(BIN, 'initdb'), '-D', data, '-A', 'scram-sha-256', `--pwfile=${pwfile}`, '-U', 'postgres', '--no-sync']);
    start();
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  const url = (database: string) => `postgresql://postgres:${password}@127.0.0.1:${port}/${database}`;
  return {
    url,
    async createDatabase(name) {
      const { default: pgLib } = await import('pg');
      const client = new pgLib.Client({ connectionString: url('postgres') });
      await client.connect();
      try {
        await client.query(`CREATE DATABASE "${name.replace(/"/g, '""')}"`);
      } finally {
        await client.end();
      }
    },
    pause() {
      asPostgres([join(BIN, 'pg_ctl'), '-D', data, '-m', 'fast', '-w', '-t', '30', 'stop']);
    },
    resume: start,
    async stop() {
      try {
        if (existsSync(join(data, 'postmaster.pid'))) asPostgres([join(BIN, 'pg_ctl'), '-D', data, '-m', 'fast', '-w', '-t', '30', 'stop']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
