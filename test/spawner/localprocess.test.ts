// The localprocess backend: each server runs as its user's own system account, and cannot read what
// belongs to the hub or to other users. Real accounts (useradd), real processes, real permission checks.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, SUPERVISOR, startHub, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { Browser, formLogin, whoami } from '../auth/helpers.js';
import { account, groupId, PROBE, probe, readProgress, serverRecord, systemAccounts } from './helpers.js';

const ADMIN = randomToken();
const accounts = systemAccounts('h10');
const ALICE = accounts.name('a');
const BOB = accounts.name('b');
const GROUP = accounts.name('g');
let hub: HubUnderTest;
let api: ApiCall;

test.before(async () => {
  accounts.addGroup(GROUP);
  accounts.addUser(ALICE, [GROUP]);
  accounts.expect(BOB); // created by the hub below
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, spawner_class: 'localprocess', authenticator_class: 'dummy' },
      Authenticator: { admin_users: ['boss'], username_map: { 'alice.smith@example.org': ALICE } },
      DummyAuthenticator: { password: 'open-sesame' },
      Spawner: {
        cmd: [process.execPath, PROBE],
        profiles: [
          { name: 'standard', display_name: 'Standard', default: true, overrides: { 'Spawner.mem_limit': '256M', 'Spawner.cpu_limit': 1 } },
          { name: 'newcomer', display_name: 'Newcomer', description: 'creates your account', overrides: { 'LocalProcessSpawner.create_system_users': true } },
        ],
      },
    },
  });
  api = apiClient(hub.url);
  const made = await api('POST', '/users', { token: ADMIN, body: { usernames: [ALICE, BOB] } });
  if (made.status !== 201) throw new Error(`setup ${made.status}`);
});

test.after.always(async () => {
  await hub?.stop();
  accounts.removeAll();
});

test.serial('localprocess: the server runs as the user\'s account: uid, gid, groups, HOME/USER/LOGNAME/SHELL, cwd its home, umask 022', async (t) => {
  t.is((await api('POST', `/users/${ALICE}/server`, { token: ADMIN })).status, 201);
  const rec = (await serverRecord(hub.natsUrl, ALICE))!;
  t.is(rec.spawner_class, 'localprocess');
  t.is(rec.spawner_state.account, ALICE);
  const a = account(ALICE);
  const me = await probe(rec, 'whoami');
  t.deepEqual(me.uid, [a.uid, a.uid, a.uid, a.uid], 'real, effective, saved and filesystem uid');
  t.deepEqual(me.gid, [a.gid, a.gid, a.gid, a.gid]);
  t.true(me.groups.includes(groupId(GROUP)), 'supplementary groups of the account');
  t.false(me.groups.includes(0), 'none of the hub\'s groups');
  t.like(me.env, { HOME: a.home, USER: ALICE, LOGNAME: ALICE, SHELL: a.shell, HUB_USER: ALICE });
  t.is(me.cwd, a.home);
  t.is(me.umask, 0o022);
  t.is(me.fileMode, 0o644, 'files it creates are 0644');
});

test.serial('username_map: a login name maps to the hub user (and so to the system account its server runs as); the API maps too', async (t) => {
  const b = new Browser();
  t.is((await formLogin(b, hub.url, 'Alice.Smith@Example.org', 'open-sesame')).status, 302);
  const me = await whoami(b, hub.url);
  t.is(me.status, 200);
  t.is(me.body.name, ALICE, 'logged in as the mapped user');
  t.is((await api('GET', `/users/${encodeURIComponent('alice.smith@example.org')}`, { token: ADMIN })).status, 404, 'no user under the login name');
  const again = await api('POST', '/users', { token: ADMIN, body: { usernames: ['ALICE.SMITH@example.org'] } });
  t.is(again.status, 409, 'the API maps the name to the existing user');
  t.is(again.body.status, 409);
});

