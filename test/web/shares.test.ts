// Sharing from home in a real browser: the owner opens Share on her server, shares it with a person and makes a
// link; the person sees it under "Shared with me" and opens it; the link is accepted by a third person; Revoke
// shuts the person out. One hub, one chromium, a context per person.
import test from 'ava';
import { startHub, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { launchBrowser, login, newPage, screenshot, type Browser } from './browser.js';

let hub: HubUnderTest;
let browser: Browser;
const ADMIN = randomToken();

test.before(async () => {
  [hub, browser] = await Promise.all([
    startHub({
      config: {
        Hub: {
          authenticator_class: 'dummy', api_tokens: { [ADMIN]: 'boss' },
          load_roles: [{ name: 'user', scopes: ['self', 'shares!user', 'read:users:name'] }],
        },
        DummyAuthenticator: { password: 'pw' },
        Authenticator: { admin_users: ['boss'] },
        Spawner: { environment: { HUB_ACTIVITY_INTERVAL: '3600', HUB_CACHE_MAX_AGE: '0' } },
      },
    }),
    launchBrowser(),
  ]);
  const api = apiClient(hub.url);
  for (const u of ['alice', 'bob']) if ((await api('POST', `/users/${u}`, { token: ADMIN })).status !== 201) throw new Error(`user ${u}`);
  if ((await api('POST', '/users/alice/server', { token: ADMIN })).status !== 201) throw new Error('alice\'s server');
});
test.after.always(async () => {
  await browser?.close();
  await hub?.stop();
});

test('shares page: share from home, open what is shared with me, accept a link, revoke', async (t) => {
  const owner = await newPage(browser);
  await login(owner.page, hub.url, 'alice', 'pw');
  await Promise.all([owner.page.waitForURL(/\/hub\/share\/alice$/), owner.page.click('#default-server a[data-action=share]')]);
  t.true(await owner.page.isVisible('text=Nobody yet.'));
  await owner.page.fill('#share-form input[name=name]', 'bob');
  await Promise.all([owner.page.waitForURL(/\/hub\/share\/alice$/), owner.page.click('#share-form button[data-action=grant]')]);
  t.true(await owner.page.isVisible('#shares tr[data-grantee="user:bob"]'));
  // a link, shown once
  await owner.page.selectOption('#code-form select[name=expires_in]', '3600');
  await owner.page.click('#code-form button');
  const link = (await owner.page.textContent('#share-link'))!;
  t.regex(link, /\/hub\/accept-share\?code=[A-Za-z0-9_-]{43}$/);
  await screenshot(owner.page, 'share-page');
  // a name that does not exist: the page says so
  await owner.page.fill('#share-form input[name=name]', 'nobody');
  await owner.page.click('#share-form button[data-action=grant]');
  t.regex((await owner.page.textContent('#share-error'))!, /No such user: nobody/);

  // bob: home lists alice's server under "Shared with me", and it opens (his consent for her server asked once)
  const bob = await newPage(browser);
  await login(bob.page, hub.url, 'bob', 'pw');
  t.true(await bob.page.isVisible('#shared-with-me tr[data-shared="alice/"]'));
  await screenshot(bob.page, 'home-shared-with-me');
  await Promise.all([bob.page.waitForURL(/oauth2\/authorize/), bob.page.click('#shared-with-me a[data-action=open]')]);
  await screenshot(bob.page, 'oauth-consent');
  await Promise.all([bob.page.waitForURL(/\/user\/alice\/$/), bob.page.click('button[type=submit]')]);
  t.true(await bob.page.isVisible('text=Hello, bob'));

  // carol comes with the link: sign in, accept, and she is on alice's server's doorstep
  const carol = await newPage(browser);
  await carol.page.goto(link);
  await carol.page.fill('input[name=username]', 'carol');
  await carol.page.fill('input[name=password]', 'pw');
  await Promise.all([carol.page.waitForURL(/\/hub\/accept-share\?code=/), carol.page.click('button[type=submit]')]);
  t.regex((await carol.page.textContent('main'))!, /alice shares the server of alice with you/);
  await screenshot(carol.page, 'accept-share');
  await Promise.all([carol.page.waitForURL(/oauth2\/authorize/), carol.page.click('button[data-action=accept]')]);

  // alice revokes bob: his next request to her server is refused
  await owner.page.goto(`${hub.url}/hub/share/alice`);
  await Promise.all([owner.page.waitForURL(/\/hub\/share\/alice$/), owner.page.click('#shares tr[data-grantee="user:bob"] button[data-action=revoke]')]);
  t.false(await owner.page.isVisible('#shares tr[data-grantee="user:bob"]'));
  t.true(await owner.page.isVisible('#shares tr[data-grantee="user:carol"]'), 'carol accepted the link');
  const again = await bob.page.goto(`${hub.url}/user/alice/`);
  t.is(again?.status(), 403);
  await bob.page.goto(`${hub.url}/hub/home`);
  t.false(await bob.page.isVisible('#shared-with-me'));
  // none of it raised a script error or an unexpected failed load (bob's 403 after the revocation was expected)
  t.deepEqual(owner.errors.filter((e) => !/^4\d\d POST .*\/hub\/share\/alice$/.test(e)), []);
  t.deepEqual(carol.errors, []);
  for (const p of [owner, bob, carol]) await p.context.close();
});
