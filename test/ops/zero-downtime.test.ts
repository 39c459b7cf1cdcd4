// Zero downtime (issue 24): the front door opens only when the hub can serve, and a start sent while the spawner
// restarts waits for the new one instead of failing.
import test from 'ava';
import { fileURLToPath } from 'node:url';
import { apiClient, randomToken } from '../api/client.js';
import { join } from 'node:path';
import { isAlive, NATS_TOKEN, REPO, runHubCommand, startHub, waitFor } from '../harness.js';
import { execFileSync } from 'node:child_process';
import { HUB_VERSION } from '../../shared/build-info.js';

const TARGET = fileURLToPath(new URL('../bench/spawn-target.mjs', import.meta.url));
const ADMIN = randomToken();

/** `hub status`'s row of one process: its pid, start time and code (release and commit). */
async function statusRow(dataDir: string, process: string): Promise<{ pid: number; started: string; code: string }> {
  const r = await runHubCommand(['status', '--config', join(dataDir, 'hub.json')], { env: { HUB_NATS_TOKEN: NATS_TOKEN } });
  if (r.code !== 0) throw new Error(`hub status: ${r.code} ${r.stdout}${r.stderr}`);
  const line = r.stdout.split('\n').find((l) => l.startsWith(`${process} `));
  const m = line && /^\S+\s+(\d+)\s+[\d.]+ MB\s+[\d.]+ MB\s+(\S+)\s+(.+)$/.exec(line);
  if (!m) throw new Error(`hub status has no row for ${process}:\n${r.stdout}`);
  return { pid: Number(m[1]), started: m[2], code: m[3].trim() };
}

/** "<release> (<commit>)" naming this package's release and a commit of this repository (HEAD moves while tests run). */
function isCheckoutCode(code: string): boolean {
  const m = /^(\S+) \(([0-9a-f]{12})\)$/.exec(code);
  if (!m || m[1] !== HUB_VERSION) return false;
  try {
    return execFileSync('git', ['cat-file', '-t', m[2]], { cwd: REPO }).toString().trim() === 'commit';
  } catch {
    return false;
  }
}

const hubConfig = (more: Record<string, Record<string, unknown>> = {}) => ({
  ...more,
  Hub: { api_tokens: { [ADMIN]: 'boss' }, ...more.Hub },
  Authenticator: { admin_users: ['boss'] },
  Spawner: { cmd: [process.execPath, TARGET], slow_spawn_timeout: 5, ...more.Spawner },
});

test.serial('front door: starts sent as soon as the port first answers all succeed (20 users, no 503)', async (t) => {
  const hub = await startHub({ readyWhen: 'answering', config: hubConfig() });
  try {
    const api = apiClient(hub.url);
    const names = Array.from({ length: 20 }, (_, i) => `early${i}`);
    const made = await api('POST', '/users', { token: ADMIN, body: { usernames: names } });
    t.is(made.status, 201, JSON.stringify(made.body));
    const starts = await Promise.all(names.map((n) => api('POST', `/users/${n}/server`, { token: ADMIN })));
    t.deepEqual(starts.map((r, i) => [names[i], r.status]).filter(([, s]) => s !== 201 && s !== 202), []);
    const health = await fetch(`${hub.url}/hub/health`);
    t.is(health.status, 200);
  } finally {
    await hub.stop();
  }
});

test.serial('front door: a start sent while the spawner restarts waits for the new spawner (no 503)', async (t) => {
  const hub = await startHub({ config: hubConfig({ Hub: { rpc_timeout: 10 } }) });
  try {
    const api = apiClient(hub.url);
    t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: ['late'] } })).status, 201);
    const old = hub.children().spawner!;
    // hub status: every process with its start time and the code it runs
    const before = await statusRow(hub.dataDir, 'spawner');
    t.is(before.pid, old);
    t.true(isCheckoutCode(before.code), before.code);
    t.true(Date.parse(before.started) <= Date.now());
    t.true(isCheckoutCode((await statusRow(hub.dataDir, 'supervisor')).code));
    process.kill(old, 'SIGKILL');
    await waitFor('the spawner to be gone', async () => (isAlive(old) ? undefined : true), 5000, 10);
    const start = await api('POST', '/users/late/server', { token: ADMIN });
    t.true(start.status === 201 || start.status === 202, `${start.status} ${JSON.stringify(start.body)}`);
    const fresh = hub.children().spawner;
    t.truthy(fresh);
    t.not(fresh, old);
    const ready = await waitFor('the server to be ready', async () => {
      const r = await api('GET', '/users/late', { token: ADMIN });
      return r.body?.servers?.['']?.ready ? true : undefined;
    }, 15_000);
    t.true(ready);
    const after = await statusRow(hub.dataDir, 'spawner');
    t.is(after.pid, fresh);
    t.true(Date.parse(after.started) > Date.parse(before.started), `${after.started} after ${before.started}`);
    t.true(isCheckoutCode(after.code), after.code);
  } finally {
    await hub.stop();
  }
});
