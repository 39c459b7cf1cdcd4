// Spawner.group_overrides and Spawner.apply_user_options (the established hub 5's): what a start runs with,
// seen from inside the server (the fixture's /env), on a real hub.
import test from 'ava';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runHubCommand, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { FIXTURE, serverRecord } from './helpers.js';

const ADMIN = randomToken();
const MiB = 1024 * 1024;
let hub: HubUnderTest;
let api: ApiCall;

// The fixture shows the HUB_* variables' values (and only the names of the others): MEM_LIMIT is copied into one.
const CMD = [process.execPath, '--input-type=module', '-e',
  `process.env.HUB_SEEN_MEM_LIMIT = process.env.MEM_LIMIT ?? 'none'; await import(${JSON.stringify(FIXTURE)});`];

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' }, spawner_class: 'simple', allow_named_servers: true, log_level: 'info' },
      Authenticator: { admin_users: ['boss'] },
      Spawner: {
        cmd: CMD,
        environment: { HUB_T_BASE: 'base', HUB_T_WHO: 'base' },
        // listed out of order on purpose: "Y-beta" sorts before "x-alpha" by code point (as the established hub's
        // sorted() orders them), after it by locale and by insertion
        group_overrides: {
          'x-alpha': { groups: ['alpha'], spawner_override: { environment: { HUB_T_ALPHA: 'yes', HUB_T_WHO: 'alpha' }, mem_limit: '256M' } },
          'Y-beta': { groups: ['beta', 'gamma'], spawner_override: { environment: { HUB_T_BETA: 'yes', HUB_T_WHO: 'beta', HUB_T_BASE: null }, 'Spawner.mem_limit': '192M', default_url: '/beta' } },
        },
        apply_user_options: { mem: 'mem_limit', url: 'Spawner.default_url', debug: 'debug' },
        profiles: [
          { name: 'plain', display_name: 'Plain', default: true },
          { name: 'big', display_name: 'Big', overrides: { 'Spawner.mem_limit': '512M', 'Spawner.environment': { HUB_T_WHO: 'profile' } } },
        ],
      },
    },
  });
  api = apiClient(hub.url);
  const made = await api('POST', '/users', { token: ADMIN, body: { usernames: ['ann', 'bob', 'cid', 'dee', 'eve'] } });
  if (made.status !== 201) throw new Error(`users not created: ${made.status}`);
  for (const [group, users] of [['alpha', ['ann', 'cid', 'dee']], ['beta', ['cid']], ['other', ['bob']]] as const) {
    const r = await api('POST', `/groups/${group}`, { token: ADMIN, body: { users } });
    if (r.status !== 201) throw new Error(`group ${group} not created: ${r.status} ${JSON.stringify(r.body)}`);
  }
});
test.after.always(async () => {
  await hub?.stop();
});

/** Starts a server, waits until it is ready, and returns its HUB_* environment. */
async function started(user: string, userOptions?: Record<string, unknown>, name = ''): Promise<Record<string, string>> {
  const path = name ? `/users/${user}/servers/${name}` : `/users/${user}/server`;
  const r = await api('POST', path, { token: ADMIN, body: userOptions ? { user_options: userOptions } : undefined });
  if (r.status !== 201 && r.status !== 202) throw new Error(`start of ${user}: ${r.status} ${JSON.stringify(r.body)}`);
  await waitFor(`${user}'s server to be ready`, async () => ((await api('GET', `/users/${user}`, { token: ADMIN })).body.servers[name]?.ready ? true : undefined), 20_000);
  const rec = (await serverRecord(hub.natsUrl, user, name))!;
  const env = await (await fetch(`${rec.target}${rec.url}env`, { signal: AbortSignal.timeout(10_000) })).json();
  return env.hub;
}

async function stopped(user: string, name = ''): Promise<void> {
  const path = name ? `/users/${user}/servers/${name}` : `/users/${user}/server`;
  const r = await api('DELETE', path, { token: ADMIN, body: name ? { remove: true } : undefined });
  if (r.status !== 204 && r.status !== 202) throw new Error(`stop of ${user}: ${r.status}`);
  await waitFor(`${user}'s server to stop`, async () => (!(await api('GET', `/users/${user}`, { token: ADMIN })).body.servers[name] ? true : undefined), 15_000);
}

test.serial('group_overrides: a member of a group gets its override (environment merged, mem_limit as MEM_LIMIT); a user outside gets the configured options', async (t) => {
  const ann = await started('ann');
  t.like(ann, { HUB_T_BASE: 'base', HUB_T_ALPHA: 'yes', HUB_T_WHO: 'alpha', HUB_SEEN_MEM_LIMIT: String(256 * MiB) });
  t.false('HUB_T_BETA' in ann);
  const bob = await started('bob'); // in a group no override names
  t.like(bob, { HUB_T_BASE: 'base', HUB_T_WHO: 'base', HUB_SEEN_MEM_LIMIT: 'none' });
  t.false('HUB_T_ALPHA' in bob || 'HUB_T_BETA' in bob || 'HUB_DEFAULT_URL' in bob);
  t.regex(hub.logs(), /"event":"server.group_overrides".*"server":"ann".*"applied":\["x-alpha"\]/);
  await stopped('ann');
  await stopped('bob');
});

