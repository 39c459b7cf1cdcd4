// Authenticator.manage_roles (the established hub 5.0's) with the `oauth` authenticator against a real OpenID Connect
// provider (panva's oidc-provider, roles in a Keycloak-style claim `realm_access.roles`): a person's roles are what
// the provider says at each login, so what their tokens may do follows (a role the provider stops naming is gone
// at the next login); roles the hub does not define are left out; Hub.load_roles may not also assign them.
import { randomBytes } from 'node:crypto';
import test from 'ava';
import { runHubCommand, waitFor } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { Browser } from './helpers.js';
import { signIn, startHubWithOidc, type OidcHub } from './oidc-hub-helpers.js';

const ADMIN = randomToken();
const PW = `pw-${randomBytes(4).toString('hex')}`;
let o: OidcHub;
let api: ApiCall;

test.before(async () => {
  o = await startHubWithOidc({ ann: { password: PW, roles: ['user-readers', 'no-such-role'] } }, {
    Hub: {
      api_tokens: { [ADMIN]: 'boss' },
      load_roles: [{ name: 'user-readers', description: 'given by the provider', scopes: ['list:users', 'read:users'] }],
    },
    Authenticator: { admin_users: ['boss'], allow_all: true, manage_roles: true },
    OAuthenticator: { scope: ['openid', 'profile', 'roles'], claim_roles_key: 'realm_access.roles' },
  });
  api = apiClient(o.hub.url);
});
test.after.always(async () => {
  await o?.stop();
});

async function signInAnn(): Promise<void> {
  const back = await signIn(new Browser(), o, 'ann', PW);
  if (back.status !== 302) throw new Error(`sign-in: ${back.status} ${back.body.slice(0, 300)}`);
}

test.serial('manage_roles: the provider\'s roles are the person\'s, and what their tokens may do follows them', async (t) => {
  await signInAnn();
  t.deepEqual((await api('GET', '/users/ann', { token: ADMIN })).body.roles.sort(), ['user', 'user-readers'], 'a role the hub does not define is left out');
  const token = (await api('POST', '/users/ann/tokens', { token: ADMIN, body: { note: 'roles test' } })).body.token as string;
  const listed = await api('GET', '/users', { token });
  t.is(listed.status, 200, 'user-readers gives list:users');
  t.true(listed.body.some((u: { name: string }) => u.name === 'boss'));

  // the provider stops naming the role: at the next login it is gone, and so is what it gave
  await o.op.setUsers({ ann: { roles: [] } });
  await signInAnn();
  // the change reaches the gateways as events (auth → tokens → gateways): bounded waits for each to show it
  await waitFor('ann\'s model without the role', async () => ((await api('GET', '/users/ann', { token: ADMIN })).body.roles.join() === 'user' ? true : undefined), 10_000, 100);
  const refused = await waitFor('her token to lose list:users', async () => {
    const r = await api('GET', '/users', { token });
    return r.status !== 200 ? r : undefined;
  }, 10_000, 100);
  t.is(refused.status, 403);
});

test('manage_roles: Hub.load_roles may not also assign roles to users or groups', async (t) => {
  const r = await runHubCommand([
    '--Hub.authenticator_class=oauth', '--OAuthenticator.client_id=x', '--OAuthenticator.authorize_url=https://idp.example/a',
    '--OAuthenticator.token_url=https://idp.example/t', '--OAuthenticator.userdata_url=https://idp.example/u',
    '--Authenticator.manage_roles=true', '--Hub.load_roles=[{"name":"ops","scopes":["list:users"],"users":["ann"]}]',
  ]);
  t.not(r.code, 0);
  t.regex(r.stderr + r.stdout, /Hub.load_roles: with Authenticator.manage_roles, roles are not assigned to users or groups here \(ops\)/);
});
