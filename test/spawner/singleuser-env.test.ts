// What the established hub's single-user server (jupyterhub-singleuser 6.1, a Jupyter Server extension) and its
// auth library read from a hub: the server's JUPYTERHUB_* environment (Hub.env_prefix_aliases) with the established
// hub's meanings, with and without Hub.public_url; the version it compares at start (GET /hub/api and the version
// header on every answer). The 6.1.1 auth library itself (HubOAuth, from the bench's venv) reads the environment
// a server got and identifies the server's token against the hub.
import test from 'ava';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, runCommand, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { FIXTURE, serverRecord } from './helpers.js';

/** The test venv `scripts/setup.mjs --for-tests` makes (jupyterhub 6.1.1, JupyterLab), as test/web/jupyterlab.test.ts uses it. */
const JUPYTERHUB_VENV = join(REPO, '.cache', 'jupyter-6.1');
const JUPYTERHUB_VERSION = '6.1.1';

const ADMIN = randomToken();
const PUBLIC = 'https://hub.example.org';
const PACKAGE_VERSION: string = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version;
/** The suffixes the 6.1 spawner sets and its single-user server or auth library reads (left out: legacy names such as JPY_API_TOKEN, and what the established hub never sets itself). */
const ALIASED = [
  'API_TOKEN', 'API_URL', 'ACTIVITY_URL', 'CLIENT_ID', 'OAUTH_CALLBACK_URL', 'OAUTH_ACCESS_SCOPES', 'OAUTH_SCOPES',
  'OAUTH_CLIENT_ALLOWED_SCOPES', 'USER', 'SERVER_NAME', 'SERVICE_PREFIX', 'SERVICE_URL', 'BASE_URL', 'HOST', 'PUBLIC_URL',
  'PUBLIC_HUB_URL', 'COOKIE_OPTIONS', 'COOKIE_HOST_PREFIX_ENABLED', 'ROOT_DIR', 'DEFAULT_URL', 'DEBUG', 'DISABLE_USER_CONFIG',
];

let compat: HubUnderTest;
let plain: HubUnderTest;
let compatApi: ApiCall;
let plainApi: ApiCall;
const root = mkdtempSync(join(tmpdir(), 'hub-singleuser-root-'));

test.before(async () => {
  // two hubs at once: one as a JupyterHub deployment would configure it, one with every default
  [compat, plain] = await Promise.all([
    startHub({
      config: {
        Hub: { api_tokens: { [ADMIN]: 'boss' }, env_prefix_aliases: ['JUPYTERHUB_'], public_url: `${PUBLIC}/`, allow_named_servers: true },
        Authenticator: { admin_users: ['boss'] },
        Spawner: {
          cmd: [process.execPath, FIXTURE], notebook_dir: root, default_url: '/lab/tree/{username}', debug: true, disable_user_config: true,
          profiles: [
            { name: 'lab', display_name: 'JupyterLab', default: true },
            { name: 'classic', display_name: 'Classic', overrides: { 'Spawner.default_url': '/tree', 'Spawner.notebook_dir': '~', 'Spawner.debug': false, 'Spawner.disable_user_config': false } },
          ],
        },
      },
    }),
    startHub({
      config: {
        Hub: { api_tokens: { [ADMIN]: 'boss' }, extra_headers: { 'x-jupyterhub-version': '9.9.9' } },
        Authenticator: { admin_users: ['boss'] },
        Spawner: { cmd: [process.execPath, FIXTURE] },
      },
    }),
  ]);
  compatApi = apiClient(compat.url);
  plainApi = apiClient(plain.url);
  for (const [api, names] of [[compatApi, ['alice', 'bob', 'dave']], [plainApi, ['carol']]] as const) {
    const made = await api('POST', '/users', { token: ADMIN, body: { usernames: names } });
    if (made.status !== 201) throw new Error(`setup: users not created (${made.status})`);
  }
});

test.after.always(async () => {
  await Promise.all([compat?.stop(), plain?.stop()]);
  rmSync(root, { recursive: true, force: true });
});

interface ServerEnv { hub: Record<string, string>; jupyterhub: Record<string, string>; names: string[] }

/** Starts a server and reads the environment it was given (the fixture's /env), straight from the server. */
async function startedEnv(hub: HubUnderTest, api: ApiCall, user: string, name = '', options?: Record<string, unknown>): Promise<ServerEnv> {
  const path = name ? `/users/${user}/servers/${name}` : `/users/${user}/server`;
  const started = await api('POST', path, { token: ADMIN, body: options });
  if (started.status !== 201 && started.status !== 202) throw new Error(`start of ${user}/${name}: ${started.status} ${JSON.stringify(started.body)}`);
  const rec = await waitFor(`${user}/${name} to run`, async () => {
    const r = await serverRecord(hub.natsUrl, user, name);
    if (r?.state === 'stopped') throw new Error(`the server stopped: ${JSON.stringify(r.progress)}`);
    return r?.state === 'running' ? r : undefined;
  }, 20_000, 100);
  const r = await fetch(`${rec.target}${rec.url}env`, { signal: AbortSignal.timeout(5000) });
  return await r.json() as ServerEnv;
}

