// What the established hub's pages (5.x–6.1) offer a person besides the flows, in a real browser: dark mode
// that follows the system and a top-bar choice that overrides it (remembered, set before first paint), every
// page readable in both themes, Show on password fields, the warning on a login page sent over plain HTTP to
// another machine, a Services menu with only the services the visitor may use, and a confirmation before a
// named server is deleted (a dialog; a page of its own without script).
import test from 'ava';
import { chromium } from 'playwright-core';
import { startHub, type HubUnderTest } from '../harness.js';
import { FIXTURE } from '../spawner/helpers.js';
import { CHROMIUM, login, newPage, screenshot, type Browser, type Page } from './browser.js';

let hub: HubUnderTest;
/** the password authenticator with no admin yet: the first-admin set-up page is open */
let fresh: HubUnderTest;
let browser: Browser;

test.before(async () => {
  [hub, fresh, browser] = await Promise.all([
    startHub({
      config: {
        Hub: {
          authenticator_class: 'dummy', allow_named_servers: true,
          services: [
            { name: 'notes', url: 'http://127.0.0.1:9', api_token: 'svc-token-notes-0123456789' },
            { name: 'ledger', url: 'http://127.0.0.1:9', api_token: 'svc-token-ledger-0123456789' },
          ],
          load_roles: [{ name: 'notes-users', scopes: ['access:services!service=notes'], users: ['ann'] }],
        },
        DummyAuthenticator: { password: 'pw' }, Authenticator: { admin_users: ['boss'] },
        Spawner: {
          cmd: [process.execPath, FIXTURE],
          profiles: [
            { name: 'quick', display_name: 'Quick', default: true },
            // never listens: its start stays pending until stopped
            { name: 'waits', display_name: 'Waits', overrides: { 'Spawner.environment': { FIXTURE_MODE: 'never' } } },
          ],
        },
      },
    }),
    startHub(),
    // as test/web/browser.ts launches it, and hub.test resolving to this machine: a page at http://hub.test:<port>/ is plain HTTP to a name that is not loopback
    chromium.launch({
      executablePath: CHROMIUM, timeout: 30_000,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
        '--host-resolver-rules=MAP hub.test 127.0.0.1'],
    }),
  ]);
});
test.after.always(async () => {
  await browser?.close();
  await Promise.all([hub?.stop(), fresh?.stop()]);
});

