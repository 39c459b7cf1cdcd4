// The `docker` backend against a real Podman service (Docker Engine API on a unix socket), started for
// this file by test/spawner/podman.ts: containers on the bridge network and on the host's, limits, removal,
// a named volume across stop and start, kill -9 of the spawner then adoption and clean-up, image errors.
import test from 'ava';
import { validateConfig } from '../../shared/config.js';
import { containerName, safeName } from '../../shared/containers.js';
import { startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { FIXTURE, readProgress, serverRecord } from './helpers.js';
import { IMAGE, startPodman, type PodmanService } from './podman.js';

const ADMIN = randomToken();
let podman: PodmanService;
let hub: HubUnderTest;

/** The fixture server, after counting its starts in /home/hub/starts (the user's named volume). */
const COUNTING = [process.execPath, '--input-type=module', '-e', [
  "import { readFileSync, writeFileSync } from 'node:fs';",
  "const f = '/home/hub/starts'; let n = 0; try { n = Number(readFileSync(f, 'utf8')); } catch {}",
  'writeFileSync(f, String(n + 1));',
  `await import(${JSON.stringify(FIXTURE)});`,
].join(' ')];

const dockerConfig = (extra: Record<string, unknown> = {}, spawner: Record<string, unknown> = {}) => ({
  Hub: { api_tokens: { [ADMIN]: 'boss' }, allow_named_servers: true, spawner_class: 'docker' },
  Authenticator: { admin_users: ['boss'] },
  Spawner: {
    cmd: COUNTING, mem_limit: '256M', cpu_limit: 0.5, stop_signal_timeout: 1, poll_interval: 0.5,
    profiles: [
      { name: 'standard', display_name: 'Standard', default: true },
      { name: 'missing', display_name: 'An image nobody has', overrides: { 'DockerSpawner.image': 'localhost/hub-no-such-image:1' } },
      { name: 'pull', display_name: 'Pulled from a registry', overrides: { 'DockerSpawner.image': 'localhost/hub-absent:2', 'DockerSpawner.pull_policy': 'ifnotpresent' } },
    ],
    ...spawner,
  },
  DockerSpawner: {
    host: podman.host, image: IMAGE, pull_policy: 'never', volumes: { 'hubtest-{username}': '/home/hub' }, hub_connect_url: 'http://10.88.0.1:8000',
    extra_host_config: { Binds: podman.hostBinds }, ...extra,
  },
});

const inspect = (id: string) => podman.api(`/containers/${id}/json`);
const gone = async (id: string) => /no such container/i.test((await inspect(id))?.message ?? '');

test.before(async () => {
  podman = await startPodman();
  hub = await startHub({ config: dockerConfig() });
});

test.after.always(async () => {
  await hub?.stop();
  await podman?.stop();
});

test.serial('docker: a server runs in a container on the bridge network, reached through the gateway, within its limits; stop removes the container; its named volume keeps a file', async (t) => {
  const api = apiClient(hub.url);
  await api('POST', '/users', { token: ADMIN, body: { usernames: ['alice'] } });
  t.is((await api('POST', '/users/alice/server', { token: ADMIN })).status, 201);
  const rec = (await serverRecord(hub.natsUrl, 'alice'))!;
  t.regex(rec.target, /^http:\/\/10\.\d+\.\d+\.\d+:8888$/, 'the container\'s own address on the bridge, on DockerSpawner.port');
  const { id, name } = rec.spawner_state as { id: string; name: string };
  t.is(name, 'hub-alice');

  const page = await fetch(`${hub.url}/user/alice/`);
  t.is(page.status, 200);
  t.is(await page.text(), 'fixture for alice\n');
  const env = await (await fetch(`${hub.url}/user/alice/env`)).json();
  t.like(env.hub, { HUB_USER: 'alice', HUB_SERVER_NAME: '', HUB_SERVICE_URL: 'http://0.0.0.0:8888/user/alice/'});
  t.truthy(env.hub.HUB_API_TOKEN);
  t.is(env.hub.HUB_API_URL, 'http://10.88.0.1:8000/hub/api', 'DockerSpawner.hub_connect_url: where containers reach the hub');
  t.true(env.names.includes('MEM_LIMIT') && env.names.includes('CPU_LIMIT'));

  const info = await inspect(id);
  t.is(info.Name.replace(/^\//, ''), 'hub-alice');
  t.is(info.HostConfig.Memory, 256 * 2 ** 20, 'Spawner.mem_limit is the container\'s memory limit');
  t.is(info.HostConfig.NanoCpus, 5e8, 'Spawner.cpu_limit is its CPU quota');
  t.like(info.Config.Labels, { 'hub.user': 'alice', 'hub.server': '' });
  t.false(info.Config.Env.includes(`PATH=${process.env.PATH}`), 'the hub\'s own PATH does not hide the image\'s');
  t.regex(info.Config.Labels['hub.id'], /^[0-9a-f]{10}$/);
  t.true(info.Mounts.some((m: { Type: string; Name?: string; Destination: string }) => m.Type === 'volume' && m.Name === 'hubtest-alice' && m.Destination === '/home/hub'));
  t.is((await podman.podman(['volume', 'inspect', '--format', '{{.Mountpoint}}', 'hubtest-alice'])).trim().length > 0, true);

  t.is((await api('DELETE', '/users/alice/server', { token: ADMIN })).status, 204);
  t.true(await gone(id), 'DockerSpawner.remove: the container is removed at stop');
  t.is((await fetch(`${hub.url}/user/alice/`, { redirect: 'manual' })).status, 302, 'no route any more: the hub offers to start it');

  // a new container, the same volume: the file the first one wrote is still there
  t.is((await api('POST', '/users/alice/server', { token: ADMIN })).status, 201);
  const again = (await serverRecord(hub.natsUrl, 'alice'))!;
  t.not((again.spawner_state as { id: string }).id, id);
  const mountpoint = (await podman.podman(['volume', 'inspect', '--format', '{{.Mountpoint}}', 'hubtest-alice'])).trim();
  const { readFileSync } = await import('node:fs');
  t.is(readFileSync(`${mountpoint}/starts`, 'utf8'), '2', 'the second container found the first one\'s file');
  t.is((await api('DELETE', '/users/alice/server', { token: ADMIN })).status, 204);
});

test.serial('docker: kill -9 of the spawner leaves containers serving; the new spawner adopts them, forgets the dead and removes this hub\'s containers it does not know', async (t) => {
  const api = apiClient(hub.url);
  await api('POST', '/users', { token: ADMIN, body: { usernames: ['bob', 'carol'] } });
  t.is((await api('POST', '/users/bob/server', { token: ADMIN })).status, 201);
  t.is((await api('POST', '/users/carol/servers/lab', { token: ADMIN })).status, 201);
  const bob = (await serverRecord(hub.natsUrl, 'bob'))!;
  const carol = (await serverRecord(hub.natsUrl, 'carol', 'lab'))!;
  const bobId = (bob.spawner_state as { id: string }).id;
  const carolId = (carol.spawner_state as { id: string }).id;
  t.is((carol.spawner_state as { name: string }).name, 'hub-carol--lab');
  const hubLabel = (await inspect(bobId)).Config.Labels['hub.id'];

  // one container labelled with this hub that no server names, one of another hub
  const run = (name: string, hubId: string) => podman.podman(['run', '-d', '--name', name, '--label', `hub.id=${hubId}`, '--label', 'hub.user=ghost',
    '--label', 'hub.server=', '--network', 'none', ...podman.hostBinds.flatMap((b) => ['-v', b]), IMAGE, '/usr/bin/sleep', '300']);
  const orphan = (await run('hub-ghost', hubLabel)).trim();
  const foreign = (await run('other-hub-ghost', 'ffffffffff')).trim();

  const spawner = hub.children().spawner!;
  process.kill(spawner, 'SIGKILL');
  await podman.podman(['kill', carolId]); // dies while nobody watches
  t.is((await fetch(`${bob.target}/user/bob/`)).status, 200, 'the container keeps serving without its spawner');

  await waitFor('a new spawner', async () => (hub.children().spawner !== spawner ? true : undefined), 10_000);
  await waitFor('bob re-adopted', async () => ((await serverRecord(hub.natsUrl, 'bob'))?.instance !== bob.instance ? true : undefined), 20_000);
  t.true((await api('GET', '/users/bob', { token: ADMIN })).body.servers[''].ready);
  t.is((await fetch(`${hub.url}/user/bob/`)).status, 200, 'still reached through the gateway');
  await waitFor('carol\'s dead server forgotten', async () =>
    (Object.keys((await api('GET', '/users/carol', { token: ADMIN })).body.servers).length === 0 ? true : undefined), 10_000);
  t.true(await gone(carolId), 'the dead container is removed too');
  await waitFor('the unknown container of this hub removed', async () => ((await gone(orphan)) ? true : undefined), 10_000);
  t.false(await gone(foreign), 'another hub\'s container is left alone');
  await podman.podman(['rm', '-f', '-t', '0', foreign]);

  // an adopted container that dies is noticed by polling (Spawner.poll_interval)
  await podman.podman(['kill', bobId]);
  await waitFor('bob\'s death noticed', async () =>
    (Object.keys((await api('GET', '/users/bob', { token: ADMIN })).body.servers).length === 0 ? true : undefined), 10_000);
  t.true(await gone(bobId));
});

test.serial('docker: an image the Docker host lacks is a clear spawn error on the API and the progress stream, and leaves no container', async (t) => {
  const api = apiClient(hub.url);
  await api('POST', '/users', { token: ADMIN, body: { usernames: ['dave', 'erin'] } });
  const before = (await podman.api('/containers/json?all=true')).length;

  const r = await api('POST', '/users/dave/server', { token: ADMIN, body: { profile: 'missing' } });
  t.is(r.status, 500, JSON.stringify(r.body));
  t.regex(r.body.message, /the image 'localhost\/hub-no-such-image:1' is not on the Docker host and DockerSpawner.pull_policy is "never"/);
  const progress = await readProgress(`${hub.url}/hub/api/users/dave/server/progress`, ADMIN);
  t.like(progress.events.at(-1), { failed: true });
  t.regex(progress.events.at(-1).message, /^Spawn failed: the image 'localhost\/hub-no-such-image:1' is not on the Docker host/);

  // pull_policy ifnotpresent: the pull is tried, and its failure is the reason (no registry answers here)
  const pulled = await api('POST', '/users/erin/server', { token: ADMIN, body: { profile: 'pull' } });
  t.is(pulled.status, 500);
  t.regex(pulled.body.message, /could not pull the image 'localhost\/hub-absent:2': \S/);
  const lines = (await readProgress(`${hub.url}/hub/api/users/erin/server/progress`, ADMIN)).events.map((e) => e.message);
  t.true(lines.includes('Pulling image localhost/hub-absent:2'), lines.join(' | '));
  t.is((await podman.api('/containers/json?all=true')).length, before, 'a failed start leaves nothing behind');
});

test.serial('docker: host networking puts the server on a free port of 127.0.0.1, reached through the gateway', async (t) => {
  // no volume here, so the plain fixture
  const own = await startHub({ config: dockerConfig({ network_name: 'host', volumes: {} }, { cmd: [process.execPath, FIXTURE] }) });
  try {
    const api = apiClient(own.url);
    await api('POST', '/users', { token: ADMIN, body: { usernames: ['frank'] } });
    const r = await api('POST', '/users/frank/server', { token: ADMIN });
    t.is(r.status, 201, JSON.stringify(r.body));
    const rec = (await serverRecord(own.natsUrl, 'frank'))!;
    t.regex(rec.target, /^http:\/\/127\.0\.0\.1:\d+$/);
    t.is((await inspect((rec.spawner_state as { id: string }).id)).HostConfig.NetworkMode, 'host');
    t.is(await (await fetch(`${own.url}/user/frank/`)).text(), 'fixture for frank\n');
    t.is((await api('DELETE', '/users/frank/server', { token: ADMIN })).status, 204);
  } finally {
    await own.stop();
  }
});

test('docker: the DockerSpawner options are checked at start, every problem named', (t) => {
  const e = t.throws(() => validateConfig({
    Hub: { spawner_class: 'docker' },
    DockerSpawner: {
      host: 'ftp://x', pull_policy: 'sometimes', volumes: { 'bad name!': 'relative/path' }, name_template: 'hub-{username}',
      extra_create_kwargs: { name: 'x', Env: ['NOEQUALS'] }, extra_host_config: { Binds: 'not-a-list' }, hub_connect_url: 'hub:8000',
    },
  }));
  const m = e!.message;
  for (const expected of [
    /DockerSpawner.host: "ftp:\/\/x": expected unix:\/\/\//, /DockerSpawner.pull_policy: expected one of "ifnotpresent", "always", "never"/,
    /DockerSpawner.volumes\["bad name!"\]: expected an absolute path in the container/, /"bad name!" is neither an absolute host path nor a volume name/,
    /DockerSpawner.name_template: "hub-\{username\}" must contain \{username\} and \{servername\}/, /extra_create_kwargs.name: container names come from/,
    /extra_create_kwargs.Env: expected a list of "NAME=value"/, /extra_host_config.Binds: expected a list/, /DockerSpawner.hub_connect_url: expected http/,
  ]) t.regex(m, expected);
  t.notThrows(() => validateConfig({ Hub: { spawner_class: 'docker' }, DockerSpawner: { image: 'x', host: 'tcp://10.0.0.2:2375', volumes: { '/srv/homes/{username}': '/home/jovyan:rw' } } }));
});

test('docker: user and server names become container and volume names one-to-one, never a path or a leading dash', (t) => {
  const names = ['alice', 'a-b', 'a_2db', 'A', 'a.b', '.hidden', '..', 'x/y', 'jean luc', 'zoë', 'ゆき', '-dash', 'a'.repeat(200), `${'a'.repeat(199)}b`];
  const safe = names.map(safeName);
  t.is(new Set(safe).size, names.length, 'no two names share a container or a volume');
  for (const s of safe) t.regex(s, /^[a-z0-9_][a-z0-9_.]{0,62}$/);
  t.is(safeName('alice'), 'alice');
  t.is(safeName('a-b'), 'a_2db');
  t.is(containerName('hub-{username}--{servername}', 'a-b', ''), 'hub-a_2db');
  t.is(containerName('hub-{username}--{servername}', 'a', 'b-c'), 'hub-a--b_2dc');
  t.not(containerName('hub-{username}--{servername}', 'a--b', ''), containerName('hub-{username}--{servername}', 'a', 'b'));
});
