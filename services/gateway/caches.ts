// What the gateway remembers between requests, and forgets when an event says it is stale:
// token resolutions (from the tokens actor) and user records (from the auth actor).
// Every entry is also bounded by `Hub.cache_max_age`, and everything is dropped on a NATS
// reconnect, since events may have been missed meanwhile.
import type { HubError } from '../../shared/errors.js';
import type { AuthClient, TokensClient } from '../../shared/contracts/index.js';
import { BoundedCache, stringBytes } from '../../shared/bounded-cache.js';
import { cacheKey } from '../../shared/secrets.js';
import { identityHit, identityMiss } from './metrics.js';

export interface Owner { kind: 'user' | 'service'; name: string }

export interface Identity {
  owner: Owner;
  tokenId: string;
  sessionId: string;
  /** expanded effective scopes; one Set per cached identity, never mutated (scope checks memoise on it) */
  scopes: ReadonlySet<string>;
}

export interface UserRecord { name: string; admin: boolean; groups: string[]; created: string; last_activity: string; user_info_json?: string; managed_roles?: string[] }

/** Cache keys grouped by something many entries share (an owner, a token id), so forgetting them is no scan. */
class KeysBy {
  private readonly groups = new Map<string, Set<string>>();
  add(group: string, key: string): void {
    let keys = this.groups.get(group);
    if (!keys) this.groups.set(group, (keys = new Set()));
    keys.add(key);
  }

  remove(group: string, key: string): void {
    const keys = this.groups.get(group);
    if (keys?.delete(key) && !keys.size) this.groups.delete(group);
  }

  /** The keys of `group`, copied (the caller deletes them, which changes the set). */
  of(group: string): string[] {
    return [...(this.groups.get(group) ?? [])];
  }
}

const ownerKey = (o: Owner) => `${o.kind}:${o.name}`;

/** What an identity costs: its object, the owner and its ids, and the Set of scope strings it carries. */
const identityBytes = (i: Identity): number => {
  let n = 160 + stringBytes(i.owner.name) + stringBytes(i.tokenId) + stringBytes(i.sessionId);
  for (const s of i.scopes) n += 32 + stringBytes(s);
  return n;
};

/**
 * What the tokens actor said of a token that names no identity: `revoked` (one of this hub's that left: revoked,
 * expired, its owner deleted) or `unknown` (never one of this hub's, e.g. a server's own token).
 */
export type TokenVerdict = 'revoked' | 'unknown';

/** A verdict entry holds no value worth counting beyond the key and the entry (BoundedCache adds those). */
const verdictBytes = () => 8;