test.serial('singleuser env: with Hub.public_url and the JUPYTERHUB_ alias, every variable 6.1 reads, with its meaning', async (t) => {
  const env = await startedEnv(compat, compatApi, 'alice');
  t.like(env.hub, {
    HUB_USER: 'alice', HUB_SERVER_NAME: '', HUB_SERVICE_PREFIX: '/user/alice/', HUB_BASE_URL: '/', HUB_CLIENT_ID: 'hub-user-alice',
    HUB_API_URL: `${compat.url}/hub/api`, HUB_ACTIVITY_URL: `${compat.url}/hub/api/users/alice/activity`,
    HUB_OAUTH_CALLBACK_URL: '/user/alice/oauth_callback',
    HUB_PUBLIC_URL: `${PUBLIC}/user/alice/`, HUB_PUBLIC_HUB_URL: `${PUBLIC}/hub/`, HUB_HOST: '',
    // an https public URL: the server's cookies are Secure, as the hub's own are
    HUB_COOKIE_OPTIONS: '{"secure":true}', HUB_COOKIE_HOST_PREFIX_ENABLED: '0',
    HUB_ROOT_DIR: root, HUB_DEFAULT_URL: '/lab/tree/alice', HUB_DEBUG: '1', HUB_DISABLE_USER_CONFIG: '1',
  });
  t.deepEqual(JSON.parse(env.hub.HUB_OAUTH_ACCESS_SCOPES).sort(), ['access:servers!server=alice/', 'access:servers!user=alice']);
  t.regex(env.hub.HUB_SERVICE_URL, /^http:\/\/127\.0\.0\.1:\d+\/user\/alice\/$/);
  for (const suffix of ALIASED) {
    t.true(`HUB_${suffix}` in env.hub, `HUB_${suffix} is set`);
    t.is(env.jupyterhub[`JUPYTERHUB_${suffix}`], env.hub[`HUB_${suffix}`], `JUPYTERHUB_${suffix} repeats HUB_${suffix}`);
  }
  t.false(env.names.includes('JPY_API_TOKEN'), 'the token under its pre-0.8 name is not given');
  // a named server's public URL is its own
  const named = await startedEnv(compat, compatApi, 'alice', 'work');
  t.is(named.jupyterhub.JUPYTERHUB_PUBLIC_URL, `${PUBLIC}/user/alice/work/`);
  t.is(named.jupyterhub.JUPYTERHUB_SERVER_NAME, 'work');
});

test.serial('singleuser env: a profile changes default_url, notebook_dir, debug and disable_user_config; unset ones are not given', async (t) => {
  const env = await startedEnv(compat, compatApi, 'bob', '', { profile: 'classic' });
  t.is(env.jupyterhub.JUPYTERHUB_DEFAULT_URL, '/tree');
  // `~` is expanded by the server with its own HOME
  t.is(env.jupyterhub.JUPYTERHUB_ROOT_DIR, '~');
  for (const name of ['DEBUG', 'DISABLE_USER_CONFIG']) {
    t.false(`HUB_${name}` in env.hub, `HUB_${name} unset`);
    t.false(`JUPYTERHUB_${name}` in env.jupyterhub, `JUPYTERHUB_${name} unset`);
  }
});

test.serial('singleuser env: without Hub.public_url or aliases, the public URLs are empty, options unset, no JUPYTERHUB_ name', async (t) => {
  const env = await startedEnv(plain, plainApi, 'carol');
  t.like(env.hub, { HUB_USER: 'carol', HUB_PUBLIC_URL: '', HUB_PUBLIC_HUB_URL: '', HUB_HOST: '', HUB_COOKIE_HOST_PREFIX_ENABLED: '0' });
  for (const name of ['COOKIE_OPTIONS', 'ROOT_DIR', 'DEFAULT_URL', 'DEBUG', 'DISABLE_USER_CONFIG']) t.false(`HUB_${name}` in env.hub, `HUB_${name} unset`);
  t.deepEqual(env.jupyterhub, {});
  t.false(env.names.some((n) => n.startsWith('JUPYTERHUB_')));
});

