// The "password" authenticator: passwords set through the admin API, the login form, and lockouts after
// PasswordAuthenticator.failed_login_limit failures, per user and per client address, that outlive a
// kill -9 of the auth actor. Client addresses are told apart by binding to different 127.0.0.x.
import test from 'ava';
import { isAlive, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { Browser, formLogin, whoami } from './helpers.js';

let hub: HubUnderTest;
let api: ApiCall;
const ADMIN = randomToken();
const HELPER = randomToken();
const LIMIT = 3;
const PW: Record<string, string> = { alice: 'alice-password', bob: 'bob-password', carol: 'carol-password', dora: 'dora-password' };

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: {
        api_tokens: { [ADMIN]: 'boss', [HELPER]: 'helper' },
        load_roles: [{ name: 'user-admins', scopes: ['admin:users'], users: ['helper'] }],
      },
      Authenticator: { admin_users: ['boss'] },
      PasswordAuthenticator: { failed_login_limit: LIMIT, lockout_seconds: 300, min_password_length: 8 },
    },
  });
  api = apiClient(hub.url);
  const created = await api('POST', '/users', { token: ADMIN, body: { usernames: Object.keys(PW) } });
  if (created.status !== 201) throw new Error(`users: ${created.status}`);
  for (const [name, password] of Object.entries(PW)) {
    const r = await api('PUT', `/users/${name}/password`, { token: ADMIN, body: { password } });
    if (r.status !== 204) throw new Error(`password of ${name}: ${r.status} ${JSON.stringify(r.body)}`);
  }
});
test.after.always(async () => {
  await hub?.stop();
});

test.serial('passwords: the admin API answers 204, 400 when too short or malformed, 404 for nobody, 403 without the right', async (t) => {
  t.is((await api('PUT', '/users/carol/password', { token: ADMIN, body: { password: 'carol-password' } })).status, 204);
  t.is((await api('PUT', '/users/carol/password', { token: ADMIN, body: { password: 'short' } })).status, 400);
  t.is((await api('PUT', '/users/carol/password', { token: ADMIN, body: { password: 12345678 } })).status, 400);
  t.is((await api('PUT', '/users/carol/password', { token: ADMIN, body: { password: 'carol-password', admin: true } })).status, 400);
  t.is((await api('PUT', '/users/carol/password', { token: ADMIN, body: 'not json' })).status, 400);
  t.is((await api('PUT', '/users/nobody-here/password', { token: ADMIN, body: { password: 'long-enough-1' } })).status, 404);
  t.is((await api('PUT', '/users/carol/password', { body: { password: 'long-enough-1' } })).status, 403, 'anonymous');
  // a user's own token holds no admin:users
  const own = await api('POST', '/users/dora/tokens', { token: ADMIN, body: {} });
  const denied = await api('PUT', '/users/carol/password', { token: own.body.token, body: { password: 'long-enough-1' } });
  t.true([403, 404].includes(denied.status), String(denied.status));
  // admin:users may set an ordinary user's password, not an admin's (that would be becoming the admin)
  t.is((await api('PUT', '/users/carol/password', { token: HELPER, body: { password: 'carol-password' } })).status, 204);
  t.is((await api('PUT', '/users/boss/password', { token: HELPER, body: { password: 'boss-password' } })).status, 403);
  t.is((await api('PUT', '/users/boss/password', { token: ADMIN, body: { password: 'boss-password' } })).status, 204);
});

test.serial('passwords: a login works; a wrong password re-renders the form with 403', async (t) => {
  const b = new Browser();
  const ok = await formLogin(b, hub.url, 'alice', PW.alice);
  t.is(ok.status, 302);
  t.is(ok.location, `${hub.url}/hub/home`);
  const login = String(ok.headers['set-cookie']?.find((c) => c.startsWith('hub-hub-login=')));
  t.regex(login, /HttpOnly/);
  t.regex(login, /Path=\/hub\//);
  t.regex(login, /SameSite=Lax/);
  t.is((await whoami(b, hub.url)).body.name, 'alice');
  // user names are compared lower-cased
  t.is((await formLogin(new Browser(), hub.url, 'Alice', PW.alice)).status, 302);

  const w = new Browser('127.0.0.9');
  const wrong = await formLogin(w, hub.url, 'alice', 'not-her-password');
  t.is(wrong.status, 403);
  t.regex(wrong.body, /class="error"/);
  t.regex(wrong.body, /name="username"/);
  t.regex(wrong.body, /name="_xsrf"/);
  t.is(w.cookie(hub.url, 'hub-hub-login'), undefined);
  t.is((await formLogin(new Browser('127.0.0.9'), hub.url, 'nobody-at-all', 'whatever-pw')).status, 403, 'unknown user: the same answer');
});

const lockedOut = (html: string) => /Too many failed logins/.test(html);

test.serial('passwords: lockouts per user and per client address survive kill -9 of the auth actor', async (t) => {
  // per user: bob fails LIMIT times from one address; then even his right password, from elsewhere, is refused
  for (let i = 0; i < LIMIT; i++) t.is((await formLogin(new Browser('127.0.0.2'), hub.url, 'bob', `wrong-${i}-password`)).status, 403);
  const bobElsewhere = await formLogin(new Browser('127.0.0.3'), hub.url, 'bob', PW.bob);
  t.is(bobElsewhere.status, 403);
  t.true(lockedOut(bobElsewhere.body));
  t.is((await formLogin(new Browser('127.0.0.3'), hub.url, 'carol', PW.carol)).status, 302, 'other users from that address are fine');

  // per address: LIMIT failures for different users from one address lock that address for everyone
  for (let i = 0; i < LIMIT; i++) t.is((await formLogin(new Browser('127.0.0.4'), hub.url, `guess${i}`, 'wrong-password')).status, 403);
  const fromThere = await formLogin(new Browser('127.0.0.4'), hub.url, 'carol', PW.carol);
  t.is(fromThere.status, 403);
  t.true(lockedOut(fromThere.body));
  t.is((await formLogin(new Browser('127.0.0.5'), hub.url, 'carol', PW.carol)).status, 302, 'carol from elsewhere is fine');

  // kill -9 of the auth actor: the supervisor restarts it, and the lockouts are still there
  const before = hub.children().auth!;
  process.kill(before, 'SIGKILL');
  await waitFor('auth to be restarted', async () => {
    const now = hub.children().auth;
    return now && now !== before && isAlive(now) ? now : undefined;
  }, 15_000);
  await waitFor('the hub to be healthy again', async () => ((await fetch(`${hub.url}/hub/health`)).status === 200 ? true : undefined), 15_000);
  const bobAfter = await formLogin(new Browser('127.0.0.6'), hub.url, 'bob', PW.bob);
  t.is(bobAfter.status, 403);
  t.true(lockedOut(bobAfter.body), 'the per-user lockout survived');
  const addrAfter = await formLogin(new Browser('127.0.0.4'), hub.url, 'dora', PW.dora);
  t.is(addrAfter.status, 403);
  t.true(lockedOut(addrAfter.body), 'the per-address lockout survived');
  t.is((await formLogin(new Browser('127.0.0.6'), hub.url, 'dora', PW.dora)).status, 302);
});
