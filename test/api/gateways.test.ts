// Several gateways serve one hub: a revoked token, a user's lost role, a share granted or revoked and a logout
// reach every one of them at once (NATS events), not after their caches age out.
import test from 'ava';
import { startHub, waitFor } from '../harness.js';
import { startExtraGateway } from '../proxy/helpers.js';
import { apiClient, randomToken } from './client.js';

test('gateways: revocation and role changes take effect at once on every gateway', async (t) => {
  const ADMIN = randomToken();
  const hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, cache_max_age: 3600, load_roles: [{ name: 'readers', scopes: ['list:users'], groups: ['readers'] }] },
      Authenticator: { admin_users: ['boss'] },
    },
  });
  const second = await startExtraGateway(hub.dataDir);
  try {
    const one = apiClient(hub.url);
    const two = apiClient(second.url);
    await one('POST', '/users/ann', { token: ADMIN });
    await one('POST', '/groups/readers', { token: ADMIN, body: { users: ['ann'] } });
    const created = await one('POST', '/users/ann/tokens', { token: ADMIN, body: {} });
    const token = created.body.token;
    // both gateways have the token's resolution cached (for an hour, by cache_max_age)
    await waitFor('ann to list users on both gateways', async () => {
      const [a, b] = await Promise.all([one('GET', '/users', { token }), two('GET', '/users', { token })]);
      return a.status === 200 && b.status === 200 ? true : undefined;
    }, 5000);
    // a group change on one gateway narrows the token on the other
    t.is((await one('DELETE', '/groups/readers/users', { token: ADMIN, body: { users: ['ann'] } })).status, 200);
    await waitFor('the other gateway to see the lost role', async () => ((await two('GET', '/users', { token })).status === 403 ? true : undefined), 1000, 20);
    // a share granted on one gateway shows on the other, and its revocation on the other shows on the first
    t.is((await one('POST', '/users/bob', { token: ADMIN })).status, 201);
    const shared = async (api: typeof one) => ((await api('GET', '/user', { token })).body.scopes as string[]).includes('access:servers!server=bob/');
    t.false(await shared(one));
    t.false(await shared(two), 'both gateways have the resolution without the share cached');
    t.is((await one('POST', '/shares/bob/', { token: ADMIN, body: { user: 'ann' } })).status, 200);
    t.true(await shared(one), 'at once on the gateway that granted it');
    await waitFor('the other gateway to see the share', async () => ((await shared(two)) ? true : undefined), 1000, 20);
    t.is((await two('PATCH', '/shares/bob/', { token: ADMIN, body: { user: 'ann' } })).status, 200);
    t.false(await shared(two));
    await waitFor('the first gateway to see the revocation', async () => ((await shared(one)) ? undefined : true), 1000, 20);
    // a revocation through the second gateway is refused at once by the first
    t.is((await two('DELETE', `/users/ann/tokens/${created.body.id}`, { token: ADMIN })).status, 204);
    await waitFor('the first gateway to refuse the revoked token', async () => ((await one('GET', '/user', { token })).status === 403 ? true : undefined), 1000, 20);
    t.is((await two('GET', '/user', { token })).status, 403);
  } finally {
    second.proc.kill('SIGTERM');
    await hub.stop();
  }
});
