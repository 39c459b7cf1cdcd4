// POST /hub/api/shutdown: only with the `shutdown` scope, a body of booleans, then the whole hub stops
// (through the supervisor), leaving single-user servers running when the request says so.
import test from 'ava';
import { isAlive, startHub, waitFor } from '../harness.js';
import { serverRecord } from '../spawner/helpers.js';
import { apiClient, randomToken } from './client.js';

test('shutdown: refused without the scope or with a bad body; an admin stops the hub, servers kept on request', async (t) => {
  const ADMIN = randomToken();
  const LOW = randomToken();
  const hub = await startHub({ config: { Hub: { api_tokens: { [ADMIN]: 'boss', [LOW]: 'low' } }, Authenticator: { admin_users: ['boss'] } } });
  let serverPid = 0;
  try {
    const api = apiClient(hub.url);
    const denied = await api('POST', '/shutdown', { token: LOW });
    t.is(denied.status, 403);
    t.regex(denied.body.message, /shutdown/);
    for (const [body, about] of [[{ servers: 'yes' }, /servers must be true or false/], [{ proxy: 1 }, /proxy must be true or false/],
      [[true], /JSON object/], [{ server: false }, /Invalid JSON keys: "server"/], ['{"servers": tru', /valid JSON/]] as const) {
      const r = await api('POST', '/shutdown', { token: ADMIN, body });
      t.is(r.status, 400, JSON.stringify(body));
      t.regex(r.body.message, about);
    }
    t.is((await fetch(`${hub.url}/hub/health`)).status, 200);

    // a running server, to be left running by {servers: false}
    t.true([201, 202].includes((await api('POST', '/users/low/server', { token: ADMIN })).status));
    await waitFor('the server to be ready', async () => ((await api('GET', '/users/low', { token: ADMIN })).body.servers?.['']?.ready ? true : undefined), 30_000, 200);
    serverPid = (await serverRecord(hub.natsUrl, 'low'))!.pid;
    t.true(isAlive(serverPid));

    const r = await api('POST', '/shutdown', { token: ADMIN, body: { servers: false, proxy: true } });
    t.is(r.status, 202);
    t.deepEqual(r.body, { message: 'Shutting down Hub' });
    await waitFor('the supervisor to exit', async () => (hub.proc.exitCode !== null ? true : undefined), 30_000, 100);
    t.is(hub.proc.exitCode, 0);
    t.true(isAlive(serverPid), 'the server outlives the hub');
    const stopped = await hub.stop();
    t.deepEqual(stopped.leftovers, [], 'every hub process is gone');
  } finally {
    if (serverPid && isAlive(serverPid)) process.kill(serverPid, 'SIGKILL');
    await hub.stop();
  }
});
