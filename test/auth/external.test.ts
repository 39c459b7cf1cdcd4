// The "oauth" authenticator against the identity-provider fixture: the hub's login nested in the
// provider's, every redirect asserted; state and code checks; allow and admin lists; refresh after
// Authenticator.auth_refresh_age (renewal, revocation, provider outage); bounded waits; no secret in logs.
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { freePort, sleep, startHub, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, field, startIdp, whoami, type Idp, type Page } from './helpers.js';

const SECRET = `idp-secret-${randomToken()}`;
const CLIENT_ID = 'hub-at-idp';
const ADMIN = randomToken();
const USERS = { alice: 'alice-pw-1', bob: 'bob-pw-2', carol: 'carol-pw-3', root: 'root-pw-4', mallory: 'mallory-pw-5' };
const TOKEN_TTL = 3; // seconds: logins outlive their first access token only by renewing it

let hub: HubUnderTest;
let idp: Idp;
let callback: string;

test.before(async () => {
  const port = await freePort();
  callback = `http://127.0.0.1:${port}/hub/oauth_callback`;
  idp = await startIdp({
    IDP_USERS: JSON.stringify(USERS), IDP_CLIENT_ID: CLIENT_ID, IDP_CLIENT_SECRET: SECRET, IDP_REDIRECT_URI: callback, IDP_TOKEN_TTL: String(TOKEN_TTL),
  });
  // The provider must know the callback before the hub starts, so the hub's port is chosen here (`reuse` takes it).
  const reuse = { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port, natsPort: await freePort() };
  hub = await startHub({
    reuse,
    config: {
      Hub: { authenticator_class: 'oauth', log_level: 'debug', rpc_timeout: 2, api_tokens: { [ADMIN]: 'boss' } },
      Authenticator: { admin_users: ['boss'], auth_refresh_age: 1 },
      OAuthenticator: {
        authorize_url: `${idp.url}/authorize`, token_url: `${idp.url}/token`, userdata_url: `${idp.url}/userinfo`,
        client_id: CLIENT_ID, client_secret: SECRET, scope: ['openid', 'profile'],
        allowed_users: ['alice', 'bob', 'carol'], admin_users: ['root'],
      },
    },
  });
});
test.after.always(async () => {
  await hub?.stop();
  await idp?.stop();
});

const PROVIDER_FIELDS = ['client_id', 'redirect_uri', 'response_type', 'scope', 'state', 'code_challenge', 'code_challenge_method'];

/** From the hub's /hub/oauth_login to the provider's redirect back (not yet followed). */
async function toProviderRedirect(b: Browser, user: string, password: string, next = ''): Promise<Page> {
  const start = await b.get(`${hub.url}/hub/oauth_login${next ? `?next=${encodeURIComponent(next)}` : ''}`);
  if (start.status !== 302 || !start.location?.startsWith(`${idp.url}/authorize?`)) throw new Error(`oauth_login: ${start.status} ${start.location}`);
  const form = await b.get(start.location);
  if (form.status !== 200) throw new Error(`provider form: ${form.status}`);
  const fields = Object.fromEntries(PROVIDER_FIELDS.map((k) => [k, field(form.body, k) ?? '']).filter(([, v]) => v));
  return b.post(`${idp.url}/authorize`, { ...fields, username: user, password, action: 'login' });
}

/** The whole flow; returns the hub's answer to the callback. */
async function providerLogin(b: Browser, user: string, next = ''): Promise<Page> {
  const back = await toProviderRedirect(b, user, USERS[user as keyof typeof USERS], next);
  if (back.status !== 302 || !back.location) throw new Error(`provider login: ${back.status}`);
  return b.get(back.location);
}

