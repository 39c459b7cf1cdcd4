// The hub's pages in a real browser, as a person uses them: start the default server and watch the
// bar reach ready, land on the server and come back; named servers from create to delete; a token
// requested, listed, used, revoked; names with quotes, brackets, markup and accents everywhere; a failed
// start with its message and Retry. One hub for the file; a fresh browser context per test.
import test from 'ava';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, startHub, type HubUnderTest } from '../harness.js';
import { launchBrowser, login, newPage, screenshot, type Browser, type Page } from './browser.js';

let hub: HubUnderTest;
/** a file of a user's name here holds their server's start (test/fixtures/maybe-fail.mjs) */
const holdDir = mkdtempSync(join(tmpdir(), 'hub-hold-'));
/** far longer than any wait for a page here: a start that waited for the server would not show its pending page */
const SLOW_SPAWN_TIMEOUT_S = 120;
let browser: Browser;

test.before(async () => {
  [hub, browser] = await Promise.all([
    startHub({
      config: {
        Hub: { authenticator_class: 'dummy', allow_named_servers: true }, DummyAuthenticator: { password: 'pw' },
        Spawner: {
          cmd: [process.execPath, join(REPO, 'test', 'fixtures', 'maybe-fail.mjs')], environment: { FAIL_USERS: '["doomed"]', HOLD_DIR: holdDir },
          slow_spawn_timeout: SLOW_SPAWN_TIMEOUT_S,
        },
      },
    }),
    launchBrowser(),
  ]);
});
test.after.always(async () => {
  await browser?.close();
  await hub?.stop();
  rmSync(holdDir, { recursive: true, force: true });
});

/** The widths the bar showed, recorded in the page as they change (a MutationObserver, installed before the page's own script runs). */
async function recordBar(page: Page): Promise<void> {
  await page.addInitScript(() => {
    const seen: string[] = [];
    (window as unknown as { barWidths: string[] }).barWidths = seen;
    new MutationObserver(() => {
      const bar = document.querySelector<HTMLElement>('#progress .bar');
      if (bar && bar.style.width && seen[seen.length - 1] !== bar.style.width) {
        seen.push(bar.style.width);
        sessionStorage.setItem('barWidths', JSON.stringify(seen));
      }
    }).observe(document, { subtree: true, childList: true, attributes: true });
  });
}

test('pages: start the default server from home, the bar reaches ready, the server opens, and the way back', async (t) => {
  const { context, page, errors } = await newPage(browser);
  await login(page, hub.url, 'alice', 'pw');
  await screenshot(page, 'home');
  await recordBar(page);
  // the pending page shows while the server cannot be ready (its start held), long before Spawner.slow_spawn_timeout
  const hold = join(holdDir, 'alice');
  writeFileSync(hold, '');
  await Promise.all([page.waitForURL(/\/hub\/spawn-pending\/alice$/, { timeout: 30_000 }), page.click('#default-server button[data-action=start]')]);
  rmSync(hold);
  await screenshot(page, 'spawn-pending');
  await page.waitForURL(/\/user\/alice\/$/, { timeout: 30_000 });
  const widths = JSON.parse(await page.evaluate(() => sessionStorage.getItem('barWidths') ?? '[]')) as string[];
  t.is(widths[widths.length - 1], '100%', `the bar reached 100% (${widths.join(' → ')})`);
  t.true(await page.isVisible('text=Server of alice'));
  await screenshot(page, 'server');
  await Promise.all([page.waitForURL(/\/hub\/home$/), page.click('#hub-home')]);
  t.is(await page.getAttribute('#default-server .state', 'data-state'), 'running');
  t.true(await page.isVisible('#default-server a[data-action=open]'));
  await Promise.all([page.waitForURL(/\/hub\/home$/), page.click('#default-server button[data-action=stop]')]);
  t.is(await page.getAttribute('#default-server .state', 'data-state'), 'stopped');
  // a stopped server's URL offers a start to its owner
  const r = await page.goto(`${hub.url}/user/alice/`);
  t.is(r?.status(), 503);
  t.true(await page.isVisible('#not-running'));
  t.true(await page.isVisible('button[data-action=start]'));
  await screenshot(page, 'not-running');
  t.deepEqual(errors.filter((e) => !e.startsWith('503 GET')), []);
  await context.close();
});

