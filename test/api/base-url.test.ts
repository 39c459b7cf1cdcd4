// Hub.base_url (the established hub's JupyterHub.base_url): a hub served under /jupyter/ — the API, pages, static
// files, cookies, login and logout redirects, a server's route and environment, its OAuth flow, a service's route —
// all under the prefix; `/` and paths outside it redirect into it (never to another site). The 6.1.1 auth library
// (HubOAuth, from the test venv) reads a server's environment and finds the hub under the prefix.
import test from 'ava';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, REPO, runCommand, runHubCommand, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from './client.js';
import { Browser, hiddenField, paramsOf, pathOf, WHOAMI } from '../oauth/browser.js';
import { FIXTURE, serverRecord } from '../spawner/helpers.js';

const ADMIN = randomToken();
const PW = 'under a prefix';
const PUBLIC = 'https://example.org';
const JUPYTERHUB_VENV = join(REPO, '.cache', 'jupyter-6.1');

let hub: HubUnderTest;
let api: ApiCall;

test.before(async () => {
  const whoamiPort = await freePort();
  hub = await startHub({
    config: {
      Hub: {
        // spelled without slashes: the hub normalises it to /jupyter/
        base_url: 'jupyter', public_url: `${PUBLIC}/jupyter/`,
        authenticator_class: 'dummy', allow_named_servers: true, env_prefix_aliases: ['JUPYTERHUB_'],
        api_tokens: { [ADMIN]: 'boss' },
        services: [{ name: 'whoami', url: `http://127.0.0.1:${whoamiPort}`, command: [process.execPath, WHOAMI], oauth_no_confirm: true }],
        load_roles: [{ name: 'whoami-users', scopes: ['access:services!service=whoami'], users: ['alice'] }],
      },
      DummyAuthenticator: { password: PW },
      Authenticator: { admin_users: ['boss'] },
      Spawner: {
        environment: { HUB_ACTIVITY_INTERVAL: '3600' },
        profiles: [
          { name: 'own', display_name: 'This project\'s server', default: true },
          { name: 'env', display_name: 'Environment fixture', overrides: { 'Spawner.cmd': [process.execPath, FIXTURE] } },
        ],
      },
    },
  });
  api = apiClient(`${hub.url}/jupyter`);
  for (const name of ['alice', 'bob']) {
    const r = await api('POST', `/users/${name}`, { token: ADMIN });
    if (r.status !== 201) throw new Error(`setup: ${name}: ${r.status} ${JSON.stringify(r.body)}`);
  }
});

test.after.always(async () => {
  await hub?.stop();
});

/** The answer to a GET without following it: status and Location. */
async function hop(path: string, init: RequestInit = {}): Promise<{ status: number; location: string | null; body: string }> {
  const r = await fetch(`${hub.url}${path}`, { redirect: 'manual', ...init, signal: AbortSignal.timeout(10_000) });
  return { status: r.status, location: r.headers.get('location'), body: await r.text() };
}

/** A browser signed in through the login form under the prefix; the POST's answer with it. */
async function signedIn(user: string, next = ''): Promise<{ b: Browser; answer: Awaited<ReturnType<Browser['post']>> }> {
  const b = new Browser(hub.url);
  const query = next ? `?next=${encodeURIComponent(next)}` : '';
  const form = await b.get(`/jupyter/hub/login${query}`);
  if (form.status !== 200) throw new Error(`login page: ${form.status}`);
  const answer = await b.post(`/jupyter/hub/login${query}`, { _xsrf: hiddenField(form.body, '_xsrf'), username: user, password: PW, next });
  return { b, answer };
}

/** The data a page hands its script (the `data-page` attribute, HTML-escaped JSON). */
function pageData(html: string): Record<string, unknown> {
  const m = /data-page="([^"]*)"/.exec(html);
  if (!m) throw new Error(`no data-page in ${html.slice(0, 200)}`);
  const text = m[1].replace(/&#(\d+);/g, (_, c) => String.fromCharCode(Number(c))).replace(/&quot;/g, '"').replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
  return JSON.parse(text);
}

