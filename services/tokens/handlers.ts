// The tokens actor's operations: resolving a token to its owner and effective scopes, and the token
// lifecycle. Owner scopes come from roles (shared/roles.ts) and the owner's current admin flag and
// groups (asked of the auth actor, cached until an event says they changed), plus the user's live shares
// (shares.ts: granted to them or to one of their groups).
import type { AuditPublisher } from '../../shared/audit.js';
import { BoundedCache, stringBytes } from '../../shared/bounded-cache.js';
import { collectAfterBurst } from '../../shared/idle-gc.js';
import { currentRequest } from '../../shared/context.js';
import type { CallContext } from '../../shared/contracts/index.js';
import type { Announce } from '../../shared/nats.js';
import { errors } from '../../shared/errors.js';
import { roleBook, rolesOfService, rolesOfUser, scopesOfRoles, configuredServices, type ServiceConfig, type UserFacts } from '../../shared/roles.js';
import {
  effectiveTokenScopes, expandScopes, intersectScopes, missingScopes, scopeOnServer, validateScopes, type ScopeOwner,
} from '../../shared/scopes.js';
import { GENERATED_ROUNDS, hashSecret, newToken, tokenPrefix, verifySecret } from '../../shared/secrets.js';
import { isoNow } from '../../shared/time.js';
import type { HubConfig } from '../../shared/config.js';
import type { Logger } from '../../shared/log.js';
import { createShareHandlers, scopesOfShares } from './shares.js';
import type { TokenRow, TokenStore } from './store.js';
import { pushAll } from '../../shared/lists.js';

export interface Owner { kind: 'user' | 'service'; name: string }
type SentOwner = { kind: string; name: string } | null | undefined;

/** An Owner sub-message as it arrives: absent or of another kind is the caller's mistake, not ours. */
export function ownerOf(o: SentOwner): Owner {
  if (!o || (o.kind !== 'user' && o.kind !== 'service') || !o.name) throw errors.badRequest('owner must name a user or a service');
  return { kind: o.kind, name: o.name };
}

export interface TokensDeps {
  config: HubConfig;
  store: TokenStore;
  audit: AuditPublisher;
  /** the user's admin flag and groups, from the auth actor; null when there is no such user */
  lookupUser: (name: string) => Promise<UserFacts | null>;
  /** a group's members, from the auth actor; null when there is no such group */
  groupMembers: (name: string) => Promise<string[] | null>;
  log: Logger;
  /** tells every gateway that cached resolutions are stale: of one token, of one owner, or all */
  announce: Announce;
  /** every service by name, configured and added at run time (shared/runtime-services.ts); default: the configured ones */
  services?: ReadonlyMap<string, ServiceConfig>;
}

export const tokenId = (row: { id: number }) => `a${row.id}`;

function parseTokenId(id: string): number | null {
  const m = /^a([1-9][0-9]{0,15})$/.exec(id);
  return m ? Number(m[1]) : null;
}

const ownerLabel = (o: Owner) => `${o.kind === 'user' ? 'User' : 'Service'} ${o.name}`;

/**
 * How long a token that left is remembered as this hub's (ResolveToken's `revoked`): servers keep a token's answer
 * for HUB_CACHE_MAX_AGE (300 s by default), so the gateway must refuse it at least that long; past this, a server
 * that meets it asks the hub, which refuses it.
 */
export const REVOKED_KEPT_MS = 3_600_000;

/** The latest expiry a four-digit-year timestamp holds (the established hub's datetime cannot go further either). */
const LATEST_EXPIRY_MS = Date.UTC(9999, 11, 31, 23, 59, 59);

/** `expires_in` seconds from now as an ISO time, null for 0 (never); a 400 for what no date can hold. */
export function expiryFromNow(expiresIn: number): string | null {
  if (!Number.isInteger(expiresIn) || expiresIn < 0) {
    throw errors.badRequest(`token expires_in must be a non-negative integer number of seconds, or 0 / null for no expiry, not ${String(expiresIn).slice(0, 40)}`);
  }
  if (expiresIn === 0) return null;
  const at = Date.now() + expiresIn * 1000;
  if (!(at <= LATEST_EXPIRY_MS)) throw errors.badRequest(`token expires_in: ${expiresIn} is too large (a token cannot expire after 9999-12-31)`);
  return new Date(at).toISOString();
}