test('singleuser env: GET /hub/api answers the API version and our own; every answer carries the version header', async (t) => {
  const r = await fetch(`${compat.url}/hub/api`);
  t.is(r.status, 200);
  t.deepEqual(await r.json(), { version: JUPYTERHUB_VERSION, hub_version: PACKAGE_VERSION });
  t.is(r.headers.get('access-control-allow-origin'), '*');
  t.regex(r.headers.get('content-type') ?? '', /^application\/json/);
  for (const [path, init] of [['/hub/api', { method: 'HEAD' }], ['/hub/api/', {}], ['/hub/api/nope', {}], ['/hub/login', {}], ['/hub/api/users', {}]] as const) {
    const a = await fetch(`${compat.url}${path}`, { ...init, redirect: 'manual' });
    t.is(a.headers.get('x-jupyterhub-version'), JUPYTERHUB_VERSION, `${init.method ?? 'GET'} ${path} (${a.status})`);
    t.is(a.headers.get('x-hub-version'), JUPYTERHUB_VERSION, `${init.method ?? 'GET'} ${path} (${a.status})`);
  }
  const info = await compatApi('GET', '/info', { token: ADMIN });
  t.is(info.status, 200);
  t.like(info.body, { version: JUPYTERHUB_VERSION, hub_version: PACKAGE_VERSION, spawner: { class: 'simple' }, authenticator: { class: 'password' } });
  for (const key of ['python', 'sys_executable']) t.is(typeof info.body[key], 'string', key);
  // Hub.extra_headers may replace it (as the established hub's tornado_settings headers may), never doubled
  const other = await fetch(`${plain.url}/hub/api`);
  t.is(other.headers.get('x-jupyterhub-version'), '9.9.9');
  t.is(other.headers.get('x-hub-version'), JUPYTERHUB_VERSION);
});

/**
 * The established hub's own auth library (jupyterhub 6.1.1's HubOAuth, and the version check its single-user
 * server runs at start) given exactly the JUPYTERHUB_* environment a server got (the whole single-user server with
 * JupyterLab runs in test/web/jupyterlab.test.ts).
 */
const CHECK = `
import json, logging
import jupyterhub
from jupyterhub._version import _check_version
from jupyterhub.services.auth import HubOAuth
from jupyterhub.utils import _bool_env
from tornado.httpclient import HTTPClient
logged = []
class Keep(logging.Handler):
    def emit(self, record):
        logged.append([record.levelname, record.getMessage()])
log = logging.getLogger("version-check")
log.setLevel(logging.DEBUG)
log.addHandler(Keep())
auth = HubOAuth()
answer = HTTPClient().fetch(auth.api_url)
_check_version(answer.headers.get("X-JupyterHub-Version"), jupyterhub.__version__, log)
user = auth.user_for_token(auth.api_token, sync=True)
print(json.dumps({
    "library": jupyterhub.__version__, "logged": logged, "api": json.loads(answer.body),
    "api_url": auth.api_url, "base_url": auth.base_url, "hub_prefix": auth.hub_prefix, "hub_host": auth.hub_host,
    "client_id": auth.oauth_client_id, "redirect_uri": auth.oauth_redirect_uri, "authorize": auth.oauth_authorization_url,
    "access_scopes": sorted(auth.access_scopes), "cookie_options": auth.cookie_options, "cookie_path": auth.cookie_path,
    "debug": _bool_env("JUPYTERHUB_DEBUG"), "disable_user_config": _bool_env("JUPYTERHUB_DISABLE_USER_CONFIG"),
    "user": user and user["name"], "allowed": sorted(auth.check_scopes(auth.access_scopes, user)) if user else [],
}))
`;

test.serial('singleuser env: jupyterhub 6.1.1\'s auth library reads the server\'s environment and accepts the hub', async (t) => {
  const python = join(JUPYTERHUB_VENV, 'bin', 'python');
  if (!existsSync(join(JUPYTERHUB_VENV, '.installed'))) throw new Error(`no jupyterhub ${JUPYTERHUB_VERSION} venv at ${JUPYTERHUB_VENV}: run \`node scripts/setup.mjs --for-tests\``);
  const env = await startedEnv(compat, compatApi, 'dave');
  const run = await runCommand(python, ['-c', CHECK], { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/', ...env.jupyterhub } });
  t.is(run.code, 0, run.stderr);
  const got = JSON.parse(run.stdout);
  t.is(got.library, JUPYTERHUB_VERSION);
  t.deepEqual(got.logged.filter(([level]: [string]) => level !== 'DEBUG'), [], 'the version check has nothing to warn about');
  t.true(got.logged.some(([, message]: [string, string]) => message.includes(`both on version ${JUPYTERHUB_VERSION}`)), JSON.stringify(got.logged));
  t.deepEqual(got.api, { version: JUPYTERHUB_VERSION, hub_version: PACKAGE_VERSION });
  t.like(got, {
    api_url: `${compat.url}/hub/api`, base_url: '/user/dave/', hub_prefix: '/hub/', hub_host: '',
    client_id: 'hub-user-dave', redirect_uri: '/user/dave/oauth_callback', authorize: '/hub/api/oauth2/authorize',
    cookie_options: { secure: true }, cookie_path: '/user/dave/', debug: true, disable_user_config: true, user: 'dave',
  });
  t.deepEqual(got.access_scopes, ['access:servers!server=dave/', 'access:servers!user=dave']);
  t.true(got.allowed.length > 0, 'the server\'s own token may reach the server');
});
