// Activity reported for a server while it starts (POST /hub/api/users/<name>/activity, as a server or a service
// reports it) is kept once the server is ready, as in the established hub: the start's own record, written again at
// ready, must not take the server's last_activity back to the start request. An idle culler otherwise culled a server
// in use the moment a start slower than its timeout ended. The start is held by a file (test/fixtures/maybe-fail.mjs).
import test from 'ava';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, sleep, startHub, waitFor } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';

const ADMIN = randomToken();

test('activity reported while a server starts is its last_activity once it is ready', async (t) => {
  const holdDir = mkdtempSync(join(tmpdir(), 'hub-hold-'));
  const hub = await startHub({
    config: {
      Hub: { authenticator_class: 'dummy', api_tokens: { [ADMIN]: 'boss' }, activity_resolution: 1 },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { cmd: [process.execPath, join(REPO, 'test', 'fixtures', 'maybe-fail.mjs')], environment: { HOLD_DIR: holdDir } },
    },
  });
  try {
    const api = apiClient(hub.url);
    t.is((await api('POST', '/users/ada', { token: ADMIN })).status, 201);
    writeFileSync(join(holdDir, 'ada'), '');
    const started = await api('POST', '/users/ada/server', { token: ADMIN });
    t.is(started.status, 202, JSON.stringify(started.body));
    const requested = (await api('GET', '/users/ada', { token: ADMIN })).body.servers[''];
    t.false(requested.ready);
    // a moment later, while the start is still held, someone reports activity of the starting server
    await sleep(50);
    const at = new Date().toISOString();
    t.true(at > requested.last_activity, `${at} after ${requested.last_activity}`);
    const reported = await api('POST', '/users/ada/activity', { token: ADMIN, body: { servers: { '': { last_activity: at } } } });
    t.is(reported.status, 200, JSON.stringify(reported.body));
    // the report reaches the record (flushed each Hub.activity_resolution) while the server still cannot be ready
    await waitFor('the starting server\'s activity to show', async () => {
      const s = (await api('GET', '/users/ada', { token: ADMIN })).body.servers[''];
      return !s.ready && new Date(s.last_activity).getTime() === new Date(at).getTime() ? true : undefined;
    }, 20_000, 100);
    rmSync(join(holdDir, 'ada'));
    const ready = await waitFor('the server to be ready', async () => {
      const s = (await api('GET', '/users/ada', { token: ADMIN })).body.servers[''];
      return s?.ready ? s : undefined;
    }, 30_000, 100);
    t.is(new Date(ready.last_activity).getTime(), new Date(at).getTime(), 'ready, the server keeps the activity reported while it started');
  } finally {
    await hub.stop();
    rmSync(holdDir, { recursive: true, force: true });
  }
});
