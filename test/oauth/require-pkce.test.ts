// Hub.oauth_require_pkce (the established hub 6.0's): an authorization request without a PKCE challenge goes back
// to the client as invalid_request; with one, the flow works (the hub's own servers always send one).
import test from 'ava';
import { createHash, randomBytes } from 'node:crypto';
import { startHub } from '../harness.js';
import { randomToken } from '../api/client.js';
import { Browser, paramsOf } from './browser.js';

const PW = 'pw-for-tests';
const CB = 'http://127.0.0.1:9/cb';

test('oauth_require_pkce: no code_challenge → error=invalid_request to the client; with S256 → a code that the verifier redeems', async (t) => {
  const SECRET = randomToken();
  const hub = await startHub({
    config: {
      Hub: {
        authenticator_class: 'dummy', oauth_require_pkce: true,
        services: [{ name: 'direct', api_token: SECRET, oauth_redirect_uri: CB, oauth_no_confirm: true }],
        load_roles: [{ name: 'direct-users', scopes: ['access:services!service=direct'], users: ['carol'] }],
      },
      DummyAuthenticator: { password: PW },
    },
  });
  try {
    const b = new Browser(hub.url);
    t.is((await b.login('carol', PW)).status, 302);
    const authorize = (extra: Record<string, string>) =>
      b.get(`/hub/api/oauth2/authorize?${new URLSearchParams({ client_id: 'service-direct', response_type: 'code', redirect_uri: CB, state: 'st-1', ...extra })}`);

    const refused = await authorize({});
    t.is(refused.status, 302);
    t.true(refused.location!.startsWith(CB));
    const q = paramsOf(refused.location!);
    t.is(q.get('error'), 'invalid_request');
    t.regex(q.get('error_description') ?? '', /code_challenge required/);
    t.is(q.get('state'), 'st-1');
    t.is(q.get('code'), null);

    const verifier = randomBytes(32).toString('base64url');
    const challenge = createHash('sha256').update(verifier).digest('base64url');
    const granted = await authorize({ code_challenge: challenge, code_challenge_method: 'S256' });
    t.is(granted.status, 302);
    const code = paramsOf(granted.location!).get('code');
    t.truthy(code);
    const token = await fetch(`${hub.url}/hub/api/oauth2/token`, {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'authorization_code', code: code!, client_id: 'service-direct', client_secret: SECRET, redirect_uri: CB, code_verifier: verifier }).toString(),
    });
    t.is(token.status, 200);
    t.is(typeof (await token.json()).access_token, 'string');
  } finally {
    await hub.stop();
  }
});
