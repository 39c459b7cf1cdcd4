// Limits and profiles: Spawner.mem_limit / cpu_limit enforced by the kernel through one cgroup per server,
// and profiles overriding them (and the command's environment) per start.
import test from 'ava';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { PROBE, probe, serverRecord } from './helpers.js';

const ADMIN = randomToken();
const MiB = 1024 * 1024;
let hub: HubUnderTest;
let api: ApiCall;

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, spawner_class: 'simple' },
      Authenticator: { admin_users: ['boss'] },
      Spawner: {
        cmd: [process.execPath, PROBE], mem_limit: '160M', cpu_limit: 0.5,
        profiles: [
          { name: 'standard', display_name: 'Standard', description: '160 MiB, half a core' },
          { name: 'big', display_name: 'Big', description: '1 GiB, two cores', overrides: { 'Spawner.mem_limit': '1G', 'Spawner.cpu_limit': 2, 'Spawner.environment': { FLAVOUR: 'big' } } },
          { name: 'free', display_name: 'No limits', overrides: { 'Spawner.mem_limit': '', 'Spawner.cpu_limit': 0 } },
        ],
      },
    },
  });
  api = apiClient(hub.url);
  await api('POST', '/users', { token: ADMIN, body: { usernames: ['lim', 'hog', 'calm', 'big', 'free'] } });
});
test.after.always(async () => {
  await hub?.stop();
});

const read = (dir: string, file: string) => readFileSync(join(dir, file), 'utf8').trim();
const servers = async (user: string) => (await api('GET', `/users/${user}`, { token: ADMIN })).body.servers;
const dirsOf = (rec: any): string[] => rec.spawner_state.cgroup.dirs;

test.serial('limits: one cgroup per server holds it from its first instruction, with the limits in its files and MEM_LIMIT/CPU_LIMIT in its environment; removed with it', async (t) => {
  t.is((await api('POST', '/users/lim/server', { token: ADMIN })).status, 201);
  const rec = (await serverRecord(hub.natsUrl, 'lim'))!;
  const dirs = dirsOf(rec);
  const memory = dirs.find((d) => existsSync(join(d, 'memory.limit_in_bytes')) || existsSync(join(d, 'memory.max')))!;
  const cpu = dirs.find((d) => existsSync(join(d, 'cpu.cfs_quota_us')) || existsSync(join(d, 'cpu.max')))!;
  t.truthy(memory && cpu, `groups ${dirs.join(', ')}`);
  if (existsSync(join(memory, 'memory.limit_in_bytes'))) {
    t.is(Number(read(memory, 'memory.limit_in_bytes')), 160 * MiB);
    t.is(read(cpu, 'cpu.cfs_quota_us'), '50000');
    t.is(read(cpu, 'cpu.cfs_period_us'), '100000');
  } else {
    t.is(Number(read(memory, 'memory.max')), 160 * MiB);
    t.is(read(cpu, 'cpu.max'), '50000 100000');
  }
  for (const d of dirs) t.true(read(d, 'cgroup.procs').split('\n').includes(String(rec.pid)), `the server is in ${d}`);
  const me = await probe(rec, 'whoami');
  t.is(me.env.MEM_LIMIT, String(160 * MiB));
  t.is(me.env.CPU_LIMIT, '0.5');
  t.is((await api('DELETE', '/users/lim/server', { token: ADMIN })).status, 204);
  for (const d of dirs) t.false(existsSync(d), `${d} removed with the server`);
});

test.serial('limits: a server allocating past mem_limit is killed by the kernel and shown stopped; its neighbour and the hub are unaffected', async (t) => {
  t.is((await api('POST', '/users/calm/server', { token: ADMIN })).status, 201);
  t.is((await api('POST', '/users/hog/server', { token: ADMIN })).status, 201);
  const hog = (await serverRecord(hub.natsUrl, 'hog'))!;
  const calm = (await serverRecord(hub.natsUrl, 'calm'))!;
  const answer = await probe(hog, 'alloc?mb=400').catch((e: Error) => e);
  t.true(answer instanceof Error, 'the allocation never completes: the server dies mid-request');
  await waitFor('the hub to show the server stopped', async () => (Object.keys(await servers('hog')).length === 0 ? true : undefined), 10_000);
  t.regex(hub.logs(), /"event":"server.exited".*out of memory/, 'the reason is logged');
  for (const d of dirsOf(hog)) t.false(existsSync(d), 'its group is removed');
  t.is((await fetch(`${hub.url}/hub/health`)).status, 200);
  t.true((await servers('calm'))[''].ready);
  t.is((await probe(calm, 'whoami')).pid, calm.pid, 'the neighbour still serves');
  t.is((await api('POST', '/users/hog/server', { token: ADMIN })).status, 201, 'and the user can start again');
  for (const u of ['hog', 'calm']) t.is((await api('DELETE', `/users/${u}/server`, { token: ADMIN })).status, 204);
});

test.serial('profiles: user_options.profile picks limits and environment per start; unknown is a 400 naming the choices', async (t) => {
  t.is((await api('POST', '/users/big/server', { token: ADMIN, body: { user_options: { profile: 'big' } } })).status, 201);
  const big = (await serverRecord(hub.natsUrl, 'big'))!;
  const env = (await probe(big, 'whoami')).env;
  t.like(env, { MEM_LIMIT: String(1024 * MiB), CPU_LIMIT: '2', FLAVOUR: 'big' });
  t.deepEqual((await servers('big'))[''].user_options, { profile: 'big' });
  t.is((await api('POST', '/users/free/server', { token: ADMIN, body: { user_options: { profile: 'free' } } })).status, 201);
  const free = (await serverRecord(hub.natsUrl, 'free'))!;
  t.is(free.spawner_state.cgroup, null, 'no limit, no group');
  const freeEnv = (await probe(free, 'whoami')).env;
  t.false('MEM_LIMIT' in freeEnv || 'CPU_LIMIT' in freeEnv);
  const bad = await api('POST', '/users/lim/server', { token: ADMIN, body: { user_options: { profile: 'gpu' } } });
  t.is(bad.status, 400);
  t.is(bad.body.message, "Unknown profile 'gpu'; choose one of: standard, big, free");
  t.deepEqual(await servers('lim'), {}, 'nothing was started');
  for (const u of ['big', 'free']) t.is((await api('DELETE', `/users/${u}/server`, { token: ADMIN })).status, 204);
});
