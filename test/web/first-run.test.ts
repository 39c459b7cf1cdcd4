// First run as a newcomer meets it: a fresh data dir, `hub` started, the ready line says where to go and
// prints a one-time set-up code; the set-up page makes the first admin, who logs in and starts a
// server; then the set-up page is gone.
import test from 'ava';
import { startHub, waitFor, type HubUnderTest } from '../harness.js';
import { launchBrowser, login, newPage, screenshot, type Browser } from './browser.js';

let hub: HubUnderTest;
let browser: Browser;

test.before(async () => {
  [hub, browser] = await Promise.all([startHub(), launchBrowser()]);
});
test.after.always(async () => {
  await browser?.close();
  await hub?.stop();
});

test('first run: the start-up output says where to go and gives a set-up code that makes the first admin', async (t) => {
  const out = await waitFor('the ready line', async () => (/Hub ready: open http:\/\/127\.0\.0\.1:\d+\//.test(hub.logs()) && /set-up code [0-9A-Z-]+/.test(hub.logs()) ? hub.logs() : undefined), 20_000);
  t.true(out.includes(`Hub ready: open ${hub.url}/`));
  const code = /set-up code ([0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4})/.exec(out)![1];
  t.is(out.split(code).length - 1, 1, 'the code appears exactly once in the output');

  const { context, page, errors } = await newPage(browser);
  await page.goto(`${hub.url}/`);
  t.is(new URL(page.url()).pathname, '/hub/login', '/ leads to the login');
  await page.click('#setup-hint a');
  await screenshot(page, 'setup');
  // a wrong code is refused with a readable message
  await page.fill('input[name=code]', 'AAAA-BBBB-CCCC');
  await page.fill('input[name=username]', 'root-admin');
  await page.fill('input[name=password]', 'first-admin-pw');
  await page.fill('input[name=password2]', 'first-admin-pw');
  const wrong = await Promise.all([page.waitForNavigation(), page.click('#setup-form button[type=submit]')]).then(([r]) => r);
  t.is(wrong?.status(), 403);
  t.true(await page.isVisible('#setup-error'));
  errors.length = 0;
  await page.fill('input[name=code]', code.toLowerCase());
  await page.fill('input[name=password]', 'first-admin-pw');
  await page.fill('input[name=password2]', 'first-admin-pw');
  await Promise.all([page.waitForURL(/\/hub\/login\?setup=done$/), page.click('#setup-form button[type=submit]')]);
  t.true(await page.isVisible('#setup-done'));
  await login(page, hub.url, 'root-admin', 'first-admin-pw');
  t.is(new URL(page.url()).pathname, '/hub/home');
  t.true(await page.isVisible('header a[href="/hub/admin"]'), 'the first user is an admin');
  await Promise.all([page.waitForURL(/\/hub\/spawn-pending\/root-admin$/), page.click('#default-server button[data-action=start]')]);
  await page.waitForURL(/\/user\/root-admin\/$/, { timeout: 30_000 });
  t.true(await page.isVisible('text=Server of root-admin'));
  t.deepEqual(errors, []);
  // the set-up is gone for good
  const gone = await page.goto(`${hub.url}/hub/setup`);
  t.is(gone?.status(), 404);
  const post = await fetch(`${hub.url}/hub/setup`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `code=${code}&username=x&password=yyyyyyyy&password2=yyyyyyyy` });
  t.is(post.status, 404);
  await context.close();
});