async function running(user: string, name = ''): Promise<NonNullable<Awaited<ReturnType<typeof serverRecord>>>> {
  return waitFor(`${user}/${name} to run`, async () => {
    const r = await serverRecord(hub.natsUrl, user, name);
    if (r?.state === 'stopped') throw new Error(`the server stopped: ${JSON.stringify(r.progress)}`);
    return r?.state === 'running' ? r : undefined;
  }, 20_000, 100);
}

test('base_url: the API answers under the prefix with a token; an unknown API path is a JSON 404', async (t) => {
  const me = await api('GET', '/user', { token: ADMIN });
  t.is(me.status, 200);
  t.is(me.body.name, 'boss');
  const users = await api('GET', '/users', { token: ADMIN });
  t.is(users.status, 200);
  t.deepEqual(users.body.map((u: { name: string }) => u.name).sort(), ['alice', 'bob', 'boss']);
  const nope = await api('GET', '/nope', { token: ADMIN });
  t.is(nope.status, 404);
  t.regex(nope.headers.get('content-type') ?? '', /^application\/json/);
  t.is(nope.body.status, 404);
  t.is(typeof nope.body.message, 'string');
  // the hub's own route table (its routes carry the prefix) and the services' prefixes
  const services = await api('GET', '/services', { token: ADMIN });
  t.is(services.body.whoami.prefix, '/jupyter/services/whoami/');
  const routes = await api('GET', '/proxy', { token: ADMIN });
  t.truthy(routes.body['/jupyter/services/whoami/'], JSON.stringify(Object.keys(routes.body)));
});

