// The `oauth` backend (services/auth/authenticators/oauth.ts) as an OpenID Connect client against a real
// provider (panva's oidc-provider in a child process: test/fixtures/oidc-provider.mjs), and as a plain OAuth 2
// client against test/fixtures/idp.mjs (no id_token, user info only). The backend is driven directly, as the
// auth actor drives it: loginUrl → the provider's own login form and consent page → completeLogin with the
// callback's code; refresh; logoutUrl. Serial: the provider's keys, failures and features are shared state.
import { createHash, randomBytes } from 'node:crypto';
import test from 'ava';
import { decodeProtectedHeader } from 'jose';
import { pino } from 'pino';
import type { Authenticator, CallContext, Verdict } from '../../services/auth/authenticators/contract.js';
import { createOAuthenticator } from '../../services/auth/authenticators/oauth.js';
import { validateConfig } from '../../shared/config.js';
import { freePort, sleep } from '../harness.js';
import { Browser, field, startIdp, submitProviderForm, type Idp } from './helpers.js';
import { providerLogin, startOidcProvider, type OidcProvider } from './oidc-provider.js';

const SECRET = `oidc-secret-${randomBytes(12).toString('hex')}`;
const REDIRECT = 'http://127.0.0.1:8000/hub/oauth_callback';
const AFTER_LOGOUT = 'http://127.0.0.1:8000/hub/login';
const SCOPE = ['openid', 'profile', 'email', 'groups', 'offline_access'];
const USERS = {
  alice: { password: 'alice-pw-1', groups: ['staff', 'hub-admins'], roles: ['physics'], email: 'alice@example.org' },
  bob: { password: 'bob-pw-2', groups: ['students'], roles: ['chemistry', 'physics'] },
  carol: { password: 'carol-pw-3' },
};
const client = (client_id: string, token_endpoint_auth_method: string, secret = true) => ({
  client_id, ...(secret ? { client_secret: SECRET } : {}), token_endpoint_auth_method,
  redirect_uris: [REDIRECT], post_logout_redirect_uris: [AFTER_LOGOUT],
  grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'],
});

// Every log line of every backend, to show that no code, token or secret ever reaches one.
const lines: string[] = [];
const log = pino({ level: 'debug' }, { write: (s: string) => void lines.push(s) });
/** Codes and tokens seen in the tests: none may be in a log line or a reason. */
const secrets = new Set<string>([SECRET]);
const reasons: string[] = [];

let op: OidcProvider;

test.before(async () => {
  op = await startOidcProvider({
    users: USERS,
    clients: [
      client('hub', 'client_secret_post'), client('hub-basic', 'client_secret_basic'), client('hub-public', 'none', false),
      { ...client('hub-jwt-userinfo', 'client_secret_post'), userinfo_signed_response_alg: 'RS256' },
    ],
  });
});
test.after.always(async () => {
  await op?.stop();
});

const ctx = (ms = 5000): CallContext => ({ deadline: Date.now() + ms, log });

function backend(O: Record<string, unknown> = {}, sections: Record<string, Record<string, unknown>> = {}): Authenticator {
  const config = validateConfig({
    ...sections,
    OAuthenticator: { oidc_issuer: op.issuer, client_id: 'hub', client_secret: SECRET, scope: SCOPE, ...O },
  });
  return createOAuthenticator({ config, log, passwordOf: async () => undefined });
}

