// The hub as an OpenID Connect provider, as a real relying party sees it: panva's openid-client, given nothing but
// the issuer URL, a client id and a secret, does discovery, the code flow with PKCE and nonce through the hub's own
// login and consent pages (driven over HTTP with cookies), checks the id_token's signature against the JWKS
// (non-repudiation checks on), reads userinfo, refreshes (the spent refresh token refused, and its whole line with
// it), rotates the key in the middle (`hub rotate-oidc-key`: old id_tokens still verify, new ones carry the new
// key) and logs out at the provider. Then every refusal the issue names, with the error the specs give it, and the
// audit events. One hub for all (serial: its users and keys are shared state).
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { createLocalJWKSet, decodeProtectedHeader, jwtVerify, type JWTPayload } from 'jose';
import * as oidc from 'openid-client';
import { runHubCommand, startHub, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { auditTrail } from '../spawner/helpers.js';
import { Browser, hiddenField, hiddenFields, paramsOf } from './browser.js';

const ADMIN = randomToken();
const PW = 'oidc-pw-for-tests';
const GRAFANA_SECRET = `grafana-${randomToken()}`;
const RP = 'http://127.0.0.1:9';
const CALLBACK = `${RP}/login/generic_oauth`;
const SIGNED_OUT = `${RP}/signed-out`;
const SCOPE = 'openid profile email groups offline_access';

let hub: HubUnderTest;
let api: ApiCall;
let issuer: string;

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: {
        authenticator_class: 'dummy',
        log_level: 'debug',
        api_tokens: { [ADMIN]: 'boss' },
        oauth_clients: [
          // a confidential client that shows the consent page and insists on a nonce
          { client_id: 'grafana', client_secret: GRAFANA_SECRET, description: 'Grafana', redirect_uris: [CALLBACK, `${RP}/other-callback`],
            post_logout_redirect_uris: [SIGNED_OUT], require_nonce: true },
          // a public client (a browser app): no secret, so PKCE S256 is required
          { client_id: 'notes', redirect_uris: [`${RP}/notes/cb`], oauth_no_confirm: true },
        ],
        // rita holds it through a group: membership follows her rename, a name in `users` would not
        load_roles: [{ name: 'dashboards', scopes: ['access:services!service=grafana', 'access:services!service=notes'], users: ['alice', 'sam'], groups: ['viewers'] }],
      },
      DummyAuthenticator: { password: PW },
      Authenticator: { admin_users: ['boss'] },
    },
  });
  api = apiClient(hub.url);
  issuer = `${hub.url}/hub`;
  for (const user of ['alice', 'bob', 'rita', 'sam']) t_is((await api('POST', `/users/${user}`, { token: ADMIN })).status, 201, `create ${user}`);
  t_is((await api('POST', '/groups/staff', { token: ADMIN, body: { users: ['alice'] } })).status, 201, 'group staff');
  t_is((await api('POST', '/groups/viewers', { token: ADMIN, body: { users: ['rita'] } })).status, 201, 'group viewers');
});
test.after.always(async () => {
  await hub?.stop();
});

function t_is(actual: unknown, expected: unknown, what: string): void {
  if (actual !== expected) throw new Error(`${what}: ${String(actual)} instead of ${String(expected)}`);
}

/** The relying party, configured with the issuer URL alone (plain http here: the hub listens on 127.0.0.1). */
async function relyingParty(clientId = 'grafana', secret: string | null = GRAFANA_SECRET): Promise<oidc.Configuration> {
  const config = await oidc.discovery(new URL(issuer), clientId, secret ?? undefined, secret ? undefined : oidc.None(), { execute: [oidc.allowInsecureRequests] });
  oidc.enableNonRepudiationChecks(config); // the id_token's signature is checked against the JWKS too
  return config;
}

interface Started { url: URL; verifier: string; nonce: string; state: string }

async function authorizationRequest(rp: oidc.Configuration, extra: Record<string, string> = {}): Promise<Started> {
  const verifier = oidc.randomPKCECodeVerifier();
  const nonce = oidc.randomNonce();
  const state = oidc.randomState();
  const url = oidc.buildAuthorizationUrl(rp, {
    redirect_uri: CALLBACK, scope: SCOPE, code_challenge: await oidc.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256', nonce, state, ...extra,
  });
  return { url, verifier, nonce, state };
}

