// Spawner options are validated once at start, every problem named (no hub needed).
import test from 'ava';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, SUPERVISOR } from '../harness.js';
import { ConfigError, parseByteSize, validateConfig } from '../../shared/config.js';
import { withPrefixAliases } from '../../shared/environment.js';
import { chooseProfile, limitsOf, withOverrides } from '../../shared/profiles.js';

const problems = (raw: unknown): string[] => {
  try {
    validateConfig(raw);
    return [];
  } catch (e) {
    return (e as ConfigError).problems;
  }
};

test('options: sizes read as the established hub reads them', (t) => {
  t.is(parseByteSize('512M'), 512 * 1024 ** 2);
  t.is(parseByteSize('2G'), 2 * 1024 ** 3);
  t.is(parseByteSize('1.5G'), 1.5 * 1024 ** 3);
  t.is(parseByteSize(1000), 1000);
  t.is(parseByteSize('100'), 100);
  for (const bad of ['12X', '-1', 'G', '1..2M', -5, 1.5]) t.is(parseByteSize(bad as string), null, String(bad));
});

test('options: spawner_class, limits, aliases and profiles are checked, every problem listed', (t) => {
  const p = problems({
    Hub: { spawner_class: 'swarm', env_prefix_aliases: ['jupyterhub_', 'JUPYTERHUB_'] },
    Spawner: {
      mem_limit: '12X', cpu_limit: -1,
      profiles: [
        { name: 'a', display_name: 'A', default: true, overrides: { 'Hub.port': 1, 'Spawner.mem_limit': 'lots', 'Spawner.profiles': [], 'LocalProcessSpawner.create_system_users': 'yes' } },
        { name: 'a', display_name: 'Again', default: true },
        { name: 'B', colour: 'red' },
      ],
    },
    LocalProcessSpawner: { min_uid: 0 },
    Authenticator: { username_map: { 'Alice.Smith': 'alice', 'bob@example.org': 'b/ob' } },
  });
  const expect = [
    /^Hub.spawner_class: expected one of "simple", "localprocess", "docker"/,
    /^Hub.env_prefix_aliases: "jupyterhub_" is not an environment variable prefix/,
    /^Spawner.mem_limit: expected a size in bytes/,
    /^Spawner.cpu_limit: expected a number >= 0/,
    /^Spawner.profiles "a".overrides: "Hub.port" is not an option a profile can override/,
    /^Spawner.profiles "a".overrides\["Spawner.mem_limit"\]: expected a size/,
    /^Spawner.profiles "a".overrides: "Spawner.profiles" is not an option/,
    /^Spawner.profiles "a".overrides\["LocalProcessSpawner.create_system_users"\]: expected a boolean/,
    /^Spawner.profiles "a": defined twice/,
    /^Spawner.profiles "B".name: required/,
    /^Spawner.profiles "B".display_name: required/,
    /^Spawner.profiles "B".colour: unknown option/,
    /^Spawner.profiles: more than one profile is marked default/,
    /^LocalProcessSpawner.min_uid: expected an integer >= 1/,
    /^Authenticator.username_map: "Alice.Smith" is never looked up/,
    /^Authenticator.username_map: invalid name "b\/ob"/,
  ];
  for (const re of expect) t.true(p.some((line) => re.test(line)), `${re} in:\n${p.join('\n')}`);
  t.is(p.length, expect.length, p.join('\n'));
});

test('options: a profile overrides its sections only, merges the environment, and is chosen by name, default, or first', (t) => {
  const config = validateConfig({
    Spawner: {
      mem_limit: '1G', environment: { A: '1', B: '1' },
      profiles: [
        { name: 'one', display_name: 'One' },
        { name: 'two', display_name: 'Two', default: true, overrides: { 'Spawner.mem_limit': 2048, 'Spawner.environment': { B: '2' }, 'LocalProcessSpawner.create_system_users': true } },
      ],
    },
  });
  const two = chooseProfile(config, {})!;
  t.is(two.name, 'two');
  t.is(chooseProfile(config, { profile: 'one' })!.name, 'one');
  const s = withOverrides(config, 'Spawner', two);
  t.deepEqual(s.environment, { A: '1', B: '2' });
  t.deepEqual(limitsOf(s), { memBytes: 2048, cpu: null });
  t.true(withOverrides(config, 'LocalProcessSpawner', two).create_system_users);
  t.false(withOverrides(config, 'LocalProcessSpawner', null).create_system_users);
  t.is(chooseProfile(validateConfig({}), {}), null);
  const none = t.throws(() => chooseProfile(validateConfig({}), { profile: 'x' }));
  t.is((none as { status?: number }).status, 400);
  t.is((t.throws(() => chooseProfile(config, { profile: 7 })) as { status?: number }).status, 400);
});

test('options: env_prefix_aliases duplicate every HUB_ variable; an explicit variable wins', (t) => {
  t.deepEqual(withPrefixAliases({ HUB_API_TOKEN: 't', HUB_USER: 'u', PATH: '/bin', JUPYTERHUB_USER: 'explicit' }, ['JUPYTERHUB_', 'X_']), {
    HUB_API_TOKEN: 't', HUB_USER: 'u', PATH: '/bin', JUPYTERHUB_USER: 'explicit', JUPYTERHUB_API_TOKEN: 't', X_API_TOKEN: 't', X_USER: 'u',
  });
  t.deepEqual(withPrefixAliases({ HUB_USER: 'u' }, []), { HUB_USER: 'u' });
});

test('options: limits that cannot be enforced stop the hub at start with the reason (never advisory)', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-nolimits-'));
  try {
    // an unprivileged hub cannot make cgroups here
    const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, SUPERVISOR,
      '--Spawner.mem_limit=1G', `--Hub.data_dir=${join(dir, 'data')}`], { cwd: REPO, encoding: 'utf8', timeout: 30_000 });
    t.is(r.status, 2, r.stderr);
    t.regex(r.stderr, /Spawner.mem_limit is set \(here or in a profile\) but cannot be enforced: cannot create cgroups under .* limits need the hub to run as root/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
