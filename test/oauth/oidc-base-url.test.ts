// The OpenID Connect provider under Hub.base_url: the issuer is <public_url>/jupyter/hub, discovery lives under it,
// every endpoint it names works through the prefix, and the sign-in and sign-out pages stay under it.
import test from 'ava';
import * as oidc from 'openid-client';
import { startHub, type HubUnderTest } from '../harness.js';
import { randomToken } from '../api/client.js';
import { Browser, hiddenField, paramsOf } from './browser.js';

const PW = 'oidc-base-pw';
const SECRET = `wiki-${randomToken()}`;
const CALLBACK = 'http://127.0.0.1:9/wiki/cb';
const SIGNED_OUT = 'http://127.0.0.1:9/wiki/bye';

let hub: HubUnderTest;

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: {
        base_url: '/jupyter/', authenticator_class: 'dummy',
        oauth_clients: [{ client_id: 'wiki', client_secret: SECRET, redirect_uris: [CALLBACK], post_logout_redirect_uris: [SIGNED_OUT], oauth_no_confirm: true }],
        load_roles: [{ name: 'wiki', scopes: ['access:services!service=wiki'], users: ['alice'] }],
      },
      DummyAuthenticator: { password: PW },
    },
  });
});
test.after.always(async () => {
  await hub?.stop();
});

test('oidc provider under Hub.base_url: issuer, discovery, sign-in, userinfo and sign-out all under the prefix', async (t) => {
  const issuer = `${hub.url}/jupyter/hub`;
  const rp = await oidc.discovery(new URL(issuer), 'wiki', SECRET, undefined, { execute: [oidc.allowInsecureRequests] });
  oidc.enableNonRepudiationChecks(rp);
  t.is(rp.serverMetadata().issuer, issuer);
  t.is(rp.serverMetadata().jwks_uri, `${issuer}/api/oauth2/jwks`);

  const b = new Browser(hub.url);
  const verifier = oidc.randomPKCECodeVerifier();
  const nonce = oidc.randomNonce();
  const url = oidc.buildAuthorizationUrl(rp, { redirect_uri: CALLBACK, scope: 'openid profile', nonce, code_challenge: await oidc.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256' });
  const toLogin = await b.get(url.href);
  t.is(toLogin.status, 302);
  t.true(toLogin.location!.startsWith('/jupyter/hub/login?next='), toLogin.location!);
  const form = await b.get(toLogin.location!);
  const signedIn = await b.post(toLogin.location!, { _xsrf: hiddenField(form.body, '_xsrf'), username: 'alice', password: PW, next: paramsOf(toLogin.location).get('next')! });
  t.is(signedIn.status, 302);
  const granted = await b.get(signedIn.location!);
  t.is(granted.status, 302);
  t.true(granted.location!.startsWith(`${CALLBACK}?code=`));

  const tokens = await oidc.authorizationCodeGrant(rp, new URL(granted.location!), { pkceCodeVerifier: verifier, expectedNonce: nonce, idTokenExpected: true });
  const claims = tokens.claims()!;
  t.is(claims.iss, issuer);
  t.is(claims.preferred_username, 'alice');
  t.is((await oidc.fetchUserInfo(rp, tokens.access_token, claims.sub)).preferred_username, 'alice');

  const asked = await b.get(`/jupyter/hub/api/oauth2/logout?client_id=wiki&post_logout_redirect_uri=${encodeURIComponent(SIGNED_OUT)}`);
  t.is(asked.status, 200);
  t.regex(asked.body, /<form method="post" action="\/jupyter\/hub\/api\/oauth2\/logout">/);
  const out = await b.get(oidc.buildEndSessionUrl(rp, { id_token_hint: tokens.id_token!, post_logout_redirect_uri: SIGNED_OUT }).href);
  t.is(out.status, 302);
  t.is(out.location, SIGNED_OUT);
  t.is((await b.get('/jupyter/hub/home')).status, 302, 'signed out of the hub');
});