test('base_url: / and paths outside the prefix redirect into it, never to another site', async (t) => {
  t.like(await hop('/'), { status: 302, location: '/jupyter/hub/' });
  t.like(await hop('/jupyter'), { status: 302, location: '/jupyter/hub/' });
  t.like(await hop('/jupyter/'), { status: 302, location: '/jupyter/hub/' });
  // the hub's own spaces as they would be without a base: the same path under it
  t.like(await hop('/hub/login?next=%2Fjupyter%2Fhub%2Ftoken'), { status: 302, location: '/jupyter/hub/login?next=%2Fjupyter%2Fhub%2Ftoken' });
  t.like(await hop('/user/alice/lab'), { status: 302, location: '/jupyter/user/alice/lab' });
  t.like(await hop('/hub/api/users'), { status: 302, location: '/jupyter/hub/api/users' });
  // anything else: into the hub's pages, which answer 404
  t.like(await hop('/elsewhere/x'), { status: 302, location: '/jupyter/hub/elsewhere/x' });
  t.like(await hop('/jupyterlab'), { status: 302, location: '/jupyter/hub/jupyterlab' });
  for (const sneaky of ['//evil.example/x', '/\\evil.example', '/%2F%2Fevil.example']) {
    const r = await hop(sneaky);
    t.is(r.status, 302, sneaky);
    t.true(r.location!.startsWith('/jupyter/hub/'), `${sneaky} → ${r.location}`);
  }
  const landed = await fetch(`${hub.url}/elsewhere/x`, { headers: { accept: 'application/json' } });
  t.is(landed.status, 404);
  t.is(landed.url, `${hub.url}/jupyter/hub/elsewhere/x`);
  // a write outside the prefix is not redirected (a client would repeat it as a GET): a JSON 404 that says where the hub is
  const post = await fetch(`${hub.url}/hub/api/users/carol`, { method: 'POST', headers: { authorization: `token ${ADMIN}` } });
  t.is(post.status, 404);
  t.regex((await post.json()).message, /\/jupyter\//);
  t.is((await api('GET', '/users/carol', { token: ADMIN })).status, 404, 'nothing was created');
  // the health check and the static files live under the prefix too
  t.is((await hop('/jupyter/hub/health')).status, 200);
  t.is((await hop('/jupyter/hub/static/hub.css')).status, 200);
});

test('base_url: login, its cookies and redirects, the pages\' links and logout all stay under the prefix', async (t) => {
  const anonymous = new Browser(hub.url);
  const home = await anonymous.get('/jupyter/hub/home');
  t.is(home.status, 302);
  t.is(home.location, `/jupyter/hub/login?next=${encodeURIComponent('/jupyter/hub/home')}`);
  const form = await anonymous.get(home.location!);
  t.is(form.status, 200);
  t.regex(form.body, /<form method="post" action="\/jupyter\/hub\/login\?next=%2Fjupyter%2Fhub%2Fhome">/);
  t.regex(form.body, /href="\/jupyter\/hub\/static\/hub\.css\?v=/);
  t.notRegex(form.body, /(href|action|src)="\/hub\//, 'no link leaves the prefix');
  t.is(anonymous.cookie('_xsrf')?.path, '/jupyter/hub/');

  const { b, answer } = await signedIn('alice', '/jupyter/hub/home');
  t.is(answer.status, 302);
  t.is(answer.location, '/jupyter/hub/home');
  t.is(b.cookie('hub-hub-login')?.path, '/jupyter/hub/');
  t.is(b.cookie('hub-session-id')?.path, '/jupyter/');
  const page = await b.get('/jupyter/hub/home');
  t.is(page.status, 200);
  for (const link of ['/jupyter/hub/home', '/jupyter/hub/token', '/jupyter/hub/logout', '/jupyter/services/whoami/']) t.true(page.body.includes(`href="${link}"`), link);
  t.notRegex(page.body, /(href|action|src)="\/(hub|user|services)\//, 'no link leaves the prefix');

  // a `next` written without the prefix (an old link) is taken under it, as the established hub does
  const old = await signedIn('alice', '/hub/token');
  t.is(old.answer.location, '/jupyter/hub/token');
  // and one that names another site is not followed
  const evil = await signedIn('alice', '//evil.example/');
  t.is(evil.answer.location, '/jupyter/hub/home');

  // the pages whose scripts call the API get its path under the prefix
  const tokens = await b.get('/jupyter/hub/token');
  t.is(tokens.status, 200);
  t.true(tokens.body.includes('/jupyter/hub/api/users/alice/tokens/'), 'the token page\'s API path');
  t.regex(tokens.body, /<form method="post" action="\/jupyter\/hub\/token"/);
  const { b: admin } = await signedIn('boss');
  const adminPage = await admin.get('/jupyter/hub/admin');
  t.is(adminPage.status, 200);
  t.is(pageData(adminPage.body).api, '/jupyter/hub/api', 'the admin page\'s API path');

  const out = await b.get('/jupyter/hub/logout');
  t.is(out.status, 302);
  t.is(out.location, '/jupyter/hub/login');
  t.is(b.cookie('hub-hub-login'), undefined);
  t.is((await b.get('/jupyter/hub/home')).status, 302, 'signed out');
});

test.serial('base_url: a spawned server lives at /jupyter/user/<name>/ and its OAuth flow stays under the prefix', async (t) => {
  const started = await api('POST', '/users/alice/server', { token: ADMIN });
  t.true(started.status === 201 || started.status === 202, JSON.stringify(started.body));
  const record = await running('alice');
  t.is(record.url, '/jupyter/user/alice/');
  const model = await api('GET', '/users/alice', { token: ADMIN });
  t.is(model.body.server, '/jupyter/user/alice/');
  t.like(model.body.servers[''], { url: '/jupyter/user/alice/', progress_url: '/jupyter/hub/api/users/alice/server/progress', ready: true });

  // 1. no credentials: the server sends the browser to the hub's authorize endpoint under the prefix
  const b = new Browser(hub.url);
  const first = await b.get('/jupyter/user/alice/tree?x=1');
  t.is(first.status, 302);
  t.is(pathOf(first.location), '/jupyter/hub/api/oauth2/authorize');
  t.is(paramsOf(first.location).get('redirect_uri'), '/jupyter/user/alice/oauth_callback');
  t.is(b.cookie('hub-user-alice-oauth-state')?.path, '/jupyter/user/alice/');
  // 2. not signed in: the hub's login, which comes back to authorize
  const toLogin = await b.get(first.location!);
  t.is(toLogin.status, 302);
  t.is(pathOf(toLogin.location), '/jupyter/hub/login');
  const next = paramsOf(toLogin.location).get('next')!;
  t.is(next, first.location);
  const form = await b.get(toLogin.location!);
  const login = await b.post(`/jupyter/hub/login?next=${encodeURIComponent(next)}`, { _xsrf: hiddenField(form.body, '_xsrf'), username: 'alice', password: PW, next });
  t.is(login.status, 302);
  t.is(login.location, next);
  // 3–6. the code goes to the server's callback under the prefix; the server keeps its token on its own path
  const granted = await b.get(login.location!);
  t.is(granted.status, 302);
  t.is(pathOf(granted.location), '/jupyter/user/alice/oauth_callback');
  const back = await b.get(granted.location!);
  t.is(back.status, 302);
  t.is(back.location, '/jupyter/user/alice/tree?x=1');
  t.is(b.cookie('hub-user-alice')?.path, '/jupyter/user/alice/');
  const there = await b.get(back.location!);
  t.is(there.status, 200);
  t.regex(there.body, /Hello, alice\./);
  // the way back to the hub the server offers is under the prefix (HUB_BASE_URL)
  t.regex(there.body, /id="hub-home" href="\/jupyter\/hub\/home"/);

  // another person's server that does not run: the hub's page for it, under the prefix
  const bob = await b.get('/jupyter/user/bob/tree');
  t.is(bob.status, 302);
  t.is(bob.location, '/jupyter/hub/user/bob/tree');
  t.is((await b.get(bob.location!)).status, 503);
  // the user-redirect link of JupyterLab's "copy shareable link"
  const shared = await b.get('/jupyter/hub/user-redirect/lab/tree/a.ipynb');
  t.is(shared.status, 302);
  t.is(shared.location, `/jupyter/hub/spawn/alice?next=${encodeURIComponent('/jupyter/user/alice/lab/tree/a.ipynb')}`);
});

test.serial('base_url: a server\'s environment is what the established hub 6.1 gives under base_url; its auth library agrees', async (t) => {
  const started = await api('POST', '/users/bob/servers/env', { token: ADMIN, body: { profile: 'env' } });
  t.true(started.status === 201 || started.status === 202, JSON.stringify(started.body));
  const record = await running('bob', 'env');
  t.is(record.url, '/jupyter/user/bob/env/');
  const env = await (await fetch(`${record.target}${record.url}env`, { signal: AbortSignal.timeout(5000) })).json() as { jupyterhub: Record<string, string> };
  t.like(env.jupyterhub, {
    JUPYTERHUB_BASE_URL: '/jupyter/',
    JUPYTERHUB_SERVICE_PREFIX: '/jupyter/user/bob/env/',
    JUPYTERHUB_API_URL: `${hub.url}/jupyter/hub/api`,
    JUPYTERHUB_ACTIVITY_URL: `${hub.url}/jupyter/hub/api/users/bob/activity`,
    JUPYTERHUB_OAUTH_CALLBACK_URL: '/jupyter/user/bob/env/oauth_callback',
    JUPYTERHUB_PUBLIC_URL: `${PUBLIC}/jupyter/user/bob/env/`,
    JUPYTERHUB_PUBLIC_HUB_URL: `${PUBLIC}/jupyter/hub/`,
  });
  t.regex(env.jupyterhub.JUPYTERHUB_SERVICE_URL, /^http:\/\/127\.0\.0\.1:\d+\/jupyter\/user\/bob\/env\/$/);
  // the server is reached through the hub at its prefixed route (the fixture answers without a login)
  const through = await fetch(`${hub.url}/jupyter/user/bob/env/hello`);
  t.is(through.status, 200);
  t.is(await through.text(), 'fixture for bob\n');

  const python = join(JUPYTERHUB_VENV, 'bin', 'python');
  if (!existsSync(join(JUPYTERHUB_VENV, '.installed'))) throw new Error(`no jupyterhub 6.1.1 venv at ${JUPYTERHUB_VENV}: run \`node scripts/setup.mjs --for-tests\``);
  const check = [
    'import json',
    'from jupyterhub.services.auth import HubOAuth',
    'auth = HubOAuth()',
    'user = auth.user_for_token(auth.api_token, sync=True)',
    'print(json.dumps({"base_url": auth.base_url, "hub_prefix": auth.hub_prefix, "authorize": auth.oauth_authorization_url,',
    '  "redirect_uri": auth.oauth_redirect_uri, "cookie_path": auth.cookie_path, "user": user and user["name"]}))',
  ].join('\n');
  const run = await runCommand(python, ['-c', check], { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/', ...env.jupyterhub } });
  t.is(run.code, 0, run.stderr);
  t.deepEqual(JSON.parse(run.stdout), {
    base_url: '/jupyter/user/bob/env/', hub_prefix: '/jupyter/hub/', authorize: '/jupyter/hub/api/oauth2/authorize',
    redirect_uri: '/jupyter/user/bob/env/oauth_callback', cookie_path: '/jupyter/user/bob/env/', user: 'bob',
  });
});

test('base_url: a service is routed at /jupyter/services/<name>/ and its OAuth flow stays under the prefix', async (t) => {
  const { b } = await signedIn('alice');
  const hops = await b.follow('/jupyter/services/whoami/');
  const trail = hops.map((h) => `${h.status} ${pathOf(h.location)}`);
  t.deepEqual(trail, [
    '302 /jupyter/hub/api/oauth2/authorize',
    '302 /jupyter/services/whoami/oauth_callback',
    '302 /jupyter/services/whoami/',
    '200 /',
  ]);
  t.is(paramsOf(hops[0].location).get('redirect_uri'), '/jupyter/services/whoami/oauth_callback');
  t.is(JSON.parse(hops.at(-1)!.body).name, 'alice');
  t.is(b.cookie('service-whoami')?.path, '/jupyter/services/whoami/');
});

test('base_url: a base_url that is not a plain path, or a public_url whose path is another, is a configuration error naming it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-base-url-'));
  try {
    const bad = await runHubCommand(['status', `--Hub.data_dir=${dir}`, '--Hub.base_url=/my hub/']);
    t.is(bad.code, 2);
    t.regex(bad.stderr, /Hub\.base_url: "\/my hub\/"/);
    const dots = await runHubCommand(['status', `--Hub.data_dir=${dir}`, '--Hub.base_url=/a/../b/']);
    t.is(dots.code, 2);
    t.regex(dots.stderr, /Hub\.base_url/);
    const other = await runHubCommand(['status', `--Hub.data_dir=${dir}`, '--Hub.base_url=/jupyter/', '--Hub.public_url=https://example.org/other/']);
    t.is(other.code, 2);
    t.regex(other.stderr, /Hub\.public_url: its path "\/other\/" must be Hub\.base_url \("\/jupyter\/"\)/);
    // the origin alone, or the origin with the base, are both the hub's public URL
    for (const publicUrl of ['https://example.org', 'https://example.org/jupyter']) {
      const ok = await runHubCommand(['status', `--Hub.data_dir=${dir}`, '--Hub.base_url=/jupyter/', `--Hub.public_url=${publicUrl}`]);
      t.not(ok.code, 2, `${publicUrl}: ${ok.stderr}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
