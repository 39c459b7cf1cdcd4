// The `oauth` authenticator as an OpenID Connect client through a whole hub (the real supervisor, gateway, auth
// actor and spawner) against a real provider (panva's oidc-provider in a child process), configured with the
// issuer alone: what a person and an admin see. The login page's "Sign in with …" button, the provider's own
// login form and consent, admin from admin_groups, hub groups following the provider's (manage_groups, read-only
// in the API), a readable refusal for someone in no allowed group, auth state kept encrypted and shown only with
// admin:auth_state, a server started with the provider's access token in its environment, a login ended by a
// refresh after the provider revoked it, and the logout that ends the provider's session too. One known failure
// (test.serial.failing, see its comment): a user-info outage during a refresh ends the login.
// One hub and one provider for all (serial: the provider's users are shared state); each test signs in its own
// people. Auth state needs HUB_CRYPT_KEY: this file's process gives it to the hubs it starts (startHub passes
// its environment on), and takes it away for the hub that must refuse to start without it.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { decodeJwt } from 'jose';
import { freePort, runHubCommand, waitFor } from '../harness.js';
import { apiClient, randomToken } from '../api/client.js';
import { auditTrail, FIXTURE, serverRecord } from '../spawner/helpers.js';
import { Browser, field, whoami } from './helpers.js';
import { loginButton, signIn, startHubWithOidc, type OidcHub } from './oidc-hub-helpers.js';

process.env.HUB_CRYPT_KEY = randomBytes(32).toString('hex');
delete process.env.JUPYTERHUB_CRYPT_KEY;

const ADMIN = randomToken();
const SCOPE = ['openid', 'profile', 'email', 'groups', 'offline_access'];
const pw = (name: string) => `${name}-pw-${randomBytes(4).toString('hex')}`;
const USERS = {
  alice: { password: pw('alice'), groups: ['staff', 'hub-admins'], email: 'alice@example.org' },
  bob: { password: pw('bob'), groups: ['staff'] },
  carol: { password: pw('carol'), groups: ['staff', 'physics'] },
  dave: { password: pw('dave'), groups: ['staff'] },
  ivy: { password: pw('ivy'), groups: ['staff'] },
  erin: { password: pw('erin'), groups: ['visitors'] },
  gina: { password: pw('gina'), groups: ['staff'] },
  frank: { password: pw('frank'), groups: ['staff'] },
  hank: { password: pw('hank'), groups: ['staff'] },
};
type Name = keyof typeof USERS;
/** The server fixture reports only HUB_* variables: the wrapper hands it OIDC_ACCESS_TOKEN under such a name. */
const SEEN = 'HUB_TEST_SEEN_OIDC_ACCESS_TOKEN';

let o: OidcHub;
let api: ReturnType<typeof apiClient>;

test.before(async () => {
  o = await startHubWithOidc(USERS, {
    Hub: { api_tokens: { [ADMIN]: 'boss' } },
    Authenticator: {
      admin_users: ['boss'], manage_groups: true, enable_auth_state: true,
      auth_state_environment: { OIDC_ACCESS_TOKEN: 'access_token' }, auth_refresh_age: 1,
    },
    OAuthenticator: { scope: SCOPE, allowed_groups: ['staff'], admin_groups: ['hub-admins'], login_service: 'Example SSO' },
    Spawner: { cmd: ['/bin/sh', '-c', `${SEEN}="\${OIDC_ACCESS_TOKEN-unset}" exec "$0" "$@"`, process.execPath, FIXTURE] },
  });
  api = apiClient(o.hub.url);
});
test.after.always(async () => {
  await o?.stop();
});

const signInAs = (b: Browser, name: Name, next = '') => signIn(b, o, name, USERS[name].password, next);
const sorted = (a: unknown) => [...(a as string[])].sort();

