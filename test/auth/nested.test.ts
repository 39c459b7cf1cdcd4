// The seed's two nested OAuth flows end to end: a browser opens its single-user server; the server sends
// it to the hub (internal flow), the hub sends it to the external identity provider (the hub's own login),
// and back up both flows to the server's page.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { freePort, startHub } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, field, startIdp, type Page } from './helpers.js';

test('nested: server → hub authorize → hub login → provider → hub callback → authorize → server callback → server page', async (t) => {
  const port = await freePort();
  const secret = `idp-secret-${randomToken()}`;
  const ADMIN = randomToken();
  const idp = await startIdp({
    IDP_USERS: JSON.stringify({ erin: 'erin-pw-1' }), IDP_CLIENT_ID: 'hub-at-idp', IDP_CLIENT_SECRET: secret,
    IDP_REDIRECT_URI: `http://127.0.0.1:${port}/hub/oauth_callback`, IDP_TOKEN_TTL: '3600',
  });
  const hub = await startHub({
    reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port, natsPort: await freePort() },
    config: {
      Hub: { authenticator_class: 'oauth', api_tokens: { [ADMIN]: 'boss' } },
      Authenticator: { admin_users: ['boss'] },
      OAuthenticator: { authorize_url: `${idp.url}/authorize`, token_url: `${idp.url}/token`, userdata_url: `${idp.url}/userinfo`, client_id: 'hub-at-idp', client_secret: secret },
    },
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
    t.true(p.location!.startsWith(`${hub.url}/hub/oauth_login`));
    p = await go(p.location!);
    t.true(p.location!.startsWith(`${idp.url}/authorize?`), 'the hub is a client of the provider');
    const form = await go(p.location!);
    const fields = Object.fromEntries(['client_id', 'redirect_uri', 'response_type', 'scope', 'state', 'code_challenge', 'code_challenge_method']
      .map((k) => [k, field(form.body, k) ?? '']).filter(([, v]) => v));
    p = await b.post(`${idp.url}/authorize`, { ...fields, username: 'erin', password: 'erin-pw-1', action: 'login' });
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
