// The OAuth provider's endpoints as a client sees them (reference §6.2–6.4): authorize checks, the token
// endpoint's answers and errors, single-use codes, PKCE, what a user may grant, and logs without secrets.
import test from 'ava';
import { createHash, randomBytes } from 'node:crypto';
import { startHub, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { Browser, paramsOf } from './browser.js';

let hub: HubUnderTest;
let api: ApiCall;
const ADMIN = randomToken();
const DIRECT = randomToken();
const OTHER = randomToken();
const PW = 'pw-for-tests';
const CB = 'http://127.0.0.1:9/cb';
/** every code and token the tests see: none may appear in a log line */
const secrets: string[] = [ADMIN, DIRECT, OTHER];

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: {
        authenticator_class: 'dummy',
        log_level: 'debug',
        api_tokens: { [ADMIN]: 'boss' },
        services: [
          // plain external OAuth clients: no url, a redirect URI on their own host
          { name: 'direct', api_token: DIRECT, oauth_redirect_uri: CB, oauth_no_confirm: true, oauth_client_allowed_scopes: ['read:users', 'read:users:activity!user'] },
          { name: 'other', api_token: OTHER, oauth_client_id: 'service-other-client', oauth_redirect_uri: 'http://127.0.0.1:9/other', oauth_no_confirm: true },
        ],
        load_roles: [
          { name: 'direct-users', scopes: ['access:services!service=direct', 'access:services!service=other'], users: ['carol'] },
          { name: 'activity-reader', scopes: ['read:users:activity!user'] },
        ],
      },
      DummyAuthenticator: { password: PW },
      Authenticator: { admin_users: ['boss'] },
    },
  });
  api = apiClient(hub.url);
});
test.after.always(async () => {
  await hub?.stop();
});

async function loggedIn(user: string): Promise<Browser> {
  const b = new Browser(hub.url);
  if ((await b.login(user, PW)).status !== 302) throw new Error(`login ${user}`);
  return b;
}

const authorizeUrl = (params: Record<string, string>) =>
  `/hub/api/oauth2/authorize?${new URLSearchParams({ client_id: 'service-direct', response_type: 'code', redirect_uri: CB, state: 'st-1', ...params })}`;

/** A code for carol (or `b`'s user) from the direct client, with extra authorize parameters. */
async function codeFor(b: Browser, params: Record<string, string> = {}): Promise<string> {
  const r = await b.get(authorizeUrl(params));
  if (r.status !== 302 || !r.location?.startsWith(CB)) throw new Error(`authorize: ${r.status} ${r.location} ${r.body.slice(0, 200)}`);
  const code = paramsOf(r.location).get('code')!;
  secrets.push(code);
  return code;
}

async function exchange(form: Record<string, string>, headers: Record<string, string> = {}) {
  const r = await fetch(`${hub.url}/hub/api/oauth2/token`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: new URLSearchParams(form).toString(),
  });
  const body = await r.json();
  if (typeof body.access_token === 'string') secrets.push(body.access_token);
  return { status: r.status, body, headers: r.headers };
}

const redeem = (code: string, extra: Record<string, string> = {}) =>
  exchange({ grant_type: 'authorization_code', code, client_id: 'service-direct', client_secret: DIRECT, redirect_uri: CB, ...extra });

const whoami = async (token: string) => {
  const r = await fetch(`${hub.url}/hub/api/user`, { headers: { authorization: `token ${token}` } });
  return { status: r.status, body: r.status === 200 ? await r.json() : null };
};

test.serial('oauth provider: authorize needs a hub login, a known client and the exact redirect URI', async (t) => {
  const anonymous = new Browser(hub.url);
  const r = await anonymous.get(authorizeUrl({}));
  t.is(r.status, 302);
  t.is(r.location, `/hub/login?next=${encodeURIComponent(authorizeUrl({}))}`);

  const b = await loggedIn('carol');
  for (const [what, url] of [
    ['unknown client', authorizeUrl({ client_id: 'service-nope' })],
    ['no client', '/hub/api/oauth2/authorize?response_type=code'],
    ['another redirect_uri', authorizeUrl({ redirect_uri: 'http://evil.example/cb' })],
    ['a redirect_uri with more on it', authorizeUrl({ redirect_uri: `${CB}/x` })],
  ]) {
    const page = await b.get(url);
    t.is(page.status, 400, what);
    t.is(page.location, null, `${what}: never redirected`);
    t.regex(page.headers.get('content-type') ?? '', /text\/html/);
  }
  const unsupported = await b.get(authorizeUrl({ response_type: 'token' }));
  t.is(unsupported.status, 302);
  t.is(paramsOf(unsupported.location).get('error'), 'unsupported_response_type');
  t.is(paramsOf(unsupported.location).get('state'), 'st-1');

  const dave = await loggedIn('dave');
  const gate = await dave.get(authorizeUrl({}));
  t.is(gate.status, 403, 'the access gate: dave may not use the direct service');
});