/** The provider's user info for an access token: whether the provider itself takes it, and for whom. */
async function providerUserinfo(accessToken: string): Promise<{ status: number; sub?: string }> {
  const discovery = await (await fetch(`${o.op.issuer}/.well-known/openid-configuration`)).json() as { userinfo_endpoint: string };
  const r = await fetch(discovery.userinfo_endpoint, { headers: { authorization: `Bearer ${accessToken}` }, signal: AbortSignal.timeout(5000) });
  return { status: r.status, sub: r.ok ? ((await r.json()) as { sub: string }).sub : undefined };
}

test.serial('oidc hub: the login page\'s button leads through the provider; admin iff in admin_groups; groups are the provider\'s and read-only', async (t) => {
  // the login page: a "Sign in with <login_service>" button that keeps `next`, no password form
  const anon = new Browser();
  const login = await anon.get(`${o.hub.url}/hub/login?next=${encodeURIComponent('/hub/token')}`);
  t.is(login.status, 200);
  t.deepEqual(loginButton(login.body), { href: `/hub/oauth_login?next=${encodeURIComponent('/hub/token')}`, text: 'Sign in with Example SSO' });
  t.false(/name="password"/.test(login.body), 'no password form: the provider asks for the password');

  // alice (staff, hub-admins): the provider's login form and consent, back to `next`, an admin
  const a = new Browser();
  const done = await signInAs(a, 'alice', '/hub/token');
  t.is(done.status, 302, done.body);
  t.is(done.location, `${o.hub.url}/hub/token`);
  t.is((await a.get(done.location!)).status, 200);
  const alice = await whoami(a, o.hub.url);
  t.is(alice.status, 200);
  t.is(alice.body.name, 'alice');
  t.true(alice.body.admin, 'in admin_groups: an admin');
  t.deepEqual(sorted(alice.body.groups), ['hub-admins', 'staff']);

  // bob (staff only): a user, not an admin
  const b = new Browser();
  t.is((await signInAs(b, 'bob')).status, 302);
  const bob = await whoami(b, o.hub.url);
  t.is(bob.body.name, 'bob');
  t.false(bob.body.admin, 'not in admin_groups: not an admin');
  t.deepEqual(bob.body.groups, ['staff']);

  // the admin's view: the same users and groups; the hub's groups were made from the provider's
  const u = await api('GET', '/users/alice', { token: ADMIN });
  t.true(u.body.admin);
  // user_info (the established hub 6): what JupyterLab's user menu shows, from the provider's `name` claim
  t.deepEqual(u.body.user_info, { display_name: 'Test alice' });
  t.deepEqual(sorted(u.body.groups), ['hub-admins', 'staff']);
  t.false((await api('GET', '/users/bob', { token: ADMIN })).body.admin);
  const staff = await api('GET', '/groups/staff', { token: ADMIN });
  t.is(staff.status, 200);
  t.true(['alice', 'bob'].every((n) => staff.body.users.includes(n)), JSON.stringify(staff.body));
  t.deepEqual((await api('GET', '/groups/hub-admins', { token: ADMIN })).body.users, ['alice']);

  // manage_groups: membership is the provider's; the API refuses to change it, and nothing changes
  for (const [method, path, body] of [
    ['POST', '/groups/staff/users', { users: ['boss'] }],
    ['DELETE', '/groups/staff/users', { users: ['bob'] }],
  ] as const) {
    const r = await api(method, path, { token: ADMIN, body });
    t.is(r.status, 400, `${method} ${path}`);
    t.regex(r.body.message, /^Group management via API is disabled/, `${method} ${path}`);
  }
  t.deepEqual(sorted((await api('GET', '/groups/staff', { token: ADMIN })).body.users), sorted(staff.body.users));

  // the provider puts bob in hub-admins and physics: at his next refresh he is an admin in those groups …
  await o.op.setUsers({ bob: { groups: ['staff', 'hub-admins', 'physics'] } });
  const promoted = await waitFor('bob to follow the provider\'s groups', async () => {
    const me = await whoami(b, o.hub.url);
    return me.status === 200 && me.body.admin === true && sorted(me.body.groups).join() === 'hub-admins,physics,staff' ? me : undefined;
  }, 10_000, 200);
  t.is(promoted.body.name, 'bob');
  t.true((await api('GET', '/users/bob', { token: ADMIN })).body.admin);
  t.deepEqual((await api('GET', '/groups/physics', { token: ADMIN })).body.users, ['bob']);
  // … and taken out again, he is neither
  await o.op.setUsers({ bob: { groups: ['staff'] } });
  await waitFor('bob to leave hub-admins and physics', async () => {
    const me = await whoami(b, o.hub.url);
    return me.status === 200 && me.body.admin === false && sorted(me.body.groups).join() === 'staff' ? true : undefined;
  }, 10_000, 200);
  const after = await api('GET', '/users/bob', { token: ADMIN });
  t.false(after.body.admin);
  t.deepEqual(after.body.groups, ['staff']);
  t.deepEqual((await api('GET', '/groups/hub-admins', { token: ADMIN })).body.users, ['alice']);
});

