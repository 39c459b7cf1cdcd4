// Logging out as the established hub 6.1 does: back to the sign-in page (with Authenticator.auto_login, a page that
// says so instead, since the sign-in page would send the browser straight back to the provider), and with
// Hub.shutdown_on_logout the person's running servers stop first.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { startHub, waitFor } from '../harness.js';
import { FIXTURE } from '../spawner/helpers.js';
import { Browser, formLogin, startHubWithIdp, submitProviderForm, whoami } from '../auth/helpers.js';

test('logout: back to the sign-in page; with shutdown_on_logout the running servers stop first', async (t) => {
  const ADMIN = randomToken();
  const hub = await startHub({
    config: {
      Hub: { authenticator_class: 'dummy', shutdown_on_logout: true, allow_named_servers: true, api_tokens: { [ADMIN]: 'boss' } },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { cmd: [process.execPath, FIXTURE] },
    },
  });
  try {
    const api = apiClient(hub.url);
    const b = new Browser();
    t.is((await formLogin(b, hub.url, 'lena', 'any')).status, 302);
    t.is((await api('POST', '/users/lena/server', { token: ADMIN })).status, 201);
    t.is((await api('POST', '/users/lena/servers/extra', { token: ADMIN })).status, 201);
    t.is((await api('POST', '/users/boss/server', { token: ADMIN })).status, 201, 'someone else\'s server, to stay');

    const out = await b.get(`${hub.url}/hub/logout`);
    t.is(out.status, 302);
    t.is(out.location, `${hub.url}/hub/login`);
    t.is((await whoami(b, hub.url)).status, 403);
    const lena = (await api('GET', '/users/lena', { token: ADMIN })).body;
    t.deepEqual(Object.keys(lena.servers), [], 'both of her servers stopped before the answer');
    const kept = await api('GET', '/users/lena?include_stopped_servers', { token: ADMIN });
    t.true('extra' in kept.body.servers, 'a named server is stopped, not removed');
    t.truthy((await api('GET', '/users/boss', { token: ADMIN })).body.servers[''], 'others\' servers run on');
  } finally {
    await hub.stop();
  }
});

test('logout with auto_login: /hub/login goes straight to the provider, so logging out shows a signed-out page', async (t) => {
  const { hub, idp } = await startHubWithIdp({ nora: 'nora-pw-1' }, { Authenticator: { auto_login: true, allow_all: true } });
  try {
    const b = new Browser();
    const login = await b.get(`${hub.url}/hub/login`);
    t.is(login.status, 302);
    t.true(login.location!.startsWith(`${hub.url}/hub/oauth_login`));
    const start = await b.get(login.location!);
    const back = await submitProviderForm(b, idp, await b.get(start.location!), 'nora', 'nora-pw-1');
    t.is((await b.get(back.location!)).status, 302);
    t.is((await whoami(b, hub.url)).body.name, 'nora');
    const out = await b.get(`${hub.url}/hub/logout`);
    t.is(out.status, 200);
    t.regex(out.body, /You are signed out/);
    await waitFor('the login to end', async () => ((await whoami(b, hub.url)).status === 403 ? true : undefined), 5000);
  } finally {
    await hub.stop();
    await idp.stop();
  }
});