function pkce() {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

function remember(v: Verdict | null): Verdict | null {
  if (v && !v.ok) reasons.push(v.reason);
  if (v?.ok) for (const k of ['access_token', 'refresh_token', 'id_token'] as const) {
    const t = v.identity.authState?.[k];
    if (typeof t === 'string') secrets.add(t);
  }
  return v;
}

/** Up to the callback: the code the provider gave (checked against state), and what the login started with. */
async function authorize(a: Authenticator, user: string, password: string, browser?: Browser) {
  const state = randomBytes(16).toString('base64url');
  const nonce = randomBytes(16).toString('base64url');
  const { verifier, challenge } = pkce();
  const url = await a.loginUrl!({ state, codeChallenge: challenge, nonce, redirectUri: REDIRECT });
  const back = await providerLogin(url, REDIRECT, user, password, browser);
  const cb = new URL(back.location!);
  if (cb.searchParams.get('state') !== state) throw new Error('state did not come back');
  const code = cb.searchParams.get('code');
  if (!code) throw new Error(`no code: ${cb.search}`);
  secrets.add(code);
  return { url: new URL(url), code, nonce, verifier };
}

async function login(a: Authenticator, user: string, password = USERS[user as keyof typeof USERS].password, change: { nonce?: string; verifier?: string; ms?: number } = {}): Promise<Verdict> {
  const r = await authorize(a, user, password);
  return remember(await a.completeLogin!({ code: r.code, codeVerifier: change.verifier ?? r.verifier, nonce: change.nonce ?? r.nonce, redirectUri: REDIRECT }, ctx(change.ms)))!;
}

function identity(t: { fail(m: string): void }, v: Verdict) {
  if (!v.ok) {
    t.fail(`refused: ${v.reason}`);
    throw new Error(v.reason);
  }
  return v.identity;
}

test.serial('oidc: the issuer alone is enough: discovery, code, verified id_token, user info → name, groups, email, auth state', async (t) => {
  const a = backend();
  t.deepEqual(a.configProblems!(), []);
  t.deepEqual(a.offer, { form: false, button: 'OAuth 2.0' });
  t.false(a.admitsAllByDefault);
  t.false(a.hasAllowRule);
  const before = await op.stats();
  const r = await authorize(a, 'alice', USERS.alice.password);
  // the authorization request
  t.is(r.url.origin + r.url.pathname, `${op.issuer}/auth`);
  const q = r.url.searchParams;
  t.is(q.get('response_type'), 'code');
  t.is(q.get('client_id'), 'hub');
  t.is(q.get('redirect_uri'), REDIRECT);
  t.is(q.get('scope'), SCOPE.join(' '));
  t.is(q.get('nonce'), r.nonce);
  t.is(q.get('code_challenge_method'), 'S256');
  t.is(q.get('code_challenge'), createHash('sha256').update(r.verifier).digest('base64url'));
  t.is(q.get('prompt'), 'consent', 'offline_access is asked for with prompt=consent (OIDC Core §11)');
  const v = remember(await a.completeLogin!({ code: r.code, codeVerifier: r.verifier, nonce: r.nonce, redirectUri: REDIRECT }, ctx()))!;
  const id = identity(t, v);
  t.is(id.name, 'alice');
  t.deepEqual(id.groups, ['staff', 'hub-admins']);
  t.is(id.email, 'alice@example.org');
  t.is(id.admin, undefined, 'no admin_groups: no opinion');
  t.is(id.allowed, undefined, 'no allowed_groups: no rule');
  const s = id.authState!;
  for (const k of ['access_token', 'refresh_token', 'id_token']) t.is(typeof s[k], 'string', k);
  t.is(typeof s.expires_at, 'number');
  t.true(Math.abs((s.expires_at as number) - (Date.now() / 1000 + 600)) < 30);
  const tr = s.token_response as Record<string, unknown>;
  t.is(tr.token_type, 'Bearer');
  t.false('access_token' in tr || 'refresh_token' in tr || 'id_token' in tr, 'no token twice');
  const user = s.oauth_user as Record<string, unknown>;
  t.is(user.sub, 'sub-alice');
  t.is(user.iss, op.issuer);
  t.is(user.preferred_username, 'alice');
  // a second login reads neither the discovery document nor the keys again
  t.true(identity(t, await login(a, 'bob')).name === 'bob');
  const after = await op.stats();
  const asked = (p: string) => (after[p] ?? 0) - (before[p] ?? 0);
  t.is(asked('/.well-known/openid-configuration'), 1);
  t.is(asked('/jwks'), 1);
  t.is(asked('/me'), 2);
});

test.serial('oidc: an id_token whose nonce is not the login\'s is refused', async (t) => {
  const v = await login(backend(), 'alice', undefined, { nonce: randomBytes(16).toString('base64url') });
  t.false(v.ok);
  t.is(!v.ok && v.reason, 'id_token: nonce mismatch');
  t.falsy(!v.ok && v.unavailable);
});

test.serial('oidc: an id_token signed by a key the provider does not hold is refused', async (t) => {
  const a = backend();
  t.true((await login(a, 'alice')).ok);
  await op.tamper({ foreignKey: true }); // same kid as the published key, another key
  const v = await login(a, 'alice');
  t.false(v.ok);
  t.is(!v.ok && v.reason, 'id_token: bad signature');
  t.falsy(!v.ok && v.unavailable);
});

test.serial('oidc: an id_token for another audience is refused; several audiences need azp naming the hub', async (t) => {
  const a = backend();
  await op.tamper({ aud: 'another-client' });
  let v = await login(a, 'alice');
  t.is(!v.ok && v.reason, 'id_token: aud check failed');
  await op.tamper({ aud: ['hub', 'another-client'] });
  v = await login(a, 'alice');
  t.is(!v.ok && v.reason, 'id_token: several audiences and no azp');
  await op.tamper({ aud: ['hub', 'another-client'], azp: 'another-client' });
  v = await login(a, 'alice');
  t.is(!v.ok && v.reason, 'id_token: azp check failed');
  await op.tamper({ aud: ['hub', 'another-client'], azp: 'hub' });
  v = await login(a, 'alice');
  t.true(v.ok, !v.ok ? v.reason : '');
});

test.serial('oidc: a wrong PKCE verifier is refused by the provider; a code is good once', async (t) => {
  const a = backend();
  const r = await authorize(a, 'alice', USERS.alice.password);
  const wrong = await a.completeLogin!({ code: r.code, codeVerifier: pkce().verifier, nonce: r.nonce, redirectUri: REDIRECT }, ctx());
  remember(wrong);
  t.false(wrong.ok);
  t.is(!wrong.ok && wrong.reason, 'token endpoint: 400 invalid_grant');
  t.falsy(!wrong.ok && wrong.unavailable);
  const empty = await a.completeLogin!({ code: '', codeVerifier: r.verifier, nonce: r.nonce, redirectUri: REDIRECT }, ctx());
  t.is(!empty.ok && empty.reason, 'no usable code');
  const r2 = await authorize(a, 'bob', USERS.bob.password);
  const once = remember(await a.completeLogin!({ code: r2.code, codeVerifier: r2.verifier, nonce: r2.nonce, redirectUri: REDIRECT }, ctx()))!;
  t.true(once.ok);
  const twice = remember(await a.completeLogin!({ code: r2.code, codeVerifier: r2.verifier, nonce: r2.nonce, redirectUri: REDIRECT }, ctx()))!;
  t.is(!twice.ok && twice.reason, 'token endpoint: 400 invalid_grant');
});

test.serial('oidc: allowed_groups and admin_groups; the provider is authoritative for admin when admin_groups is set', async (t) => {
  const a = backend({ allowed_groups: ['staff', 'teachers'], admin_groups: ['hub-admins'] });
  t.true(a.hasAllowRule);
  const alice = identity(t, await login(a, 'alice'));
  t.true(alice.allowed);
  t.true(alice.admin);
  const bob = identity(t, await login(a, 'bob'));
  t.is(bob.allowed, undefined, 'not in an allowed group: no rule of its own (allowed_users may still admit)');
  t.false(bob.admin);
  t.deepEqual(bob.groups, ['students']);
  const carol = identity(t, await login(a, 'carol'));
  t.deepEqual(carol.groups, [], 'the claim is there, empty');
  t.false(carol.admin);
  const onlyAdmins = identity(t, await login(backend({ admin_groups: ['hub-admins'] }), 'bob'));
  t.false(onlyAdmins.admin);
  t.is(onlyAdmins.allowed, undefined);
});

test.serial('oidc: groups at a nested claim path (auth_state_groups_key realm_access.roles)', async (t) => {
  const a = backend({ scope: ['openid', 'profile', 'roles'], auth_state_groups_key: 'realm_access.roles', allowed_groups: ['chemistry'], admin_groups: ['physics'] });
  const bob = identity(t, await login(a, 'bob'));
  t.deepEqual(bob.groups, ['chemistry', 'physics']);
  t.true(bob.allowed);
  t.true(bob.admin);
  const alice = identity(t, await login(a, 'alice'));
  t.deepEqual(alice.groups, ['physics']);
  t.is(alice.allowed, undefined);
  t.true(alice.admin);
  t.is(alice.authState!.refresh_token, undefined, 'no offline_access: no refresh token');
});

test.serial('oidc: refresh uses the refresh token, takes the rotated one, and reads groups and admin again', async (t) => {
  const a = backend({ admin_groups: ['hub-admins'] });
  await op.setUsers({ bob: { groups: ['students'] } });
  const first = identity(t, await login(a, 'bob'));
  t.false(first.admin);
  await op.setUsers({ bob: { groups: ['students', 'hub-admins'] } });
  const v = remember(await a.refresh!({ name: 'bob', authState: first.authState! }, ctx()));
  const second = identity(t, v!);
  t.is(second.name, 'bob');
  t.true(second.admin, 'a group given at the provider counts at the next refresh');
  t.deepEqual(second.groups, ['students', 'hub-admins']);
  t.not(second.authState!.refresh_token, first.authState!.refresh_token, 'rotated');
  t.not(second.authState!.access_token, first.authState!.access_token);
  t.is(typeof second.authState!.id_token, 'string');
  // and again with the rotated one
  await op.setUsers({ bob: { groups: ['students'] } });
  const third = identity(t, remember(await a.refresh!({ name: 'bob', authState: second.authState! }, ctx()))!);
  t.false(third.admin);
  t.not(third.authState!.refresh_token, second.authState!.refresh_token);
  // two refreshes at once share one use of the refresh token (a second use would be taken for a replay)
  const [x, y] = await Promise.all([a.refresh!({ name: 'bob', authState: third.authState! }, ctx()), a.refresh!({ name: 'bob', authState: third.authState! }, ctx())]);
  const fourth = identity(t, remember(x)!);
  t.is(identity(t, remember(y)!).authState!.refresh_token, fourth.authState!.refresh_token);
  const fifth = identity(t, remember(await a.refresh!({ name: 'bob', authState: fourth.authState! }, ctx()))!);
  t.is(fifth.name, 'bob', 'the grant survived');
  // the id_token a refresh brings is verified like the login's
  await op.tamper({ foreignKey: true });
  const forged = remember(await a.refresh!({ name: 'bob', authState: fifth.authState! }, ctx()));
  t.deepEqual(forged, { ok: false, reason: 'id_token: bad signature' });
});

test.serial('oidc: after the provider revokes the user\'s grants, refresh is refused', async (t) => {
  const a = backend();
  const first = identity(t, await login(a, 'carol'));
  const latest = identity(t, remember(await a.refresh!({ name: 'carol', authState: first.authState! }, ctx()))!);
  t.is(latest.name, 'carol');
  t.true((await op.revoke('carol')) > 0);
  const v = remember(await a.refresh!({ name: 'carol', authState: latest.authState! }, ctx()));
  t.deepEqual(v, { ok: false, reason: 'refresh refused' });
  // without a refresh token, the access token alone: user info must still answer for the same sub
  const again = identity(t, await login(a, 'carol'));
  const { refresh_token: _, ...accessOnly } = again.authState!;
  const stillOk = identity(t, remember(await a.refresh!({ name: 'carol', authState: accessOnly }, ctx()))!);
  t.is(stillOk.authState!.access_token, accessOnly.access_token);
  await op.revoke('carol');
  const gone = remember(await a.refresh!({ name: 'carol', authState: accessOnly }, ctx()));
  t.deepEqual(gone, { ok: false, reason: 'userinfo: 401' });
  const expired = await a.refresh!({ name: 'carol', authState: { ...accessOnly, expires_at: Math.floor(Date.now() / 1000) - 5 } }, ctx());
  t.false(expired!.ok);
  t.falsy(!expired!.ok && expired!.unavailable);
  const nothing = await a.refresh!({ name: 'carol', authState: {} }, ctx());
  t.false(nothing!.ok);
  // no auth state kept at all: nothing to ask (JupyterHub); kept but missing: a fresh login is needed
  t.is(await a.refresh!({ name: 'carol', authState: null }, ctx()), null);
  const kept = backend({}, { Authenticator: { enable_auth_state: true } });
  const missing = await kept.refresh!({ name: 'carol', authState: null }, ctx());
  t.false(missing!.ok);
});

test.serial('oidc: a provider that hangs, fails or answers garbage is unavailable, within the deadline', async (t) => {
  const a = backend();
  const r = await authorize(a, 'alice', USERS.alice.password);
  await op.fail({ path: '/token', mode: 'hang' });
  try {
    const start = Date.now();
    const v = await a.completeLogin!({ code: r.code, codeVerifier: r.verifier, nonce: r.nonce, redirectUri: REDIRECT }, ctx(1000));
    const took = Date.now() - start;
    t.true(!v.ok && v.unavailable === true, JSON.stringify(v));
    t.true(took >= 800 && took <= 1000 + 250, `answered in ${took} ms for a 1000 ms deadline`);
    await op.fail(null);
    const first = identity(t, await login(a, 'alice'));
    await op.fail({ path: '/token', mode: 'hang' });
    const start2 = Date.now();
    const rv = await a.refresh!({ name: 'alice', authState: first.authState! }, ctx(800));
    t.true(!rv!.ok && rv!.unavailable === true, JSON.stringify(rv));
    t.true(Date.now() - start2 <= 800 + 250);
    for (const mode of ['503', '429', 'garbage', 'huge'] as const) {
      await op.fail(null);
      const rr = await authorize(a, 'alice', USERS.alice.password);
      await op.fail({ path: '/token', mode });
      const vv = remember(await a.completeLogin!({ code: rr.code, codeVerifier: rr.verifier, nonce: rr.nonce, redirectUri: REDIRECT }, ctx()));
      t.true(!vv!.ok && vv!.unavailable === true, `${mode}: ${JSON.stringify(vv)}`);
    }
    // user info, and the keys of a backend that has not read them yet
    for (const [path, b] of [['/me', a], ['/jwks', backend()]] as const) {
      await op.fail(null);
      const ru = await authorize(b, 'alice', USERS.alice.password);
      await op.fail({ path, mode: '503' });
      const vu = remember(await b.completeLogin!({ code: ru.code, codeVerifier: ru.verifier, nonce: ru.nonce, redirectUri: REDIRECT }, ctx()));
      t.true(!vu!.ok && vu!.unavailable === true, `${path} 503: ${JSON.stringify(vu)}`);
    }
  } finally {
    await op.fail(null);
  }
  // nothing listening at all
  const down = backend({ oidc_issuer: `http://127.0.0.1:${await freePort()}` });
  t.deepEqual(down.configProblems!(), [], 'a provider down at start is not a configuration problem');
  const start = Date.now();
  const v = await down.completeLogin!({ code: 'some-code', codeVerifier: 'v', nonce: 'n', redirectUri: REDIRECT }, ctx(2000));
  t.true(!v.ok && v.unavailable === true);
  t.true(Date.now() - start < 2000);
  const e = await t.throwsAsync(down.loginUrl!({ state: 's', codeChallenge: 'c', nonce: 'n', redirectUri: REDIRECT }));
  t.is((e as { status?: number }).status, 503);
  // an explicit token_url overrides the discovered one (here: one where nothing listens)
  const overridden = await login(backend({ token_url: `http://127.0.0.1:${await freePort()}/token` }), 'alice');
  t.deepEqual(overridden, { ok: false, reason: 'provider unavailable: token: unreachable', unavailable: true });
});

test.serial('oidc: discovery that fails is tried again at the next login', async (t) => {
  await op.fail({ path: '/.well-known/openid-configuration', mode: '503' });
  const a = backend();
  try {
    t.deepEqual(a.configProblems!(), []);
    await t.throwsAsync(a.loginUrl!({ state: 's', codeChallenge: 'c', nonce: 'n', redirectUri: REDIRECT }));
  } finally {
    await op.fail(null);
  }
  t.true(identity(t, await login(a, 'bob')).name === 'bob');
});

test.serial('oidc: a key rotated at the provider (new kid) is picked up', async (t) => {
  const a = backend();
  const before = identity(t, await login(a, 'alice'));
  const oldKid = decodeProtectedHeader(before.authState!.id_token as string).kid;
  const jwksBefore = (await op.stats())['/jwks'] ?? 0;
  const kid = await op.rotate();
  t.not(kid, oldKid);
  await sleep(1100); // the backend reads a JWKS again for an unknown key once its copy is a second old
  const after = identity(t, await login(a, 'alice'));
  t.is(decodeProtectedHeader(after.authState!.id_token as string).kid, kid);
  t.is(((await op.stats())['/jwks'] ?? 0) - jwksBefore, 1, 'one read of the JWKS for the new key');
  // and refresh verifies the rotated provider's id_token too
  t.true(identity(t, remember(await a.refresh!({ name: 'alice', authState: before.authState! }, ctx()))!).name === 'alice');
});

test.serial('oidc: user info must be about the id_token\'s sub', async (t) => {
  await op.tamper({ userinfoSub: 'sub-mallory' });
  const v = await login(backend(), 'alice');
  t.is(!v.ok && v.reason, 'userinfo: sub differs from the id_token\'s');
});

test.serial('oidc: a provider without user info: the claims come from the id_token', async (t) => {
  await op.features({ userinfo: false, conformIdTokenClaims: false });
  try {
    const a = backend({ admin_groups: ['hub-admins'] });
    const alice = identity(t, await login(a, 'alice'));
    t.is(alice.name, 'alice');
    t.deepEqual(alice.groups, ['staff', 'hub-admins']);
    t.true(alice.admin);
    t.is(alice.email, 'alice@example.org');
    const again = identity(t, remember(await a.refresh!({ name: 'alice', authState: alice.authState! }, ctx()))!);
    t.deepEqual(again.groups, ['staff', 'hub-admins']);
  } finally {
    await op.features({ userinfo: true, conformIdTokenClaims: true });
  }
});

test.serial('oidc: client_secret_basic and a public client (none, PKCE) log in too', async (t) => {
  t.is(identity(t, await login(backend({ client_id: 'hub-basic', token_endpoint_auth_method: 'client_secret_basic' }), 'bob')).name, 'bob');
  t.is(identity(t, await login(backend({ client_id: 'hub-public', client_secret: '', token_endpoint_auth_method: 'none' }), 'bob')).name, 'bob');
  // user info as a signed JWT (application/jwt), checked against the provider's keys
  const signed = identity(t, await login(backend({ client_id: 'hub-jwt-userinfo', admin_groups: ['hub-admins'] }), 'alice'));
  t.is(signed.email, 'alice@example.org');
  t.true(signed.admin);
  const wrongSecret = await login(backend({ client_secret: 'not-the-secret' }), 'bob');
  t.is(!wrongSecret.ok && wrongSecret.reason, 'token endpoint: 401 invalid_client');
});

test.serial('oidc: logoutUrl is the end-session endpoint with id_token_hint, unless logout_redirect_url is set', async (t) => {
  const a = backend();
  const browser = new Browser(); // keeps its session at the provider, to sign out of it
  const r = await authorize(a, 'alice', USERS.alice.password, browser);
  const alice = identity(t, remember(await a.completeLogin!({ code: r.code, codeVerifier: r.verifier, nonce: r.nonce, redirectUri: REDIRECT }, ctx()))!);
  const url = new URL((await a.logoutUrl!({ authState: alice.authState!, postLogoutRedirectUri: AFTER_LOGOUT }))!);
  t.is(url.origin + url.pathname, `${op.issuer}/session/end`);
  t.is(url.searchParams.get('id_token_hint'), alice.authState!.id_token);
  t.is(url.searchParams.get('post_logout_redirect_uri'), AFTER_LOGOUT);
  t.is(url.searchParams.get('client_id'), 'hub');
  // the provider takes it: its sign-out confirmation, then back to the hub
  const page = await browser.get(url.toString());
  t.is(page.status, 200, page.body.slice(0, 200));
  t.regex(page.body, /sign-out/i);
  const confirm = /<form[^>]*id="op.logoutForm"[^>]*action="([^"]+)"/.exec(page.body)?.[1] ?? /action="([^"]+)"/.exec(page.body)?.[1];
  const done = await browser.post(new URL(confirm!, op.issuer).toString(), { xsrf: field(page.body, 'xsrf') ?? '', logout: 'yes' });
  t.is(done.status, 303);
  t.is(done.location, AFTER_LOGOUT);
  t.is(await backend({ logout_redirect_url: 'https://idp.example.org/logout' }).logoutUrl!({ authState: alice.authState!, postLogoutRedirectUri: AFTER_LOGOUT }), 'https://idp.example.org/logout');
});

test.serial('oidc: configuration problems', (t) => {
  const problems = (O: Record<string, unknown>) => createOAuthenticator({ config: validateConfig({ OAuthenticator: O }), log, passwordOf: async () => undefined }).configProblems!();
  t.deepEqual(problems({ oidc_issuer: 'https://idp.example.org/realms/x', client_id: 'hub' }), []);
  t.deepEqual(problems({ authorize_url: 'https://gh.example/a', token_url: 'https://gh.example/t', userdata_url: 'https://gh.example/u', client_id: 'hub' }), []);
  t.true(problems({ oidc_issuer: 'https://idp.example.org' }).some((p) => p.startsWith('OAuthenticator.client_id')));
  t.true(problems({ client_id: 'hub', authorize_url: 'https://gh.example/a' }).some((p) => p.includes('missing: token_url, userdata_url')));
  t.true(problems({ client_id: 'hub', authorize_url: 'ftp://x', token_url: 'https://gh.example/t', userdata_url: 'nope' }).length === 2);
  t.true(problems({ client_id: 'hub', oidc_issuer: 'https://idp.example.org/?x=1' }).some((p) => p.includes('no query')));
  t.true(problems({ client_id: 'hub', oidc_issuer: 'https://idp.example.org', logout_redirect_url: 'javascript:alert(1)' }).some((p) => p.includes('logout_redirect_url')));
});

test.serial('oauth: plain OAuth 2 (no issuer, no id_token) against the user-info-only provider still works', async (t) => {
  let idp: Idp | undefined;
  try {
    idp = await startIdp({
      IDP_USERS: JSON.stringify({ dave: 'dave-pw-4' }), IDP_CLIENT_ID: 'hub-at-idp', IDP_CLIENT_SECRET: SECRET, IDP_REDIRECT_URI: REDIRECT, IDP_TOKEN_TTL: '3600',
    });
    const a = backend({ oidc_issuer: '', authorize_url: `${idp.url}/authorize`, token_url: `${idp.url}/token`, userdata_url: `${idp.url}/userinfo`, client_id: 'hub-at-idp', scope: ['openid', 'profile'] });
    t.deepEqual(a.configProblems!(), []);
    const { verifier, challenge } = pkce();
    const url = new URL(await a.loginUrl!({ state: 'st-1', codeChallenge: challenge, nonce: 'nonce-1', redirectUri: REDIRECT }));
    t.is(url.searchParams.get('nonce'), null, 'no nonce without OpenID Connect');
    t.is(url.searchParams.get('prompt'), null);
    const b = new Browser();
    const form = await b.get(url.toString());
    t.is(form.status, 200);
    t.is(field(form.body, 'state'), 'st-1');
    const back = await submitProviderForm(b, idp, form, 'dave', 'dave-pw-4');
    const code = new URL(back.location!).searchParams.get('code')!;
    secrets.add(code);
    const dave = identity(t, remember(await a.completeLogin!({ code, codeVerifier: verifier, nonce: 'nonce-1', redirectUri: REDIRECT }, ctx()))!);
    t.is(dave.name, 'dave');
    t.is(dave.email, 'dave@idp.test');
    t.is(dave.groups, undefined, 'no groups claim: no opinion on groups');
    t.is(dave.authState!.id_token, undefined);
    t.is((dave.authState!.oauth_user as Record<string, unknown>).preferred_username, 'dave');
    const last = (await idp.stats()).last_token_request!;
    t.true(last.client_secret_in_body);
    t.true(last.has_code_verifier);
    const again = identity(t, remember(await a.refresh!({ name: 'dave', authState: dave.authState! }, ctx()))!);
    t.not(again.authState!.refresh_token, dave.authState!.refresh_token, 'rotated');
    t.is(again.name, 'dave');
    await idp.revoke('dave');
    t.deepEqual(remember(await a.refresh!({ name: 'dave', authState: again.authState! }, ctx())), { ok: false, reason: 'refresh refused' });
    t.is(await a.logoutUrl!({ authState: again.authState!, postLogoutRedirectUri: AFTER_LOGOUT }), undefined);
    for (const k of ['codes', 'access_tokens', 'refresh_tokens'] as const) for (const s of (await idp.issued())[k]) secrets.add(s);
  } finally {
    await idp?.stop();
  }
});

test.serial('oidc: no code, token or secret in any log line or verdict reason', (t) => {
  t.true(lines.length > 10, 'the backends logged');
  t.true(secrets.size > 20);
  const all = lines.join('\n');
  for (const s of secrets) t.false(all.includes(s), 'a secret in the log');
  for (const r of reasons) {
    t.true(r.length < 100, r);
    t.false(/eyJ|[A-Za-z0-9_-]{30,}/.test(r), r);
    for (const s of secrets) t.false(r.includes(s));
  }
});