test.serial('localprocess: the server cannot read the hub\'s data dir, stores, cookie secret, server logs, NATS (registry, routes), its cgroup limits, or another user\'s home', async (t) => {
  // bob's account and home are made by the hub, through a profile that sets create_system_users
  t.is((await api('POST', `/users/${BOB}/server`, { token: ADMIN, body: { user_options: { profile: 'newcomer' } } })).status, 201);
  const rec = (await serverRecord(hub.natsUrl, ALICE))!;
  const bobHome = account(BOB).home;
  const secrets = [
    hub.dataDir, join(hub.dataDir, 'cookie_secret'), join(hub.dataDir, 'auth.sqlite'), join(hub.dataDir, 'tokens.sqlite'),
    join(hub.dataDir, 'oauth.sqlite'), join(hub.dataDir, 'run', 'config.json'), join(hub.dataDir, 'jetstream'), join(hub.dataDir, 'servers'),
    bobHome, join(bobHome, '.bashrc'),
  ];
  for (const path of secrets) {
    t.true(existsSync(path), `${path} exists (the hub can read it)`);
    t.deepEqual(await probe(rec, `read?path=${encodeURIComponent(path)}`), { ok: false, code: 'EACCES' }, path);
  }
  t.deepEqual(await probe(rec, `read?path=${encodeURIComponent(join(account(ALICE).home, '.bashrc'))}`), { ok: true }, 'its own home is readable');
  // its limits are the hub's: it sits in its groups but cannot raise them or leave
  for (const dir of (rec.spawner_state.cgroup as { dirs: string[] }).dirs) {
    t.true(readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').includes(String(rec.pid)));
    for (const file of ['memory.limit_in_bytes', 'memory.max', 'cpu.cfs_quota_us', 'cpu.max', 'cgroup.procs'].filter((f) => existsSync(join(dir, f)))) {
      t.deepEqual(await probe(rec, `write?path=${encodeURIComponent(join(dir, file))}`), { ok: false, code: 'EACCES' }, file);
    }
  }
  // the registry, routes and events live in the hub's NATS: a server may connect but is refused without the hub's token
  t.regex((await probe(rec, `tcp?port=${hub.natsPort}`)).answer, /Authorization Violation/);
  t.is((await api('DELETE', `/users/${BOB}/server`, { token: ADMIN })).status, 204);
});

test.serial('localprocess: a missing account fails the spawn with the reason in the API error and the progress stream; create_system_users makes it, home 0700', async (t) => {
  const carol = accounts.name('c');
  accounts.expect(carol);
  t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: [carol] } })).status, 201);
  const r = await api('POST', `/users/${carol}/server`, { token: ADMIN });
  const reason = `no system account '${carol}'; create it or set LocalProcessSpawner.create_system_users`;
  t.is(r.status, 500);
  t.true(r.body.message.includes(reason), r.body.message);
  const p = await readProgress(`${hub.url}/hub/api/users/${carol}/server/progress`, ADMIN);
  t.like(p.events.at(-1), { failed: true });
  t.true(p.events.at(-1).message.includes(reason));
  t.is(spawnSync('getent', ['passwd', carol]).status, 2, 'no account was made');

  const bad = await api('POST', `/users/${carol}/server`, { token: ADMIN, body: { user_options: { profile: 'huge' } } });
  t.is(bad.status, 400);
  t.regex(bad.body.message, /Unknown profile 'huge'; choose one of: standard, newcomer/);

  t.is((await api('POST', `/users/${carol}/server`, { token: ADMIN, body: { user_options: { profile: 'newcomer' } } })).status, 201);
  const a = account(carol);
  t.is(statSync(a.home).mode & 0o777, 0o700);
  const rec = (await serverRecord(hub.natsUrl, carol))!;
  t.true(rec.progress.some((e) => /Creating the system account/.test(e.message)), 'the creation is on the progress stream');
  t.is((await probe(rec, 'whoami')).uid[0], a.uid);
  t.deepEqual(rec.user_options, { profile: 'newcomer' });
  t.is((await api('DELETE', `/users/${carol}/server`, { token: ADMIN })).status, 204);
});

test.serial('localprocess: a hub not running as root refuses to start, with one line saying why', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-noroot-'));
  try {
    const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, SUPERVISOR,
      '--Hub.spawner_class=localprocess', `--Hub.data_dir=${join(dir, 'data')}`], { cwd: REPO, encoding: 'utf8', timeout: 30_000 });
    t.is(r.status, 2);
    const lines = r.stderr.trim().split('\n').map((l) => l.trim()).filter((l) => !/^hub: invalid configuration:$/.test(l));
    t.is(lines.length, 1, r.stderr);
    t.regex(lines[0], /"localprocess" runs each server as its user's own system account, which needs the hub to run as root/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
