// The seed's internal OAuth flow, step by step, with a scripted browser: a real single-user server behind
// the gateway, the whoami service (a child process of this test, as an externally managed service), the
// confirmation page's three cases, the callbacks' 403s, authorization checked on every request, logout.
import test from 'ava';
import type { ChildProcess } from 'node:child_process';
import { freePort, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { Browser, hiddenField, paramsOf, pathOf, startWhoami, stopChild, WHOAMI } from './browser.js';

let hub: HubUnderTest;
let api: ApiCall;
let whoami: ChildProcess & { output: () => string };
const ADMIN = randomToken();
const WHOAMI_TOKEN = randomToken();
const PW = 'correct horse';

test.before(async () => {
  const whoamiPort = await freePort();
  const managedPort = await freePort();
  hub = await startHub({
    config: {
      Hub: {
        authenticator_class: 'dummy',
        allow_named_servers: true,
        api_tokens: { [ADMIN]: 'boss' },
        services: [
          { name: 'whoami', url: `http://127.0.0.1:${whoamiPort}`, api_token: WHOAMI_TOKEN },
          // hub-managed: the supervisor starts it with the HUB_* environment and a generated token
          { name: 'managed-whoami', url: `http://127.0.0.1:${managedPort}`, command: [process.execPath, WHOAMI], oauth_no_confirm: true },
        ],
        load_roles: [{ name: 'whoami-users', scopes: ['access:services!service=whoami'], groups: ['whoamiers'] }],
      },
      DummyAuthenticator: { password: PW },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { environment: { HUB_ACTIVITY_INTERVAL: '3600' } },
    },
  });
  api = apiClient(hub.url);
  // a short client cache, so a scope taken away shows within the test (the default is 300 s)
  whoami = await startWhoami({ hubPort: hub.port, port: whoamiPort, token: WHOAMI_TOKEN, cacheMaxAge: 1 });
  for (const name of ['alice', 'bob', 'erin']) t201(await api('POST', `/users/${name}`, { token: ADMIN }), name);
  t201(await api('POST', '/users/alice/server', { token: ADMIN }), 'alice server');
  t201(await api('POST', '/groups/whoamiers', { token: ADMIN }), 'group');
});
test.after.always(async () => {
  await stopChild(whoami);
  await hub?.stop();
});

function t201(r: { status: number; body: unknown }, what: string): void {
  if (r.status !== 201) throw new Error(`${what}: ${r.status} ${JSON.stringify(r.body)}`);
}

/** A browser logged in to the hub as `user` (the login form, as a person would). */
async function loggedIn(user: string): Promise<Browser> {
  const b = new Browser(hub.url);
  const r = await b.login(user, PW);
  if (r.status !== 302) throw new Error(`login ${user}: ${r.status}`);
  return b;
}

/** Opens `url` and follows the OAuth dance for a browser that is already logged in to the hub and needs no consent. */
async function openThroughOAuth(b: Browser, url: string): Promise<string[]> {
  const hops = await b.follow(url);
  return hops.map((h) => `${h.status} ${h.location ?? ''}`);
}

const oauthTokensOf = async (user: string) =>
  ((await api('GET', `/users/${user}/tokens`, { token: ADMIN })).body.api_tokens as any[]).filter((tk) => tk.oauth_client !== 'Hub');

test.serial('oauth flow: steps 1-7 against a real single-user server, as the seed numbers them', async (t) => {
  const b = new Browser(hub.url);
  // 1. no credentials: the server sends the browser to the hub's authorize endpoint with its client id
  const first = await b.get('/user/alice/tree?x=1');
  t.is(first.status, 302);
  t.is(pathOf(first.location), '/hub/api/oauth2/authorize');
  const q = paramsOf(first.location);
  t.is(q.get('client_id'), 'hub-user-alice');
  t.is(q.get('redirect_uri'), '/user/alice/oauth_callback');
  t.is(q.get('response_type'), 'code');
  t.is(q.get('code_challenge_method'), 'S256');
  t.truthy(q.get('code_challenge'));
  const state = q.get('state')!;
  t.true(state.length >= 16);
  const stateCookie = b.cookie('hub-user-alice-oauth-state');
  t.truthy(stateCookie);
  t.is(stateCookie!.path, '/user/alice/');
  t.true(stateCookie!.httpOnly);
  t.false(stateCookie!.value.includes(state), 'the state cookie is sealed');

  // 2. not logged in to the hub: its login, then back to authorize
  const toLogin = await b.get(first.location!);
  t.is(toLogin.status, 302);
  t.is(pathOf(toLogin.location), '/hub/login');
  const next = paramsOf(toLogin.location).get('next')!;
  t.is(next, first.location);
  const login = await b.login('alice', PW, next);
  t.is(login.status, 302);
  t.is(login.location, next);
  t.is(b.cookie('hub-hub-login')?.path, '/hub/');
  const session = b.cookie('hub-session-id')!.value;

  // 3–4. her own server: accepted without a confirmation page; the code goes to the callback with the state
  const granted = await b.get(login.location!);
  t.is(granted.status, 302);
  t.is(pathOf(granted.location), '/user/alice/oauth_callback');
  t.is(paramsOf(granted.location).get('state'), state);
  t.regex(paramsOf(granted.location).get('code') ?? '', /^[A-Za-z0-9_-]{20,}$/);

  // 5–6. the server exchanges the code, keeps the token in an encrypted cookie on its path, and returns to the original URL
  const back = await b.get(granted.location!);
  t.is(back.status, 302);
  t.is(back.location, '/user/alice/tree?x=1');
  const tokenCookie = b.cookie('hub-user-alice');
  t.truthy(tokenCookie);
  t.is(tokenCookie!.path, '/user/alice/');
  t.true(tokenCookie!.httpOnly);
  t.is(b.cookie('hub-user-alice-oauth-state'), undefined, 'the state cookie is cleared');
  const minted = await oauthTokensOf('alice');
  t.is(minted.length, 1);
  t.like(minted[0], { oauth_client: 'hub-user-alice', session_id: session, note: 'Server at /user/alice/' });
  // sealed: base64url of nonce + box, whose bytes hold no JSON (the plain payload would read {"t":"<token>"}); a
  // short token id like "a3" turns up in random base64 text by chance, so the check is on the decoded bytes
  t.regex(tokenCookie!.value, /^[A-Za-z0-9_-]+$/, 'the cookie is sealed (base64url only)');
  const sealedBytes = Buffer.from(tokenCookie!.value, 'base64url').toString('latin1');
  t.false(sealedBytes.includes('{"') || sealedBytes.includes('":"'), 'the cookie is sealed');
  const lifetime = (Date.parse(minted[0].expires_at) - Date.now()) / 1000;
  t.true(Math.abs(lifetime - 14 * 86_400) < 120, `token lifetime = Hub.cookie_max_age_days (got ${lifetime} s)`);
  t.true(minted[0].scopes.includes('access:servers!server=alice/'));
  t.true(minted[0].scopes.includes('read:users:name!user=alice'));

  // 7. later requests: the cookie's token is checked with the hub and lets her in
  const page = await b.get('/user/alice/tree?x=1');
  t.is(page.status, 200);
  t.regex(page.body, /Hello, alice/);
  t.is((await b.get('/user/alice/api/status', { accept: 'application/json' })).status, 200);
});

test.serial('oauth flow: a named server is a client of its own, with its own cookie', async (t) => {
  t201(await api('POST', '/users/alice/servers/lab', { token: ADMIN }), 'named server');
  const b = await loggedIn('alice');
  const hops = await b.follow('/user/alice/lab/');
  t.deepEqual(hops.map((h) => h.status), [302, 302, 302, 200]);
  t.is(paramsOf(hops[0].location).get('client_id'), 'hub-user-alice-lab');
  t.is(paramsOf(hops[0].location).get('redirect_uri'), '/user/alice/lab/oauth_callback');
  t.is(b.cookie('hub-user-alice-lab')?.path, '/user/alice/lab/');
  t.is(b.cookie('hub-user-alice'), undefined, 'the default server\'s cookie is another one');
  t.is((await api('DELETE', '/users/alice/servers/lab', { token: ADMIN })).status, 204);
});

test.serial('oauth flow: a service (steps 8–9): access scope needed, confirmation, checked again on each request', async (t) => {
  const b = await loggedIn('erin');
  // without access:services!service=whoami: the hub refuses at authorize
  const denied = await b.follow('/services/whoami/');
  t.deepEqual(denied.map((h) => h.status), [302, 403]);
  t.regex(denied[1].body, /do not have permission to access Hub service whoami/);

  t.is((await api('POST', '/groups/whoamiers/users', { token: ADMIN, body: { users: ['erin'] } })).status, 200);
  const hops = await b.follow('/services/whoami/some/page');
  t.deepEqual(hops.map((h) => h.status), [302, 200], 'confirmation page: the service has no oauth_no_confirm');
  t.regex(hops[1].body, /Hub service whoami/);
  // the consent page's own framing policy replaces the hub's (one header, not both)
  t.is(hops[1].headers.get('content-security-policy'), "frame-ancestors 'none'");
  t.is(hops[1].headers.get('x-content-type-options'), 'nosniff');
  const consentUrl = hops[0].location!;
  const answer = await b.post(consentUrl, { _xsrf: hiddenField(hops[1].body, '_xsrf'), scopes: [] });
  t.is(answer.status, 302);
  t.is(pathOf(answer.location), '/services/whoami/oauth_callback');
  const back = await b.get(answer.location!);
  t.is(back.status, 302);
  t.is(back.location, '/services/whoami/some/page');
  t.is(b.cookie('service-whoami')?.path, '/services/whoami/');
  const me = await b.get('/services/whoami/');
  t.is(me.status, 200);
  const model = JSON.parse(me.body);
  t.is(model.name, 'erin');
  t.true(model.scopes.includes('access:services!service=whoami'));
  // 9. no shared hub-services cookie anywhere
  t.is([...b.jar.values()].filter((c) => c.name === 'hub-services').length, 0);

  // 8. the scope is taken away later without revoking the token: refused once the client's cache has expired
  t.is((await api('DELETE', '/groups/whoamiers/users', { token: ADMIN, body: { users: ['erin'] } })).status, 200);
  const refused = await waitFor('whoami to refuse erin', async () => {
    const r = await b.get('/services/whoami/');
    return r.status === 403 ? r : undefined;
  }, 10_000, 250);
  t.regex(refused.body, /not allowed/);
});

test.serial('oauth flow: no confirmation for a service with oauth_no_confirm (the hub-managed whoami)', async (t) => {
  const b = await loggedIn('boss');
  await waitFor('the managed service to answer', async () => ((await b.get('/services/managed-whoami/')).status === 302 ? true : undefined), 15_000, 200);
  const hops = await b.follow('/services/managed-whoami/');
  t.deepEqual(hops.map((h) => h.status), [302, 302, 302, 200]);
  t.is(pathOf(hops[1].location), '/services/managed-whoami/oauth_callback');
  t.is(JSON.parse(hops[3].body).name, 'boss');
});

test.serial('oauth flow: confirmation page for an admin opening another user\'s server; XSRF checked', async (t) => {
  const b = await loggedIn('boss');
  const hops = await b.follow('/user/alice/');
  t.deepEqual(hops.map((h) => h.status), [302, 200]);
  t.regex(hops[1].body, /Server at \/user\/alice\//);
  const xsrf = hiddenField(hops[1].body, '_xsrf');
  t.is((await b.post(hops[0].location!, {})).status, 403, 'no _xsrf');
  t.is((await b.post(hops[0].location!, { _xsrf: `${xsrf}x` })).status, 403, 'forged _xsrf');
  const granted = await b.post(hops[0].location!, { _xsrf: xsrf });
  t.is(granted.status, 302);
  const rest = await b.follow(granted.location!);
  t.deepEqual(rest.map((h) => h.status), [302, 200]);
  t.regex(rest[1].body, /Hello, boss/);
});

test.serial('oauth flow: authenticated but not authorized is 403 (bob and alice\'s server)', async (t) => {
  const b = await loggedIn('bob');
  const hops = await b.follow('/user/alice/');
  t.deepEqual(hops.map((h) => h.status), [302, 403]);
  t.regex(hops[1].body, /do not have permission to access Server at \/user\/alice\//);
  const bobToken = (await api('POST', '/users/bob/tokens', { token: ADMIN, body: {} })).body.token;
  const r = await fetch(`${hub.url}/user/alice/`, { headers: { authorization: `token ${bobToken}`, accept: 'text/html' } });
  t.is(r.status, 403);
});

for (const [kind, prefix] of [['server', '/user/alice/'], ['service', '/services/whoami/']] as const) {
  test.serial(`oauth flow: a ${kind}'s callback answers 403 to a missing code and a missing or mismatched state`, async (t) => {
    const b = await loggedIn('alice');
    const start = await b.get(prefix);
    t.is(start.status, 302);
    const state = paramsOf(start.location).get('state')!;
    const callback = `${prefix}oauth_callback`;
    t.is((await b.get(`${callback}?state=${state}`)).status, 403, 'no code');
    t.is((await b.get(`${callback}?code=abc&state=`)).status, 403, 'empty state');
    t.is((await b.get(`${callback}?code=abc`)).status, 403, 'no state');
    t.is((await b.get(`${callback}?code=abc&state=${state}x`)).status, 403, 'another state');
    const stranger = new Browser(hub.url);
    t.is((await stranger.get(`${callback}?code=abc&state=${state}`)).status, 403, 'no state cookie');
  });
}

test.serial('oauth flow: logout revokes the server cookie\'s token (seed logout steps 1–3)', async (t) => {
  const b = await loggedIn('alice');
  t.deepEqual((await b.follow('/user/alice/')).map((h) => h.status), [302, 302, 302, 200]);
  const session = b.cookie('hub-session-id')!.value;
  t.true((await oauthTokensOf('alice')).some((tk) => tk.session_id === session));
  const out = await b.get('/hub/logout');
  t.is(out.status, 302, 'back to the sign-in page, as the established hub 6.1');
  t.is(pathOf(out.location), '/hub/login');
  t.is(b.cookie('hub-hub-login'), undefined, '1. the login cookie is gone');
  t.is(b.cookie('hub-session-id'), undefined, '3. so is the session id');
  t.false((await oauthTokensOf('alice')).some((tk) => tk.session_id === session), '2. the session\'s tokens are revoked');
  t.truthy(b.cookie('hub-user-alice'), 'the server cookie itself cannot be cleared by the hub');
  // the next request asks the hub (no cached answer for this session), which refuses: cookie dropped, dance again
  const next = await b.get('/user/alice/');
  t.is(next.status, 302);
  t.is(pathOf(next.location), '/hub/api/oauth2/authorize');
  t.true(next.setCookies.some((c) => c.startsWith('hub-user-alice=;')));
  t.is(b.cookie('hub-user-alice'), undefined);
  t.is(pathOf((await b.get(next.location!)).location), '/hub/login', 'and the hub wants a login again');
});

test.serial('oauth flow: any GET or HEAD of a page goes to login whatever its Accept; the API paths and other methods get 403; /api stays open', async (t) => {
  for (const method of ['GET', 'HEAD']) {
    for (const accept of ['*/*', 'application/json', '']) {
      const r = await fetch(`${hub.url}/user/alice/`, { method, redirect: 'manual', headers: accept ? { accept } : {} });
      t.is(r.status, 302, `${method} with Accept ${accept || '(none)'}`);
      t.is(pathOf(r.headers.get('location')), '/hub/api/oauth2/authorize');
    }
  }
  const api = await fetch(`${hub.url}/user/alice/api/status`, { redirect: 'manual', headers: { accept: 'text/html' } });
  t.is(api.status, 403, "the server's API paths are never redirected");
  const post = await new Browser(hub.url).post('/user/alice/', {});
  t.is(post.status, 403, 'non-GET without credentials');
  t.is((await fetch(`${hub.url}/user/alice/api`)).status, 200);
});

test.serial('oauth flow: no redirect loop: after 3 fruitless trips to the hub, an error page', async (t) => {
  const b = await loggedIn('alice');
  b.refused.add('hub-user-alice'); // a browser that keeps every cookie but the token cookie
  const hops = await b.follow('/user/alice/', 20);
  t.deepEqual(hops.map((h) => h.status), [302, 302, 302, 302, 302, 302, 302, 302, 302, 500]);
  t.is(hops.filter((h) => pathOf(h.location) === '/hub/api/oauth2/authorize').length, 3);
  t.regex(hops.at(-1)!.body, /cookies/);
  // the counter is cleared with the error, so once the browser keeps the cookie a reload works
  b.refused.clear();
  t.deepEqual((await b.follow('/user/alice/')).map((h) => h.status), [302, 302, 302, 200]);
});

test.serial('oauth flow: stopping a server removes its client and the tokens it issued', async (t) => {
  const b = await loggedIn('alice');
  t.is((await b.follow('/user/alice/')).at(-1)!.status, 200);
  t.true((await oauthTokensOf('alice')).some((tk) => tk.oauth_client === 'hub-user-alice'));
  t.is((await api('DELETE', '/users/alice/server', { token: ADMIN })).status, 204);
  t.false((await oauthTokensOf('alice')).some((tk) => tk.oauth_client === 'hub-user-alice'));
  const r = await b.get('/hub/api/oauth2/authorize?client_id=hub-user-alice&response_type=code&redirect_uri=%2Fuser%2Falice%2Foauth_callback');
  t.is(r.status, 400);
  t.is(r.location, null);
});
