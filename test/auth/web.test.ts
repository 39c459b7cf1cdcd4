// Browser logins around the authenticator: no open redirect after login, XSRF on forms and on
// cookie-authenticated API writes, logout ending the login for a replayed cookie, and a new
// Hub.cookie_secret ending every login.
import test from 'ava';
import { startHub, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, field, formLogin, whoami } from './helpers.js';

const ADMIN = randomToken();
const SECRET_A = 'a'.repeat(64);
const SECRET_B = 'b'.repeat(64);
const PW = 'alice-password';
const config = (cookieSecret: string) => ({
  Hub: { api_tokens: { [ADMIN]: 'boss' }, cookie_secret: cookieSecret },
  Authenticator: { admin_users: ['boss'] },
});

let hub: HubUnderTest;

test.before(async () => {
  hub = await startHub({ config: config(SECRET_A) });
  const api = apiClient(hub.url);
  if ((await api('POST', '/users/alice', { token: ADMIN })).status !== 201) throw new Error('user alice');
  if ((await api('PUT', '/users/alice/password', { token: ADMIN, body: { password: PW } })).status !== 204) throw new Error('password');
});
test.after.always(async () => {
  await hub?.stop();
});

const EVIL = ['//evil.com', '/\\evil.com', '%2F%2Fevil.com', 'https://evil.com', '/%5Cevil.com', '\\/evil.com', '/%2F/evil.com', ' //evil.com'];
const landsHome = (location: string | null) => location === `${hub.url}/hub/home`;

test.serial('login: `next` outside this hub is never followed, at any step', async (t) => {
  for (const next of EVIL) {
    // the form drops it, a crafted POST is refused it, and a logged-in visit ignores it
    const b = new Browser();
    const form = await b.get(`${hub.url}/hub/login?next=${encodeURIComponent(next)}`);
    t.is(field(form.body, 'next'), '', next);
    const viaForm = await b.post(`${hub.url}/hub/login`, { _xsrf: field(form.body, '_xsrf')!, next: field(form.body, 'next')!, username: 'alice', password: PW });
    t.true(landsHome(viaForm.location), `${next} via the form: ${viaForm.location}`);
    const crafted = new Browser();
    const f2 = await crafted.get(`${hub.url}/hub/login`);
    const viaPost = await crafted.post(`${hub.url}/hub/login?next=${encodeURIComponent(next)}`, { _xsrf: field(f2.body, '_xsrf')!, next, username: 'alice', password: PW });
    t.true(landsHome(viaPost.location), `${next} in a crafted POST: ${viaPost.location}`);
    const loggedIn = await b.get(`${hub.url}/hub/login?next=${encodeURIComponent(next)}`);
    t.true(landsHome(loggedIn.location), `${next} when logged in: ${loggedIn.location}`);
  }
  // a local path is followed
  const ok = await formLogin(new Browser(), hub.url, 'alice', PW, '/hub/token');
  t.is(ok.location, `${hub.url}/hub/token`);
});

test.serial('xsrf: the login form without or with a forged _xsrf is 403', async (t) => {
  const b = new Browser();
  const form = await b.get(`${hub.url}/hub/login`);
  t.truthy(b.cookie(hub.url, '_xsrf'));
  const missing = await b.post(`${hub.url}/hub/login`, { username: 'alice', password: PW });
  t.is(missing.status, 403);
  const forged = await b.post(`${hub.url}/hub/login`, { _xsrf: `${field(form.body, '_xsrf')!.slice(0, -3)}xyz`, username: 'alice', password: PW });
  t.is(forged.status, 403);
  // a value of the attacker's own choosing, cookie and field alike, on a browser that never loaded the form
  const planted = new Browser();
  const fake = 'A'.repeat(32);
  planted.setCookie(hub.url, '_xsrf', fake, '/hub/');
  t.is((await planted.post(`${hub.url}/hub/login`, { _xsrf: 'B'.repeat(32), username: 'alice', password: PW })).status, 403);
  t.is(b.cookie(hub.url, 'hub-hub-login'), undefined);
  t.is(planted.cookie(hub.url, 'hub-hub-login'), undefined);
});

