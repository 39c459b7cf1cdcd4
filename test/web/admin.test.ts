// The admin page in a real browser (Debian's chromium through playwright-core), on one hub with 10,000
// users: search, sort and page; start, open and stop another user's servers (named ones too) and stop
// them all; add users, rename, make admin, delete; manage a group; names that need escaping everywhere;
// a person without the admin-ui scope is refused. Screenshots go to test-output/screenshots/.
import test from 'ava';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { startHub, waitFor, type HubUnderTest } from '../harness.js';
import { launchBrowser, login, newPage, screenshot, type Browser, type Page } from './browser.js';

const ADMIN_TOKEN = randomToken();
const PASSWORD = 'admin-page-password';
const ODD = ["o'brien", 'a(b)', '<img src=x>', 'émile'];
const USERS = 10_000;

let hub: HubUnderTest;
let api: ApiCall;
let browser: Browser;
let page: Page;
let pageErrors: string[];

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN_TOKEN]: 'boss' }, authenticator_class: 'dummy', allow_named_servers: true },
      // a profile to show in the users' list (Spawner.profiles validates the choice at spawn)
      Spawner: { profiles: [{ name: 'gpu-large', display_name: 'GPU <b>large</b>' }, { name: 'small', display_name: 'Small', default: true }] },
      DummyAuthenticator: { password: PASSWORD },
      Authenticator: { admin_users: ['boss'] },
    },
  });
  api = apiClient(hub.url);
  // 10,000 users through the API's bulk create: ten requests of 1,000 (each well within Hub.rpc_timeout on a busy machine)
  const names = [...ODD, ...Array.from({ length: USERS - ODD.length - 1 }, (_, i) => `user${String(i).padStart(5, '0')}`)];
  for (let i = 0; i < names.length; i += 1000) {
    const r = await api('POST', '/users', { token: ADMIN_TOKEN, body: { usernames: names.slice(i, i + 1000) } });
    if (r.status !== 201) throw new Error(`bulk create: ${r.status} ${JSON.stringify(r.body)}`);
  }
  browser = await launchBrowser();
  ({ page, errors: pageErrors } = await newPage(browser));
  await login(page, hub.url, 'boss', PASSWORD);
});
test.after.always(async () => {
  await browser?.close();
  await hub?.stop();
});

