// Deadlines travel with a call, and an actor does no work for a caller that has already given up;
// every API error names its catalogue code.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { sleep, startHub, type HubUnderTest } from '../harness.js';

const ADMIN_TOKEN = randomToken();
let hub: HubUnderTest;

test.before(async () => {
  hub = await startHub({ config: { Hub: { rpc_timeout: 1, api_tokens: { [ADMIN_TOKEN]: 'boss' } }, Authenticator: { admin_users: ['boss'] } } });
});
test.after.always(async () => {
  await hub?.stop();
});

test.serial('deadlines: a token request that already answered 504 mints no token once the tokens actor wakes up', async (t) => {
  const api = apiClient(hub.url);
  const before = await api('GET', '/users/boss/tokens', { token: ADMIN_TOKEN }); // also caches the admin's identity
  t.is(before.status, 200);
  const pid = hub.children().tokens!;
  process.kill(pid, 'SIGSTOP');
  let answer;
  try {
    answer = await api('POST', '/users/boss/tokens', { token: ADMIN_TOKEN, body: { note: 'too late' } });
  } finally {
    await sleep(300);
    process.kill(pid, 'SIGCONT');
  }
  t.is(answer.status, 504);
  t.is(answer.body.code, 'HUB_ERR_ACTOR_TIMEOUT');
  await sleep(500); // the woken actor reads the request it was sent while stopped
  const after = await api('GET', '/users/boss/tokens', { token: ADMIN_TOKEN });
  t.is(after.status, 200);
  t.deepEqual(after.body.api_tokens.map((x: { id: string }) => x.id), before.body.api_tokens.map((x: { id: string }) => x.id));
  t.false(JSON.stringify(after.body).includes('too late'));
});

test.serial('errors: API errors keep status and message and add the catalogue code', async (t) => {
  const api = apiClient(hub.url);
  const missing = await api('GET', '/users/nobody-here', { token: ADMIN_TOKEN });
  t.is(missing.status, 404);
  t.is(missing.body.status, 404);
  t.is(missing.body.code, 'HUB_ERR_USER_NOT_FOUND');
  t.is(typeof missing.body.message, 'string');
  const bad = await api('POST', '/users/boss/tokens', { token: ADMIN_TOKEN, body: { scopes: ['no-such-scope'] } });
  t.is(bad.status, 400);
  t.is(bad.body.code, 'HUB_ERR_SCOPE_INVALID');
  const anon = await api('GET', '/users');
  t.is(anon.status, 403);
  t.regex(anon.body.code, /^HUB_ERR_AUTH_/);
});