const unescapeHtml = (s: string) => s.replace(/&amp;/g, '&').replace(/&quot;/g, '"').replace(/&#(\d+);/g, (_, c) => String.fromCharCode(Number(c)));

/** A person signs in at the hub's login page on the way, agrees on the consent page; the browser lands on the callback. */
async function signIn(b: Browser, user: string, started: Started, expectConsent = true): Promise<{ callback: string; consent: string }> {
  let r = await b.get(started.url.href);
  if (r.status === 302 && r.location?.startsWith('/hub/login')) {
    const next = paramsOf(r.location).get('next')!;
    const login = await b.login(user, PW, next);
    if (login.status !== 302) throw new Error(`login ${user}: ${login.status}`);
    r = await b.get(login.location!);
  }
  let consent = '';
  if (expectConsent) {
    if (r.status !== 200) throw new Error(`consent page expected: ${r.status} ${r.location} ${r.body.slice(0, 300)}`);
    consent = r.body;
    const action = unescapeHtml(/<form method="post" action="([^"]+)"/.exec(r.body)![1]);
    r = await b.post(action, { _xsrf: hiddenField(r.body, '_xsrf'), scopes: hiddenFields(r.body, 'scopes') });
  }
  if (r.status !== 302 || !r.location?.startsWith(RP)) throw new Error(`no redirect to the client: ${r.status} ${r.location} ${r.body.slice(0, 300)}`);
  return { callback: r.location, consent };
}

/** Every secret the tests see: none may be in a log line. */
const seen: string[] = [GRAFANA_SECRET];
const keep = (...values: (string | undefined)[]) => {
  for (const v of values) if (v) seen.push(v);
};

async function codeFlow(rp: oidc.Configuration, b: Browser, user: string, expectConsent = true) {
  const started = await authorizationRequest(rp);
  const { callback, consent } = await signIn(b, user, started, expectConsent);
  const tokens = await oidc.authorizationCodeGrant(rp, new URL(callback), { pkceCodeVerifier: started.verifier, expectedNonce: started.nonce, expectedState: started.state });
  keep(paramsOf(callback).get('code')!, tokens.access_token, tokens.refresh_token, tokens.id_token, started.verifier);
  return { tokens, claims: tokens.claims()!, consent, started };
}

const jwks = async () => (await (await fetch(`${issuer}/api/oauth2/jwks`)).json()) as { keys: { kid: string }[] };
const verifyWithPublishedKeys = async (idToken: string) => (await jwtVerify(idToken, createLocalJWKSet(await jwks()), { issuer, currentDate: new Date() })).payload;
const whoami = async (token: string) => (await fetch(`${hub.url}/hub/api/user`, { headers: { authorization: `Bearer ${token}` } })).status;