const rowOf = (name: string) => page.locator('tbody.user').filter({ has: page.locator('.username', { hasText: new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`) }) });
const usernames = () => page.locator('#user-table tbody.user .username').allTextContents();
const pageInfo = () => page.locator('#user-page-info').textContent();

async function searchFor(text: string): Promise<void> {
  await page.fill('#user-search', text);
  await waitFor(`the search for ${text}`, async () => {
    const names = await usernames();
    return names.length && names.every((n) => n.toLowerCase().includes(text.toLowerCase())) ? true : undefined;
  }, 10_000);
}

test.serial('admin: the page lists 10,000 users a page at a time; search and paging answer fast', async (t) => {
  await page.goto(`${hub.url}/hub/admin`);
  await page.waitForSelector('#user-table tbody.user');
  t.is((await usernames()).length, 50);
  t.is(await pageInfo(), `1–50 of ${USERS}`);
  await screenshot(page, 'admin-users');

  let started = Date.now();
  await page.click('#user-next');
  await waitFor('page 2', async () => ((await pageInfo()) === `51–100 of ${USERS}` ? true : undefined));
  const pageMs = Date.now() - started;
  t.true(new URL(page.url()).searchParams.get('offset') === '50', 'the page is in the URL');
  await page.selectOption('#page-size', '200');
  await waitFor('200 a page', async () => ((await usernames()).length === 200 ? true : undefined));

  started = Date.now();
  await searchFor('user0998');
  const searchMs = Date.now() - started;
  t.deepEqual(await usernames(), Array.from({ length: 10 }, (_, i) => `user0998${i}`));
  t.is(await pageInfo(), '1–10 of 10');
  // case-insensitive, any part of the name, and a search with no match says so
  await searchFor('USER0998');
  t.is((await usernames()).length, 10);
  await page.fill('#user-search', 'nobody-has-this-name');
  await page.waitForSelector('text=No user\'s name contains');
  t.log(`next page ${pageMs} ms, search ${searchMs} ms (typing delay 200 ms included)`);
  // generous bounds for a shared 2-core machine; the table holds one page (asserted above)
  t.true(pageMs < 5000 && searchMs < 5000, `page ${pageMs} ms, search ${searchMs} ms`);
  // what the page asks of the API: a sorted, searched page deep into 10,000 users (median of 9)
  const times: number[] = [];
  for (let i = 0; i < 9; i++) {
    const t0 = performance.now();
    const r = await api('GET', `/users?name_filter=user0&sort=-name&offset=${4000 + i * 50}&limit=50`, { token: ADMIN_TOKEN, headers: { accept: 'application/hub-pagination+json' } });
    times.push(performance.now() - t0);
    t.is(r.body.items.length, 50);
  }
  const median = times.sort((a, b) => a - b)[4];
  t.log(`API: searched, sorted page at offset 4,000+ of 10,000 users: median ${median.toFixed(1)} ms`);
  t.true(median < 1000, `${median} ms`);
  // a reload shows the same search
  await searchFor('user0998');
  await page.reload();
  await page.waitForSelector('#user-table tbody.user');
  t.is(await page.inputValue('#user-search'), 'user0998');
  t.is((await usernames()).length, 10);
});

test.serial('admin: sort by name both ways and by last activity', async (t) => {
  await page.goto(`${hub.url}/hub/admin?q=user0000`);
  await page.waitForSelector('#user-table tbody.user');
  const sortBy = async (label: string, expect: (names: string[]) => boolean) => {
    await page.click(`th button[data-sort=${label}]`);
    await waitFor(`sorted by ${label}`, async () => (expect(await usernames()) ? true : undefined));
  };
  const asc = Array.from({ length: 10 }, (_, i) => `user0000${i}`);
  await sortBy('name', (n) => n.join() === asc.join());
  t.is(new URL(page.url()).searchParams.get('sort'), 'name');
  await sortBy('name', (n) => n.join() === [...asc].reverse().join());
  t.is(new URL(page.url()).searchParams.get('sort'), '-name');
  // the most recently active first
  t.is((await api('POST', '/users/user00004/activity', { token: ADMIN_TOKEN, body: { last_activity: new Date().toISOString() } })).status, 200);
  await waitFor('the activity to be recorded', async () => ((await api('GET', '/users/user00004', { token: ADMIN_TOKEN })).body.last_activity ? true : undefined));
  await sortBy('last_activity', (n) => n[0] === 'user00004');
  t.is(new URL(page.url()).searchParams.get('sort'), '-last_activity');
});

test.serial('admin: names that need escaping are shown as typed and their buttons work', async (t) => {
  await page.goto(`${hub.url}/hub/admin`);
  for (const name of ODD) {
    await searchFor(name);
    t.is(await rowOf(name).count(), 1, name);
  }
  // nothing typed became markup
  await searchFor('<img');
  t.is(await page.locator('main img').count(), 0);
  t.is(await rowOf('<img src=x>').locator('.username').textContent(), '<img src=x>');

  // start another user's server: a(b)
  await searchFor('a(b)');
  const row = rowOf('a(b)');
  await row.locator('button[data-action=start]').first().click();
  await waitFor('a(b) running', async () => ((await row.locator('.state').first().textContent()) === 'running' ? true : undefined), 30_000);
  t.is(await row.locator('a[data-action=open]').getAttribute('href'), '/user/a%28b%29/');
  // the Open link reaches a(b)'s server (its own OAuth sends a browser without a cookie to the hub's login)
  const open = await fetch(`${hub.url}/user/a%28b%29/`, { headers: { accept: 'text/html' }, redirect: 'manual' });
  await screenshot(page, 'admin-server-running');
  await row.locator('button[data-action=stop]').first().click();
  await waitFor('a(b) stopped', async () => ((await row.locator('.state').first().textContent()) === 'stopped' ? true : undefined), 30_000);
  t.is((await api('GET', '/users/a(b)', { token: ADMIN_TOKEN })).body.server, null);

  // a named server of o'brien, from the edit dialog
  await searchFor("o'brien");
  await rowOf("o'brien").locator('button[data-action=edit]').click();
  await page.fill('dialog input[name=server]', 'lab');
  await page.click('dialog button[data-action=start-named]');
  const named = rowOf("o'brien").locator('tr.server-row[data-server=lab]');
  await waitFor('o\'brien/lab running', async () => ((await named.locator('.state').textContent().catch(() => '')) === 'running' ? true : undefined), 30_000);
  t.is(await named.locator('a[data-action=open]').getAttribute('href'), '/user/o%27brien/lab/');
  await named.locator('button[data-action=stop]').click();
  // a stopped named server stays listed (include_stopped_servers) until it is deleted
  await waitFor('o\'brien/lab stopped', async () => ((await named.locator('.state').textContent()) === 'stopped' ? true : undefined), 30_000);
  t.falsy((await api('GET', "/users/o'brien", { token: ADMIN_TOKEN })).body.servers?.lab);
  t.is((await api('GET', "/users/o'brien?include_stopped_servers", { token: ADMIN_TOKEN })).body.servers?.lab?.stopped, true);
  await named.locator('button[data-action=delete-server]').click();
  await page.click('dialog button[data-action=confirm]');
  await waitFor('o\'brien/lab deleted', async () => ((await named.count()) === 0 ? true : undefined), 30_000);
  t.falsy((await api('GET', "/users/o'brien?include_stopped_servers=1", { token: ADMIN_TOKEN })).body.servers?.lab);
  t.is(open.status, 302, 'the server answers at the Open link');
  t.regex(open.headers.get('location') ?? '', /\/hub\/api\/oauth2\/authorize\?/);
});

test.serial('admin: stop all stops every running server', async (t) => {
  // one of them with a profile among its options: the page shows it (as text)
  for (const [u, body] of [['user00001', { user_options: { profile: 'gpu-large' } }], ['émile', {}]] as const) {
    t.true([201, 202].includes((await api('POST', `/users/${encodeURIComponent(u)}/server`, { token: ADMIN_TOKEN, body })).status));
  }
  await page.goto(`${hub.url}/hub/admin?active=1`);
  await waitFor('two active users', async () => ((await usernames()).length === 2 ? true : undefined), 30_000).catch(async (e) => { throw new Error(`${e.message}: ${(await usernames()).join()} / ${await page.locator('#admin-status').textContent()} / ${JSON.stringify((await api('GET', '/users?state=active', { token: ADMIN_TOKEN })).body)}`); });
  await page.goto(`${hub.url}/hub/admin?limit=25`);
  await waitFor('the running servers', async () => ((await page.locator('.state.running').count()) === 2 ? true : undefined), 30_000);
  await screenshot(page, 'admin-overview');
  t.is((await rowOf('user00001').locator('.profile').textContent())?.trim(), 'gpu-large');
  await page.goto(`${hub.url}/hub/admin?active=1`);
  await waitFor('two active users again', async () => ((await usernames()).length === 2 ? true : undefined), 30_000);
  await page.click('#stop-all');
  await page.click('dialog button[data-action=confirm]');
  await page.waitForSelector('#admin-status.ok >> text=Stopping 2 servers');
  let active: string[] = [];
  await waitFor('no active users', async () => {
    active = (await api('GET', '/users?state=active', { token: ADMIN_TOKEN })).body.map((u: { name: string }) => u.name);
    return active.length === 0 ? true : undefined;
  }, 60_000).catch((e) => { throw new Error(`${e.message}; still active: ${active.join(', ')}`); });
  t.deepEqual(active, []);
});

test.serial('admin: add several users, rename one, make one admin, delete one', async (t) => {
  await page.goto(`${hub.url}/hub/admin`);
  await page.click('#add-users');
  await page.fill('dialog textarea[name=usernames]', 'newbie\nnewbie-two\n\nnewbie');
  await page.click('dialog button[data-action=add]');
  await page.waitForSelector('#admin-status.ok >> text=Added 2 users');
  await searchFor('newbie');
  t.deepEqual(await usernames(), ['newbie', 'newbie-two']);

  await rowOf('newbie').locator('button[data-action=edit]').click();
  await page.check('dialog input[name=admin]');
  await page.click('dialog button[data-action=save]');
  await page.waitForSelector('#admin-status.ok >> text=Saved newbie (admin)');
  await waitFor('the admin badge', async () => ((await rowOf('newbie').locator('.badge').count()) === 1 ? true : undefined));
  t.true((await api('GET', '/users/newbie', { token: ADMIN_TOKEN })).body.admin);

  await rowOf('newbie-two').locator('button[data-action=edit]').click();
  await page.fill('dialog input[name=name]', 'newbie-renamed');
  await page.click('dialog button[data-action=save]');
  await page.waitForSelector('#admin-status.ok >> text=Saved newbie-renamed');
  await searchFor('newbie-re');
  t.deepEqual(await usernames(), ['newbie-renamed']);
  t.is((await api('GET', '/users/newbie-two', { token: ADMIN_TOKEN })).status, 404);

  // a rename onto an existing name is refused in the dialog, which stays open
  await rowOf('newbie-renamed').locator('button[data-action=edit]').click();
  await page.fill('dialog input[name=name]', 'newbie');
  await page.click('dialog button[data-action=save]');
  await page.waitForSelector('dialog .dialog-error >> text=already exists');
  await page.click('dialog button[data-action=delete-user]');
  await page.click('dialog >> nth=-1 >> button[data-action=confirm]');
  await page.waitForSelector('#admin-status.ok >> text=Deleted newbie-renamed');
  t.is((await api('GET', '/users/newbie-renamed', { token: ADMIN_TOKEN })).status, 404);
});

test.serial('admin: create a group, add and remove members, edit its properties', async (t) => {
  const group = "<b>o'team (a&b)";
  await page.goto(`${hub.url}/hub/admin`);
  await page.click('[data-view=groups]');
  await page.fill('#new-group', group);
  await page.click('#create-group button[type=submit]');
  const card = page.locator('section.group').filter({ has: page.locator('h3', { hasText: group }) });
  await card.waitFor();
  t.is(await page.locator('main b').count(), 0, 'the group name is text');
  await card.locator('input[name=member]').fill("o'brien, émile");
  await card.locator('button[data-action=add-member]').click();
  await waitFor('two members', async () => ((await card.locator('ul.members li[data-member]').count()) === 2 ? true : undefined));
  await card.getByRole('button', { name: `Remove émile from ${group}` }).click();
  await waitFor('one member', async () => ((await card.locator('ul.members li[data-member]').allTextContents()).map((s) => s.replace(/\s*×$/, '').trim()).join() === "o'brien" ? true : undefined));
  await card.locator('details.properties summary').click();
  await card.locator('textarea[name=properties]').fill('{"course": "x<y", "seats": 3}');
  await card.locator('button[data-action=save-properties]').click();
  await page.waitForSelector('#admin-status.ok >> text=Saved the properties');
  const g = await api('GET', `/groups/${encodeURIComponent(group)}`, { token: ADMIN_TOKEN });
  t.deepEqual(g.body.users, ["o'brien"]);
  t.deepEqual(g.body.properties, { course: 'x<y', seats: 3 });
  // invalid JSON is refused in the page, nothing is sent
  await card.locator('textarea[name=properties]').fill('{not json');
  await card.locator('button[data-action=save-properties]').click();
  await page.waitForSelector('#admin-status.error >> text=not valid JSON');
  await screenshot(page, 'admin-groups');
  // the member's row on the users tab shows the group
  await page.click('[data-view=users]');
  await searchFor("o'brien");
  t.is(await rowOf("o'brien").locator('td.groups').textContent(), group);
  // no script error, and no refused request but the one provoked (the rename onto an existing name)
  t.deepEqual(pageErrors, [`400 PATCH ${hub.url}/hub/api/users/newbie-renamed`], 'no other error on the page');
});

test.serial('admin: a person without admin-ui gets a 403 page, and no admin link', async (t) => {
  const { context, page: other } = await newPage(browser);
  try {
    await login(other, hub.url, 'user00002', PASSWORD);
    const r = await other.goto(`${hub.url}/hub/admin`);
    t.is(r?.status(), 403);
    t.regex(await other.locator('body').innerText(), /admin/i);
    await other.goto(`${hub.url}/hub/home`);
    t.is(await other.locator('a[href="/hub/admin"]').count(), 0);
    await other.goto(`${hub.url}/hub/admin`);
    await screenshot(other, 'admin-refused');
  } finally {
    await context.close();
  }
});
