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
      Authenticator: { admin_users: ['boss'], allowed_users: ['ann', 'ben'] },
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
