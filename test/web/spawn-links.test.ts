// Links that start servers and links that name no user, as the established hub 6 answers them:
// GET /hub/spawn[/<u>[/<s>]] starts at once when there is nothing to choose or the link chose
// (opt-<key>=<value>), keeps a local `next` through the pending page, shows the form when profiles exist
// and the link chose none; /hub/user-redirect/<path> sends each person to <path> on their own server and
// refuses paths that could leave it. Two hubs (without and with profiles) and one browser for the file.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { startHub, waitFor, type HubUnderTest } from '../harness.js';
import { Browser, field, formLogin, type Page } from '../auth/helpers.js';
import { FIXTURE, serverRecord } from '../spawner/helpers.js';
import { launchBrowser, login, newPage, type Browser as Chromium } from './browser.js';
import type { ServerRecord } from '../../shared/servers.js';

const ADMIN_TOKEN = `spawn-links-${randomBytes(12).toString('hex')}`;
let plain: HubUnderTest; // no profiles, named servers allowed
let profiled: HubUnderTest; // profiles, named servers not allowed
let chromium: Chromium;

test.before(async () => {
  const common = {
    Hub: { authenticator_class: 'dummy', api_tokens: { [ADMIN_TOKEN]: 'root' } },
    DummyAuthenticator: { password: 'pw' }, Authenticator: { admin_users: ['root'] },
  };
  [plain, profiled, chromium] = await Promise.all([
    startHub({ config: { ...common, Hub: { ...common.Hub, allow_named_servers: true }, Spawner: { cmd: [process.execPath, FIXTURE] } } }),
    startHub({
      config: {
        ...common,
        Spawner: {
          cmd: [process.execPath, FIXTURE],
          profiles: [
            { name: 'small', display_name: 'Small', default: true },
            { name: 'big', display_name: 'Big', overrides: { 'Spawner.environment': { WHICH: 'big' } } },
            // slow to listen: the pending page is surely shown before the server is ready
            { name: 'slow', display_name: 'Slow', overrides: { 'Spawner.environment': { FIXTURE_DELAY_MS: '1500' } } },
            // ignores SIGINT and SIGTERM: its stop takes two stop_signal_timeouts
            { name: 'stubborn', display_name: 'Stubborn', overrides: { 'Spawner.environment': { FIXTURE_MODE: 'stubborn' } } },
          ],
        },
      },
    }),
    launchBrowser(),
  ]);
});
test.after.always(async () => {
  await chromium?.close();
  await Promise.all([plain?.stop(), profiled?.stop()]);
});

async function loggedIn(hub: HubUnderTest, name: string): Promise<Browser> {
  const b = new Browser();
  const r = await formLogin(b, hub.url, name, 'pw');
  if (r.status !== 302) throw new Error(`login of ${name}: ${r.status}`);
  return b;
}

/** A GET with the path sent exactly as written (no URL normalisation of `..` or `%2e`), with the browser's cookies. */
function rawGet(b: Browser, hub: HubUnderTest, path: string): Promise<Page> {
  const cookie = [...b.cookies(hub.url)].map(([k, c]) => `${k}=${c.value}`).join('; ');
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: hub.port, path, method: 'GET', agent: false, headers: { accept: 'text/html', ...(cookie ? { cookie } : {}) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString('utf8'), location: res.headers.location ?? null }));
    });
    req.on('error', reject);
    req.end();
  });
}

const pathOf = (location: string | null) => (location ? (({ pathname, search }) => pathname + search)(new URL(location, 'http://x')) : null);

function waitRunning(hub: HubUnderTest, user: string, name = ''): Promise<ServerRecord> {
  return waitFor(`${user}/${name} running`, async () => {
    const r = await serverRecord(hub.natsUrl, user, name);
    return r?.state === 'running' ? r : undefined;
  }, 20_000, 100);
}

async function apiUser(hub: HubUnderTest, user: string): Promise<any> {
  const r = await fetch(`${hub.url}/hub/api/users/${user}`, { headers: { authorization: `token ${ADMIN_TOKEN}` } });
  return r.json();
}