/** `verdictMaxBytes`: the bound of the verdicts, kept apart so a flood of made-up tokens never evicts identities. */
export function createIdentityCache(tokens: TokensClient, maxAgeMs: number, maxBytes: number, verdictMaxBytes = maxBytes / 10) {
  const byOwner = new KeysBy();
  const byToken = new KeysBy();
  const cache = new BoundedCache<Identity>(maxBytes, maxAgeMs, identityBytes, (key, i) => {
    byOwner.remove(ownerKey(i.owner), key);
    if (i.tokenId) byToken.remove(i.tokenId, key);
  });
  const remember = (key: string, i: Identity, untilMs: number) => {
    cache.set(key, i, untilMs);
    byOwner.add(ownerKey(i.owner), key);
    if (i.tokenId) byToken.add(i.tokenId, key);
  };
  const verdicts = new BoundedCache<TokenVerdict>(verdictMaxBytes, maxAgeMs, verdictBytes);
  /** in-flight resolutions, so a burst of requests with one new token asks once */
  const inflight = new Map<string, Promise<Identity | TokenVerdict>>();

  async function ask(token: string, key: string, requestId?: string): Promise<Identity | TokenVerdict> {
    const r = await tokens.resolveToken({ token }, requestId ? { request: { requestId } } : undefined);
    if (!r.found) {
      const verdict: TokenVerdict = r.revoked ? 'revoked' : 'unknown';
      verdicts.set(key, verdict);
      return verdict;
    }
    const identity: Identity = { owner: r.owner as Owner, tokenId: r.token_id, sessionId: r.session_id, scopes: new Set(r.scopes) };
    // kept until the token expires, or a share among its scopes does (the tokens actor also announces that)
    remember(key, identity, Math.min(r.expires_at_ms || Infinity, r.scopes_until_ms || Infinity));
    return identity;
  }

  function asked(token: string, key: string, requestId?: string): Promise<Identity | TokenVerdict> {
    identityMiss.inc();
    let p = inflight.get(key);
    if (!p) {
      p = ask(token, key, requestId).finally(() => inflight.delete(key));
      inflight.set(key, p);
    }
    return p;
  }

  return {
    /**
     * The API's question (who is asking): an identity, or null. A token without one is asked about again each
     * time (a token may be registered under a chosen string later); `requestId` goes to the tokens actor on a miss.
     */
    async resolve(token: string, requestId?: string): Promise<Identity | null> {
      const key = cacheKey(token);
      const hit = cache.get(key);
      if (hit) {
        identityHit.inc();
        return hit;
      }
      const answer = await asked(token, key, requestId);
      return typeof answer === 'string' ? null : answer;
    },
    /**
     * The front door's question (services/gateway/proxy/token-gate.ts): what is known of a token, from memory when
     * anything is (an identity, or a verdict remembered up to Hub.cache_max_age), else asked once.
     */
    judge(token: string): Identity | TokenVerdict | Promise<Identity | TokenVerdict> {
      const key = cacheKey(token);
      const hit = cache.get(key) ?? verdicts.get(key);
      if (hit) {
        identityHit.inc();
        return hit;
      }
      return asked(token, key);
    },
    forgetToken: (tokenId: string) => { for (const key of byToken.of(tokenId)) cache.delete(key); },
    forgetOwner: (o: Owner) => { for (const key of byOwner.of(ownerKey(o))) cache.delete(key); },
    clear: () => {
      cache.clear();
      verdicts.clear();
    },
    get bytes() { return cache.bytes + verdicts.bytes; },
  };
}

/** What a cached user model costs: its object, its strings, its groups and roles. */
const userBytes = (u: UserRecord): number => {
  let n = 120 + stringBytes(u.name) + stringBytes(u.created) + stringBytes(u.last_activity ?? '') + stringBytes(u.user_info_json ?? '');
  for (const g of u.groups) n += 8 + stringBytes(g);
  for (const r of u.managed_roles ?? []) n += 8 + stringBytes(r);
  return n;
};

export function createUserCache(auth: AuthClient, maxAgeMs: number, maxBytes: number) {
  const cache = new BoundedCache<UserRecord>(maxBytes, maxAgeMs, userBytes);
  return {
    /** The user, or null when there is none. */
    async get(name: string): Promise<UserRecord | null> {
      const hit = cache.get(name);
      if (hit) return hit;
      try {
        const user = await auth.getUser({ name });
        cache.set(name, user);
        return user;
      } catch (e) {
        if ((e as HubError).status === 404) return null;
        throw e;
      }
    },
    /** Users read in bulk (a list page) refresh the cache too. */
    remember(user: UserRecord): void {
      cache.set(user.name, user);
    },
    /** Activity moves a cached model forward in place (no refetch): `hub.evt.user.activity` carries the time. */
    touch(name: string, at: string): void {
      const hit = cache.get(name);
      if (hit && at > (hit.last_activity || '')) hit.last_activity = at;
    },
    forget: (name: string) => cache.delete(name),
    clear: () => cache.clear(),
    get bytes() { return cache.bytes; },
  };
}

export type IdentityCache = ReturnType<typeof createIdentityCache>;
export type UserCache = ReturnType<typeof createUserCache>;