test.serial('oauth provider: a code becomes a Bearer token of the user, with the client\'s access scope', async (t) => {
  const b = await loggedIn('carol');
  const granted = await b.get(authorizeUrl({ state: 'opaque/+state=' }));
  t.is(granted.status, 302, 'oauth_no_confirm: no confirmation page');
  t.true(granted.location!.startsWith(`${CB}?`));
  t.is(paramsOf(granted.location).get('state'), 'opaque/+state=', 'state comes back unchanged');
  const code = paramsOf(granted.location).get('code')!;
  secrets.push(code);
  const r = await redeem(code);
  t.is(r.status, 200);
  t.is(r.headers.get('cache-control'), 'no-store');
  t.is(r.headers.get('pragma'), 'no-cache');
  t.is(r.body.token_type, 'Bearer');
  t.is(r.body.expires_in, 14 * 86_400);
  t.deepEqual(Object.keys(r.body).sort(), ['access_token', 'expires_in', 'scope', 'token_type']);
  const scopes = r.body.scope.split(' ');
  for (const s of ['access:services!service=direct', 'read:users:name!user=carol', 'read:users:groups!user=carol']) t.true(scopes.includes(s), s);
  const me = await whoami(r.body.access_token);
  t.is(me.status, 200);
  t.is(me.body.name, 'carol');
  t.true(me.body.scopes.includes('access:services!service=direct'));
  t.is(me.body.session_id, b.cookie('hub-session-id')!.value);
  const listed = (await api('GET', '/users/carol/tokens', { token: ADMIN })).body.api_tokens.find((tk: any) => tk.id === me.body.token_id);
  t.like(listed, { oauth_client: 'service-direct', note: 'Hub service direct' });
});

test.serial('oauth provider: a code is single-use; presenting it again revokes the token it gave', async (t) => {
  const b = await loggedIn('carol');
  const code = await codeFor(b);
  const first = await redeem(code);
  t.is(first.status, 200);
  t.is((await whoami(first.body.access_token)).status, 200);
  const again = await redeem(code);
  t.is(again.status, 400);
  t.is(again.body.error, 'invalid_grant');
  t.is((await whoami(first.body.access_token)).status, 403, 'the first token is revoked');
  t.is((await redeem(code)).body.error, 'invalid_grant', 'and stays refused');
});

test.serial('oauth provider: client authentication in the body or with HTTP Basic, never both', async (t) => {
  const b = await loggedIn('carol');
  const code = await codeFor(b);
  const wrong = await redeem(code, { client_secret: `${DIRECT}x` });
  t.is(wrong.status, 401);
  t.is(wrong.body.error, 'invalid_client');
  t.truthy(wrong.headers.get('www-authenticate'));
  t.is((await redeem(code, { client_secret: '' })).status, 401, 'no secret');
  t.is((await redeem(code, { client_id: 'service-nope' })).status, 401, 'unknown client');
  t.is((await redeem(code, { client_id: 'service-other-client', client_secret: OTHER })).body.error, 'invalid_grant', 'another client\'s code');
  const basic = `Basic ${Buffer.from(`service-direct:${DIRECT}`).toString('base64')}`;
  t.is((await exchange({ grant_type: 'authorization_code', code, client_secret: DIRECT }, { authorization: basic })).body.error, 'invalid_request', 'both ways at once');
  const ok = await exchange({ grant_type: 'authorization_code', code, redirect_uri: CB }, { authorization: basic });
  t.is(ok.status, 200, 'Basic alone; the failed attempts did not use up the code');
});