test('pages: a named server is created, started, stopped (still listed), started again and deleted', async (t) => {
  const { context, page } = await newPage(browser);
  await login(page, hub.url, 'bob', 'pw');
  await page.fill('#create-server input[name=server]', 'analysis-2');
  await Promise.all([page.waitForURL(/\/hub\/spawn-pending\/bob\/analysis-2$/), page.click('#create-server button')]);
  await page.waitForURL(/\/user\/bob\/analysis-2\/$/, { timeout: 30_000 });
  await page.goto(`${hub.url}/hub/home`);
  const row = 'tr[data-server="analysis-2"]';
  t.is(await page.getAttribute(`${row} .state`, 'data-state'), 'running');
  await screenshot(page, 'home-named');
  await Promise.all([page.waitForURL(/\/hub\/home$/), page.click(`${row} button[data-action=stop]`)]);
  t.is(await page.getAttribute(`${row} .state`, 'data-state'), 'stopped', 'a stopped named server stays on home');
  t.true(await page.isVisible(`${row} button[data-action=delete]`));
  await Promise.all([page.waitForURL(/\/hub\/spawn-pending\/bob\/analysis-2$/), page.click(`${row} button[data-action=start]`)]);
  await page.waitForURL(/\/user\/bob\/analysis-2\/$/, { timeout: 30_000 });
  await page.goto(`${hub.url}/hub/home`);
  await Promise.all([page.waitForURL(/\/hub\/home$/), page.click(`${row} button[data-action=stop]`)]);
  // deleting asks first (a dialog; the page stays until it is confirmed)
  await page.click(`${row} button[data-action=delete]`);
  await Promise.all([page.waitForURL(/\/hub\/home$/), page.click('dialog button[data-action=confirm]')]);
  await page.locator(row).waitFor({ state: 'detached' });
  t.is(await page.$(row), null, 'deleted');
  // a bad name is a readable page, not a crash
  await page.evaluate(() => document.querySelector('#create-server input[name=server]')!.removeAttribute('pattern'));
  await page.fill('#create-server input[name=server]', 'Bad Name');
  const answer = await Promise.all([page.waitForNavigation(), page.click('#create-server button')]).then(([r]) => r);
  t.is(answer?.status(), 400);
  t.true(await page.isVisible('#error-message'));
  await screenshot(page, 'error-400');
  await context.close();
});

test('pages: a token is requested, shown once, listed, works with the API, is revoked and then refused', async (t) => {
  const { context, page, errors } = await newPage(browser);
  await login(page, hub.url, 'carol', 'pw');
  await page.click('header a[href="/hub/token"]');
  await page.fill('#request-token input[name=note]', 'my <b>script</b>');
  await page.selectOption('#request-token select[name=expires_in]', '86400');
  const [created] = await Promise.all([page.waitForURL(/\/hub\/token$/), page.click('#request-token button')]);
  void created;
  const token = (await page.textContent('#new-token'))!.trim();
  t.regex(token, /^[A-Za-z0-9_-]{20,}$/);
  await screenshot(page, 'token');
  const row = page.locator('#api-tokens tbody tr', { hasText: 'my <b>script</b>' });
  t.is(await row.count(), 1, 'listed, the note shown as typed (escaped)');
  // a reload shows no token again and makes no second one
  const reloaded = await page.reload();
  t.is(reloaded?.headers()['cache-control'], 'no-store');
  t.is(await page.$('#new-token'), null);
  t.is(await page.locator('#api-tokens tbody tr', { hasText: 'my <b>script</b>' }).count(), 1);
  // the token works with the API
  const who = await fetch(`${hub.url}/hub/api/user`, { headers: { authorization: `token ${token}` } });
  t.is(who.status, 200);
  t.is((await who.json()).name, 'carol');
  // revoked from the page, then refused
  page.once('dialog', (d) => void d.accept());
  await page.locator('#api-tokens tbody tr', { hasText: 'my <b>script</b>' }).locator('button[data-revoke]').click();
  await page.locator('#api-tokens tbody tr', { hasText: 'my <b>script</b>' }).waitFor({ state: 'detached' });
  const after = await fetch(`${hub.url}/hub/api/user`, { headers: { authorization: `token ${token}` } });
  t.is(after.status, 403);
  t.deepEqual(errors, []);
  await context.close();
});

