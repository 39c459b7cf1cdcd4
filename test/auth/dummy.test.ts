// The "dummy" authenticator: any allowed name logs in with DummyAuthenticator.password (for demos and tests).
import test from 'ava';
import { startHub, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, formLogin, whoami } from './helpers.js';

let hub: HubUnderTest;
const ADMIN = randomToken();

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: { authenticator_class: 'dummy', api_tokens: { [ADMIN]: 'boss' } },
      Authenticator: { admin_users: ['boss', 'ada'], allowed_users: ['ann', 'ben', 'bea'] },
      DummyAuthenticator: { password: 'demo-pass' },
    },
  });
});
test.after.always(async () => {
  await hub?.stop();
});

test('dummy: the configured password logs in any allowed name, creating the user; anything else is 403', async (t) => {
  const api = apiClient(hub.url);
  t.is((await api('GET', '/users/ann', { token: ADMIN })).status, 404);
  const ann = new Browser();
  const ok = await formLogin(ann, hub.url, 'ann', 'demo-pass');
  t.is(ok.status, 302);
  t.is(ok.location, `${hub.url}/hub/home`);
  t.is((await whoami(ann, hub.url)).body.name, 'ann');
  t.is((await api('GET', '/users/ann', { token: ADMIN })).status, 200, 'created at first login');

  t.is((await formLogin(new Browser('127.0.0.2'), hub.url, 'ben', 'wrong-pass')).status, 403);
  t.is((await formLogin(new Browser('127.0.0.2'), hub.url, 'zed', 'demo-pass')).status, 403, 'not in allowed_users');
  t.is((await api('GET', '/users/zed', { token: ADMIN })).status, 404);
  t.is((await formLogin(new Browser(), hub.url, 'boss', 'demo-pass')).status, 302, 'admins are always allowed');
});

test('dummy: a returning user\'s login follows what changed in between (admin_users gives admin back after the API took it; a renamed or deleted user is made again)', async (t) => {
  // the auth actor remembers what a login found of a user; every change made since must be seen at the next login
  const api = apiClient(hub.url);
  t.is((await formLogin(new Browser(), hub.url, 'ada', 'demo-pass')).status, 302);
  t.is((await formLogin(new Browser(), hub.url, 'ada', 'demo-pass')).status, 302, 'a second login: remembered');
  t.is((await api('PATCH', '/users/ada', { token: ADMIN, body: { admin: false } })).status, 200);
  t.false((await api('GET', '/users/ada', { token: ADMIN })).body.admin, 'the API took admin away');
  t.is((await formLogin(new Browser(), hub.url, 'ada', 'demo-pass')).status, 302);
  t.true((await api('GET', '/users/ada', { token: ADMIN })).body.admin, 'Authenticator.admin_users gives it back at the next login');

  t.is((await formLogin(new Browser(), hub.url, 'bea', 'demo-pass')).status, 302);
  t.is((await formLogin(new Browser(), hub.url, 'bea', 'demo-pass')).status, 302);
  t.is((await api('PATCH', '/users/bea', { token: ADMIN, body: { name: 'beatrix' } })).status, 200);
  t.is((await api('GET', '/users/bea', { token: ADMIN })).status, 404);
  t.is((await formLogin(new Browser(), hub.url, 'bea', 'demo-pass')).status, 302);
  t.is((await api('GET', '/users/bea', { token: ADMIN })).status, 200, 'bea made again at his login after the rename');
  t.is((await api('DELETE', '/users/bea', { token: ADMIN })).status, 204);
  t.is((await formLogin(new Browser(), hub.url, 'bea', 'demo-pass')).status, 302);
  t.is((await api('GET', '/users/bea', { token: ADMIN })).status, 200, 'and again after a delete');
});
