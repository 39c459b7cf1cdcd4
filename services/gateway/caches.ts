// What the gateway remembers between requests, and forgets when an event says it is stale:
// token resolutions (from the tokens actor) and user records (from the auth actor).
// Every entry is also bounded by `Hub.cache_max_age`, and everything is dropped on a NATS
// reconnect, since events may have been missed meanwhile.
import type { HubError } from '../../shared/errors.js';
import type { AuthClient, TokensClient } from '../../shared/contracts/index.js';
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

export interface UserRecord { name: string; admin: boolean; groups: string[]; created: string; last_activity: string }

/** A Map with a size bound (oldest first out) and an age bound per entry. */
export class BoundedCache<V> {
  private entries = new Map<string, { value: V; until: number }>();
  constructor(private readonly maxEntries: number, private readonly maxAgeMs: number) {}

  get(key: string): V | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (e.until <= Date.now()) {
      this.entries.delete(key);
      return undefined;
    }
    return e.value;
  }

  set(key: string, value: V, untilMs = Infinity): void {
    if (this.entries.size >= this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, { value, until: Math.min(untilMs, Date.now() + this.maxAgeMs) });
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  deleteWhere(test: (v: V) => boolean): void {
    for (const [k, e] of this.entries) if (test(e.value)) this.entries.delete(k);
  }

  clear(): void {
    this.entries.clear();
  }
}

export function createIdentityCache(tokens: TokensClient, maxAgeMs: number) {
  const cache = new BoundedCache<Identity>(100_000, maxAgeMs);
  /** in-flight resolutions, so a burst of requests with one new token asks once */
  const inflight = new Map<string, Promise<Identity | null>>();

  async function ask(token: string, key: string, requestId?: string): Promise<Identity | null> {
    const r = await tokens.resolveToken({ token }, requestId ? { request: { requestId } } : undefined);
    if (!r.found) return null;
    const identity: Identity = { owner: r.owner as Owner, tokenId: r.token_id, sessionId: r.session_id, scopes: new Set(r.scopes) };
    // kept until the token expires, or a share among its scopes does (the tokens actor also announces that)
    cache.set(key, identity, Math.min(r.expires_at_ms || Infinity, r.scopes_until_ms || Infinity));
    return identity;
  }

  return {
    /** `requestId`: of the request that asks, passed to the tokens actor on a miss */
    async resolve(token: string, requestId?: string): Promise<Identity | null> {
      const key = cacheKey(token);
      const hit = cache.get(key);
      if (hit) {
        identityHit.inc();
        return hit;
      }
      identityMiss.inc();
      let p = inflight.get(key);
      if (!p) {
        p = ask(token, key, requestId).finally(() => inflight.delete(key));
        inflight.set(key, p);
      }
      return p;
    },
    forgetToken: (tokenId: string) => cache.deleteWhere((i) => i.tokenId === tokenId),
    forgetOwner: (o: Owner) => cache.deleteWhere((i) => i.owner.kind === o.kind && i.owner.name === o.name),
    clear: () => cache.clear(),
  };
}

export function createUserCache(auth: AuthClient, maxAgeMs: number) {
  const cache = new BoundedCache<UserRecord>(200_000, maxAgeMs);
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
  };
}

export type IdentityCache = ReturnType<typeof createIdentityCache>;
export type UserCache = ReturnType<typeof createUserCache>;