const bodyBackground = (page: Page) => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
/** 0 (black) … 1 (white), of an `rgb(…)` colour */
function luminance(rgb: string): number {
  const [r, g, b] = rgb.match(/[\d.]+/g)!.slice(0, 3).map((v) => Number(v) / 255).map((c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4));
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

/**
 * Text on the page (under `within`) whose contrast with what is behind it is below WCAG AA: 4.5:1, 3:1 for
 * large text; disabled controls are exempt. Each as "<tag>.<class> 'text' ratio". Plain JavaScript in a
 * string: the test runner's compiler would add helpers to a function that the page does not have.
 */
const LOW_CONTRAST = `(selector) => {
  const rgba = (c) => {
    const v = (c.match(/[\\d.]+/g) || ['0', '0', '0', '0']).map(Number);
    return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
  };
  const channel = (c) => { const s = c / 255; return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4; };
  const lum = (c) => 0.2126 * channel(c[0]) + 0.7152 * channel(c[1]) + 0.0722 * channel(c[2]);
  const over = (top, under) => top.slice(0, 3).map((c, i) => c * top[3] + under[i] * (1 - top[3]));
  // the colour behind an element: its own and its ancestors' backgrounds, composed down to the first opaque one
  const behind = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const bg = rgba(getComputedStyle(e).backgroundColor);
      if (bg[3] > 0) layers.push(bg);
      if (bg[3] >= 1) break;
    }
    let out = [255, 255, 255];
    for (const layer of layers.reverse()) out = over(layer, out);
    return out;
  };
  const bad = [];
  const root = document.querySelector(selector);
  for (const el of [root, ...root.querySelectorAll('*')]) {
    const own = [...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim()) || el.matches('input:not([type=hidden]):not([type=checkbox]), select, textarea');
    if (!own || !el.checkVisibility({ opacityProperty: true, visibilityProperty: true }) || el.closest(':disabled, option')) continue;
    const style = getComputedStyle(el);
    const bg = behind(el);
    const text = lum(over(rgba(style.color), bg));
    const back = lum(bg);
    const ratio = (Math.max(text, back) + 0.05) / (Math.min(text, back) + 0.05);
    const size = Number.parseFloat(style.fontSize);
    const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
    if (ratio < (large ? 3 : 4.5)) bad.push(el.tagName.toLowerCase() + '.' + el.className + " '" + el.textContent.trim().slice(0, 30) + "' " + ratio.toFixed(2));
  }
  return bad;
}`;
const lowContrast = (page: Page, within = 'body'): Promise<string[]> => page.evaluate(`(${LOW_CONTRAST})(${JSON.stringify(within)})`);

test('comforts: dark mode follows the system; the top bar\'s choice overrides it, is remembered, and is set before the first paint', async (t) => {
  const { context, page, errors } = await newPage(browser);
  await page.emulateMedia({ colorScheme: 'light' });
  await page.goto(`${hub.url}/hub/login`);
  const light = await bodyBackground(page);
  t.true(luminance(light) > 0.8, `light by default (${light})`);
  await page.emulateMedia({ colorScheme: 'dark' });
  const dark = await bodyBackground(page);
  t.true(luminance(dark) < 0.05, `dark when the system is (${dark})`);
  t.true(await page.isVisible('#theme-choice'), 'the choice is in the top bar of the login page too');
  t.is(await page.inputValue('#theme-choice'), 'system');

  await login(page, hub.url, 'tess', 'pw');
  t.is(await bodyBackground(page), dark, 'home follows the system as well');
  // the choice overrides the system, on this page at once and on the next after a reload
  await page.selectOption('#theme-choice', 'light');
  t.is(await bodyBackground(page), light);
  // where the theme stands when <body> first exists: set by then, so the first paint has it
  await page.addInitScript(() => {
    new MutationObserver((_m, observer) => {
      if (!document.body) return;
      (window as unknown as { themeAtBody: string }).themeAtBody = document.documentElement.dataset.theme ?? 'none';
      observer.disconnect();
    }).observe(document, { childList: true, subtree: true });
  });
  await page.reload();
  t.is(await page.evaluate(() => (window as unknown as { themeAtBody: string }).themeAtBody), 'light', 'the theme is on <html> before <body> is parsed');
  t.is(await bodyBackground(page), light, 'remembered across a reload, the system still dark');
  t.is(await page.inputValue('#theme-choice'), 'light');
  await page.goto(`${hub.url}/hub/token`);
  t.is(await bodyBackground(page), light, 'and on the other pages');
  // dark chosen while the system is light
  await page.emulateMedia({ colorScheme: 'light' });
  await page.selectOption('#theme-choice', 'dark');
  t.is(await bodyBackground(page), dark);
  await page.reload();
  t.is(await bodyBackground(page), dark);
  // back to the system: nothing kept, the system decides again
  await page.selectOption('#theme-choice', 'system');
  t.is(await bodyBackground(page), light);
  t.is(await page.evaluate(() => localStorage.getItem('hub-theme')), null);
  await page.reload();
  t.is(await bodyBackground(page), light);
  // keyboard: the choice is a native select, reachable with Tab and changed with the arrow keys
  await page.focus('#theme-choice');
  await page.keyboard.press('ArrowDown');
  t.is(await page.inputValue('#theme-choice'), 'light');
  t.deepEqual(errors, []);
  await context.close();
});

test('comforts: login, home, token, admin, pending and error pages keep readable contrast in both themes', async (t) => {
  const { context, page, errors } = await newPage(browser);
  const check = async (what: string) => {
    for (const scheme of ['light', 'dark'] as const) {
      await page.emulateMedia({ colorScheme: scheme });
      t.deepEqual(await lowContrast(page), [], `${what} (${scheme})`);
    }
    await screenshot(page, `dark-${what}`);
  };
  await page.goto(`${hub.url}/hub/login`);
  await check('login');
  await login(page, hub.url, 'boss', 'pw');
  await page.click('#services-menu summary');
  await check('home');
  await page.goto(`${hub.url}/hub/token`);
  await page.fill('#request-token input[name=note]', 'for contrast');
  await Promise.all([page.waitForURL(/\/hub\/token$/), page.click('#request-token button')]);
  await page.locator('#new-token').waitFor();
  await check('token');
  await page.goto(`${hub.url}/hub/admin`);
  await page.locator('#user-table tbody.user').first().waitFor();
  await check('admin');
  // a start that stays pending: the pending page, then stopped from it
  await Promise.all([page.waitForURL(/\/hub\/spawn-pending\/boss$/), page.goto(`${hub.url}/hub/spawn/boss?opt-profile=waits`)]);
  await check('pending');
  await Promise.all([page.waitForURL(/\/hub\/home$/), page.click('#spawn-running button[data-action=stop]')]);
  const missing = await page.goto(`${hub.url}/hub/nowhere`);
  t.is(missing?.status(), 404);
  await check('error');
  t.deepEqual(errors.filter((e) => !e.startsWith('404 GET')), []);
  await context.close();
});

test('comforts: a password field has a Show button that flips it between hidden and shown, by mouse and by keyboard', async (t) => {
  const { context, page, errors } = await newPage(browser);
  await page.goto(`${hub.url}/hub/login`);
  const password = page.locator('input[name=password]');
  const show = page.getByRole('button', { name: 'Show password' });
  t.is(await password.getAttribute('type'), 'password');
  t.is(await show.getAttribute('aria-pressed'), 'false');
  t.is(await show.getAttribute('aria-controls'), await password.getAttribute('id'));
  t.is(await page.getByLabel('Password', { exact: true }).count(), 1, "the field's name is still its label alone");
  await password.fill('pw');
  await show.click();
  t.is(await password.getAttribute('type'), 'text');
  t.is(await show.getAttribute('aria-pressed'), 'true');
  t.is(await password.inputValue(), 'pw', 'the same text, shown');
  await screenshot(page, 'login-password-shown');
  // keyboard: Tab from the field reaches the button; Space and Enter flip it
  await password.focus();
  await page.keyboard.press('Tab');
  t.true(await show.evaluate((b) => b === document.activeElement));
  await page.keyboard.press('Space');
  t.is(await password.getAttribute('type'), 'password');
  await page.keyboard.press('Enter');
  t.is(await password.getAttribute('type'), 'text');
  t.is(await show.getAttribute('aria-pressed'), 'true');
  // the form still signs in (the field goes back to a password field as it is sent)
  await page.fill('input[name=username]', 'pia');
  await Promise.all([page.waitForURL(/\/hub\/home$/), page.click('button[type=submit]')]);
  t.deepEqual(errors, []);

  // the first-admin set-up form: both of its password fields
  const setup = await newPage(browser);
  await setup.page.goto(`${fresh.url}/hub/setup`);
  const fields = setup.page.locator('#setup-form input[name^=password]');
  const buttons = setup.page.getByRole('button', { name: 'Show password' });
  t.is(await buttons.count(), 2);
  await buttons.nth(1).click();
  t.deepEqual(await fields.evaluateAll((is) => is.map((i) => (i as HTMLInputElement).type)), ['password', 'text']);
  await screenshot(setup.page, 'setup-password-shown');
  t.deepEqual(setup.errors, []);
  await setup.context.close();
  await context.close();
});

test('comforts: the login page warns when served over plain HTTP to another machine, not on this machine', async (t) => {
  const { context, page, errors } = await newPage(browser);
  await page.goto(`http://hub.test:${hub.port}/hub/login`);
  t.is(new URL(page.url()).hostname, 'hub.test');
  const warning = page.locator('#insecure-login-warning');
  await warning.waitFor({ state: 'visible' });
  t.regex((await warning.textContent()) ?? '', /unsecured HTTP connection.*HTTPS/);
  await screenshot(page, 'login-insecure-warning');
  for (const local of [`${hub.url}/hub/login`, `http://localhost:${hub.port}/hub/login`]) {
    await page.goto(local);
    // the page's script has run (it wires the theme choice at the same moment it decides on the warning)
    await page.locator('#theme-choice').waitFor({ state: 'visible' });
    t.false(await warning.isVisible(), local);
    t.is(await warning.count(), 1, 'the warning is there, hidden');
  }
  t.deepEqual(errors, []);
  await context.close();
});

test('comforts: the Services menu lists only the services the visitor may use', async (t) => {
  const ann = await newPage(browser);
  await login(ann.page, hub.url, 'ann', 'pw');
  await ann.page.click('#services-menu summary');
  const listed = await ann.page.$$eval('#services-menu a', (as) => as.map((a) => [a.textContent, a.getAttribute('href')]));
  t.deepEqual(listed, [['notes', '/services/notes/']], 'access:services!service=notes: notes, not ledger');
  await ann.context.close();
  const bea = await newPage(browser);
  await login(bea.page, hub.url, 'bea', 'pw');
  t.is(await bea.page.locator('#services-menu').count(), 0, 'no service to use: no menu');
  await bea.context.close();
  const boss = await newPage(browser);
  await login(boss.page, hub.url, 'boss', 'pw');
  t.deepEqual(await boss.page.$$eval('#services-menu a', (as) => as.map((a) => a.textContent)), ['notes', 'ledger'], 'an admin may use both');
  await boss.context.close();
});

/** Creates a named server of `user` (a start that stays pending) and stops it: it stays listed, stopped, with Delete. */
async function stoppedNamedServer(page: Page, name: string): Promise<string> {
  await page.goto(`${hub.url}/hub/home`);
  await page.fill('#create-server input[name=server]', name);
  await page.selectOption('#create-server select[name=profile]', 'waits');
  await Promise.all([page.waitForURL(new RegExp(`/hub/spawn-pending/[^/]+/${name}$`)), page.click('#create-server button')]);
  await Promise.all([page.waitForURL(/\/hub\/home$/), page.click('#spawn-running button[data-action=stop]')]);
  const row = `tr[data-server="${name}"]`;
  await page.locator(`${row} button[data-action=delete]`).waitFor();
  return row;
}

test('comforts: deleting a named server asks first; cancel keeps it, confirm deletes it; without script a page asks', async (t) => {
  const { context, page, errors } = await newPage(browser);
  await login(page, hub.url, 'cid', 'pw');
  const row = await stoppedNamedServer(page, 'scratch');
  const dialog = page.getByRole('dialog', { name: 'Delete server' });
  await page.click(`${row} button[data-action=delete]`);
  await dialog.waitFor();
  t.regex((await dialog.textContent()) ?? '', /Delete server “scratch”\?/);
  t.true(await dialog.getByRole('button', { name: 'Cancel' }).evaluate((b) => b === document.activeElement), 'Cancel has the focus');
  t.deepEqual(await lowContrast(page, 'dialog'), []);
  await screenshot(page, 'delete-confirm');
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  await dialog.waitFor({ state: 'detached' });
  t.is(await page.locator(row).count(), 1, 'cancel keeps it');
  // Escape cancels too
  await page.click(`${row} button[data-action=delete]`);
  await dialog.waitFor();
  await page.keyboard.press('Escape');
  await dialog.waitFor({ state: 'detached' });
  await page.reload();
  t.is(await page.locator(row).count(), 1, 'still there after a reload');
  await page.click(`${row} button[data-action=delete]`);
  await dialog.getByRole('button', { name: 'Delete' }).click();
  // the form is sent: the answer is home again, without the server
  await page.locator(row).waitFor({ state: 'detached' });
  await page.locator('#named-servers').waitFor();
  t.is(new URL(page.url()).pathname, '/hub/home');
  t.is(await page.locator(row).count(), 0, 'confirmed: deleted');

  // without script: Delete answers a page that asks; Cancel goes home with the server kept, Delete there deletes
  const spare = await stoppedNamedServer(page, 'spare');
  const noScript = await browser.newContext({ javaScriptEnabled: false, viewport: { width: 1100, height: 760 } });
  noScript.setDefaultTimeout(30_000);
  const plain = await noScript.newPage();
  await login(plain, hub.url, 'cid', 'pw');
  await Promise.all([plain.waitForURL(/\/hub\/delete\/cid\/spare$/), plain.click(`${spare} button[data-action=delete]`)]);
  t.regex((await plain.textContent('#confirm-delete')) ?? '', /Delete server spare\?/);
  await screenshot(plain, 'delete-confirm-page');
  await Promise.all([plain.waitForURL(/\/hub\/home$/), plain.click('a[data-action=cancel]')]);
  t.is(await plain.locator(spare).count(), 1, 'cancel keeps it');
  await plain.click(`${spare} button[data-action=delete]`);
  await Promise.all([plain.waitForURL(/\/hub\/home$/), plain.click('button[data-action=confirm]')]);
  t.is(await plain.locator(spare).count(), 0, 'confirmed on the page: deleted');
  await noScript.close();
  t.deepEqual(errors, []);
  await context.close();
});