test.serial('xsrf: a cookie-authenticated API write needs X-XSRFToken of this login; token-authenticated ones do not', async (t) => {
  const b = new Browser();
  t.is((await formLogin(b, hub.url, 'alice', PW)).status, 302);
  const tokens = `${hub.url}/hub/api/users/alice/tokens`;
  const json = { accept: 'application/json' };
  t.is((await b.request('POST', tokens, { json: { note: 'x' }, headers: json })).status, 403, 'no X-XSRFToken');
  t.is((await b.request('POST', tokens, { json: { note: 'x' }, headers: { ...json, 'x-xsrftoken': 'forged-value' } })).status, 403, 'forged');
  // another login's token (same user, another session) is not this one's
  const other = new Browser();
  await formLogin(other, hub.url, 'alice', PW);
  const otherXsrf = field((await other.get(`${hub.url}/hub/home`)).body, '_xsrf')!;
  t.is((await b.request('POST', tokens, { json: { note: 'x' }, headers: { ...json, 'x-xsrftoken': otherXsrf } })).status, 403, 'another session\'s');
  const xsrf = field((await b.get(`${hub.url}/hub/home`)).body, '_xsrf')!;
  t.truthy(xsrf);
  const created = await b.request('POST', tokens, { json: { note: 'from the browser' }, headers: { ...json, 'x-xsrftoken': xsrf } });
  t.is(created.status, 201, created.body);
  // reads need no XSRF token; a token-authenticated write needs none either
  t.is((await whoami(b, hub.url)).status, 200);
  const token = JSON.parse(created.body).token;
  t.is((await apiClient(hub.url)('POST', '/users/alice/tokens', { token, body: {} })).status, 201);
});

test.serial('logout: the old login cookie, replayed, no longer works', async (t) => {
  const b = new Browser();
  t.is((await formLogin(b, hub.url, 'alice', PW)).status, 302);
  const saved = b.cookies(hub.url);
  t.is((await whoami(b, hub.url)).status, 200);
  const out = await b.get(`${hub.url}/hub/logout`);
  t.is(out.status, 302, 'back to the sign-in page');
  t.is(out.location, `${hub.url}/hub/login`);
  t.is(b.cookie(hub.url, 'hub-hub-login'), undefined);
  t.is(b.cookie(hub.url, 'hub-session-id'), undefined);
  t.is((await whoami(b, hub.url)).status, 403);
  const replay = new Browser();
  for (const [name, c] of saved) replay.setCookie(hub.url, name, c.value, c.path);
  t.is((await whoami(replay, hub.url)).status, 403);
  const home = await replay.get(`${hub.url}/hub/home`);
  t.is(home.status, 302);
  t.regex(home.location!, /\/hub\/login\?next=/);
});

test.serial('cookie secret: a restart with the same secret keeps logins; a new secret ends them all', async (t) => {
  const b = new Browser();
  t.is((await formLogin(b, hub.url, 'alice', PW)).status, 302);
  const reuse = { dataDir: hub.dataDir, port: hub.port, natsPort: hub.natsPort };

  await hub.stop({ keepDataDir: true });
  hub = await startHub({ reuse, config: config(SECRET_A) });
  t.is((await whoami(b, hub.url)).status, 200, 'same secret: still logged in');

  await hub.stop({ keepDataDir: true });
  hub = await startHub({ reuse, config: config(SECRET_B) });
  t.is((await whoami(b, hub.url)).status, 403, 'new secret: the old cookie means nothing');
  t.is((await b.get(`${hub.url}/hub/home`)).status, 302);
  // the password itself is not tied to the secret
  const again = new Browser();
  t.is((await formLogin(again, hub.url, 'alice', PW)).status, 302);
  t.is((await whoami(again, hub.url)).body.name, 'alice');
});
