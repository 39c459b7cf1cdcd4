// The `hub` command line (cli/): each verb with a running hub (through the actors over gRPC: the gateway
// knows the change at once, the audit trail names the operator) and without one (the data dir's stores,
// honoured by the hub started afterwards); bad arguments are one line and exit code 2.
import test from 'ava';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { Browser, formLogin, whoami } from '../auth/helpers.js';
import { freePort, REPO, runHubCommand, startHub, SUPERVISOR, waitFor, type HubUnderTest } from '../harness.js';

const OPERATOR = `cli:${userInfo().username}`;
const ADMIN = randomToken();
let hub: HubUnderTest;
let api: ApiCall;

test.before(async () => {
  hub = await startHub({ config: { Hub: { api_tokens: { [ADMIN]: 'boss' } }, Authenticator: { admin_users: ['boss'] } } });
  api = apiClient(hub.url);
});
test.after.always(async () => {
  await hub?.stop();
});

/** The hub command against the running hub's config (so it finds the data dir). */
const cli = (args: string[], input?: string) => runHubCommand([...args, '--config', join(hub.dataDir, 'hub.json')], { input });

const oneLine = (s: string) => s.trim().split('\n').length === 1;

async function auditEvents(args: string[]): Promise<Record<string, unknown>[]> {
  const r = await cli(['audit', '--json', ...args]);
  if (r.code !== 0) throw new Error(`hub audit: ${r.code} ${r.stderr}`);
  return r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

test.serial('cli: add-user while the hub runs: the gateway knows the user at once and they log in with that password', async (t) => {
  t.is((await api('GET', '/users/newbie', { token: ADMIN })).status, 404, 'asked before, so a stale cache would show');
  const r = await cli(['add-user', 'NewBie'], 'newbie-password\n');
  t.is(r.code, 0, r.stderr);
  t.regex(r.stderr, /added user newbie with a password/);
  t.notRegex(r.stderr, /no hub is running/, 'went through the running hub');
  const model = await api('GET', '/users/newbie', { token: ADMIN });
  t.is(model.status, 200);
  t.is(model.body.admin, false);
  const b = new Browser();
  t.is((await formLogin(b, hub.url, 'newbie', 'newbie-password')).status, 302);
  const me = await whoami(b, hub.url);
  t.is(me.body.name, 'newbie');
  t.is(me.body.admin, false);
});

test.serial('cli: add-user --admin gives an admin; an existing user, a short password and bad arguments are refused', async (t) => {
  const r = await cli(['add-user', 'chief', '--admin'], 'chief-password\n');
  t.is(r.code, 0, r.stderr);
  const b = new Browser();
  t.is((await formLogin(b, hub.url, 'chief', 'chief-password')).status, 302);
  const me = await whoami(b, hub.url);
  t.is(me.body.admin, true);
  t.true(me.body.scopes.includes('admin:users'));

  const again = await cli(['add-user', 'chief'], 'another-password\n');
  t.is(again.code, 1);
  t.regex(again.stderr, /User chief already exists/);

  const short = await cli(['add-user', 'shorty'], 'short\n');
  t.is(short.code, 1);
  t.regex(short.stderr, /at least 8 characters/);
  t.is((await api('GET', '/users/shorty', { token: ADMIN })).status, 404, 'no user without the password asked for');

  for (const args of [['add-user', 'a/b'], ['add-user', 'x', '--bogus']]) { // the rest of the grammar: args.test.ts
    const bad = await cli(args, 'long-enough-pw\n');
    t.is(bad.code, 2, `${args.join(' ')}: ${bad.stderr}`);
    t.true(oneLine(bad.stderr), bad.stderr);
    t.regex(bad.stderr, /^hub add-user: /);
  }
  t.is((await api('GET', '/users/x', { token: ADMIN })).status, 404);
});

test.serial('cli: set-password and token while the hub runs; an unknown user is an error', async (t) => {
  const r = await cli(['set-password', 'newbie'], 'second-password\n');
  t.is(r.code, 0, r.stderr);
  t.is((await formLogin(new Browser(), hub.url, 'newbie', 'newbie-password')).status, 403, 'the old password no longer works');
  t.is((await formLogin(new Browser(), hub.url, 'newbie', 'second-password')).status, 302);
  const ghost = await cli(['set-password', 'ghost'], 'ghost-password\n');
  t.is(ghost.code, 1);
  t.regex(ghost.stderr, /No such user: ghost/);

  const tok = await cli(['token', 'newbie']);
  t.is(tok.code, 0, tok.stderr);
  const me = await api('GET', '/user', { token: tok.stdout.trim() });
  t.is(me.status, 200);
  t.is(me.body.name, 'newbie');
});

test.serial('cli: audit finds what the command line did, with who = the operator', async (t) => {
  const users = await auditEvents(['--type', 'user.*']);
  t.true(users.length > 0);
  t.true(users.every((e) => String(e.type).startsWith('user.')));
  t.truthy(users.find((e) => e.type === 'user.create' && e.what === 'newbie' && e.who === OPERATOR && e.actor === 'auth' && e.details?.admin === false));
  t.truthy(users.find((e) => e.type === 'user.create' && e.what === 'chief' && e.who === OPERATOR && e.details?.admin === true));
  t.truthy(users.find((e) => e.type === 'user.set_password' && e.what === 'newbie' && e.who === OPERATOR));
  t.falsy(users.find((e) => e.what === 'shorty'));

  const tokens = await auditEvents(['--type', 'token.create', '--who', 'cli:*', '--since', '1h']);
  t.truthy(tokens.find((e) => String(e.what).startsWith('user:newbie/') && e.who === OPERATOR && e.actor === 'tokens'));
  t.true(tokens.every((e) => e.who === OPERATOR));

  // readable lines; --who alice also finds user:alice
  const logins = await cli(['audit', '--who', 'newbie', '--type', 'login.*']);
  t.is(logins.code, 0, logins.stderr);
  t.regex(logins.stdout, /^\S+Z {2}login\.success {2}ok {2}who=user:newbie {2}what=newbie/m);
  t.notRegex(logins.stdout, /who=anonymous/, 'the failed attempt with the old password was not by newbie');
  t.deepEqual(await auditEvents(['--since', '2099-01-01T00:00:00Z']), [], 'nothing after a future date');

  for (const args of [['--since', '10x'], ['--type', 'user create']]) {
    const bad = await cli(['audit', ...args]);
    t.is(bad.code, 2, `${args.join(' ')}: ${bad.stderr}`);
    t.true(oneLine(bad.stderr), bad.stderr);
  }
});

test.serial('cli: audit --follow prints new events as they happen until Ctrl-C', async (t) => {
  const p = spawn(process.execPath, [SUPERVISOR, 'audit', '--follow', '--type', 'user.create', '--config', join(hub.dataDir, 'hub.json')], { cwd: REPO });
  let out = '';
  p.stdout.on('data', (d) => { out += d; });
  p.stderr.on('data', (d) => { out += d; });
  const exited = new Promise<number | null>((resolve) => p.on('exit', (code) => resolve(code)));
  try {
    await waitFor('the stored events', async () => (/what=chief/.test(out) ? true : undefined), 10_000);
    t.is((await api('POST', '/users/late-comer', { token: ADMIN })).status, 201);
    await waitFor('the new event', async () => (/user\.create {2}ok {2}who=user:boss {2}what=late-comer/.test(out) ? true : undefined), 10_000);
    t.notRegex(out, /set_password/, '--type filters');
  } finally {
    p.kill('SIGINT');
  }
  const timer = setTimeout(() => p.kill('SIGKILL'), 5000);
  t.is(await exited, 0, out);
  clearTimeout(timer);
});

test.serial('cli: status lists every process and each actor answering its ping', async (t) => {
  const r = await cli(['status']);
  t.is(r.code, 0, r.stderr);
  // each process with its memory, its start time and the code it runs (release, and commit in a checkout)
  t.regex(r.stdout, /^supervisor +\d+ +[\d.]+ MB +[\d.]+ MB +\d{4}-\d\d-\d\dT[\d:.]+Z +\d+\.\d+\.\d+( \([0-9a-f]{12}\))?$/m);
  for (const actor of ['tokens', 'auth', 'oauth', 'spawner', 'proxy-router']) {
    t.regex(r.stdout, new RegExp(`^${actor} +${actor}-[0-9a-f]{8} +\\d+ +\\d+ s +[\\d.]+ ms$`, 'm'), actor);
  }
  t.regex(r.stdout, new RegExp(`^gateway-${hub.port} +gateway-[0-9a-f]{8} `, 'm'));
});

test('cli: a verb never writes behind the back of a hub whose actor does not answer', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-cli-'));
  try {
    // a live supervisor (this test process) on the data dir, no actor sockets
    mkdirSync(join(dir, 'run'));
    writeFileSync(join(dir, 'run', 'processes.json'), JSON.stringify({ supervisor: process.pid, children: {} }));
    const r = await runHubCommand(['add-user', 'someone', `--Hub.data_dir=${dir}`, '--Hub.rpc_timeout=1'], { input: 'long-enough-pw\n' });
    t.is(r.code, 1);
    t.regex(r.stderr, /its auth actor does not answer .*nothing was changed/);
    t.false(existsSync(join(dir, 'auth.sqlite')));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('cli: without a running hub every verb works on the data dir, and the hub started afterwards honours it', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hub-test-'));
  const port = await freePort();
  const natsPort = await freePort();
  const here = [`--Hub.data_dir=${dataDir}`, `--Hub.port=${port}`, `--Hub.nats_port=${natsPort}`];
  const offline = (args: string[], input?: string) => runHubCommand([...args, ...here], { input });

  const status = await offline(['status']);
  t.is(status.code, 1);
  t.regex(status.stdout, /no hub is running with data dir/);
  const audit = await offline(['audit']);
  t.is(audit.code, 1);
  t.true(oneLine(audit.stderr), audit.stderr);
  t.regex(audit.stderr, new RegExp(`cannot reach the hub's NATS at nats://127\\.0\\.0\\.1:${natsPort}`));

  const added = await offline(['add-user', 'first', '--admin'], 'first-password\n');
  t.is(added.code, 0, added.stderr);
  t.regex(added.stderr, /no hub is running on .*: changed its stores directly/);
  t.is((await offline(['set-password', 'first'], 'better-password\n')).code, 0);
  t.is((await offline(['set-password', 'ghost'], 'ghost-password\n')).code, 1);
  t.is((await offline(['add-user', 'first'], 'first-password\n')).code, 1);
  const tok = await offline(['token', 'first']);
  t.is(tok.code, 0, tok.stderr);
  t.regex(tok.stdout, /^[0-9a-f]{32}\n$/);

  const later = await startHub({ reuse: { dataDir, port, natsPort } });
  try {
    const me = await apiClient(later.url)('GET', '/user', { token: tok.stdout.trim() });
    t.is(me.status, 200);
    t.is(me.body.name, 'first');
    t.is(me.body.admin, true);
    t.is((await formLogin(new Browser(), later.url, 'first', 'better-password')).status, 302);
  } finally {
    await later.stop();
  }
});