test('spawn links: GET /hub/spawn starts the default server, the pending page, then the server', async (t) => {
  const b = await loggedIn(plain, 'ann');
  const go = await b.get(`${plain.url}/hub/spawn`);
  t.is(go.status, 302);
  t.is(pathOf(go.location), '/hub/spawn-pending/ann');
  t.is(go.headers['cache-control'], 'no-store', 'a GET that starts is never cached');
  const pending = await b.get(go.location!);
  // the pending page while it starts, or the server when it was already quicker
  if (pending.status === 200) t.regex(pending.body, /progress_url/);
  else t.is(pathOf(pending.location), '/user/ann/');
  await waitRunning(plain, 'ann');
  const ready = await b.get(go.location!);
  t.is(ready.status, 302);
  t.is(pathOf(ready.location), '/user/ann/');
  const server = await b.get(ready.location!);
  t.is(server.status, 200);
  t.regex(server.body, /fixture for ann/);
  // running: the link goes straight to the server (and starts nothing else)
  const again = await b.get(`${plain.url}/hub/spawn/ann`);
  t.is(pathOf(again.location), '/user/ann/');
});

test('spawn links: opt-<key> arguments are the start\'s user_options, a key given twice a list', async (t) => {
  const b = await loggedIn(plain, 'opal');
  // no profiles here: choosing one is a readable 400, nothing started
  const bad = await b.get(`${plain.url}/hub/spawn?opt-profile=big`);
  t.is(bad.status, 400);
  t.regex(bad.body, /id="error-message"/);
  t.is(await serverRecord(plain.natsUrl, 'opal'), null);
  const go = await b.get(`${plain.url}/hub/spawn?opt-colour=red&opt-size=1&opt-size=2&other=ignored`);
  t.is(pathOf(go.location), '/hub/spawn-pending/opal');
  const r = await waitRunning(plain, 'opal');
  t.deepEqual(r.user_options, { colour: 'red', size: ['1', '2'] });
  t.deepEqual((await apiUser(plain, 'opal')).servers[''].user_options, { colour: 'red', size: ['1', '2'] }, 'the API shows them');
});

test('spawn links: with profiles and no option the form, with opt-profile a start with that profile', async (t) => {
  const b = await loggedIn(profiled, 'pia');
  const shown = await b.get(`${profiled.url}/hub/spawn`);
  t.is(shown.status, 200);
  t.regex(shown.body, /<select name="profile">/);
  t.regex(shown.body, /data-action="start"/);
  t.is(await serverRecord(profiled.natsUrl, 'pia'), null, 'showing the form starts nothing');
  // a `next` rides through the form's POST to the pending page
  const withNext = await b.get(`${profiled.url}/hub/spawn?next=${encodeURIComponent('/user/pia/lab')}`);
  t.true(withNext.body.includes(`action="/hub/spawn/pia?next=${encodeURIComponent('/user/pia/lab')}"`));
  const poe = await loggedIn(profiled, 'poe');
  const posted = await poe.post(`${profiled.url}/hub/spawn/poe?next=${encodeURIComponent('/user/poe/lab')}`, { _xsrf: field((await poe.get(`${profiled.url}/hub/spawn`)).body, '_xsrf') ?? '', profile: 'small' });
  t.is(posted.status, 302);
  t.is(pathOf(posted.location), `/hub/spawn-pending/poe?next=${encodeURIComponent('/user/poe/lab')}`);
  t.deepEqual((await waitRunning(profiled, 'poe')).user_options, { profile: 'small' });
  // an unknown profile: the form again, saying what was wrong
  const unknown = await b.get(`${profiled.url}/hub/spawn/pia?opt-profile=huge`);
  t.is(unknown.status, 400);
  t.regex(unknown.body, /id="spawn-error"/);
  t.regex(unknown.body, /<select name="profile">/);
  const go = await b.get(`${profiled.url}/hub/spawn/pia?opt-profile=big`);
  t.is(go.status, 302);
  t.is(pathOf(go.location), '/hub/spawn-pending/pia');
  const r = await waitRunning(profiled, 'pia');
  t.deepEqual(r.user_options, { profile: 'big' });
  const env = JSON.parse((await b.get(`${profiled.url}/user/pia/env`)).body);
  t.true(env.names.includes('WHICH'), 'the profile\'s environment reached the server');
  // running: a link goes straight to its next
  const running = await b.get(`${profiled.url}/hub/spawn/pia?next=${encodeURIComponent('/user/pia/lab')}`);
  t.is(pathOf(running.location), '/user/pia/lab');
});

