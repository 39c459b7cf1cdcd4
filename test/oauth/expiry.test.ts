// The seed's expiry rules 1–5 with shortened lifetimes: the login cookie lives ~3.5 s, OAuth tokens 8 s,
// the single-user server's cache of hub answers 1 s.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import { sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, pathOf } from './browser.js';

const ADMIN = randomToken();
const PW = 'expiring-pw';
const LOGIN_S = 0.00004 * 86_400; // 3.456 s
const TOKEN_S = 8;

const config = (cookieSecret: string, short = true) => ({
  Hub: {
    authenticator_class: 'dummy', api_tokens: { [ADMIN]: 'boss' }, cookie_secret: cookieSecret,
    ...(short ? { cookie_max_age_days: 0.00004, oauth_token_expires_in: TOKEN_S } : {}),
  },
  DummyAuthenticator: { password: PW },
  Authenticator: { admin_users: ['boss'] },
  Spawner: { environment: { HUB_ACTIVITY_INTERVAL: '3600', HUB_CACHE_MAX_AGE: '1' } },
});

let hub: HubUnderTest;

test.after.always(async () => {
  await hub?.stop();
});

const isAuthorizeRedirect = (p: { status: number; location: string | null }) => p.status === 302 && pathOf(p.location) === '/hub/api/oauth2/authorize';

test.serial('oauth expiry: rules 1–4 of the seed', async (t) => {
  hub = await startHub({ config: config(randomBytes(32).toString('hex')) });
  const api = apiClient(hub.url);
  t.is((await api('POST', '/users/uma', { token: ADMIN })).status, 201);
  t.is((await api('POST', '/users/uma/server', { token: ADMIN })).status, 201);
  const b = new Browser(hub.url);
  t.is((await b.login('uma', PW)).status, 302);
  const startedAt = Date.now();
  t.deepEqual((await b.follow('/user/uma/')).map((h) => h.status), [302, 302, 302, 200]);
  const tokenCookie = b.cookie('hub-user-uma')!;
  t.true(tokenCookie.expires - Date.now() <= TOKEN_S * 1000, 'the token cookie lives as long as the token');

  // 4. the hub login expires: the hub wants a login again, but the server still lets her in
  await sleep(Math.max(0, startedAt + LOGIN_S * 1000 + 300 - Date.now()));
  const home = await b.get('/hub/home');
  t.is(home.status, 302);
  t.is(pathOf(home.location), '/hub/login');
  const stillIn = await b.get('/user/uma/');
  t.is(stillIn.status, 200, 'rule 4: access to the single-user server is not itself lost');

  // 2. the token expires while a browser still holds the cookie: after the cache, nobody is identified; the flow restarts
  // from the token's own expiry (its cookie's): the OAuth dance that issued it may take a while on a loaded machine
  await sleep(Math.max(0, tokenCookie.expires + 1200 - Date.now()));
  const kept = new Browser(hub.url);
  kept.setCookie({ ...tokenCookie, expires: Infinity });
  const restarted = await kept.get('/user/uma/');
  t.true(isAuthorizeRedirect(restarted), `rule 2: ${restarted.status} ${restarted.location}`);
  t.true(restarted.setCookies.some((c) => c.startsWith('hub-user-uma=;')), 'the dead cookie is cleared');

  // 3. the cookie expired with the token: the request has no credentials and the flow restarts
  t.is(b.cookie('hub-user-uma'), undefined);
  const fresh = await b.get('/user/uma/');
  t.true(isAuthorizeRedirect(fresh), 'rule 3');
  t.false(fresh.setCookies.some((c) => c.startsWith('hub-user-uma=')));
  t.is(pathOf((await b.get(fresh.location!)).location), '/hub/login', 'and the hub login, expired too, is asked for');

  // 1. a revoked token: once the client's cache (1 s) has expired the hub is asked again and says no
  const again = new Browser(hub.url);
  t.is((await again.login('uma', PW)).status, 302);
  t.is((await again.follow('/user/uma/')).at(-1)!.status, 200);
  const tokens = (await api('GET', '/users/uma/tokens', { token: ADMIN })).body.api_tokens as any[];
  const live = tokens.filter((tk) => tk.oauth_client === 'hub-user-uma');
  t.is(live.length, 1, 'the expired token is gone from the list');
  t.is((await api('DELETE', `/users/uma/tokens/${live[0].id}`, { token: ADMIN })).status, 204);
  await waitFor('the server to notice the revocation', async () => (isAuthorizeRedirect(await again.get('/user/uma/')) ? true : undefined), 5000, 200);
  t.pass('rule 1');
});

test.serial('oauth expiry: rule 5: a new cookie secret ends every hub login (a restart alone does not)', async (t) => {
  await hub?.stop();
  const secret = randomBytes(32).toString('hex');
  hub = await startHub({ config: config(secret, false) });
  const b = new Browser(hub.url);
  t.is((await b.login('uma', PW)).status, 302);
  t.is((await b.get('/hub/home')).status, 200);
  const restart = async (cookieSecret: string) => {
    const { port, natsPort, dataDir } = hub;
    await hub.stop({ keepDataDir: true });
    hub = await startHub({ config: config(cookieSecret, false), reuse: { dataDir, port, natsPort } });
  };
  await restart(secret);
  t.is((await b.get('/hub/home')).status, 200, 'same secret: still logged in');
  await restart(randomBytes(32).toString('hex'));
  const after = await b.get('/hub/home');
  t.is(after.status, 302);
  t.is(pathOf(after.location), '/hub/login');
});