interface OwnerInfo { roles: string[]; scopes: Set<string>; /** 0, or when a share in `scopes` expires */ untilMs: number }

export function createTokenHandlers({ config, store, audit, lookupUser, groupMembers, log, announce, services = new Map(configuredServices(config).map((s) => [s.name, s])) }: TokensDeps) {
  let book = roleBook(config);
  /** owner key → roles and expanded scopes; dropped when the owner changes (or a share in them expires) */
  // every owner's roles and scopes, kept until an event says they changed; bounded in bytes (a million users)
  const ownerCache = new BoundedCache<OwnerInfo | null>(config.Hub.cache_max_bytes / 2, Infinity, (info) => {
    if (!info) return 16;
    let n = 120;
    for (const r of info.roles) n += 8 + stringBytes(r);
    for (const sc of info.scopes) n += 32 + stringBytes(sc);
    return n;
  });

  const keyOf = (o: Owner) => `${o.kind}:${o.name}`;

  async function ownerInfo(owner: Owner): Promise<OwnerInfo | null> {
    const key = keyOf(owner);
    const hit = ownerCache.get(key);
    if (hit === null || (hit && (!hit.untilMs || hit.untilMs > Date.now()))) return hit;
    let info: OwnerInfo | null = null;
    if (owner.kind === 'service') {
      const svc = services.get(owner.name);
      const roles = svc ? rolesOfService(book, svc) : null;
      info = roles ? { roles, scopes: scopesOfRoles(book, roles, owner), untilMs: 0 } : null;
    } else {
      const facts = await lookupUser(owner.name);
      if (facts) {
        const roles = rolesOfUser(book, facts);
        const scopes = scopesOfRoles(book, roles, owner);
        const shared = scopesOfShares(await store.sharesFor(facts.name, facts.groups, isoNow()));
        for (const s of shared.scopes) scopes.add(s);
        info = { roles, scopes, untilMs: shared.untilMs };
      }
    }
    ownerCache.set(key, info);
    return info;
  }

  /** `hub reload`: the roles of a reloaded configuration; every owner's scopes are worked out again */
  function useRoles(next: HubConfig): void {
    book = roleBook(next);
    ownerCache.clear();
  }

  function forgetOwner(owner: Owner): void {
    ownerCache.delete(keyOf(owner));
    announce('owner', 'changed', { kind: owner.kind, name: owner.name });
  }

  /** owner.changed from any tokens actor (another node's, or the one `hub restart` replaces): the cached scopes go */
  function onOwnerChanged(body: { kind?: unknown; name?: unknown } | null): void {
    if ((body?.kind === 'user' || body?.kind === 'service') && typeof body.name === 'string') ownerCache.delete(keyOf({ kind: body.kind, name: body.name }));
  }

  /**
   * Uses reported by gateways (row id → ISO time): shown at once by every read, written to the store at most
   * once per flush, so a busy token costs no write per request.
   */
  const pendingUse = new Map<number, string>();
  const lastUse = (row: TokenRow): string => {
    const p = pendingUse.get(row.id);
    return p && (!row.last_activity || p > row.last_activity) ? p : row.last_activity ?? '';
  };
  const shares = createShareHandlers({
    store, audit, log, lookupUser, groupMembers,
    forgetUsers: (names) => { for (const name of names) forgetOwner({ kind: 'user', name }); },
  });

  const rawScopes = (row: TokenRow): string[] => JSON.parse(row.scopes);
  const isExpired = (row: TokenRow) => row.expires_at !== null && row.expires_at <= isoNow();

  async function effectiveScopes(row: TokenRow): Promise<Set<string> | null> {
    const owner: Owner = { kind: row.owner_kind, name: row.owner_name };
    const info = await ownerInfo(owner);
    return info ? effectiveTokenScopes(rawScopes(row), { owner, ownerScopes: info.scopes, serverToken: row.source === 'server' }) : null;
  }

  async function model(row: TokenRow) {
    return {
      id: tokenId(row),
      owner: { kind: row.owner_kind, name: row.owner_name },
      note: row.note,
      scopes: [...((await effectiveScopes(row)) ?? [])].sort(),
      created: row.created,
      last_activity: lastUse(row),
      expires_at: row.expires_at ?? '',
      session_id: row.session_id ?? '',
      oauth_client: row.oauth_client === 'hub' ? 'Hub' : row.oauth_client,
    };
  }

  async function findByToken(token: string): Promise<TokenRow | undefined> {
    for (const row of await store.byPrefix(tokenPrefix(token))) {
      if (!isExpired(row) && verifySecret(token, row.hashed)) return row;
    }
    return undefined;
  }

  /** A token this hub issued and that left within REVOKED_KEPT_MS (revoked, expired, its owner deleted). */
  async function wasToken(token: string): Promise<boolean> {
    const now = Date.now();
    const hashes = await store.goneByPrefix(tokenPrefix(token), new Date(now - REVOKED_KEPT_MS).toISOString(), new Date(now).toISOString());
    return hashes.some((hashed) => verifySecret(token, hashed));
  }

  async function mustOwnerExist(owner: Owner): Promise<OwnerInfo> {
    const info = await ownerInfo(owner);
    if (!info) throw errors.notFound(`No such ${owner.kind}: ${owner.name}`, owner.kind === 'user' ? 'HUB_ERR_USER_NOT_FOUND' : 'HUB_ERR_SERVICE_NOT_FOUND');
    return info;
  }

  /** Stores a token and returns its row id; the plaintext is not kept. */
  async function register(owner: Owner, token: string, scopes: string[], note: string, opts: {
    rounds: number; source: string; expiresAt?: string | null; sessionId?: string | null; oauthClient?: string;
  }): Promise<number> {
    return store.insert({
      prefix: tokenPrefix(token), hashed: hashSecret(token, opts.rounds), owner_kind: owner.kind, owner_name: owner.name,
      scopes: JSON.stringify(scopes), note, created: isoNow(), expires_at: opts.expiresAt ?? null, session_id: opts.sessionId ?? null,
      oauth_client: opts.oauthClient ?? 'hub', source: opts.source,
    });
  }

  return {
    ownerInfo,
    forgetOwner,
    onOwnerChanged,
    useRoles,
    findByToken,
    register,
    shares,

    async resolveToken(r: { token: string }) {
      const none = { found: false };
      if (typeof r.token !== 'string' || r.token.length < 8 || r.token.length > 512) return none;
      const row = await findByToken(r.token);
      if (!row) return (await wasToken(r.token)) ? { found: false, revoked: true } : none;
      const owner: Owner = { kind: row.owner_kind, name: row.owner_name };
      const info = await ownerInfo(owner);
      if (!info) return { found: false, revoked: true }; // its owner is gone
      const scopes = effectiveTokenScopes(rawScopes(row), { owner, ownerScopes: info.scopes, serverToken: row.source === 'server' });
      return {
        found: true, owner, token_id: tokenId(row), scopes: [...scopes],
        expires_at_ms: row.expires_at ? Date.parse(row.expires_at) : 0, session_id: row.session_id ?? '', scopes_until_ms: info.untilMs,
      };
    },

    async ownerScopes(sent: SentOwner) {
      const info = await mustOwnerExist(ownerOf(sent));
      return { roles: info.roles, scopes: [...info.scopes], scopes_until_ms: info.untilMs };
    },

    async createToken(sent: {
      owner: SentOwner; requester: SentOwner; note: string; expires_in: number; has_scopes: boolean; scopes: string[];
      has_roles: boolean; roles: string[]; requester_scopes?: string[];
    }, call?: CallContext) {
      const r = { ...sent, owner: ownerOf(sent.owner), requester: ownerOf(sent.requester) };
      const owner = r.owner;
      const info = await mustOwnerExist(owner);
      if (r.has_scopes && r.has_roles) throw errors.badRequest('Can only assign one of scopes or roles when creating tokens.');
      // Hub.token_expires_in_max_seconds (the established hub 5.1's): no expiry asked means the longest allowed;
      // more is refused (0 is "no expiry asked", not a way round the limit)
      const maxSeconds = config.Hub.token_expires_in_max_seconds;
      if (maxSeconds > 0 && r.expires_in > maxSeconds) throw errors.badRequest(`token expires_in: ${r.expires_in} must not exceed ${maxSeconds}`);
      const expiresAt = expiryFromNow(maxSeconds > 0 && !(r.expires_in > 0) ? maxSeconds : r.expires_in);
      let requested: string[];
      if (r.has_roles) {
        const unknown = r.roles.find((name) => !book.has(name));
        if (unknown !== undefined) throw errors.badRequest(`No such role: ${unknown}`, 'HUB_ERR_ROLE_NOT_FOUND');
        requested = r.roles.flatMap((name) => book.get(name)!.scopes);
      } else if (r.has_scopes) {
        const v = validateScopes(r.scopes);
        if (!v.ok) throw errors.badRequest(v.reason, 'HUB_ERR_SCOPE_INVALID');
        requested = [...r.scopes];
      } else {
        requested = [...book.get('token')!.scopes];
      }
      // Each requested scope must be held by the owner, and by the requester when someone else asks.
      const holders: [Set<string>, string][] = [[info.scopes, ownerLabel(owner)]];
      const byOther = r.requester.kind !== owner.kind || r.requester.name !== owner.name;
      if (byOther) holders.push([new Set(r.requester_scopes ?? []), ownerLabel(r.requester)]);
      for (const [held, label] of holders) {
        const lacking = requested.filter((s) => s !== 'inherit' && missingScopes(expandScopes([s], owner), held).length > 0);
        if (lacking.length) throw errors.badRequest(`Not assigning requested scopes ${lacking.join(', ')} not held by ${label}`, 'HUB_ERR_SCOPE_NOT_HELD');
      }
      const requesterHeld = new Set(r.requester_scopes ?? []);
      if (byOther && requested.includes('inherit') && missingScopes(info.scopes, requesterHeld).length > 0) {
        // "everything the owner has" would exceed what this requester may hand out: pin it to what both hold
        requested = [...intersectScopes(info.scopes, requesterHeld)];
      }
      const token = newToken();
      const note = r.note || `Requested via api${byOther ? ` by ${r.requester.kind} ${r.requester.name}` : ''}`;
      if (call?.cancelled) throw errors.timeout('creating the token'); // the requester already had its 504
      const id = await register(owner, token, requested, note, { rounds: GENERATED_ROUNDS, source: 'api', expiresAt });
      void audit.publish('token', 'create', { who: `${r.requester.kind}:${r.requester.name}`, what: `${owner.kind}:${owner.name}/a${id}`, outcome: 'ok', scopes: requested, expires_at: expiresAt });
      return { model: await model((await store.byId(id))!), token };
    },

    async issueServerToken(r: { user: string; server_name: string; url: string }) {
      const owner: Owner = { kind: 'user', name: r.user };
      await mustOwnerExist(owner);
      const token = newToken();
      const scopes = ['users:activity!user', `access:servers!server=${r.user}/${r.server_name}`, scopeOnServer('servers:location', r.user, r.server_name)];
      const id = await register(owner, token, scopes, `Server at ${r.url}`, { rounds: GENERATED_ROUNDS, source: 'server' });
      // the person who started the server asked for it (the spawner's call carries them); the spawner on its own otherwise
      void audit.publish('token', 'create', { who: currentRequest()?.who ?? 'actor:spawner', what: `user:${r.user}/a${id}`, outcome: 'ok', scopes, server: r.server_name, kind: 'server' });
      return { model: await model((await store.byId(id))!), token };
    },

    async revokeSessionTokens(r: { user: string; session_id: string; by: string }) {
      if (!r.session_id) return {};
      const ids = await store.deleteBySession(r.user, r.session_id);
      for (const id of ids) announce('token', 'revoked', { token_id: `a${id}`, kind: 'user', name: r.user });
      if (ids.length) void audit.publish('token', 'delete', { who: r.by, what: `user:${r.user}`, outcome: 'ok', reason: 'logout', tokens: ids.map((id) => `a${id}`) });
      return {};
    },

    /**
     * An OAuth access token: owned by the user, tied to the login session (logout revokes it) and to the
     * client. The scopes are stored as the code carried them, so they name the client's access scope.
     */
    async issueOAuthToken(r: { user: string; scopes: string[]; session_id: string; oauth_client: string; note: string; expires_in: number }, call?: CallContext) {
      const owner: Owner = { kind: 'user', name: r.user };
      await mustOwnerExist(owner);
      const v = validateScopes(r.scopes);
      if (!v.ok) throw errors.badRequest(v.reason, 'HUB_ERR_SCOPE_INVALID');
      if (!r.oauth_client || r.oauth_client === 'hub') throw errors.badRequest('an OAuth token needs its client');
      const token = newToken();
      const expiresAt = expiryFromNow(Math.ceil(r.expires_in));
      if (call?.cancelled) throw errors.timeout('issuing the token'); // nobody would receive it
      const id = await register(owner, token, r.scopes, r.note, {
        rounds: GENERATED_ROUNDS, source: 'oauth', expiresAt, sessionId: r.session_id || null, oauthClient: r.oauth_client,
      });
      void audit.publish('token', 'create', { who: `oauth:${r.oauth_client}`, what: `user:${r.user}/a${id}`, outcome: 'ok', scopes: r.scopes, expires_at: expiresAt });
      return { model: await model((await store.byId(id))!), token };
    },

    /** `hub token <user>`: everything the user may do ('inherit'), recorded as asked for by the operator. */
    async issueUserToken(r: { user: string; note: string; by: string }, call?: CallContext) {
      if (!r.by) throw errors.badRequest('by: who asks for the token');
      const owner: Owner = { kind: 'user', name: r.user };
      await mustOwnerExist(owner);
      const token = newToken();
      if (call?.cancelled) throw errors.timeout('issuing the token'); // nobody would receive it
      const id = await register(owner, token, ['inherit'], r.note || 'command-line generated', { rounds: GENERATED_ROUNDS, source: 'cli' });
      void audit.publish('token', 'create', { who: r.by, what: `user:${r.user}/a${id}`, outcome: 'ok', scopes: ['inherit'] });
      return { model: await model((await store.byId(id))!), token };
    },

    /** By id (a reused authorization code) and/or by issuing client (a client removed). */
    async revokeTokens(r: { ids: string[]; oauth_client: string; by: string; reason: string; user?: string }) {
      const gone: { id: number; owner_kind: string; owner_name: string }[] = [];
      if (r.user) {
        // a deleted user: gone before the answer (the user.deleted event finds nothing left, and announces the owner)
        for (const id of await store.deleteOwner('user', r.user)) gone.push({ id, owner_kind: 'user', owner_name: r.user });
        forgetOwner({ kind: 'user', name: r.user });
      }
      for (const id of r.ids ?? []) {
        const n = parseTokenId(id);
        const row = n === null ? undefined : await store.byId(n);
        if (row && (await store.delete(row.id))) gone.push(row);
      }
      if (r.oauth_client && r.oauth_client !== 'hub') pushAll(gone, await store.deleteByClient(r.oauth_client));
      for (const row of gone) announce('token', 'revoked', { token_id: tokenId(row), kind: row.owner_kind, name: row.owner_name });
      if (gone.length) void audit.publish('token', 'delete', { who: r.by, what: r.user ? `user:${r.user}` : r.oauth_client || 'tokens', outcome: 'ok', reason: r.reason, tokens: gone.map(tokenId) });
      return { ids: gone.map(tokenId) };
    },

    async listTokens(sent: SentOwner) {
      const owner = ownerOf(sent);
      await mustOwnerExist(owner);
      const now = isoNow();
      const rows = (await store.byOwner(owner.kind, owner.name)).filter((row) => !(row.expires_at && row.expires_at <= now));
      // the store's order (last use, else creation) with uses not written yet
      const key = (row: TokenRow) => lastUse(row) || row.created;
      rows.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : a.id - b.id));
      return { tokens: await Promise.all(rows.map(model)) };
    },

    /** hub.tokens.activity from a gateway: {tokens: {"a12": iso}}; unknown or malformed ids are ignored. */
    noteUse(body: { tokens?: Record<string, string> }) {
      for (const [id, at] of Object.entries(body?.tokens ?? {})) {
        const n = parseTokenId(id);
        if (n !== null && typeof at === 'string' && at > (pendingUse.get(n) ?? '')) pendingUse.set(n, at);
      }
      return {};
    },

    async flushUse(): Promise<void> {
      if (!pendingUse.size) return;
      const batch = new Map(pendingUse);
      pendingUse.clear();
      await store.recordActivity(batch);
    },

    async getToken(r: { owner: SentOwner; id: string }) {
      return model(await mustFind(ownerOf(r.owner), r.id));
    },

    async deleteToken(r: { owner: SentOwner; id: string; by: string }) {
      const row = await mustFind(ownerOf(r.owner), r.id);
      await store.delete(row.id);
      announce('token', 'revoked', { token_id: tokenId(row), kind: row.owner_kind, name: row.owner_name });
      void audit.publish('token', 'delete', { who: r.by, what: `${row.owner_kind}:${row.owner_name}/${tokenId(row)}`, outcome: 'ok' });
      return {};
    },

    /** Reacts to identity changes announced by the auth actor. */
    async onUserEvent(change: string, body: { name: string; renamed_to?: string; users?: string[]; by?: string }) {
      if (change === 'deleted' && body.renamed_to) {
        await store.renameOwner('user', body.name, body.renamed_to);
        await shares.renameUser(body.name, body.renamed_to);
        forgetOwner({ kind: 'user', name: body.name });
        forgetOwner({ kind: 'user', name: body.renamed_to });
      } else if (change === 'deleted') {
        const ids = await store.deleteOwner('user', body.name);
        if (ids.length) void audit.publish('token', 'delete', { who: body.by || 'actor:tokens', what: `user:${body.name}`, outcome: 'ok', reason: 'user deleted', tokens: ids.map((id) => `a${id}`) });
        forgetOwner({ kind: 'user', name: body.name });
        await shares.forgetUser(body.name); // their servers' grantees lose access, shares to them go
      } else if (change === 'updated') {
        forgetOwner({ kind: 'user', name: body.name });
      } else if (change === 'created') {
        collectAfterBurst(); // a bulk create is thousands of these: collect once they stop
        // a new user has nothing cached anywhere, unless this actor remembered the name's absence: a bulk create
        // of a million users is not a million owner.changed events for every gateway
        if (ownerCache.has(keyOf({ kind: 'user', name: body.name }))) forgetOwner({ kind: 'user', name: body.name });
      } // `activity` changes nothing a token may do
    },

    /** Membership changes and deletions change the members' scopes (group roles, group shares). */
    async onGroupEvent(change: string, body: { name: string; users?: string[] }) {
      for (const name of body.users ?? []) forgetOwner({ kind: 'user', name });
      if (change === 'deleted') await shares.forgetGroup(body.name);
    },

    async purgeExpired(): Promise<void> {
      const ids = await store.deleteExpired(isoNow());
      for (const id of ids) announce('token', 'revoked', { token_id: `a${id}` });
      await store.pruneRevoked(new Date(Date.now() - REVOKED_KEPT_MS).toISOString());
    },
  };

  async function mustFind(owner: Owner, id: string): Promise<TokenRow> {
    const n = parseTokenId(id);
    const row = n === null ? undefined : await store.byId(n);
    if (!row || row.owner_kind !== owner.kind || row.owner_name !== owner.name || isExpired(row)) {
      throw errors.notFound(`No such token ${id.slice(0, 40)} for ${owner.kind} ${owner.name}`, 'HUB_ERR_TOKEN_NOT_FOUND');
    }
    return row;
  }
}

export type TokenHandlers = ReturnType<typeof createTokenHandlers>;
export type { ScopeOwner };