test.serial('external: hub login nested in the provider\'s, step by step', async (t) => {
  const b = new Browser();
  // 1. the hub's login page offers a "Sign in with <login_service>" button to /hub/oauth_login, keeping `next`
  //    (no password form: the provider asks for the password; Authenticator.auto_login would redirect instead)
  const login = await b.get(`${hub.url}/hub/login?next=${encodeURIComponent('/hub/token')}`);
  t.is(login.status, 200);
  const button = /<a [^>]*id="login-with"[^>]*href="([^"]*)"[^>]*>([^<]*)<\/a>/.exec(login.body);
  t.truthy(button, login.body);
  t.is(button![1], `/hub/oauth_login?next=${encodeURIComponent('/hub/token')}`);
  t.is(button![2], 'Sign in with OAuth 2.0', 'OAuthenticator.login_service by default');
  t.false(/name="password"/.test(login.body));
  // 2. /hub/oauth_login: a state cookie, then the provider's authorize URL
  const start = await b.get(`${hub.url}${button![1]}`);
  t.is(start.status, 302);
  const authorize = new URL(start.location!);
  t.is(`${authorize.origin}${authorize.pathname}`, `${idp.url}/authorize`);
  t.is(authorize.searchParams.get('client_id'), CLIENT_ID);
  t.is(authorize.searchParams.get('redirect_uri'), callback);
  t.is(authorize.searchParams.get('response_type'), 'code');
  t.is(authorize.searchParams.get('scope'), 'openid profile');
  t.is(authorize.searchParams.get('code_challenge_method'), 'S256');
  const state = authorize.searchParams.get('state')!;
  t.true(state.length >= 16);
  const stateCookie = String(start.headers['set-cookie']?.find((c) => c.startsWith('hub-oauth-state=')));
  t.regex(stateCookie, /HttpOnly/);
  t.regex(stateCookie, /Path=\/hub\//);
  t.regex(stateCookie, /Max-Age=\d+/);
  t.false(stateCookie.includes(state), 'the state is sealed in the cookie, not readable');
  // 3. the provider's own login form; a wrong password stays at the provider
  const form = await b.get(start.location!);
  t.is(form.status, 200);
  t.is(field(form.body, 'state'), state);
  const fields = Object.fromEntries(PROVIDER_FIELDS.map((k) => [k, field(form.body, k) ?? '']));
  t.is((await b.post(`${idp.url}/authorize`, { ...fields, username: 'alice', password: 'nope', action: 'login' })).status, 401);
  // 4. the provider sends the browser back with code and the same state
  const back = await b.post(`${idp.url}/authorize`, { ...fields, username: 'alice', password: USERS.alice, action: 'login' });
  t.is(back.status, 302);
  const cb = new URL(back.location!);
  t.is(`${cb.origin}${cb.pathname}`, callback);
  t.is(cb.searchParams.get('state'), state);
  t.truthy(cb.searchParams.get('code'));
  // 5. the hub's callback: logged in, state cookie gone, back to `next`
  const done = await b.get(back.location!);
  t.is(done.status, 302, done.body);
  t.is(done.location, `${hub.url}/hub/token`);
  t.truthy(b.cookie(hub.url, 'hub-hub-login'));
  t.truthy(b.cookie(hub.url, 'hub-session-id'));
  t.is(b.cookie(hub.url, 'hub-oauth-state'), undefined);
  // the code was exchanged with the secret in the body, the registered redirect URI and the PKCE verifier
  const last = (await idp.stats()).last_token_request!;
  t.deepEqual(last, { grant_type: 'authorization_code', client_secret_in_body: true, redirect_uri: callback, has_code_verifier: true });
  // 6. logged in: the page and the API with only the cookie
  t.is((await b.get(done.location!)).status, 200);
  const me = await whoami(b, hub.url);
  t.is(me.status, 200);
  t.is(me.body.name, 'alice');
  t.false(me.body.admin);
  // a logged-in browser going to /hub/oauth_login goes straight on
  const again = await b.get(`${hub.url}/hub/oauth_login?next=${encodeURIComponent('/hub/home')}`);
  t.is(again.location, `${hub.url}/hub/home`);
});