test.serial('oidc hub: someone in no allowed group gets a readable 403 page, and no user is made', async (t) => {
  const e = new Browser();
  const refused = await signInAs(e, 'erin');
  t.is(refused.status, 403);
  t.regex(refused.headers['content-type'] ?? '', /^text\/html/);
  t.regex(refused.body, /Sign-in failed/);
  t.true(refused.body.includes('Your account is not in a group allowed to use this hub.'), refused.body);
  t.regex(refused.body, /href="\/hub\/oauth_login"/, 'a way to try again');
  t.is(e.cookie(o.hub.url, 'hub-hub-login'), undefined);
  t.is((await whoami(e, o.hub.url)).status, 403);
  t.is((await api('GET', '/users/erin', { token: ADMIN })).status, 404, 'no user was made');
  t.is((await api('GET', '/groups/visitors', { token: ADMIN })).status, 404, 'nor a group of someone refused');
  const event = await waitFor('the refusal in the audit trail', async () =>
    (await auditTrail(o.hub.natsUrl)).find((x) => x.type === 'login.failure' && x.what === 'erin'), 5000, 100);
  t.is(event.outcome, 'denied');
  t.regex(event.reason ?? '', /not in an allowed group/);
});

test.serial('oidc hub: auth state — admins read and change it, other tokens do not see the key, and it is encrypted at rest', async (t) => {
  const c = new Browser();
  t.is((await signInAs(c, 'carol')).status, 302);
  const full = await api('GET', '/users/carol', { token: ADMIN });
  t.is(full.status, 200);
  const state = full.body.auth_state;
  t.truthy(state, JSON.stringify(full.body));
  for (const k of ['access_token', 'refresh_token', 'id_token']) t.is(typeof state[k], 'string', k);
  t.is(typeof state.expires_at, 'number');
  t.is(state.oauth_user.preferred_username, 'carol');
  t.is(state.oauth_user.sub, 'sub-carol');
  t.deepEqual(sorted(state.oauth_user.groups), ['physics', 'staff']);
  t.is(decodeJwt(state.id_token).sub, 'sub-carol');
  t.deepEqual(await providerUserinfo(state.access_token), { status: 200, sub: 'sub-carol' }, 'the provider\'s own access token');

  // a token of the same admin without admin:auth_state, and carol's own login: no auth_state key at all
  const made = await api('POST', '/users/boss/tokens', { token: ADMIN, body: { scopes: ['read:users', 'list:users'], note: 'no auth state' } });
  t.is(made.status, 201, JSON.stringify(made.body));
  const reader = made.body.token as string;
  const seen = await api('GET', '/users/carol', { token: reader });
  t.is(seen.status, 200);
  t.is(seen.body.name, 'carol');
  t.deepEqual(sorted(seen.body.groups), ['physics', 'staff']);
  t.false('auth_state' in seen.body, JSON.stringify(seen.body));
  const list = await api('GET', '/users', { token: reader });
  t.is(list.status, 200);
  t.true(list.body.every((x: Record<string, unknown>) => !('auth_state' in x)));
  t.false(JSON.stringify(list.body).includes(state.access_token));
  const own = await whoami(c, o.hub.url);
  t.is(own.body.name, 'carol');
  t.false('auth_state' in own.body, 'not even to its owner');
  t.is((await api('PATCH', '/users/carol', { token: reader, body: { auth_state: { x: 1 } } })).status, 403);

  // an admin's PATCH: the new state is answered, read back, and is what the next GET shows; null clears it
  const changed = { ...state, note: 'set by an admin' };
  const patched = await api('PATCH', '/users/carol', { token: ADMIN, body: { auth_state: changed } });
  t.is(patched.status, 200, JSON.stringify(patched.body));
  t.is(patched.body.auth_state.note, 'set by an admin');
  t.is((await api('GET', '/users/carol', { token: ADMIN })).body.auth_state.note, 'set by an admin');
  t.is((await api('PATCH', '/users/carol', { token: ADMIN, body: { auth_state: 'nope' } })).status, 400);
  const cleared = await api('PATCH', '/users/carol', { token: ADMIN, body: { auth_state: null } });
  t.is(cleared.status, 200);
  t.is(cleared.body.auth_state, null);
  t.is((await api('GET', '/users/carol', { token: ADMIN })).body.auth_state, null);
  const audit = await waitFor('the change in the audit trail', async () =>
    (await auditTrail(o.hub.natsUrl)).find((x) => x.type === 'user.set_auth_state' && x.what === 'carol'), 5000, 100);
  t.is(audit.who, 'user:boss');
  t.false(JSON.stringify(audit).includes(state.access_token));

  // at rest: no provider token in the auth store's files; the key reaches the auth actor alone
  const store = ['auth.sqlite', 'auth.sqlite-wal'].map((f) => join(o.hub.dataDir, f)).filter(existsSync).map((f) => readFileSync(f).toString('latin1')).join('');
  t.true(store.length > 0);
  for (const k of ['access_token', 'refresh_token', 'id_token']) t.false(store.includes(state[k]), `${k} stored in the clear`);
  const children = o.hub.children();
  t.truthy(children.auth);
  for (const [id, pid] of Object.entries(children)) {
    if (pid === null) continue;
    const environ = readFileSync(`/proc/${pid}/environ`, 'latin1');
    t.is(environ.includes(process.env.HUB_CRYPT_KEY!), id === 'auth', `${id}: the key ${id === 'auth' ? 'missing' : 'given'}`);
  }
});

