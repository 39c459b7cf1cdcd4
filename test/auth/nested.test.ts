// The seed's two nested OAuth flows end to end: a browser opens its single-user server; the server sends
// it to the hub (internal flow), the hub sends it to the external identity provider (the hub's own login),
// and back up both flows to the server's page.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, startHubWithIdp, submitProviderForm, type Page } from './helpers.js';

test('nested: server → hub authorize → hub login → provider → hub callback → authorize → server callback → server page', async (t) => {
  const ADMIN = randomToken();
  const { hub, idp } = await startHubWithIdp({ erin: 'erin-pw-1' }, {
    Hub: { api_tokens: { [ADMIN]: 'boss' } },
    // erin exists because an admin made her: that is what admits her (as the established hub 5 does)
    Authenticator: { admin_users: ['boss'], allow_existing_users: true },
  });
  try {
    const api = apiClient(hub.url);
    t.is((await api('POST', '/users/erin', { token: ADMIN })).status, 201);
    t.is((await api('POST', '/users/erin/server', { token: ADMIN })).status, 201);
    const b = new Browser();
    const hops: string[] = [];
    const go = async (url: string): Promise<Page> => {
      hops.push(new URL(url).pathname);
      return b.get(url);
    };
    // 1. the server, without credentials, sends the browser to the hub's authorize endpoint
    let p = await go(`${hub.url}/user/erin/`);
    t.is(p.status, 302);
    t.true(p.location!.startsWith(`${hub.url}/hub/api/oauth2/authorize?`));
    t.is(new URL(p.location!).searchParams.get('client_id'), 'hub-user-erin');
    // 2. not logged in at the hub: its login, which is the provider's
    p = await go(p.location!);
    t.true(p.location!.startsWith(`${hub.url}/hub/login?next=`));
    p = await go(p.location!);
    t.is(p.status, 200, 'the sign-in page, with its "Sign in with …" button');
    const button = /<a [^>]*id="login-with" href="([^"]+)"/.exec(p.body);
    t.truthy(button, 'the button is on the page');
    t.true(button![1].startsWith('/hub/oauth_login'));
    p = await go(`${hub.url}${button![1].replace(/&amp;/g, '&')}`);
    t.true(p.location!.startsWith(`${idp.url}/authorize?`), 'the hub is a client of the provider');
    p = await submitProviderForm(b, idp, await go(p.location!), 'erin', 'erin-pw-1');
    t.true(p.location!.startsWith(`${hub.url}/hub/oauth_callback?`));
    // 3. the hub's callback logs erin in and resumes the internal flow where it left off
    p = await go(p.location!);
    t.true(p.location!.startsWith(`${hub.url}/hub/api/oauth2/authorize?`));
    // 4. her own server: no confirmation page, straight to the server's callback with a code
    p = await go(p.location!);
    t.true(p.location!.startsWith(`${hub.url}/user/erin/oauth_callback?`));
    t.truthy(new URL(p.location!).searchParams.get('code'));
    // 5.–6. the server exchanges the code, keeps the token in its cookie, and sends the browser back
    p = await go(p.location!);
    t.is(p.location, `${hub.url}/user/erin/`);
    t.truthy(b.cookie(hub.url, 'hub-user-erin'));
    // 7. the server's page, for erin
    p = await go(p.location!);
    t.is(p.status, 200);
    t.regex(p.body, /Server of erin/);
    t.log(hops.join(' → '));
  } finally {
    await hub.stop();
    await idp.stop();
  }
});
