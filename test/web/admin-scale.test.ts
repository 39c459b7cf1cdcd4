// The admin page stays usable with 200,000 users: it opens on the first page, jumps to the last one, sorts by
// name both ways and searches, in a real browser, each answer showing the right names and count.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { startHub, waitFor } from '../harness.js';
import { launchBrowser, login, newPage, screenshot } from './browser.js';

const ADMIN_TOKEN = randomToken();
const PASSWORD = 'admin-scale-password';
const USERS = 200_000;
const nameOf = (i: number) => `u${String(i).padStart(7, '0')}`;

test('admin page at 200,000 users: first page, last page, sorted both ways, searched', async (t) => {
  const hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN_TOKEN]: 'boss' }, authenticator_class: 'dummy' },
      DummyAuthenticator: { password: PASSWORD },
      Authenticator: { admin_users: ['boss'] },
    },
  });
  const browser = await launchBrowser();
  try {
    const api = apiClient(hub.url);
    for (let i = 1; i <= USERS; i += 5000) {
      const usernames = Array.from({ length: 5000 }, (_, k) => nameOf(i + k));
      const r = await api('POST', '/users', { token: ADMIN_TOKEN, body: { usernames } });
      if (r.status !== 201) throw new Error(`bulk create at ${usernames[0]}: ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`);
    }
    const { page, errors } = await newPage(browser);
    await login(page, hub.url, 'boss', PASSWORD);
    const usernames = () => page.locator('#user-table tbody.user .username').allTextContents();
    const pageInfo = () => page.locator('#user-page-info').textContent();
    const showing = async (query: string, names: string[], info: string) => {
      await page.goto(`${hub.url}/hub/admin${query}`);
      await waitFor(`the admin page at ${query}`, async () => ((await usernames()).join() === names.join() && (await pageInfo()) === info ? true : undefined), 10_000);
    };

    await showing('', ['boss', ...Array.from({ length: 49 }, (_, k) => nameOf(k + 1))], `1–50 of ${USERS + 1}`);
    await screenshot(page, 'admin-200k-users');
    await showing(`?offset=${USERS - 49}`, Array.from({ length: 50 }, (_, k) => nameOf(USERS - 49 + k)), `${USERS - 48}–${USERS + 1} of ${USERS + 1}`);
    await showing('?sort=-name', Array.from({ length: 50 }, (_, k) => nameOf(USERS - k)), `1–50 of ${USERS + 1}`);
    await showing(`?sort=name&offset=${USERS / 2}`, Array.from({ length: 50 }, (_, k) => nameOf(USERS / 2 + k)), `${USERS / 2 + 1}–${USERS / 2 + 50} of ${USERS + 1}`);
    await showing('?q=U019998', Array.from({ length: 10 }, (_, k) => nameOf(199_980 + k)), '1–10 of 10');
    // typing a search in the box narrows the list as a person would see it
    await page.fill('#user-search', 'u0123');
    await waitFor('the typed search', async () => ((await pageInfo()) === '1–50 of 1000' ? true : undefined), 10_000);
    t.is((await usernames())[0], nameOf(123_000));
    t.deepEqual(errors, []);
  } finally {
    await browser.close();
    await hub.stop();
  }
});
