// Servers are separate processes: they outlive the spawner (and, when asked, the hub) and are re-adopted.
import test from 'ava';
import { isAlive, startHub, waitFor } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { FIXTURE, serverRecord } from './helpers.js';

const ADMIN = randomToken();
const config = (cleanup: boolean) => ({
  Hub: { api_tokens: { [ADMIN]: 'boss' }, allow_named_servers: true, cleanup_servers: cleanup },
  Authenticator: { admin_users: ['boss'] },
  Spawner: { cmd: [process.execPath, FIXTURE], poll_interval: 0.5, stop_signal_timeout: 0.5 },
});

test.serial('survival: kill -9 of the spawner leaves servers serving; the new spawner re-adopts them and cleans up the dead', async (t) => {
  const hub = await startHub({ config: config(true) });
  const api = apiClient(hub.url);
  try {
    await api('POST', '/users', { token: ADMIN, body: { usernames: ['keeper', 'loser'] } });
    t.is((await api('POST', '/users/keeper/server', { token: ADMIN })).status, 201);
    t.is((await api('POST', '/users/loser/servers/x', { token: ADMIN })).status, 201);
    const keeper = (await serverRecord(hub.natsUrl, 'keeper'))!;
    const loser = (await serverRecord(hub.natsUrl, 'loser', 'x'))!;
    const spawner = hub.children().spawner!;
    process.kill(spawner, 'SIGKILL');
    process.kill(loser.pid, 'SIGKILL'); // dies while nobody watches
    t.is((await fetch(`${keeper.target}/user/keeper/`)).status, 200, 'the server keeps serving without its spawner');
    await waitFor('a new spawner', async () => (hub.children().spawner !== spawner ? true : undefined), 5000);
    await waitFor('the dead server to be cleaned up', async () => {
      const servers = (await api('GET', '/users/loser', { token: ADMIN })).body.servers;
      return Object.keys(servers).length === 0 ? true : undefined;
    }, 5000);
    await waitFor('keeper re-adopted', async () => ((await serverRecord(hub.natsUrl, 'keeper'))?.instance !== keeper.instance ? true : undefined), 5000);
    t.true((await api('GET', '/users/keeper', { token: ADMIN })).body.servers[''].ready);
    // an adopted server is not our child: its death is noticed by polling
    process.kill(keeper.pid, 'SIGKILL');
    await waitFor('the adopted server\'s death to be noticed', async () => {
      const servers = (await api('GET', '/users/keeper', { token: ADMIN })).body.servers;
      return Object.keys(servers).length === 0 ? true : undefined;
    }, 5000);
    t.pass();
  } finally {
    t.deepEqual((await hub.stop()).leftovers, []);
  }
});

test.serial('survival: with cleanup_servers false a hub restart keeps servers running and re-adopts them; with true, shutdown stops them', async (t) => {
  const first = await startHub({ config: config(false) });
  let api = apiClient(first.url);
  await api('POST', '/users', { token: ADMIN, body: { usernames: ['stayer'] } });
  t.is((await api('POST', '/users/stayer/server', { token: ADMIN })).status, 201);
  const rec = (await serverRecord(first.natsUrl, 'stayer'))!;
  const stopped = await first.stop({ keepDataDir: true });
  t.is(stopped.code, 0);
  t.true(isAlive(rec.pid), 'the server outlives the hub');
  t.is((await fetch(`${rec.target}/user/stayer/`)).status, 200);

  const second = await startHub({ config: config(true), reuse: { dataDir: first.dataDir, port: first.port, natsPort: first.natsPort } });
  api = apiClient(second.url);
  try {
    const servers = (await api('GET', '/users/stayer', { token: ADMIN })).body.servers;
    t.true(servers[''].ready, 're-adopted by the new hub');
    t.is((await serverRecord(second.natsUrl, 'stayer'))!.pid, rec.pid);
  } finally {
    await second.stop();
  }
  t.false(isAlive(rec.pid), 'cleanup_servers true stops servers at shutdown');
});