for (const name of ["o'brien", 'a(b)', '<img src=x>', 'émile']) {
  test.serial(`pages: ${name} logs in, starts, opens and stops a server`, async (t) => {
    const { context, page, errors } = await newPage(browser);
    await page.addInitScript(() => { (window as unknown as { pwned: boolean }).pwned = false; });
    await login(page, hub.url, name, 'pw');
    t.is(await page.textContent('header .who'), name, 'the name is shown as typed');
    await Promise.all([page.waitForURL(/\/hub\/spawn-pending\//), page.click('#default-server button[data-action=start]')]);
    await page.waitForURL((u) => u.pathname.startsWith('/user/'), { timeout: 30_000 });
    t.true(await page.isVisible(`text=Server of ${name}`), `the server answers at ${page.url()}`);
    await page.click('#hub-home');
    await page.waitForURL(/\/hub\/home$/);
    t.is(await page.getAttribute('#default-server .state', 'data-state'), 'running');
    await Promise.all([page.waitForURL(/\/hub\/home$/), page.click('#default-server button[data-action=stop]')]);
    t.is(await page.getAttribute('#default-server .state', 'data-state'), 'stopped');
    t.deepEqual(errors, []);
    t.is(await page.$('img'), null, 'no markup from the name');
    if (name === "o'brien") await screenshot(page, 'home-obrien');
    await context.close();
  });
}

test('pages: a failed start shows its message and Retry, not a full bar under "Starting"', async (t) => {
  const { context, page } = await newPage(browser);
  await login(page, hub.url, 'doomed', 'pw');
  await Promise.all([page.waitForURL(/\/hub\/spawn-pending\/doomed$/), page.click('#default-server button[data-action=start]')]);
  await page.locator('#spawn-failed').waitFor({ state: 'visible', timeout: 30_000 });
  t.regex((await page.textContent('#failure-message')) ?? '', /fail/i);
  t.true(await page.isVisible('#spawn-failed button[data-action=retry]'));
  t.false(await page.isVisible('#spawn-running'), 'no Stop under a failure');
  t.regex((await page.getAttribute('#progress', 'class')) ?? '', /failed/);
  await screenshot(page, 'spawn-failed');
  // home says so too, and offers Retry
  await page.goto(`${hub.url}/hub/home`);
  t.is(await page.getAttribute('#default-server .state', 'data-state'), 'failed');
  t.true(await page.isVisible('#default-server button[data-action=retry]'));
  await context.close();
});

test('pages: error pages share the look; API clients get JSON', async (t) => {
  const { context, page } = await newPage(browser);
  const r = await page.goto(`${hub.url}/hub/nowhere`);
  t.is(r?.status(), 404);
  t.true(await page.isVisible('header.topbar'));
  t.true(await page.isVisible('#error-message'));
  await screenshot(page, 'error-404');
  const api = await fetch(`${hub.url}/hub/nowhere`, { headers: { accept: 'application/json' } });
  t.is(api.status, 404);
  t.is((await api.json()).status, 404);
  const frank = await newPage(browser);
  await login(frank.page, hub.url, 'frank', 'pw'); // frank exists, his server never runs
  await frank.context.close();
  await login(page, hub.url, 'dave', 'pw');
  const missing = await page.goto(`${hub.url}/hub/user/nobody-here/`);
  t.is(missing?.status(), 404, 'the page of a user that does not exist');
  const other = await page.goto(`${hub.url}/user/frank/`);
  t.is(other?.status(), 503);
  t.true(await page.isVisible('#not-running'));
  t.is(await page.$('button[data-action=start]'), null, 'no Start for someone else');
  await context.close();
});
