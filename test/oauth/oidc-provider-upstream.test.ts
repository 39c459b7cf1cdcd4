// The hub as OpenID Connect provider in the middle of a chain: people sign in to the hub through a real upstream
// provider (panva's oidc-provider, the `oauth` authenticator), and a tool signs them in through the hub (openid-client).
// The email the upstream provider vouched for reaches the tool's id_token and userinfo (the `email` scope); without
// that scope it does not.
import { randomBytes } from 'node:crypto';
import test from 'ava';
import * as oidc from 'openid-client';
import { Browser } from '../auth/helpers.js';
import { signIn, startHubWithOidc, type OidcHub } from '../auth/oidc-hub-helpers.js';

const PASSWORD = `erin-${randomBytes(6).toString('hex')}`;
const SECRET = `wiki-${randomBytes(12).toString('hex')}`;
const CALLBACK = 'http://127.0.0.1:9/wiki/callback';

let o: OidcHub;

test.before(async () => {
  o = await startHubWithOidc({ erin: { password: PASSWORD, email: 'erin@example.org' } }, {
    Hub: {
      oauth_clients: [{ client_id: 'wiki', client_secret: SECRET, redirect_uris: [CALLBACK], oauth_no_confirm: true, description: 'The wiki' }],
      load_roles: [{ name: 'wiki-readers', scopes: ['access:services!service=wiki'], users: ['erin'] }],
    },
    Authenticator: { allowed_users: ['erin'] },
    OAuthenticator: { scope: ['openid', 'profile', 'email'] },
  });
});
test.after.always(async () => {
  await o?.stop();
});

async function signInToWiki(b: Browser, rp: oidc.Configuration, scope: string) {
  const verifier = oidc.randomPKCECodeVerifier();
  const nonce = oidc.randomNonce();
  const url = oidc.buildAuthorizationUrl(rp, { redirect_uri: CALLBACK, scope, nonce, code_challenge: await oidc.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256' });
  const back = await b.get(url.href);
  if (back.status !== 302 || !back.location?.startsWith(CALLBACK)) throw new Error(`authorize: ${back.status} ${back.location} ${back.body.slice(0, 300)}`);
  const tokens = await oidc.authorizationCodeGrant(rp, new URL(back.location), { pkceCodeVerifier: verifier, expectedNonce: nonce });
  return { tokens, claims: tokens.claims()! };
}

test.serial('oidc provider upstream: the email the identity provider vouched for reaches the tool, with the email scope only', async (t) => {
  const b = new Browser();
  const landed = await signIn(b, o, 'erin', PASSWORD);
  t.is(landed.status, 302, 'signed in to the hub through the upstream provider');

  const rp = await oidc.discovery(new URL(`${o.hub.url}/hub`), 'wiki', SECRET, undefined, { execute: [oidc.allowInsecureRequests] });
  oidc.enableNonRepudiationChecks(rp);
  const withEmail = await signInToWiki(b, rp, 'openid profile email');
  t.is(withEmail.claims.email, 'erin@example.org');
  t.is(withEmail.claims.preferred_username, 'erin');
  const info = await oidc.fetchUserInfo(rp, withEmail.tokens.access_token, withEmail.claims.sub);
  t.is(info.email, 'erin@example.org');
  t.is(withEmail.tokens.refresh_token, undefined, 'no offline_access, no refresh token');

  const without = await signInToWiki(b, rp, 'openid profile');
  t.is(without.claims.email, undefined);
  t.is(without.claims.sub, withEmail.claims.sub);
  t.is((await oidc.fetchUserInfo(rp, without.tokens.access_token, without.claims.sub)).email, undefined);
});
