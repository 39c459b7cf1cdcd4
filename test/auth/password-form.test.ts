// Authenticator.password_form: a hub that logs in through an identity provider also shows the form for its own
// passwords (a break-glass admin); the allow options apply to it as to the provider's logins.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, formLogin, startHubWithIdp, whoami } from './helpers.js';

test('password_form: the sign-in page offers the button and the form; an admin signs in with a hub password, others are not let in', async (t) => {
  const ADMIN = randomToken();
  const { hub, idp } = await startHubWithIdp({ carol: 'carol-pw-1' }, {
    Hub: { api_tokens: { [ADMIN]: 'keeper' } },
    Authenticator: { admin_users: ['keeper'], password_form: true },
    OAuthenticator: { login_service: 'Campus SSO' },
  });
  try {
    const api = apiClient(hub.url);
    t.is((await api('PUT', '/users/keeper/password', { token: ADMIN, body: { password: 'keeper-pw-123' } })).status, 204);
    t.is((await api('POST', '/users/walter', { token: ADMIN })).status, 201);
    t.is((await api('PUT', '/users/walter/password', { token: ADMIN, body: { password: 'walter-pw-123' } })).status, 204);

    const b = new Browser();
    const page = await b.get(`${hub.url}/hub/login`);
    t.is(page.status, 200);
    t.regex(page.body, /id="login-with" href="\/hub\/oauth_login">Sign in with Campus SSO</);
    t.regex(page.body, /<form method="post" action="\/hub\/login"/);
    t.regex(page.body, /name="password" type="password"/);

    const wrong = await formLogin(new Browser(), hub.url, 'keeper', 'not-the-password');
    t.is(wrong.status, 403);
    t.regex(wrong.body, /Wrong name or password\./);
    const ok = await formLogin(b, hub.url, 'keeper', 'keeper-pw-123');
    t.is(ok.status, 302, 'the admin signs in with the hub password');
    t.is((await whoami(b, hub.url)).body.name, 'keeper');

    // with no allow option, an identity-provider hub lets only admins in: a hub password does not change that
    const other = await formLogin(new Browser(), hub.url, 'walter', 'walter-pw-123');
    t.is(other.status, 403);
    t.regex(other.body, /Your account is not allowed to use this hub\./);
  } finally {
    await hub.stop();
    await idp.stop();
  }
});