test.serial('group_overrides: two overrides apply in the order of their names sorted by code point, the later one winning; null removes a key', async (t) => {
  const cid = await started('cid'); // alpha and beta: "Y-beta" first, then "x-alpha"
  t.like(cid, { HUB_T_ALPHA: 'yes', HUB_T_BETA: 'yes', HUB_T_WHO: 'alpha', HUB_SEEN_MEM_LIMIT: String(256 * MiB), HUB_DEFAULT_URL: '/beta' });
  t.false('HUB_T_BASE' in cid, 'removed by the beta override\'s null');
  t.regex(hub.logs(), /"server":"cid".*"applied":\["Y-beta","x-alpha"\]/);
  await stopped('cid');
});

test.serial('group_overrides with a profile: the profile applies last and wins where both set an option; the group\'s other settings stay', async (t) => {
  const ann = await started('ann', { profile: 'big' });
  t.like(ann, { HUB_T_ALPHA: 'yes', HUB_T_BASE: 'base', HUB_T_WHO: 'profile', HUB_SEEN_MEM_LIMIT: String(512 * MiB) });
  await stopped('ann');
});

test.serial('apply_user_options: a listed key sets its option (strings read as the option\'s type), over group overrides and under the profile; other keys set nothing', async (t) => {
  const dee = await started('dee', { mem: '300M', url: '/lab', debug: 'true', cmd: ['/bin/false'], environment: { HUB_T_WHO: 'user' }, colour: 'red' });
  t.like(dee, { HUB_SEEN_MEM_LIMIT: String(300 * MiB), HUB_DEFAULT_URL: '/lab', HUB_DEBUG: '1', HUB_T_WHO: 'alpha', HUB_T_ALPHA: 'yes' });
  t.deepEqual((await serverRecord(hub.natsUrl, 'dee'))!.user_options.mem, '300M', 'the options are kept as given');
  await stopped('dee');
  // the profile's mem_limit wins over the user's; the user's url stays (the profile does not set one)
  const big = await started('dee', { mem: '300M', url: '/lab', profile: 'big' });
  t.like(big, { HUB_SEEN_MEM_LIMIT: String(512 * MiB), HUB_DEFAULT_URL: '/lab', HUB_T_WHO: 'profile' });
  await stopped('dee');
  // a user outside every group, numbers as numbers
  const eve = await started('eve', { mem: 200 * MiB });
  t.like(eve, { HUB_SEEN_MEM_LIMIT: String(200 * MiB), HUB_T_WHO: 'base' });
  await stopped('eve');
});

test.serial('apply_user_options: a value of the wrong type is a 400 naming the key, before anything starts', async (t) => {
  for (const [options, key] of [[{ mem: 'lots' }, 'mem'], [{ debug: 'maybe' }, 'debug'], [{ url: 'lab' }, 'url'], [{ mem: ['1G'] }, 'mem']] as const) {
    const r = await api('POST', '/users/eve/server', { token: ADMIN, body: { user_options: options } });
    t.is(r.status, 400, JSON.stringify(options));
    t.regex(r.body.message, new RegExp(`^Invalid user option '${key}': `));
    t.deepEqual((await api('GET', '/users/eve', { token: ADMIN })).body.servers, {}, 'nothing started');
  }
  t.is((await serverRecord(hub.natsUrl, 'eve'))?.state ?? 'stopped', 'stopped', 'no start was recorded');
  // a named server: refused the same way, and not created
  const named = await api('POST', '/users/eve/servers/work', { token: ADMIN, body: { user_options: { mem: 'lots' } } });
  t.is(named.status, 400);
  t.is(await serverRecord(hub.natsUrl, 'eve', 'work'), null);
});

test('group_overrides: an unknown option or a wrong type in spawner_override (and a bad apply_user_options target) stops the hub at start, one line each', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-overrides-'));
  try {
    const file = join(dir, 'hub.json');
    writeFileSync(file, JSON.stringify({
      Hub: { data_dir: join(dir, 'data') },
      Spawner: {
        group_overrides: {
          gpu: { groups: ['gpu'], spawner_override: { memory_limit: '8G', cpu_limit: 'four', environment: { OK: 'yes', BAD: 3 } } },
          hub: { groups: ['x'], spawner_override: { placement: 'pack' } },
        },
        apply_user_options: { image: 'DockerSpawner.imag', profile: 'mem_limit' },
      },
    }));
    const r = await runHubCommand(['--config', file]);
    t.is(r.code, 2, r.stderr);
    const expected = [
      /Spawner.group_overrides "gpu".spawner_override: "memory_limit" is not an option of Spawner or of a spawner backend's section/,
      /Spawner.group_overrides "gpu".spawner_override\["cpu_limit"\]: expected a number >= 0, got "four"/,
      /Spawner.group_overrides "gpu".spawner_override\["environment"\]: expected an object of strings/,
      /Spawner.group_overrides "hub".spawner_override: "placement" applies to the whole hub, not to one start/,
      /Spawner.apply_user_options\["image"\]: "DockerSpawner.imag" is not an option/,
      /Spawner.apply_user_options: "profile" is taken/,
    ];
    const lines = r.stderr.split('\n').filter((l) => /Spawner\.(group_overrides|apply_user_options)/.test(l));
    for (const re of expected) t.is(lines.filter((l) => re.test(l)).length, 1, `${re} once in:\n${r.stderr}`);
    t.is(lines.length, expected.length, r.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
