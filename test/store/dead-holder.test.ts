// A node frozen in the middle of a transaction (its machine gone: its socket to PostgreSQL stays open, nobody says
// it died) holds row locks that other nodes' writes wait for. The hub's sessions tell PostgreSQL to end a session
// that sits in a transaction without a statement for Hub.db_kwargs.idle_in_transaction_session_timeout: the other
// node's write of the same row goes through once that time has passed (without it, it waits for TCP: hours).
import test from 'ava';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Store, type StoreLocation } from '../../shared/store.js';
import { waitFor } from '../harness.js';
import { startPostgres, type PostgresUnderTest } from '../postgres.js';

const HOLDER = fileURLToPath(new URL('../fixtures/hold-transaction.ts', import.meta.url));
/** short for the test (the default is 10 s) */
const IDLE_MS = 1500;

let postgres: PostgresUnderTest | undefined;
test.after.always(() => postgres?.stop());

test('a frozen holder of a row lock: another session\'s write of that row goes through after idle_in_transaction_session_timeout', async (t) => {
  postgres = await startPostgres();
  await postgres.createDatabase('held');
  const location: StoreLocation = { kind: 'postgres', url: postgres.url('held'), schema: 'hub_test', options: { idle_in_transaction_session_timeout: IDLE_MS } };
  const holder = spawn(process.execPath, ['--import', 'tsx', HOLDER, JSON.stringify(location)], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => void holder.kill('SIGKILL'));
  let out = '';
  holder.stdout.on('data', (d) => { out += d; });
  await waitFor('the holder to lock the row', async () => (out.includes('holding') ? true : undefined), 20_000, 20);
  holder.kill('SIGSTOP'); // as its machine gone: the socket stays open

  const store = await Store.open({ ...location, options: { statement_timeout: 10_000 } }, ['CREATE TABLE held (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)']);
  t.teardown(() => store.close());
  // (a store opened without the option has the hub's default)
  t.is((await store.get<{ idle_in_transaction_session_timeout: string }>('SHOW idle_in_transaction_session_timeout'))?.idle_in_transaction_session_timeout, '10s');
  const asked = Date.now();
  t.is((await store.run('UPDATE held SET v = 10 WHERE id = 1')).changes, 1, 'the write went through');
  const waited = Date.now() - asked;
  t.log(`the write waited ${waited} ms for the frozen holder's lock`);
  t.true(waited >= IDLE_MS / 2, 'it did wait for the lock (the holder held it)');
  t.is((await store.get<{ v: number }>('SELECT v FROM held WHERE id = 1'))?.v, 10, 'the frozen transaction was rolled back');
});