test.serial('external: the callback refuses a missing code and a missing or foreign state (403)', async (t) => {
  const b = new Browser();
  const back = await toProviderRedirect(b, 'carol', USERS.carol);
  const cb = new URL(back.location!);
  const code = cb.searchParams.get('code')!;
  const state = cb.searchParams.get('state')!;
  const saved = b.cookie(hub.url, 'hub-oauth-state')!;
  const restore = () => b.setCookie(hub.url, 'hub-oauth-state', saved, '/hub/');
  const attempts: [string, string][] = [
    ['no code', `?state=${state}`],
    ['no state', `?code=${code}`],
    ['another state', `?code=${code}&state=${state.slice(0, -2)}xx`],
    ['empty state', `?code=${code}&state=`],
  ];
  for (const [what, query] of attempts) {
    restore();
    const r = await b.get(`${hub.url}/hub/oauth_callback${query}`);
    t.is(r.status, 403, what);
    t.regex(r.body, /Sign-in failed/, what);
    t.is(b.cookie(hub.url, 'hub-hub-login'), undefined, what);
  }
  // the right code and state, but not this browser's state cookie: another browser (login CSRF)
  const other = new Browser();
  await other.get(`${hub.url}/hub/oauth_login`);
  t.is((await other.get(`${hub.url}/hub/oauth_callback?code=${code}&state=${state}`)).status, 403, 'foreign state cookie');
  t.is((await new Browser().get(`${hub.url}/hub/oauth_callback?code=${code}&state=${state}`)).status, 403, 'no state cookie');
  // refused attempts never reached the provider: the code still logs carol in
  restore();
  const ok = await b.get(back.location!);
  t.is(ok.status, 302);
  t.is((await whoami(b, hub.url)).body.name, 'carol');
  // a replayed callback (same code, state cookie put back): the provider refuses the used code
  restore();
  const replay = await b.get(back.location!);
  t.is(replay.status, 403);
  const thief = new Browser();
  thief.setCookie(hub.url, 'hub-oauth-state', saved, '/hub/');
  const stolen = await thief.get(back.location!);
  t.is(stolen.status, 403, 'a used code cannot log anybody in again');
  t.is(thief.cookie(hub.url, 'hub-hub-login'), undefined);
});

test.serial('external: the provider saying no is a readable page, not a login', async (t) => {
  const b = new Browser();
  const start = await b.get(`${hub.url}/hub/oauth_login`);
  const form = await b.get(start.location!);
  const fields = Object.fromEntries(PROVIDER_FIELDS.map((k) => [k, field(form.body, k) ?? '']));
  const denied = await b.post(`${idp.url}/authorize`, { ...fields, action: 'deny' });
  t.is(denied.status, 302);
  t.is(new URL(denied.location!).searchParams.get('error'), 'access_denied');
  const page = await b.get(denied.location!);
  t.is(page.status, 403);
  t.regex(page.body, /access_denied/);
  t.regex(page.body, /href="\/hub\/oauth_login"/);
  t.is((await whoami(b, hub.url)).status, 403);
  // what the provider says is shown escaped
  const evil = await b.get(`${hub.url}/hub/oauth_callback?error=${encodeURIComponent('<script>x</script>')}`);
  t.is(evil.status, 403);
  t.false(evil.body.includes('<script>x'));
});

test.serial('external: allow and admin lists — a user not allowed is refused and not created; OAuthenticator.admin_users are admins', async (t) => {
  const api = apiClient(hub.url);
  const b = new Browser();
  const refused = await providerLogin(b, 'mallory');
  t.is(refused.status, 403);
  t.true(refused.body.includes('Your account is not allowed to use this hub.'), refused.body);
  t.is(b.cookie(hub.url, 'hub-hub-login'), undefined);
  t.is((await api('GET', '/users/mallory', { token: ADMIN })).status, 404);

  const r = new Browser();
  t.is((await providerLogin(r, 'root')).status, 302);
  const me = await whoami(r, hub.url);
  t.is(me.body.name, 'root');
  t.true(me.body.admin);
  t.true((await api('GET', '/users/root', { token: ADMIN })).body.admin);
});

test.serial('external: refresh — the provider is asked again after auth_refresh_age; an expired token is renewed', async (t) => {
  const b = new Browser();
  t.is((await providerLogin(b, 'bob')).status, 302);
  t.is((await whoami(b, hub.url)).status, 200);
  const before = await idp.stats();
  await sleep(TOKEN_TTL * 1000 + 500); // past the refresh age and the access token's life
  const me = await whoami(b, hub.url);
  t.is(me.status, 200, JSON.stringify(me.body));
  t.is(me.body.name, 'bob');
  const after = await idp.stats();
  t.true(after.userinfo > before.userinfo, 'the provider was asked again');
  t.is(after.last_token_request!.grant_type, 'refresh_token');
  t.true(after.last_token_request!.client_secret_in_body as boolean);
});