test.serial('oauth provider: token request errors name the OAuth error', async (t) => {
  const b = await loggedIn('carol');
  const code = await codeFor(b);
  const cases: [string, Record<string, string>, number, string][] = [
    ['redirect_uri differs', { redirect_uri: `${CB}/other` }, 400, 'invalid_request'],
    ['password grant', { grant_type: 'password', username: 'carol', password: PW }, 400, 'unsupported_grant_type'],
    ['a refresh token the hub never gave', { grant_type: 'refresh_token', refresh_token: 'x' }, 400, 'invalid_grant'],
    ['no grant type', { grant_type: '' }, 400, 'invalid_request'],
    ['no code', { code: '' }, 400, 'invalid_request'],
    ['made-up code', { code: 'not-a-code-at-all' }, 400, 'invalid_grant'],
  ];
  for (const [what, extra, status, error] of cases) {
    const r = await redeem(code, extra);
    t.is(r.status, status, what);
    t.is(r.body.error, error, what);
    t.is(r.headers.get('cache-control'), 'no-store', what);
  }
  const json = await fetch(`${hub.url}/hub/api/oauth2/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ grant_type: 'authorization_code', code }) });
  t.is(json.status, 400);
  t.is((await json.json()).error, 'invalid_request');
  t.is((await redeem(code, { redirect_uri: '' })).status, 200, 'redirect_uri may be left out; the code survived the failed attempts');
});

test.serial('oauth provider: PKCE with S256 and plain', async (t) => {
  const b = await loggedIn('carol');
  const verifier = randomBytes(32).toString('base64url');
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const s256 = await codeFor(b, { code_challenge: challenge, code_challenge_method: 'S256' });
  t.is((await redeem(s256)).body.error, 'invalid_request', 'verifier missing');
  t.is((await redeem(s256, { code_verifier: `${verifier}x` })).body.error, 'invalid_grant', 'verifier wrong');
  t.is((await redeem(s256, { code_verifier: challenge })).body.error, 'invalid_grant', 'the challenge is not the verifier');
  t.is((await redeem(s256, { code_verifier: verifier })).status, 200);

  const plain = await codeFor(b, { code_challenge: verifier, code_challenge_method: 'plain' });
  t.is((await redeem(plain, { code_verifier: verifier })).status, 200);
  const bare = await codeFor(b, { code_challenge: verifier });
  t.is((await redeem(bare, { code_verifier: verifier })).status, 200, 'no method means plain (RFC 7636)');

  const bad = await b.get(authorizeUrl({ code_challenge: challenge, code_challenge_method: 'MD5' }));
  t.is(bad.status, 302);
  t.is(paramsOf(bad.location).get('error'), 'invalid_request');
});

test.serial('oauth provider: scopes within the client\'s allowance, narrowed to what the user holds', async (t) => {
  const b = await loggedIn('carol');
  const outside = await b.get(authorizeUrl({ scope: 'admin:users' }));
  t.is(outside.status, 302);
  t.is(paramsOf(outside.location).get('error'), 'invalid_scope');
  t.is(paramsOf(outside.location).get('state'), 'st-1');
  t.is(paramsOf((await b.get(authorizeUrl({ scope: 'no-such-scope-or-role' }))).location).get('error'), 'invalid_scope');

  // read:users is allowed to the client but carol does not hold it: dropped, not granted
  const r = await redeem(await codeFor(b, { scope: 'read:users read:users:activity!user identify' }));
  t.is(r.status, 200);
  const scopes = r.body.scope.split(' ');
  t.false(scopes.includes('read:users'));
  t.true(scopes.includes('read:users:activity!user'));
  const me = await whoami(r.body.access_token);
  t.true(me.body.scopes.includes('read:users:activity!user=carol'));
  t.false(me.body.scopes.some((s: string) => s.startsWith('read:users!')), 'nothing beyond what she holds');

  // a role name stands for its scopes
  const byRole = await redeem(await codeFor(b, { scope: 'activity-reader' }));
  t.true(byRole.body.scope.split(' ').includes('read:users:activity!user'));

  // an admin holds read:users: then it is granted
  const boss = await loggedIn('boss');
  const adminCode = await codeFor(boss, { scope: 'read:users' });
  t.true((await redeem(adminCode)).body.scope.split(' ').includes('read:users'));
});

test.serial('oauth provider: no code, token or secret ever reaches a log line', async (t) => {
  t.true(secrets.length > 10);
  const logs = hub.logs();
  t.true(logs.length > 1000, 'debug logs were captured');
  for (const s of secrets) t.false(logs.includes(s), `a secret in the logs: ${s.slice(0, 4)}…`);
});
