// The oauth actor's handlers on a real store with a recording stand-in for the tokens actor: code expiry,
// one redemption when two race, service clients from config, pruning of stale clients.
import test from 'ava';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { HubConfig } from '../../shared/config.js';
import type { HubError } from '../../shared/errors.js';
import type { AuthClient, TokensClient } from '../../shared/contracts/index.js';
import { createLogger } from '../../shared/log.js';
import { CODE_LIFETIME_MS, createOAuthHandlers, pkceMatches, serviceClientSpecs } from '../../services/oauth/handlers.js';
import { createOidc } from '../../services/oauth/oidc.js';
import { SigningKeys } from '../../services/oauth/signing-keys.js';
import { OAuthStore } from '../../services/oauth/store.js';
import { hashSecret, SUPPLIED_ROUNDS } from '../../shared/secrets.js';
import { BACKENDS, storeBackends, type Backend } from '../store-backends.js';

/** Mints numbered tokens and records revocations, as the tokens actor would answer. */
function fakeTokens() {
  const revoked: string[] = [];
  const revokedClients: string[] = [];
  let n = 0;
  const client = {
    async issueOAuthToken() {
      await new Promise((r) => setTimeout(r, 20)); // minting takes a moment: room for a race
      n += 1;
      return { model: { id: `a${n}` }, token: `token-${n}` };
    },
    async revokeTokens(request: { ids: string[]; oauth_client: string }) {
      revoked.push(...request.ids);
      if (request.oauth_client) revokedClients.push(request.oauth_client);
      return { ids: request.ids };
    },
    close() {},
  } as unknown as TokensClient;
  return { client, revoked, revokedClients };
}

const stores = storeBackends(test);

async function setup(t: { teardown: (fn: () => void | Promise<void>) => void }, backend: Backend) {
  const dir = mkdtempSync(join(tmpdir(), 'hub-oauth-'));
  const store = await OAuthStore.open(await stores.location(t, backend, 'oauth'));
  t.teardown(() => store.close().finally(() => rmSync(dir, { recursive: true, force: true })));
  const tokens = fakeTokens();
  const config = { Hub: { oauth_token_expires_in: 0, cookie_max_age_days: 14, oidc_issuer: 'http://hub.test/hub' } } as unknown as HubConfig;
  const audit = { publish: async () => undefined, publishMany: async () => undefined };
  const log = createLogger('test', 'silent');
  // these codes are plain OAuth (no openid): the OIDC part is there but never asked for claims
  const oidc = createOidc({ config, store, tokens: tokens.client, auth: {} as AuthClient, keys: await SigningKeys.open(dir), audit, log });
  const h = createOAuthHandlers({ config, store, tokens: tokens.client, audit, log, oidc });
  await h.registerServerClient({ client_id: 'hub-user-ann', user: 'ann', server_name: '', url: '/user/ann/', secret: 'server-secret' });
  return { h, store, tokens };
}

const code = (h: Awaited<ReturnType<typeof setup>>['h'], extra: Record<string, string> = {}) => h.issueCode({
  client_id: 'hub-user-ann', user: 'ann', scopes: ['access:servers!server=ann/'], redirect_uri: '/user/ann/oauth_callback', session_id: 's1',
  code_challenge: '', code_challenge_method: '', ...extra,
});

const exchange = (h: Awaited<ReturnType<typeof setup>>['h'], c: string, extra: Record<string, string> = {}) =>
  h.exchangeCode({ client_id: 'hub-user-ann', client_secret: 'server-secret', code: c, redirect_uri: '/user/ann/oauth_callback', code_verifier: '', ...extra }, { deadline: Date.now() + 5000, cancelled: false });

const oauthError = async (p: Promise<unknown>) => {
  try {
    await p;
    return 'none';
  } catch (e) {
    return `${(e as HubError).status} ${(e as HubError).code}`;
  }
};

// serial: it moves the clock (Date.now) for everything running meanwhile
for (const backend of BACKENDS) test.serial(`oauth codes: a code older than 300 s is refused (${backend})`, async (t) => {
  const { h } = await setup(t, backend);
  const realNow = Date.now;
  const issued = await code(h);
  t.true(issued.expires_at_ms - realNow() <= CODE_LIFETIME_MS);
  Date.now = () => realNow() + CODE_LIFETIME_MS + 1000;
  try {
    t.is(await oauthError(exchange(h, issued.code)), '400 HUB_ERR_OAUTH_INVALID_GRANT');
  } finally {
    Date.now = realNow;
  }
});

for (const backend of BACKENDS) test(`oauth codes: two exchanges racing for one code: one token at most, and it is revoked (${backend})`, async (t) => {
  const { h, tokens } = await setup(t, backend);
  for (let round = 0; round < 5; round++) {
    tokens.revoked.length = 0;
    const { code: c } = await code(h);
    const results = await Promise.allSettled([exchange(h, c), exchange(h, c)]);
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    t.true(refused.length >= 1);
    for (const r of refused) t.is(r.reason.code, 'HUB_ERR_OAUTH_INVALID_GRANT');
    // whichever way the race went, the token minted for the code does not survive it
    t.is(tokens.revoked.length, 1);
  }
});

for (const backend of BACKENDS) test(`oauth codes: the secret is checked, stored only hashed, and the code only as a digest (${backend})`, async (t) => {
  const { h, store } = await setup(t, backend);
  t.is(await oauthError(exchange(h, (await code(h)).code, { client_secret: 'wrong' })), '401 HUB_ERR_OAUTH_INVALID_CLIENT');
  const row = await store.client('hub-user-ann');
  t.false(row!.secret_hash.includes('server-secret'));
  const { code: c } = await code(h);
  t.truthy(await store.code(createHash('sha256').update(c).digest('base64url')));
  t.is(await store.code(c), undefined);
  const issued = await exchange(h, c);
  t.like(issued, { access_token: 'token-1', user: 'ann', scope: 'access:servers!server=ann/', expires_in: 14 * 86_400 });
});