test.serial('external: refresh — revoked at the provider, the hub login ends after auth_refresh_age', async (t) => {
  const bob = new Browser();
  const alice = new Browser();
  t.is((await providerLogin(bob, 'bob')).status, 302);
  t.is((await providerLogin(alice, 'alice')).status, 302);
  t.is((await whoami(bob, hub.url)).status, 200);
  t.true((await idp.revoke('bob')) > 0);
  await sleep(1300);
  t.is((await whoami(bob, hub.url)).status, 403);
  const home = await bob.get(`${hub.url}/hub/home`);
  t.is(home.status, 302);
  t.regex(home.location!, /\/hub\/login\?next=/);
  await sleep(1300);
  t.is((await whoami(bob, hub.url)).status, 403, 'the session stays ended');
  t.is((await whoami(alice, hub.url)).status, 200, 'other users are not affected');
  // a new login through the provider works again (the provider issues new tokens)
  const fresh = new Browser();
  t.is((await providerLogin(fresh, 'bob')).status, 302);
  t.is((await whoami(fresh, hub.url)).body.name, 'bob');
});

test.serial('external: a provider that does not answer costs a bounded wait, and an outage is not a logout', async (t) => {
  const b = new Browser();
  t.is((await providerLogin(b, 'alice')).status, 302);
  await idp.hang('token');
  try {
    const c = new Browser();
    const back = await toProviderRedirect(c, 'carol', USERS.carol);
    const started = Date.now();
    const r = await c.get(back.location!);
    t.true(Date.now() - started < 3 * 2000 + 1500, `answered after ${Date.now() - started} ms`);
    // a readable page saying so, and a 503: an outage, not a refusal
    t.is(r.status, 503, `the callback during the outage: ${r.status}`);
    t.regex(r.body, /The sign-in service is not answering right now/);
    t.regex(r.body, /href="\/hub\/oauth_login"/);
    t.is(c.cookie(hub.url, 'hub-hub-login'), undefined);

    // the token endpoint answers again, user info does not: the refresh keeps the provider's new tokens and the
    // login stands on what it said before (its refresh token is spent: losing the new one would end the login)
    await idp.hang('userinfo');
    await sleep(1200);
    const during = await whoami(b, hub.url);
    t.is(during.status, 200, `during the outage: ${during.status}`);
  } finally {
    await idp.hang('');
  }
  const me = await whoami(b, hub.url);
  t.is(me.status, 200, 'the login survives the outage');
  t.is(me.body.name, 'alice');
});

test.serial('external: no code, token, secret or password in any log line; provider tokens sealed at rest', async (t) => {
  const issued = await idp.issued();
  t.true(issued.codes.length > 5 && issued.access_tokens.length > 5);
  const logs = hub.logs();
  t.true(logs.split('\n').some((l) => l.includes('"event":"login"') && l.includes('"via":"oauth"')), 'the logins were logged');
  for (const secret of [...issued.codes, ...issued.access_tokens, ...issued.refresh_tokens, SECRET, ...Object.values(USERS)]) {
    t.false(logs.includes(secret), 'a secret reached the log');
  }
  const store = ['auth.sqlite', 'auth.sqlite-wal'].map((f) => join(hub.dataDir, f)).filter(existsSync).map((f) => readFileSync(f).toString('latin1')).join('');
  t.true(store.length > 0);
  for (const token of [...issued.access_tokens, ...issued.refresh_tokens]) t.false(store.includes(token), 'a provider token stored in the clear');
});

test.serial('external: the password form is not a way in when the hub logs in through a provider', async (t) => {
  const b = new Browser();
  const r = await b.post(`${hub.url}/hub/login`, { username: 'alice', password: USERS.alice });
  t.is(r.status, 403);
  t.is(b.cookie(hub.url, 'hub-hub-login'), undefined);
});
