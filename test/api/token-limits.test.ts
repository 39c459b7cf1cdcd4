// Hub.token_expires_in_max_seconds (the established hub 5.1's): a token without an expiry gets the longest one
// allowed; a longer one asked for is a 400 naming the limit; 0 is no way round it.
import test from 'ava';
import { startHub } from '../harness.js';
import { apiClient, randomToken } from './client.js';

test('token_expires_in_max_seconds: missing or 0 → the maximum; more → 400; less → as asked', async (t) => {
  const ADMIN = randomToken();
  const hub = await startHub({ config: { Hub: { api_tokens: { [ADMIN]: 'boss' }, token_expires_in_max_seconds: 3600 }, Authenticator: { admin_users: ['boss'] } } });
  try {
    const api = apiClient(hub.url);
    const expiresIn = (body: { expires_at: string }) => (Date.parse(body.expires_at) - Date.now()) / 1000;
    for (const body of [{}, { expires_in: 0 }, { expires_in: null }]) {
      const r = await api('POST', '/users/boss/tokens', { token: ADMIN, body });
      t.is(r.status, 201, JSON.stringify(r.body));
      t.true(Math.abs(expiresIn(r.body) - 3600) < 60, `${JSON.stringify(body)} → expires in ${expiresIn(r.body)} s`);
    }
    const short = await api('POST', '/users/boss/tokens', { token: ADMIN, body: { expires_in: 60 } });
    t.is(short.status, 201);
    t.true(Math.abs(expiresIn(short.body) - 60) < 30);
    const long = await api('POST', '/users/boss/tokens', { token: ADMIN, body: { expires_in: 7200 } });
    t.is(long.status, 400);
    t.is(long.body.message, 'token expires_in: 7200 must not exceed 3600');
  } finally {
    await hub.stop();
  }
});