test('oauth codes: PKCE comparison', (t) => {
  const verifier = 'dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk';
  t.true(pkceMatches('E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', 'S256', verifier)); // RFC 7636 appendix B
  t.false(pkceMatches('E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', 'plain', verifier));
  t.true(pkceMatches(verifier, 'plain', verifier));
});

test('oauth clients: services with a url or an OAuth option become clients with their access scope', (t) => {
  const specs = serviceClientSpecs([
    { name: 'web', url: 'http://127.0.0.1:1', api_token: 'web-token-123' },
    { name: 'api-only', api_token: 'api-token-123' },
    { name: 'ext', api_token: 'ext-token-123', oauth_client_id: 'service-ext-1', oauth_redirect_uri: 'https://ext.example/cb', oauth_no_confirm: true, oauth_client_allowed_scopes: ['read:users'] },
    { name: 'tokenless', url: 'http://127.0.0.1:2' },
  ]);
  t.deepEqual(specs.map((s) => s.client_id), ['service-web', 'service-ext-1']);
  t.like(specs[0], { redirect_uri: '/services/web/oauth_callback', allowed_scopes: ['access:services!service=web'], no_confirm: false, service: 'web' });
  t.like(specs[1], { redirect_uri: 'https://ext.example/cb', allowed_scopes: ['read:users', 'access:services!service=ext'], no_confirm: true });
});

for (const backend of BACKENDS) test(`oauth clients: stale ones are removed with their tokens (${backend})`, async (t) => {
  const { h, store, tokens } = await setup(t, backend);
  await h.syncServiceClients([{ name: 'a', url: 'http://127.0.0.1:1', api_token: 'a-token-1234' }, { name: 'b', url: 'http://127.0.0.1:1', api_token: 'b-token-1234' }]);
  await h.syncServiceClients([{ name: 'a', url: 'http://127.0.0.1:1', api_token: 'a-token-1234' }]);
  t.truthy(await store.client('service-a'));
  t.is(await store.client('service-b'), undefined);
  await h.pruneServerClients(new Set());
  t.is(await store.client('hub-user-ann'), undefined);
  t.deepEqual(tokens.revokedClients.sort(), ['hub-user-ann', 'service-b']);
});

for (const backend of BACKENDS) test(`oauth clients: an imported secret hash stays while the service has no api_token; a configured api_token replaces it; removing the service removes it (${backend})`, async (t) => {
  const { h, store, tokens } = await setup(t, backend);
  const ext = { name: 'ext', oauth_client_id: 'service-ext-1', oauth_redirect_uri: 'https://ext.example/cb' };
  const ask = (secret: string) => h.issueCode({
    client_id: 'service-ext-1', user: 'ann', scopes: ['access:services!service=ext'], redirect_uri: 'https://ext.example/cb', session_id: 's1',
    code_challenge: '', code_challenge_method: '',
  }).then((c) => oauthError(exchange(h, c.code, { client_id: 'service-ext-1', client_secret: secret, redirect_uri: 'https://ext.example/cb' })));
  // as `hub import jupyterhub` writes it: the established hub's hash of the service's api_token
  await store.importServiceClients([{ client_id: 'service-ext-1', service: 'ext', secret_hash: hashSecret('old-token-123', SUPPLIED_ROUNDS), description: 'x', redirect_uri: 'https://ext.example/cb', allowed_scopes: [] }]);
  await h.syncServiceClients([ext]);
  t.is(await ask('old-token-123'), 'none', 'the imported secret is accepted');
  t.is(await ask('old-token-124'), '401 HUB_ERR_OAUTH_INVALID_CLIENT');
  t.like(await store.client('service-ext-1'), { imported: 1, public: 0, allowed_scopes: '["access:services!service=ext"]' });
  // the config gives a token: it is the secret from then on, and taking it out again ends the client (as for any service)
  await h.syncServiceClients([{ ...ext, api_token: 'new-token-123' }]);
  t.is(await ask('old-token-123'), '401 HUB_ERR_OAUTH_INVALID_CLIENT');
  t.is(await ask('new-token-123'), 'none');
  await h.syncServiceClients([ext]);
  t.is(await store.client('service-ext-1'), undefined);
  // an imported client whose service leaves the config goes, with its tokens
  await store.importServiceClients([{ client_id: 'service-ext-1', service: 'ext', secret_hash: hashSecret('old-token-123', SUPPLIED_ROUNDS), description: 'x', redirect_uri: 'https://ext.example/cb', allowed_scopes: [] }]);
  await h.syncServiceClients([ext]);
  t.truthy(await store.client('service-ext-1'));
  await h.syncServiceClients([]);
  t.is(await store.client('service-ext-1'), undefined);
  t.true(tokens.revokedClients.includes('service-ext-1'));
  // a client of that id held by another service is not taken over by an import
  await h.syncServiceClients([{ name: 'other', oauth_client_id: 'service-ext-1', oauth_redirect_uri: 'https://o.example/cb', api_token: 'other-token-1' }]);
  const r = await store.importServiceClients([{ client_id: 'service-ext-1', service: 'ext', secret_hash: hashSecret('old-token-123', SUPPLIED_ROUNDS), description: 'x', redirect_uri: 'https://ext.example/cb', allowed_scopes: [] }]);
  t.deepEqual(r, { added: 0, updated: 0, refused: ['service-ext-1'] });
  t.like(await store.client('service-ext-1'), { service: 'other', imported: 0 });
});
