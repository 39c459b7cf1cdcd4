// The shared-password authenticator (the established hub 5.3's SharedPasswordAuthenticator) and
// Authenticator.blocked_users: one password for a class, another (long) for its admins, passwords that give
// groups; a blocked name never logs in.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { freePort, runHubCommand, startHub } from '../harness.js';
import { Browser, formLogin, whoami } from './helpers.js';

const USER_PW = 'class-pass-2026';
const ADMIN_PW = 'teacher-pass-0123456789abcdef-0123';
const GROUP_PW = 'lab-a-pass-2026';

test('shared-password: the class password for any name but an admin\'s, the admin password for admins, password_groups, blocked_users', async (t) => {
  const ADMIN = randomToken();
  const hub = await startHub({
    config: {
      Hub: { authenticator_class: 'shared-password', api_tokens: { [ADMIN]: 'teacher' } },
      Authenticator: { admin_users: ['teacher'], allow_all: true, manage_groups: true, blocked_users: ['mallory'] },
      SharedPasswordAuthenticator: { user_password: USER_PW, admin_password: ADMIN_PW, password_groups: { [GROUP_PW]: ['lab-a'] } },
    },
  });
  try {
    const api = apiClient(hub.url);
    const b = new Browser();
    t.is((await formLogin(b, hub.url, 'Student1', USER_PW)).status, 302, 'any name with the class password');
    const me = await whoami(b, hub.url);
    t.is(me.body.name, 'student1');
    t.false(me.body.admin);

    const teacherWithClassPw = await formLogin(new Browser(), hub.url, 'teacher', USER_PW);
    t.is(teacherWithClassPw.status, 403, 'an admin name never opens with the password everybody knows');
    t.regex(teacherWithClassPw.body, /Wrong name or password\./);
    const teacher = new Browser();
    t.is((await formLogin(teacher, hub.url, 'teacher', ADMIN_PW)).status, 302);
    t.true((await whoami(teacher, hub.url)).body.admin);

    const lab = new Browser();
    t.is((await formLogin(lab, hub.url, 'student2', GROUP_PW)).status, 302);
    t.deepEqual((await whoami(lab, hub.url)).body.groups, ['lab-a'], 'password_groups with manage_groups');
    t.deepEqual((await api('GET', '/groups/lab-a', { token: ADMIN })).body.users, ['student2']);

    const blocked = await formLogin(new Browser(), hub.url, 'mallory', USER_PW);
    t.is(blocked.status, 403);
    t.regex(blocked.body, /Your account is not allowed to use this hub\./);
    t.is((await api('GET', '/users/mallory', { token: ADMIN })).status, 404, 'a blocked name is never created');
    t.is((await formLogin(new Browser(), hub.url, 'student3', 'not-the-password')).status, 403);
  } finally {
    await hub.stop();
  }
});

test('shared-password: a short admin password or password_groups without manage_groups stops the start with why', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-shared-pw-'));
  try {
    const file = join(dir, 'hub.json');
    writeFileSync(file, JSON.stringify({
      Hub: { data_dir: join(dir, 'data'), port: await freePort(), nats_port: await freePort(), authenticator_class: 'shared-password' },
      SharedPasswordAuthenticator: { admin_password: 'too-short', password_groups: { 'group-pass-1': ['x'] } },
    }));
    const r = await runHubCommand(['--config', file]);
    t.is(r.code, 2, r.stderr);
    t.regex(r.stderr, /admin_password: at least 32 characters/);
    t.regex(r.stderr, /password_groups: needs Authenticator\.manage_groups/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