async function tokenRequest(form: Record<string, string>) {
  const r = await fetch(`${hub.url}/hub/api/oauth2/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(form).toString() });
  const body = (await r.json()) as Record<string, string>;
  keep(body.access_token, body.refresh_token, body.id_token);
  return { status: r.status, body };
}

const refreshWith = (refreshToken: string) =>
  tokenRequest({ grant_type: 'refresh_token', refresh_token: refreshToken, client_id: 'grafana', client_secret: GRAFANA_SECRET });

let first: { idToken: string; sub: string; kid: string; claims: JWTPayload };

test.serial('oidc provider: discovery from the issuer alone, the code flow through login and consent, a signed id_token, userinfo', async (t) => {
  const doc = await (await fetch(`${issuer}/.well-known/openid-configuration`)).json();
  t.like(doc, {
    issuer, authorization_endpoint: `${issuer}/api/oauth2/authorize`, token_endpoint: `${issuer}/api/oauth2/token`, userinfo_endpoint: `${issuer}/api/oauth2/userinfo`,
    jwks_uri: `${issuer}/api/oauth2/jwks`, end_session_endpoint: `${issuer}/api/oauth2/logout`, response_types_supported: ['code'], code_challenge_methods_supported: ['S256'],
  });
  t.deepEqual([...doc.scopes_supported].sort(), ['email', 'groups', 'offline_access', 'openid', 'profile']);
  t.true(doc.token_endpoint_auth_methods_supported.includes('client_secret_basic'));

  const rp = await relyingParty();
  const b = new Browser(hub.url);
  const loginFrom = Math.floor(Date.now() / 1000);
  const { tokens, claims, consent } = await codeFlow(rp, b, 'alice');
  const loginTo = Math.ceil(Date.now() / 1000);
  t.regex(consent, /Grafana<\/b> would like permission to/);
  t.regex(consent, /Know which hub groups you are in/);
  t.regex(consent, /Stay signed in while you are away/);
  t.is(claims.iss, issuer);
  t.is(claims.aud, 'grafana');
  t.is(claims.preferred_username, 'alice');
  t.is(claims.name, 'alice');
  t.deepEqual(claims.groups, ['staff']);
  t.not(claims.sub, 'alice', 'sub is the stable id, not the name');
  t.true(typeof claims.auth_time === 'number' && claims.auth_time >= loginFrom && claims.auth_time <= loginTo, 'auth_time: when alice signed in on the way');
  t.true(claims.exp! > claims.iat! && claims.exp! - claims.iat! <= 3600);
  t.is(claims.email, undefined, 'the dummy authenticator knows no email: no email claim');
  t.is(tokens.token_type, 'bearer');
  t.truthy(tokens.refresh_token, 'offline_access: a refresh token');
  t.true(tokens.scope!.split(' ').includes('openid'));

  const payload = await verifyWithPublishedKeys(tokens.id_token!);
  t.is(payload.sub, claims.sub, 'the id_token verifies against the published JWKS');
  const header = decodeProtectedHeader(tokens.id_token!);
  t.is(header.alg, 'ES256');

  const info = await oidc.fetchUserInfo(rp, tokens.access_token, claims.sub);
  t.like(info, { sub: claims.sub, preferred_username: 'alice', name: 'alice', groups: ['staff'] });
  t.is(await whoami(tokens.access_token), 200, 'the access token is a hub token of alice (identify)');
  first = { idToken: tokens.id_token!, sub: claims.sub, kid: header.kid!, claims };
});

test.serial('oidc provider: refresh tokens rotate; a spent one is refused and takes its whole line with it', async (t) => {
  const rp = await relyingParty();
  const { tokens, claims } = await codeFlow(rp, new Browser(hub.url), 'sam');
  const refreshed = await oidc.refreshTokenGrant(rp, tokens.refresh_token!);
  keep(refreshed.access_token, refreshed.refresh_token, refreshed.id_token);
  t.truthy(refreshed.access_token);
  t.not(refreshed.refresh_token, tokens.refresh_token, 'rotated');
  t.is(refreshed.claims()!.sub, claims.sub);
  t.is(await whoami(refreshed.access_token), 200);

  const again = await refreshWith(tokens.refresh_token!);
  t.is(again.status, 400);
  t.is(again.body.error, 'invalid_grant');
  const next = await refreshWith(refreshed.refresh_token!);
  t.is(next.body.error, 'invalid_grant', 'the reuse revoked the line: its newest refresh token too');
  t.is(await whoami(refreshed.access_token), 403, 'and the access tokens it gave');
});

test.serial('oidc provider: hub rotate-oidc-key in the middle: old id_tokens still verify, new ones carry the new key', async (t) => {
  const rp = await relyingParty();
  const before = await codeFlow(rp, new Browser(hub.url), 'alice');
  t.is(decodeProtectedHeader(before.tokens.id_token!).kid, first.kid);

  const keyFile = join(hub.dataDir, 'oidc_signing_keys.json');
  t.is(statSync(keyFile).mode & 0o777, 0o600, 'the private keys are the oauth actor\'s alone');
  const rotated = await runHubCommand(['rotate-oidc-key', '--config', join(hub.dataDir, 'hub.json')]);
  t.is(rotated.code, 0, rotated.stderr);
  const kid = /signing with key (\S+)/.exec(rotated.stdout)?.[1];
  t.truthy(kid);
  t.not(kid, first.kid);
  t.true(rotated.stdout.includes(`previous key ${first.kid} still published`));
  t.false(readFileSync(keyFile, 'utf8').includes(GRAFANA_SECRET));

  const published = (await jwks()).keys.map((k) => k.kid);
  t.true(published.includes(first.kid) && published.includes(kid!));
  t.is((await verifyWithPublishedKeys(first.idToken)).sub, first.sub, 'an id_token from before the rotation still verifies');

  // the same relying party, its JWKS cached from before the rotation: the new key was already published then
  const after = await codeFlow(rp, new Browser(hub.url), 'alice');
  t.is(decodeProtectedHeader(after.tokens.id_token!).kid, kid);
  t.is(after.claims.sub, first.sub);
  t.is((await verifyWithPublishedKeys(after.tokens.id_token!)).sub, first.sub);
});

test.serial('oidc provider: a renamed person keeps their sub', async (t) => {
  const rp = await relyingParty();
  const before = await codeFlow(rp, new Browser(hub.url), 'rita');
  t.is((await api('PATCH', '/users/rita', { token: ADMIN, body: { name: 'rita2' } })).status, 200);
  const renamed = await codeFlow(rp, new Browser(hub.url), 'rita2');
  t.is(renamed.claims.preferred_username, 'rita2');
  t.is(renamed.claims.sub, before.claims.sub);
});

test.serial('oidc provider: RP-initiated logout ends the hub login and its tokens, and returns to a registered URI only', async (t) => {
  const rp = await relyingParty();
  const b = new Browser(hub.url);
  const { tokens } = await codeFlow(rp, b, 'alice');

  const stranger = oidc.buildEndSessionUrl(rp, { id_token_hint: tokens.id_token!, post_logout_redirect_uri: 'http://evil.example/', state: 's1' });
  const refused = await b.get(stranger.href);
  t.is(refused.status, 400);
  t.is(refused.location, null, 'never redirected to an unregistered URI');
  t.regex(refused.body, /post_logout_redirect_uri is not registered/);
  t.is((await b.get('/hub/home')).status, 200, 'still signed in');

  // without an id_token_hint the person is asked (a page cannot sign them out behind their back)
  const asked = await b.get(`${issuer}/api/oauth2/logout?client_id=grafana&post_logout_redirect_uri=${encodeURIComponent(SIGNED_OUT)}`);
  t.is(asked.status, 200);
  t.regex(asked.body, /asks to sign you out/);
  t.is((await b.post('/hub/api/oauth2/logout', { client_id: 'grafana', _xsrf: 'forged' })).status, 403);
  t.is((await b.get('/hub/home')).status, 200, 'still signed in');

  const out = await b.get(oidc.buildEndSessionUrl(rp, { id_token_hint: tokens.id_token!, post_logout_redirect_uri: SIGNED_OUT, state: 'bye' }).href);
  t.is(out.status, 302);
  t.is(out.location, `${SIGNED_OUT}?state=bye`);
  t.is((await b.get('/hub/home')).status, 302, 'the hub login has ended');
  t.is(await whoami(tokens.access_token), 403, 'the access token went with the login');
  const refresh = await refreshWith(tokens.refresh_token!);
  t.is(refresh.body.error, 'invalid_grant', 'the refresh token too');
});

test.serial('oidc provider: refusals carry the errors the specs name', async (t) => {
  const b = new Browser(hub.url);
  t.is((await b.login('alice', PW)).status, 302);
  const rp = await relyingParty();
  const authorize = async (extra: Record<string, string>) => b.get((await authorizationRequest(rp, extra)).url.href);

  for (const [what, extra] of [
    ['unknown client', { client_id: 'nope' }],
    ['a redirect URI with more on it', { redirect_uri: `${CALLBACK}/x` }],
    ['an unregistered redirect URI', { redirect_uri: 'http://evil.example/cb' }],
  ] as const) {
    const page = await authorize(extra);
    t.is(page.status, 400, what);
    t.is(page.location, null, `${what}: never redirected`);
  }
  const noNonce = await b.get((await authorizationRequest(rp)).url.href.replace(/&nonce=[^&]+/, ''));
  t.is(noNonce.status, 302);
  t.is(paramsOf(noNonce.location).get('error'), 'invalid_request', 'grafana requires a nonce');

  const bob = new Browser(hub.url);
  t.is((await bob.login('bob', PW)).status, 302);
  const gate = await bob.get((await authorizationRequest(rp)).url.href);
  t.is(gate.status, 403, 'bob holds no access:services!service=grafana');
  t.regex(gate.body, /You do not have permission to access Grafana/);
  t.regex(gate.headers.get('content-type') ?? '', /text\/html/);

  // PKCE mismatch, then the same code again: refused, and what it gave is revoked
  const started = await authorizationRequest(rp);
  const { callback } = await signIn(b, 'alice', started);
  const code = paramsOf(callback).get('code')!;
  const wrongVerifier = await tokenRequest({ grant_type: 'authorization_code', code, redirect_uri: CALLBACK, client_id: 'grafana', client_secret: GRAFANA_SECRET, code_verifier: oidc.randomPKCECodeVerifier() });
  t.is(wrongVerifier.body.error, 'invalid_grant');
  const good = await tokenRequest({ grant_type: 'authorization_code', code, redirect_uri: CALLBACK, client_id: 'grafana', client_secret: GRAFANA_SECRET, code_verifier: started.verifier });
  t.is(good.status, 200);
  t.truthy(good.body.id_token);
  const replay = await tokenRequest({ grant_type: 'authorization_code', code, redirect_uri: CALLBACK, client_id: 'grafana', client_secret: GRAFANA_SECRET, code_verifier: started.verifier });
  t.is(replay.body.error, 'invalid_grant');
  t.is(await whoami(good.body.access_token), 403, 'a reused code revokes the token it gave');
  t.is((await refreshWith(good.body.refresh_token)).body.error, 'invalid_grant', 'and the refresh token');

  const badSecret = await tokenRequest({ grant_type: 'refresh_token', refresh_token: 'x', client_id: 'grafana', client_secret: 'wrong' });
  t.is(badSecret.status, 401);
  t.is(badSecret.body.error, 'invalid_client');
  const unknownClient = await tokenRequest({ grant_type: 'authorization_code', code: 'x', client_id: 'nope', client_secret: 'x' });
  t.is(unknownClient.body.error, 'invalid_client');

  // a public client: PKCE S256 or nothing; no secret at the token endpoint
  const notes = await relyingParty('notes', null);
  const withoutPkce = await b.get(oidc.buildAuthorizationUrl(notes, { redirect_uri: `${RP}/notes/cb`, scope: 'openid', state: 'n1' }).href);
  t.is(paramsOf(withoutPkce.location).get('error'), 'invalid_request');
  const verifier = oidc.randomPKCECodeVerifier();
  const ok = await b.get(oidc.buildAuthorizationUrl(notes, {
    redirect_uri: `${RP}/notes/cb`, scope: 'openid profile', state: 'n2', code_challenge: await oidc.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
  }).href);
  t.is(ok.status, 302, 'oauth_no_confirm: no consent page');
  const publicTokens = await oidc.authorizationCodeGrant(notes, new URL(ok.location!), { pkceCodeVerifier: verifier, expectedState: 'n2' });
  t.is(publicTokens.claims()!.aud, 'notes');
  t.is(publicTokens.claims()!.groups, undefined, 'no groups scope, no groups claim');

  // a service added at run time may not take a tool's name: it would share access:services!service=grafana
  const clash = await api('POST', '/services/grafana', { token: ADMIN, body: { url: 'http://127.0.0.1:9/grafana' } });
  t.is(clash.status, 409);
  t.is((await api('GET', '/services/grafana', { token: ADMIN })).status, 404, 'nothing half-made');

  const userinfoWithout = await fetch(`${issuer}/api/oauth2/userinfo`);
  t.is(userinfoWithout.status, 401);
  const plainToken = (await api('POST', '/users/alice/tokens', { token: ADMIN, body: {} })).body.token;
  const notOidc = await fetch(`${issuer}/api/oauth2/userinfo`, { headers: { authorization: `Bearer ${plainToken}` } });
  t.is(notOidc.status, 401, 'a token never granted openid reads no userinfo');
  t.regex(notOidc.headers.get('www-authenticate') ?? '', /invalid_token/);
});

test.serial('oidc provider: grants, refusals, logouts and the key rotation are in the audit trail', async (t) => {
  const events = await auditTrail(hub.natsUrl);
  const has = (type: string, pred: (e: (typeof events)[number]) => boolean = () => true) => events.some((e) => e.type === type && pred(e));
  t.true(has('oauth_code.issue', (e) => e.what === 'grafana'));
  t.true(has('oauth_code.redeem', (e) => e.who === 'oauth:grafana'));
  t.true(has('oauth_refresh.redeem'));
  t.true(has('oauth_refresh.reuse', (e) => e.outcome === 'denied'));
  t.true(has('oauth_code.reuse', (e) => e.outcome === 'denied'));
  t.true(has('oauth_grant.denied', (e) => e.reason === 'unknown client'));
  t.true(has('oauth_grant.denied', (e) => (e.reason ?? '').includes('nonce')));
  t.true(has('oauth_grant.denied', (e) => e.who === 'user:bob'));
  t.true(has('oauth_token.denied'));
  t.true(has('oidc_logout.logout', (e) => e.who === 'user:alice' && e.what === 'grafana'));
  t.true(has('oidc_logout.denied'));
  t.true(has('oidc_key.rotate', (e) => e.who.startsWith('cli:')));
});

test.serial('oidc provider: no secret, code, id_token or refresh token reaches a log line (debug level)', (t) => {
  const logs = hub.logs();
  t.true(logs.includes('oauth.code_reused'), 'the logs are the hub\'s, at debug level');
  for (const secret of seen) t.false(logs.includes(secret), `a secret of ${secret.length} characters is in the logs`);
});
