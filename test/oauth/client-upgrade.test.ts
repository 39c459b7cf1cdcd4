// The OAuth client library with WebSocket upgrades: browsers cannot set headers on a WebSocket, so an
// upgrade may carry `?token=` even where tokens in page URLs are refused (as the established hub's
// client does since 4.1). Checked against a real hub's token resolution.
import test from 'ava';
import type { IncomingMessage } from 'node:http';
import { HubOAuth } from '../../shared/hub-oauth-client.js';
import { apiClient, randomToken } from '../api/client.js';
import { startHub, type HubUnderTest } from '../harness.js';

const ADMIN = randomToken();
let hub: HubUnderTest;
let alice = '';
let bob = '';

test.before(async () => {
  hub = await startHub({ config: { Hub: { api_tokens: { [ADMIN]: 'boss' } }, Authenticator: { admin_users: ['boss'] } } });
  const api = apiClient(hub.url);
  await api('POST', '/users/alice', { token: ADMIN });
  await api('POST', '/users/bob', { token: ADMIN });
  alice = (await api('POST', '/users/alice/tokens', { token: ADMIN, body: {} })).body.token;
  bob = (await api('POST', '/users/bob/tokens', { token: ADMIN, body: {} })).body.token;
});
test.after.always(async () => { await hub?.stop(); });

const client = () => new HubOAuth({
  apiUrl: `${hub.url}/hub/api`, apiToken: randomToken(), clientId: 'hub-user-alice', prefix: '/user/alice/',
  callbackUrl: '/user/alice/oauth_callback', authorizeUrl: '/hub/api/oauth2/authorize', accessScopes: ['access:servers!user=alice'],
  cacheMaxAgeMs: 1000, allowTokenInUrl: false,
});
const upgrade = (url: string, headers: Record<string, string> = {}) =>
  ({ method: 'GET', url, headers: { upgrade: 'websocket', connection: 'Upgrade', ...headers } }) as unknown as IncomingMessage;

test('oauth client: a WebSocket upgrade is admitted with ?token=, even where page URLs may not carry one', async (t) => {
  const c = client();
  t.is((await c.authenticateUpgrade(upgrade(`/user/alice/api/kernels/1/channels?token=${alice}`)))?.name, 'alice');
  t.is(await c.authenticateUpgrade(upgrade('/user/alice/api/kernels/1/channels')), null, 'no credentials');
  t.is(await c.authenticateUpgrade(upgrade(`/user/alice/api/kernels/1/channels?token=${randomToken()}`)), null, 'a token the hub refuses');
  t.is(await c.authenticateUpgrade(upgrade(`/user/alice/x?token=${bob}`)), null, "someone the server's access scopes do not admit");
  t.is((await c.authenticateUpgrade(upgrade('/user/alice/x', { authorization: `token ${alice}` })))?.name, 'alice', 'a header works too');
});