test.serial('oidc hub: enable_auth_state without HUB_CRYPT_KEY (or with a bad one) — the hub refuses to start, naming it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-nokey-'));
  try {
    const file = join(dir, 'hub.json');
    writeFileSync(file, JSON.stringify({
      Hub: { data_dir: join(dir, 'data'), port: await freePort(), nats_port: await freePort(), authenticator_class: 'oauth' },
      Authenticator: { enable_auth_state: true, allow_all: true },
      OAuthenticator: { oidc_issuer: o.op.issuer, client_id: o.clientId, client_secret: 'x' },
    }));
    const none = await runHubCommand(['--config', file], { env: { HUB_CRYPT_KEY: undefined, JUPYTERHUB_CRYPT_KEY: undefined } });
    t.is(none.code, 2, none.stderr);
    t.regex(none.stderr, /Authenticator\.enable_auth_state: HUB_CRYPT_KEY is not set/);
    const bad = await runHubCommand(['--config', file], { env: { HUB_CRYPT_KEY: 'abc123', JUPYTERHUB_CRYPT_KEY: undefined } });
    t.is(bad.code, 2, bad.stderr);
    t.regex(bad.stderr, /HUB_CRYPT_KEY: key 1 of 1 is not 32 bytes written as 64 hex digits/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.serial('oidc hub: the server starts with the provider\'s access token as OIDC_ACCESS_TOKEN (auth_state_environment)', async (t) => {
  const g = new Browser();
  t.is((await signInAs(g, 'gina')).status, 302);
  const home = await g.get(`${o.hub.url}/hub/home`);
  t.is(home.status, 200);
  const started = await g.post(`${o.hub.url}/hub/spawn/gina`, { _xsrf: field(home.body, '_xsrf') ?? '' });
  t.is(started.status, 302, started.body);
  try {
    const rec = await waitFor('gina\'s server to run', async () => {
      const r = await serverRecord(o.hub.natsUrl, 'gina');
      if (r?.state === 'stopped') throw new Error(`the server stopped: ${JSON.stringify(r)}`);
      return r?.state === 'running' ? r : undefined;
    }, 20_000, 100);
    const env = await (await fetch(`${rec.target}${rec.url}env`, { signal: AbortSignal.timeout(5000) })).json() as { hub: Record<string, string>; names: string[] };
    t.true(env.names.includes('OIDC_ACCESS_TOKEN'));
    const token = env.hub[SEEN];
    t.truthy(token);
    t.not(token, 'unset');
    // the very token the auth state holds (nothing of gina's asked for a refresh since the start), and the provider's own
    t.is(token, (await api('GET', '/users/gina', { token: ADMIN })).body.auth_state.access_token);
    t.deepEqual(await providerUserinfo(token), { status: 200, sub: 'sub-gina' });
    t.false(JSON.stringify(await serverRecord(o.hub.natsUrl, 'gina')).includes(token), 'never kept in the server\'s record');
    t.false(o.hub.logs().includes(token), 'nor in a log line');
  } finally {
    const stop = await api('DELETE', '/users/gina/server', { token: ADMIN });
    t.true([202, 204].includes(stop.status), `stop: ${stop.status}`);
  }
});

test.serial('oidc hub: refresh — revoked at the provider, the login ends within auth_refresh_age (login.refresh denied); others go on', async (t) => {
  const d = new Browser();
  const i = new Browser();
  t.is((await signInAs(d, 'dave')).status, 302);
  t.is((await signInAs(i, 'ivy')).status, 302);
  t.is((await whoami(d, o.hub.url)).status, 200);
  t.true((await o.op.revoke('dave')) > 0, 'the provider had grants to revoke');
  await waitFor('dave\'s login to end', async () => ((await whoami(d, o.hub.url)).status === 403 ? true : undefined), 10_000, 200);
  const home = await d.get(`${o.hub.url}/hub/home`);
  t.is(home.status, 302);
  t.regex(home.location!, /\/hub\/login\?next=/);
  const denied = await waitFor('the refused refresh in the audit trail', async () =>
    (await auditTrail(o.hub.natsUrl)).find((x) => x.type === 'login.refresh' && x.what === 'dave' && x.outcome === 'denied'), 5000, 100);
  t.is(denied.who, 'user:dave');
  t.truthy(denied.reason);
  // ivy's login goes on through refreshes (a rotating refresh token, used once each time)
  await waitFor('a refresh of ivy\'s login', async () => {
    if ((await whoami(i, o.hub.url)).status !== 200) throw new Error('ivy\'s login ended');
    return (await auditTrail(o.hub.natsUrl)).find((x) => x.type === 'login.refresh' && x.what === 'ivy' && x.outcome === 'ok');
  }, 10_000, 300);
  const ivy = await whoami(i, o.hub.url);
  t.is(ivy.status, 200);
  t.is(ivy.body.name, 'ivy');
  // dave's hub user stays (only the login ended); signing in again works
  t.is((await api('GET', '/users/dave', { token: ADMIN })).status, 200);
  const again = new Browser();
  t.is((await signInAs(again, 'dave')).status, 302);
  t.is((await whoami(again, o.hub.url)).body.name, 'dave');
});

// KNOWN BUG (reported; `failing` until fixed — then make it test.serial): a refresh whose token request succeeds
// (the provider rotates the refresh token: the old one is used up) but whose user-info request then fails is
// "unavailable", and the new tokens are dropped (services/auth/authenticators/oauth.ts refreshWithToken, and
// login.ts refreshSession keeping the old login state); the login keeps the used-up refresh token, so the next
// refresh is refused (invalid_grant) and the login ends: an outage of the user-info endpoint becomes a logout.
// test/auth/external.test.ts ("an outage is not a logout") shows the same with plain OAuth 2 and a hang.
test.serial('oidc hub: a user-info outage during a refresh is not a logout (the rotated refresh token is kept)', async (t) => {
  const h = new Browser();
  t.is((await signInAs(h, 'hank')).status, 302);
  t.is((await whoami(h, o.hub.url)).status, 200);
  const asked = async () => (await o.op.stats())['/me'] ?? 0;
  const before = await asked();
  await o.op.fail({ path: '/me', mode: '503' });
  let over = '';
  try {
    // requests until a refresh has asked the (failing) user-info endpoint
    const during = await waitFor('a refresh to ask for user info during the outage', async () => {
      const me = await whoami(h, o.hub.url);
      return (await asked()) > before ? me : undefined;
    }, 10_000, 200);
    t.true([200, 503, 504].includes(during.status), `during the outage: ${during.status} (an outage is no logout)`);
  } finally {
    await o.op.fail(null);
    over = new Date().toISOString();
  }
  // the outage is over: the next refresh goes through, and the login stands
  const next = await waitFor('a refresh after the outage', async () => {
    await whoami(h, o.hub.url);
    return (await auditTrail(o.hub.natsUrl)).find((x) => x.type === 'login.refresh' && x.what === 'hank' && (x as { time?: string }).time! > over);
  }, 10_000, 300);
  t.is(next.outcome, 'ok', `the refresh after the outage: ${next.outcome} (${next.reason})`);
  t.is((await whoami(h, o.hub.url)).status, 200, 'the login survives the outage');
});

test.serial('oidc hub: logout goes to the provider\'s end_session endpoint with id_token_hint, and the provider\'s login ends too', async (t) => {
  const f = new Browser();
  t.is((await signInAs(f, 'frank')).status, 302);
  t.is((await whoami(f, o.hub.url)).status, 200);
  const discovery = await (await fetch(`${o.op.issuer}/.well-known/openid-configuration`)).json() as { end_session_endpoint: string };
  const out = await f.get(`${o.hub.url}/hub/logout`);
  t.is(out.status, 302, out.body);
  const to = new URL(out.location!);
  t.is(to.origin, new URL(o.op.issuer).origin);
  t.is(`${to.origin}${to.pathname}`, discovery.end_session_endpoint);
  const hint = decodeJwt(to.searchParams.get('id_token_hint') ?? '');
  t.is(hint.sub, 'sub-frank');
  t.is(hint.iss, o.op.issuer);
  t.is(hint.aud, o.clientId);
  t.is(to.searchParams.get('post_logout_redirect_uri'), o.afterLogout);
  t.is(to.searchParams.get('client_id'), o.clientId);
  // the hub's login is over before the browser reaches the provider
  t.is(f.cookie(o.hub.url, 'hub-hub-login'), undefined);
  t.is((await whoami(f, o.hub.url)).status, 403);

  // the provider asks, ends its own session, and sends the browser back to the hub's login page
  const confirm = await f.get(out.location!);
  t.is(confirm.status, 200);
  const action = /<form id="op\.logoutForm" method="post" action="([^"]+)">/.exec(confirm.body)?.[1];
  t.truthy(action, confirm.body.slice(0, 500));
  const back = await f.post(new URL(action!, o.op.issuer).toString(), { xsrf: field(confirm.body, 'xsrf') ?? '', logout: 'yes' });
  t.true([302, 303].includes(back.status), `${back.status} ${back.body.slice(0, 200)}`);
  t.is(back.location?.split('?')[0], o.afterLogout);
  t.is((await f.get(back.location!)).status, 200);
  // signing in again asks for the password at the provider (its session ended), not only for consent
  const start = await f.get(`${o.hub.url}/hub/oauth_login`);
  let page = await f.get(start.location!);
  while (page.status >= 300 && page.status < 400 && page.location?.startsWith(o.op.issuer)) page = await f.get(page.location);
  t.is(page.status, 200);
  t.regex(page.body, /action="[^"]*\/login"/, 'the provider\'s login form');
  t.regex(page.body, /name="password"/);
});