test('spawn links: next is followed once the server is ready (the pending page\'s script); an outside next is ignored', async (t) => {
  const { context, page, errors } = await newPage(chromium);
  await login(page, profiled.url, 'cat', 'pw');
  const seen: Array<[string, number]> = [];
  page.on('response', (r) => { if (r.request().isNavigationRequest()) seen.push([new URL(r.url()).pathname + new URL(r.url()).search, r.status()]); });
  const next = '/user/cat/tree/x?y=1';
  await page.goto(`${profiled.url}/hub/spawn?opt-profile=slow&next=${encodeURIComponent(next)}`);
  await page.waitForURL((u) => u.pathname === '/user/cat/tree/x', { timeout: 30_000 });
  t.is(new URL(page.url()).search, '?y=1');
  t.regex((await page.textContent('body')) ?? '', /fixture for cat/);
  t.deepEqual(seen.find(([p]) => p.startsWith('/hub/spawn-pending/cat')), [`/hub/spawn-pending/cat?next=${encodeURIComponent(next)}`, 200], `the pending page was shown (${JSON.stringify(seen)})`);
  t.deepEqual(errors, []);
  await context.close();

  // outside addresses are never a `next`
  const b = await loggedIn(plain, 'oli');
  for (const outside of ['https://evil.com/x', '//evil.com/x', '/\\evil.com', '/%2F%2Fevil.com']) {
    const go = await b.get(`${plain.url}/hub/spawn?next=${encodeURIComponent(outside)}`);
    t.is(go.status, 302);
    t.is(pathOf(go.location), '/hub/spawn-pending/oli', outside);
  }
  await waitRunning(plain, 'oli');
  t.is(pathOf((await b.get(`${plain.url}/hub/spawn?next=${encodeURIComponent('//evil.com/x')}`)).location), '/user/oli/');
  t.is(pathOf((await b.get(`${plain.url}/hub/spawn-pending/oli?next=${encodeURIComponent('https://evil.com/')}`)).location), '/user/oli/');
  t.is(pathOf((await b.get(`${plain.url}/hub/spawn-pending/oli?next=${encodeURIComponent('/user/oli/tree/a')}`)).location), '/user/oli/tree/a');
});

test('spawn links: named servers by GET /hub/spawn/<u>/<name>, only where allowed', async (t) => {
  const b = await loggedIn(plain, 'nina');
  const go = await b.get(`${plain.url}/hub/spawn/nina/lab?next=${encodeURIComponent('/user/nina/lab/tree')}`);
  t.is(go.status, 302);
  t.is(pathOf(go.location), `/hub/spawn-pending/nina/lab?next=${encodeURIComponent('/user/nina/lab/tree')}`);
  await waitRunning(plain, 'nina', 'lab');
  t.is(await serverRecord(plain.natsUrl, 'nina'), null, 'the default server was not started');
  t.is(pathOf((await b.get(`${plain.url}/hub/spawn/nina/lab`)).location), '/user/nina/lab/');
  t.is(pathOf((await b.get(go.location!)).location), '/user/nina/lab/tree', 'the pending page, once ready, goes to next');
  const badName = await b.get(`${plain.url}/hub/spawn/nina/Bad_Name`);
  t.is(badName.status, 400);
  t.regex(badName.body, /id="error-message"/);
  // a hub without named servers: a readable 400, nothing started
  const p = await loggedIn(profiled, 'nina');
  const refused = await p.get(`${profiled.url}/hub/spawn/nina/lab?opt-profile=small`);
  t.is(refused.status, 400);
  t.regex(refused.body, /id="error-message"/);
  t.is(await serverRecord(profiled.natsUrl, 'nina', 'lab'), null);
});

test('spawn links: another person\'s spawn URL without start:servers on it is 404 and starts nothing; HEAD starts nothing', async (t) => {
  await loggedIn(plain, 'bert');
  const a = await loggedIn(plain, 'alma');
  for (const path of ['/hub/spawn/bert', '/hub/spawn/bert?opt-x=1', '/hub/spawn/nobody-here']) {
    const r = await a.get(`${plain.url}${path}`);
    t.is(r.status, 404, path);
  }
  t.is(await serverRecord(plain.natsUrl, 'bert'), null);
  const head = await a.request('HEAD', `${plain.url}/hub/spawn`);
  t.not(head.status, 302);
  t.is(await serverRecord(plain.natsUrl, 'alma'), null, 'HEAD is not a start');
});

