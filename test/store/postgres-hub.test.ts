// A hub with Hub.db_url on a real PostgreSQL: people, logins, tokens and servers work as with SQLite files, the
// rows are in the database (one schema per actor, no SQLite file in the data dir), and a restart finds them there.
import test from 'ava';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runHubCommand, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, formLogin, whoami } from '../auth/helpers.js';
import { FIXTURE } from '../spawner/helpers.js';
import { startPostgres, type PostgresUnderTest } from '../postgres.js';

let postgres: PostgresUnderTest | undefined;
let hub: HubUnderTest | undefined;
test.after.always(async () => {
  await hub?.stop();
  await postgres?.stop();
});

test.serial('db_url postgresql: a new user logs in, gets a token, starts and stops a server; after a restart the user and token still work; PostgreSQL down is 503 "try again shortly" and recovers by itself', async (t) => {
  postgres = await startPostgres();
  await postgres.createDatabase('hub');
  const ADMIN = randomToken();
  const config = {
    Hub: { db_url: postgres.url('hub'), db_kwargs: { max: 4 }, api_tokens: { [ADMIN]: 'boss' }, authenticator_class: 'dummy' },
    Authenticator: { admin_users: ['boss'] },
    DummyAuthenticator: { password: 'pw' },
    Spawner: { cmd: [process.execPath, FIXTURE], start_timeout: 20, slow_spawn_timeout: 15 },
  };
  hub = await startHub({ config });
  let api = apiClient(hub.url);

  t.is((await api('POST', '/users/ann', { token: ADMIN })).status, 201);
  t.is((await api('POST', '/groups/team', { token: ADMIN })).status, 201);
  t.is((await api('POST', '/groups/team/users', { token: ADMIN, body: { users: ['ann'] } })).status, 200);
  const browser = new Browser();
  t.is((await formLogin(browser, hub.url, 'ann', 'pw')).status, 302);
  const me = await whoami(browser, hub.url);
  t.is(me.status, 200);
  t.like(me.body, { name: 'ann', groups: ['team'] });
  t.is((await formLogin(new Browser(), hub.url, 'ann', 'wrong')).status, 403);

  const made = await api('POST', '/users/ann/tokens', { token: ADMIN, body: { note: 'pg', expires_in: 3600 } });
  t.is(made.status, 201);
  const annToken = made.body.token as string;
  t.like((await api('GET', '/user', { token: annToken })).body, { name: 'ann', kind: 'user' });

  const started = await api('POST', '/users/ann/server', { token: annToken });
  t.is(started.status, 201, JSON.stringify(started.body));
  t.like((await api('GET', '/users/ann', { token: ADMIN })).body.servers[''], { ready: true, url: '/user/ann/' });
  t.is((await api('DELETE', '/users/ann/server', { token: annToken })).status, 204);

  // no SQLite store was made: the rows are in PostgreSQL, one schema per actor
  t.deepEqual(readdirSync(hub.dataDir).filter((f) => f.endsWith('.sqlite')), []);
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: postgres.url('hub') });
  await client.connect();
  try {
    const schemas = (await client.query("SELECT DISTINCT table_schema AS s FROM information_schema.tables WHERE table_schema LIKE 'hub_%' ORDER BY 1")).rows.map((r) => r.s);
    t.deepEqual(schemas, ['hub_auth', 'hub_oauth', 'hub_tokens']);
    t.is(Number((await client.query("SELECT count(*) AS n FROM hub_auth.users WHERE name = 'ann'")).rows[0].n), 1);
    t.is(Number((await client.query("SELECT count(*) AS n FROM hub_tokens.tokens WHERE owner_name = 'ann' AND note = 'pg'")).rows[0].n), 1);
  } finally {
    await client.end();
  }

  // a restart reads them back from the database
  const { dataDir, port, natsPort } = hub;
  await hub.stop({ keepDataDir: true });
  hub = await startHub({ config, reuse: { dataDir, port, natsPort } });
  api = apiClient(hub.url);
  t.like((await api('GET', '/user', { token: annToken })).body, { name: 'ann', groups: ['team'] });
  t.is((await whoami(browser, hub.url)).status, 200, 'the login session is still there');
  t.is((await api('DELETE', `/users/ann/tokens/${made.body.id}`, { token: annToken })).status, 204);
  t.is((await api('GET', '/user', { token: annToken })).status, 403);

  // PostgreSQL itself goes down: a write is answered 503 "try again shortly", what the gateway knows still answers,
  // and once the database is back the same write succeeds without anyone restarting anything
  const pids = hub.children();
  t.is((await api('GET', '/users/ann', { token: ADMIN })).status, 200);
  postgres.pause();
  const down = await api('POST', '/users/bea', { token: ADMIN });
  t.is(down.status, 503, JSON.stringify(down.body));
  t.regex(down.body.message, /try again shortly/);
  t.is((await api('GET', '/users/ann', { token: ADMIN })).status, 200, 'a user the gateway has read answers from its memory');
  postgres.resume();
  const made2 = await waitFor('a write to succeed once PostgreSQL is back', async () => {
    const r = await api('POST', '/users/bea', { token: ADMIN });
    if (r.status === 503) return undefined;
    return r;
  }, 20_000, 200);
  t.is(made2.status, 201);
  t.is((await api('GET', '/users/bea', { token: ADMIN })).status, 200);
  t.deepEqual(hub.children(), pids, 'no actor was restarted');
  // the URL holds the database password: no log line carries it, not even the outage's
  const password = new URL(postgres.url('hub')).password;
  t.false(hub.logs().includes(password));
});

test('db_url postgresql: hub import jupyterhub is refused, saying why, and writes nothing', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-pg-import-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const r = await runHubCommand(['import', 'jupyterhub', '--db', join(dir, 'jupyterhub.sqlite'), `--Hub.data_dir=${dir}`, '--Hub.db_url=postgresql://hub@127.0.0.1:1/hub']);
  t.is(r.code, 1, r.stderr);
  t.regex(r.stderr, /refused with Hub\.db_url on PostgreSQL/);
  t.notRegex(r.stderr + r.stdout, /postgresql:\/\//, 'the URL (it may hold a password) is not printed');
  t.deepEqual(readdirSync(dir), []);
});
