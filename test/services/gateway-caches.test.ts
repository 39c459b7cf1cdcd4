// The gateway's caches hold a bounded number of bytes however many users and tokens pass through, and forget an
// owner's or a token's entries without scanning the others (one event per member when a big group changes).
import test from 'ava';
import { createIdentityCache, createUserCache } from '../../services/gateway/caches.js';
import { BoundedCache } from '../../shared/bounded-cache.js';
import type { AuthClient, TokensClient } from '../../shared/contracts/index.js';

test('bounded cache: the oldest entries go once the estimated bytes pass the bound; every drop is heard', (t) => {
  const dropped: string[] = [];
  const cache = new BoundedCache<string>(10_000, 60_000, (v) => 24 + v.length, (k) => dropped.push(k));
  for (let i = 0; i < 1000; i++) cache.set(`k${i}`, 'x'.repeat(100));
  t.true(cache.bytes <= 10_000, `${cache.bytes} bytes`);
  t.true(cache.size > 10 && cache.size < 1000);
  t.is(cache.get('k0'), undefined);
  t.is(cache.get('k999'), 'x'.repeat(100));
  t.is(dropped.length, 1000 - cache.size);
  cache.set('k999', 'y'); // a new value replaces the old one's bytes
  t.is(cache.get('k999'), 'y');
  cache.clear();
  t.is(cache.bytes, 0);
  t.is(cache.size, 0);
});

test('identity cache: 100,000 tokens resolved stay within the bound; an owner\'s and a token\'s identities are forgotten', async (t) => {
  let asked = 0;
  const tokens = {
    resolveToken: async ({ token }: { token: string }) => {
      asked++;
      const owner = `u${Number(token.slice(1)) % 1000}`;
      return { found: true, owner: { kind: 'user', name: owner }, token_id: `a${token.slice(1)}`, session_id: '', scopes: ['read:users!user=' + owner, 'access:servers!user=' + owner], expires_at_ms: 0, scopes_until_ms: 0 };
    },
  } as unknown as TokensClient;
  const identities = createIdentityCache(tokens, 600_000, 4_000_000);
  for (let i = 0; i < 100_000; i++) await identities.resolve(`t${i}`);
  t.true(identities.bytes <= 4_000_000, `${identities.bytes} bytes`);
  asked = 0;
  await identities.resolve('t99999');
  t.is(asked, 0, 'a recent token is a hit');
  identities.forgetOwner({ kind: 'user', name: 'u999' }); // t99999's owner
  await identities.resolve('t99999');
  t.is(asked, 1, 'forgotten with its owner');
  identities.forgetToken('a99999');
  await identities.resolve('t99999');
  t.is(asked, 2, 'forgotten by its token id');
});

test('user cache: 200,000 users remembered (a bulk create) stay within the bound', (t) => {
  const users = createUserCache({} as AuthClient, 600_000, 2_000_000);
  for (let i = 0; i < 200_000; i++) users.remember({ name: `user-${i}`, admin: false, groups: ['g'], created: '2026-11-25T00:00:00.000Z', last_activity: '' });
  t.true(users.bytes <= 2_000_000, `${users.bytes} bytes`);
});

test('identity cache: what is known of tokens that name nobody is kept apart, bounded, and answered from memory', async (t) => {
  let asked = 0;
  const tokens = {
    resolveToken: async ({ token }: { token: string }) => {
      asked++;
      if (token.startsWith('gone')) return { found: false, revoked: true }; // one of the hub's, revoked
      if (token.startsWith('own')) return { found: false, revoked: false }; // never the hub's (a server's own)
      return { found: true, owner: { kind: 'user', name: 'alice' }, token_id: 'a1', session_id: '', scopes: ['access:servers!user=alice'], expires_at_ms: 0, scopes_until_ms: 0 };
    },
  } as unknown as TokensClient;
  const identities = createIdentityCache(tokens, 600_000, 1_000_000, 100_000);
  t.like(await identities.judge('valid-token'), { owner: { kind: 'user', name: 'alice' } });
  t.is(await identities.judge('gone-token'), 'revoked');
  t.is(await identities.judge('own-token'), 'unknown');
  asked = 0;
  const again = identities.judge('gone-token');
  t.false(again instanceof Promise, 'known: decided at once');
  t.is(again, 'revoked');
  t.is(identities.judge('own-token'), 'unknown');
  t.is(asked, 0);
  for (let i = 0; i < 50_000; i++) await identities.judge(`own-${i}`); // a flood of made-up tokens
  t.true(identities.bytes <= 1_100_000, `${identities.bytes} bytes`);
  asked = 0;
  const alice = identities.judge('valid-token');
  t.false(alice instanceof Promise, 'the identity stays: the flood went to the verdicts\' own bound');
  t.is(asked, 0);
  t.is(await identities.resolve('own-49999'), null);
  t.is(asked, 1, 'the API asks again about a token that named nobody (it may be registered later)');
});
