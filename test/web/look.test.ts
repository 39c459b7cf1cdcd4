// The shared look and the headers every hub page carries, in a real browser: one stylesheet served by
// the hub, the top bar, no request leaving the hub, and no page of another origin able to frame it.
import test from 'ava';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { runHubCommand, startHub, type HubUnderTest } from '../harness.js';
import { launchBrowser, login, newPage, screenshot, type Browser } from './browser.js';

let hub: HubUnderTest;
let browser: Browser;

test.before(async () => {
  [hub, browser] = await Promise.all([
    startHub({
      config: {
        Hub: {
          authenticator_class: 'dummy',
          services: [
            { name: 'notes (beta)', url: 'http://127.0.0.1:9', api_token: 'svc-token-0123456789' },
            { name: 'hidden', url: 'http://127.0.0.1:9', api_token: 'svc-token-9876543210', display: false },
            { name: 'no-url', api_token: 'svc-token-5555555555' },
          ],
        },
        DummyAuthenticator: { password: 'pw' }, Authenticator: { admin_users: ['boss'] },
        Spawner: {
          profiles: [
            { name: 'small', display_name: 'Small', description: '1 core', default: true },
            { name: 'big', display_name: 'Big <b>box</b>', description: 'for "large" data', overrides: { 'Spawner.environment': { WHICH: 'big' } } },
          ],
        },
      },
    }),
    launchBrowser(),
  ]);
});
test.after.always(async () => {
  await browser?.close();
  await hub?.stop();
});

test('look: login and home share one stylesheet from the hub, nothing from elsewhere', async (t) => {
  const { context, page, errors } = await newPage(browser);
  const outside: string[] = [];
  page.on('request', (r) => { if (!r.url().startsWith(hub.url)) outside.push(r.url()); });
  await page.goto(`${hub.url}/hub/login`);
  await screenshot(page, 'login');
  const css = await page.evaluate(() => [...document.styleSheets].map((s) => s.href));
  t.is(css.length, 1);
  t.true(css[0]!.startsWith(`${hub.url}/hub/static/hub.css`));
  await login(page, hub.url, 'boss', 'pw');
  t.is(new URL(page.url()).pathname, '/hub/home');
  t.true(await page.isVisible('header.topbar a[href="/hub/admin"]'), 'an admin sees Admin');
  t.true(await page.isVisible('#logout'));
  await screenshot(page, 'home-admin');
  // the Services menu lists services with a url and display true, linked to their prefix
  await page.click('#services-menu summary');
  const services = await page.$$eval('#services-menu a', (as) => as.map((a) => [a.textContent, a.getAttribute('href')]));
  t.deepEqual(services, [['notes (beta)', '/services/notes%20%28beta%29/']]);
  await page.goto(`${hub.url}/hub/spawn/boss`);
  t.true(await page.isVisible('button[data-action=start]'));
  await screenshot(page, 'spawn-form');
  t.deepEqual(outside, []);
  t.deepEqual(errors, []);
  await page.click('#logout');
  await page.waitForURL(/\/hub\/login$/);
  await screenshot(page, 'logout');
  await page.goto(`${hub.url}/hub/home`);
  t.is(new URL(page.url()).pathname, '/hub/login', 'signed out');
  await context.close();
});

test('look: every hub answer carries CSP with frame-ancestors, nosniff and a referrer policy', async (t) => {
  for (const path of ['/hub/login', '/hub/home', '/hub/nowhere', '/hub/api/', '/']) {
    const r = await fetch(`${hub.url}${path}`, { redirect: 'manual', headers: { accept: 'text/html' } });
    t.regex(r.headers.get('content-security-policy') ?? '', /frame-ancestors 'self'/, path);
    t.is(r.headers.get('x-content-type-options'), 'nosniff', path);
    t.truthy(r.headers.get('referrer-policy'), path);
  }
});

test('look: a page of another origin cannot frame the hub', async (t) => {
  // another origin: a different port on 127.0.0.1 serving a page that frames the hub's login
  const evil = http.createServer((_q, s) => s.end(`<!doctype html><iframe id="f" src="${hub.url}/hub/login"></iframe>`));
  await new Promise<void>((r) => evil.listen(0, '127.0.0.1', r));
  try {
    const { context, page } = await newPage(browser);
    const blocked = page.waitForEvent('console', { predicate: (m) => /frame-ancestors|Refused to frame/i.test(m.text()), timeout: 10_000 }).then(() => true, () => false);
    await page.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
    t.true(await blocked, 'chromium reports the frame refused');
    const frame = page.frames().find((f) => f !== page.mainFrame());
    const framedForm = await frame?.$('input[name=username]').catch(() => null);
    t.falsy(framedForm, 'the login form is not rendered inside the other site');
    await context.close();
  } finally {
    evil.close();
  }
});

test('look: Hub.extra_headers is validated: a bad header name or a value with a newline stops the hub, naming it', async (t) => {
  const bad = await runHubCommand(['--Hub.extra_headers={"Bad Name":"x","X-Ok":"a\\nb","Set-Cookie":"a=b"}']);
  t.is(bad.code, 2);
  t.regex(bad.stderr, /Hub\.extra_headers: "Bad Name" is not a valid header name/);
  t.regex(bad.stderr, /Hub\.extra_headers "X-Ok": the value must be one line/);
  t.regex(bad.stderr, /Set-Cookie is set by the hub/);
});