test('spawn links: a stopping server is a readable answer, never a 500', async (t) => {
  const b = await loggedIn(profiled, 'stu');
  t.is((await b.get(`${profiled.url}/hub/spawn?opt-profile=stubborn`)).status, 302);
  await waitRunning(profiled, 'stu');
  const home = await b.get(`${profiled.url}/hub/home`);
  const stopping = b.post(`${profiled.url}/hub/stop/stu`, { _xsrf: field(home.body, '_xsrf') ?? '' });
  await waitFor('stu stopping', async () => ((await serverRecord(profiled.natsUrl, 'stu'))?.state === 'stop' ? true : undefined), 10_000, 50);
  const r = await b.get(`${profiled.url}/hub/spawn?opt-profile=small`);
  t.is(r.status, 409);
  t.regex(r.body, /id="stopping"/);
  t.is(r.headers['cache-control'], 'no-store');
  t.is((await stopping).status, 302);
});

test('spawn links: /hub/user-redirect/<path> goes to the path on one\'s own server, the query kept', async (t) => {
  const b = await loggedIn(plain, 'dee');
  // by way of the spawn link with next, as the established hub's (a server not running is started first)
  const viaSpawn = (path: string) => `/hub/spawn/dee?next=${encodeURIComponent(path)}`;
  const r = await rawGet(b, plain, '/hub/user-redirect/tree/x?y=1');
  t.is(r.status, 302);
  t.is(r.location, viaSpawn('/user/dee/tree/x?y=1'));
  t.is(r.headers['cache-control'], 'no-store');
  for (const [path, to] of [
    ['/hub/user-redirect/', '/user/dee/'], ['/hub/user-redirect', '/user/dee/'],
    ['/hub/user-redirect/lab/tree/a%20b%3F.ipynb', '/user/dee/lab/tree/a%20b%3F.ipynb'], ['/hub/user-redirect/tree/dir/', '/user/dee/tree/dir/'],
  ]) {
    const got = await rawGet(b, plain, path);
    t.is(got.location, viaSpawn(to), path);
  }
  for (const path of [
    '/hub/user-redirect//evil.com', '/hub/user-redirect//evil.com/x', '/hub/user-redirect/%2F%2Fevil.com', '/hub/user-redirect/../bob/',
    '/hub/user-redirect/tree/../../bob/', '/hub/user-redirect/%2e%2e/bob', '/hub/user-redirect/tree/..%2F..%2Fbob', '/hub/user-redirect/a//b',
    '/hub/user-redirect/%5Cevil.com', '/hub/user-redirect/./x',
  ]) {
    const got = await rawGet(b, plain, path);
    t.is(got.status, 400, path);
    t.is(got.location, null, path);
    t.regex(got.body, /id="error-message"/, path);
  }
});

test('spawn links: not logged in, the login page comes first and then the server path', async (t) => {
  // eve's server runs (started from a link in another browser)
  const first = await loggedIn(plain, 'eve');
  t.is(pathOf((await first.get(`${plain.url}/hub/spawn`)).location), '/hub/spawn-pending/eve');
  await waitRunning(plain, 'eve');

  const b = new Browser();
  const asked = await b.get(`${plain.url}/hub/user-redirect/tree/x?y=1`);
  t.is(asked.status, 302);
  t.is(pathOf(asked.location), `/hub/login?next=${encodeURIComponent('/hub/user-redirect/tree/x?y=1')}`);
  const logged = await formLogin(b, plain.url, 'eve', 'pw', '/hub/user-redirect/tree/x?y=1');
  t.is(pathOf(logged.location), '/hub/user-redirect/tree/x?y=1');
  const redirected = await b.get(logged.location!);
  t.is(pathOf(redirected.location), `/hub/spawn/eve?next=${encodeURIComponent('/user/eve/tree/x?y=1')}`);
  // her server runs: the spawn link goes on to the path
  const spawned = await b.get(redirected.location!);
  t.is(pathOf(spawned.location), '/user/eve/tree/x?y=1');
  const server = await b.get(spawned.location!);
  t.is(server.status, 200);
  t.regex(server.body, /fixture for eve/);

  // a spawn link likewise: login, then the start it asked for
  const c = new Browser();
  const spawnAsked = await c.get(`${plain.url}/hub/spawn?opt-k=v`);
  t.is(pathOf(spawnAsked.location), `/hub/login?next=${encodeURIComponent('/hub/spawn?opt-k=v')}`);
  t.is(await serverRecord(plain.natsUrl, 'finn'), null);
  const back = await formLogin(c, plain.url, 'finn', 'pw', '/hub/spawn?opt-k=v');
  t.is(pathOf(back.location), '/hub/spawn?opt-k=v');
  t.is(pathOf((await c.get(back.location!)).location), '/hub/spawn-pending/finn');
  t.deepEqual((await waitRunning(plain, 'finn')).user_options, { k: 'v' });
});
