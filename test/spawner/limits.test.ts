// Hub-wide limits, pending stops, and this project's own single-user server.
import test from 'ava';
import { startHub, waitFor } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { FIXTURE, serverRecord } from './helpers.js';

const ADMIN = randomToken();

test.serial('limits: concurrent_spawn_limit and active_server_limit answer 429 with Retry-After; a pending stop refuses a start', async (t) => {
  const hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, concurrent_spawn_limit: 1, active_server_limit: 2 },
      Authenticator: { admin_users: ['boss'] },
      Spawner: {
        cmd: [process.execPath, '--input-type=module', '-e', `process.env.FIXTURE_DELAY_MS = process.env.HUB_USER === 'slow' ? '1500' : '0'; process.env.FIXTURE_MODE = process.env.HUB_USER === 'stubborn' ? 'stubborn' : ''; await import(${JSON.stringify(FIXTURE)});`],
        slow_spawn_timeout: 0.3, slow_stop_timeout: 0.2, stop_signal_timeout: 1,
      },
    },
  });
  const api = apiClient(hub.url);
  try {
    await api('POST', '/users', { token: ADMIN, body: { usernames: ['slow', 'quick', 'stubborn', 'extra'] } });
    t.is((await api('POST', '/users/slow/server', { token: ADMIN })).status, 202);
    const throttled = await api('POST', '/users/quick/server', { token: ADMIN });
    t.is(throttled.status, 429);
    t.regex(throttled.headers.get('retry-after') ?? '', /^\d+$/);
    await waitFor('slow to be ready', async () => ((await api('GET', '/users/slow', { token: ADMIN })).body.servers['']?.ready ? true : undefined), 5000);
    t.is((await api('POST', '/users/stubborn/server', { token: ADMIN })).status, 201);
    const full = await api('POST', '/users/extra/server', { token: ADMIN });
    t.is(full.status, 429);
    t.regex(full.body.message, /Active user limit/);
    // a server that ignores SIGINT takes a while to stop: 202, pending stop, and a start meanwhile is refused
    t.is((await api('DELETE', '/users/stubborn/server', { token: ADMIN })).status, 202);
    t.is((await api('GET', '/users/stubborn', { token: ADMIN })).body.servers[''].pending, 'stop');
    const during = await api('POST', '/users/stubborn/server', { token: ADMIN });
    t.is(during.status, 400);
    t.regex(during.body.message, /pending stop/);
    await waitFor('the stop to finish', async () => (Object.keys((await api('GET', '/users/stubborn', { token: ADMIN })).body.servers).length === 0 ? true : undefined), 5000);
  } finally {
    await hub.stop();
  }
});

test.serial('singleuser: the default server serves its owner and those granted access, refuses others, and reports activity', async (t) => {
  const hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, activity_resolution: 1 },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { environment: { HUB_ACTIVITY_INTERVAL: '0.5' } },
    },
  });
  const api = apiClient(hub.url);
  try {
    await api('POST', '/users', { token: ADMIN, body: { usernames: ['owner', 'stranger'] } });
    const ownerToken = (await api('POST', '/users/owner/tokens', { token: ADMIN, body: {} })).body.token;
    const strangerToken = (await api('POST', '/users/stranger/tokens', { token: ADMIN, body: {} })).body.token;
    t.is((await api('POST', '/users/owner/server', { token: ADMIN })).status, 201);
    const rec = (await serverRecord(hub.natsUrl, 'owner'))!;
    const base = `${rec.target}/user/owner/`;
    t.is((await fetch(`${base}api`)).status, 200);
    // without credentials a page GET is sent to log in through the hub (its API paths get a 403)
    t.is((await fetch(base, { redirect: 'manual' })).status, 302, 'no credentials: to the hub\'s login');
    t.is((await fetch(`${base}api/status`)).status, 403, 'no credentials on the API');
    t.is((await fetch(base, { headers: { authorization: `token ${strangerToken}` } })).status, 403, 'another user');
    const own = await fetch(`${base}api/status`, { headers: { authorization: `token ${ownerToken}` } });
    t.is(own.status, 200);
    t.is((await own.json()).requested_by, 'owner');
    t.is((await fetch(base, { headers: { authorization: `token ${ADMIN}` } })).status, 200, 'an admin holds access:servers');
    const before = (await api('GET', '/users/owner', { token: ADMIN })).body.servers[''].last_activity;
    await waitFor('activity reported by the server', async () => {
      const now = (await api('GET', '/users/owner', { token: ADMIN })).body.servers[''].last_activity;
      return now > before ? true : undefined;
    }, 6000);
    t.is((await api('DELETE', '/users/owner/server', { token: ADMIN })).status, 204);
  } finally {
    await hub.stop();
  }
});
