// Revocation at the front door. Servers and services keep a token's answer from the hub for their
// HUB_CACHE_MAX_AGE (300 s by default), so a revoked token, a deleted user's token or a token whose share was
// revoked would still reach them meanwhile. A proxied request that carries a hub API token (`Authorization:
// token|bearer X` or `?token=X`) is therefore judged before it is forwarded, from the gateway's memory (the
// identity cache and its verdicts, caches.ts, kept right by token.revoked / owner.changed events):
// - a token the tokens actor remembers as this hub's and no longer valid (revoked, expired, owner deleted): 403;
// - a valid token on a user server's route without access to that server (access:servers, a share revoked): 403;
// - a token that is not this hub's (a server's own token, say): forwarded, as is everything without a token
//   (cookies are the server's own business: the gateway cannot judge them).
// A token memory knows nothing of is asked about once (the request waits for that answer); the answer is kept.
import { errors, type HubError } from '../../../shared/errors.js';
import { hasScope } from '../../../shared/scopes.js';
import type { Identity, IdentityCache, TokenVerdict, UserCache } from '../caches.js';
import { tokenOfAuthorization } from '../http.js';
import type { RouteEntry } from './table.js';

/** null: forward; an error: answer it instead. */
export type GateAnswer = HubError | null;

/** The hub token a proxied request carries, if any: the Authorization header's, else the query's `token`. */
export function proxiedToken(authorization: string, query: string): string | null {
  if (authorization) {
    const token = tokenOfAuthorization(authorization);
    if (token) return token;
  }
  // most queries carry no token: no parse for them
  return query && query.includes('token=') ? new URLSearchParams(query).get('token') || null : null;
}

const revoked = () => errors.forbidden('This token is no longer valid (revoked, expired, or its owner was deleted)', 'HUB_ERR_TOKEN_REVOKED');
const noAccess = (user: string, server: string) => errors.forbidden(`This token does not give access to the server ${user}/${server}`);

export function createTokenGate(identities: IdentityCache, users: UserCache) {
  /**
   * Per cached identity (its scope Set is never mutated, and a new one comes with every resolution), per server
   * route: may it reach that server. Only answers decided without group membership are kept (groups change).
   */
  const reach = new WeakMap<ReadonlySet<string>, Map<string, boolean>>();

  async function throughGroups(scopes: ReadonlySet<string>, user: string, server: string): Promise<GateAnswer> {
    const groups = (await users.get(user))?.groups ?? [];
    return hasScope(scopes, 'access:servers', { kind: 'server', user, name: server, groups }) ? null : noAccess(user, server);
  }

  function decide(known: Identity | TokenVerdict, entry: RouteEntry): GateAnswer | Promise<GateAnswer> {
    if (known === 'unknown') return null;
    if (known === 'revoked') return revoked();
    const { user, server_name: server } = entry.route.data;
    // services and routes added over the API decide themselves what a valid token may do there
    if (typeof user !== 'string' || typeof server !== 'string') return null;
    let routes = reach.get(known.scopes);
    if (!routes) reach.set(known.scopes, (routes = new Map()));
    const spec = entry.route.routespec;
    const memo = routes.get(spec);
    if (memo !== undefined) return memo ? null : noAccess(user, server);
    if (hasScope(known.scopes, 'access:servers', { kind: 'server', user, name: server, groups: [] })) {
      routes.set(spec, true);
      return null;
    }
    return throughGroups(known.scopes, user, server);
  }

  return {
    /** What to do with a request carrying `token` to `entry`: at once from memory when it can, else a promise. */
    check(token: string, entry: RouteEntry): GateAnswer | Promise<GateAnswer> {
      const known = identities.judge(token);
      return known instanceof Promise ? known.then((k) => decide(k, entry)) : decide(known, entry);
    },
  };
}

export type TokenGate = ReturnType<typeof createTokenGate>;