test('look: Hub.extra_headers replace and add headers on pages and the API, each header once; the API keeps its short policy otherwise', async (t) => {
  const csp = "default-src 'self'; frame-ancestors 'self' https://portal.example.org";
  const own = await startHub({ config: { Hub: { authenticator_class: 'dummy', extra_headers: { 'Content-Security-Policy': csp, 'X-Served-By': 'hub-a' } } } });
  t.teardown(() => own.stop());
  const rawHeaders = (url: string, accept: string) => new Promise<string[]>((resolve, reject) => {
    http.get(url, { headers: { accept } }, (res) => { res.resume(); res.on('end', () => resolve(res.rawHeaders)); }).on('error', reject);
  });
  for (const [path, accept] of [['/hub/login', 'text/html'], ['/hub/api/', 'application/json'], ['/hub/api/users', 'application/json']]) {
    const raw = await rawHeaders(`${own.url}${path}`, accept);
    const values = (name: string) => raw.filter((_, i) => i % 2 === 0 && raw[i].toLowerCase() === name).map((_, i) => i);
    const named = (name: string) => raw.flatMap((v, i) => (i % 2 === 1 && raw[i - 1].toLowerCase() === name ? [v] : []));
    t.deepEqual(named('content-security-policy'), [csp], path);
    t.deepEqual(named('x-served-by'), ['hub-a'], path);
    t.deepEqual(named('x-content-type-options'), ['nosniff'], path);
    t.is(values('referrer-policy').length, 1, path);
  }
  // without a configured policy, API answers carry the API's own: nothing may load from JSON
  const api = await fetch(`${hub.url}/hub/api/`);
  t.is(api.headers.get('content-security-policy'), "default-src 'none'; frame-ancestors 'self'");
  const login = await fetch(`${hub.url}/hub/login`);
  t.regex(login.headers.get('content-security-policy') ?? '', /script-src 'self'/);
});

/** Requests on one kept-alive connection, in order: a stray body after a HEAD answer would corrupt the next. */
async function onOneConnection(requests: { method: string; path: string }[]) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const base = new URL(hub.url);
  try {
    const out: { status: number; headers: http.IncomingHttpHeaders; body: string }[] = [];
    for (const { method, path } of requests) {
      out.push(await new Promise((resolve, reject) => {
        const req = http.request({ host: base.hostname, port: base.port, method, path, agent, headers: { accept: 'text/html' } }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => { body += c; });
          res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
        });
        req.setTimeout(5000, () => req.destroy(new Error(`${method} ${path}: no answer in 5 s`)));
        req.on('error', reject);
        req.end();
      }));
    }
    return out;
  } finally {
    agent.destroy();
  }
}

test('look: HEAD of a page or the API answers GET\'s status and headers without a body; the connection stays usable', async (t) => {
  const [headLogin, getLogin, headApi, getApi, headLogout] = await onOneConnection([
    { method: 'HEAD', path: '/hub/login' }, { method: 'GET', path: '/hub/login' },
    { method: 'HEAD', path: '/hub/api' }, { method: 'GET', path: '/hub/api' }, { method: 'HEAD', path: '/hub/logout' },
  ]);
  t.is(headLogin.status, 200);
  t.is(getLogin.status, 200);
  t.is(headLogin.body, '');
  t.is(headLogin.headers['content-type'], getLogin.headers['content-type']);
  t.regex(headLogin.headers['content-security-policy'] ?? '', /frame-ancestors/);
  t.is(Number(headLogin.headers['content-length']), Buffer.byteLength(getLogin.body), 'the length the body would have');
  t.is(headApi.status, 200);
  t.is(headApi.body, '');
  t.truthy(JSON.parse(getApi.body).version, 'the answer after a HEAD is whole');
  t.is(headLogout.status, 404, 'a GET that acts (logging out) is not run for HEAD');
});

test('look: the spawn form offers the profiles (escaped); the one chosen is the server\'s user_options', async (t) => {
  const { context, page, errors } = await newPage(browser);
  await login(page, hub.url, 'pat', 'pw');
  await page.goto(`${hub.url}/hub/spawn/pat`);
  const choices = await page.$$eval('select[name=profile] option', (os) => os.map((o) => [o.getAttribute('value'), o.textContent, (o as HTMLOptionElement).selected]));
  t.deepEqual(choices, [['small', 'Small — 1 core', true], ['big', 'Big <b>box</b> — for "large" data', false]]);
  await page.selectOption('select[name=profile]', 'big');
  await Promise.all([page.waitForURL(/\/user\/pat\/$/, { timeout: 20_000 }), page.click('button[data-action=start]')]);
  const me = await page.evaluate(async () => (await fetch('/hub/api/user', { headers: { accept: 'application/json' } })).json());
  t.deepEqual(me.servers[''].user_options, { profile: 'big' });
  t.deepEqual(errors, []);
  await context.close();
});
