// Shares and share codes (reference §2.11): a user or a group granted scopes on one server, kept here beside
// the tokens because they are part of every scope decision: a grantee's owner scopes (handlers.ts ownerInfo)
// are their roles' scopes plus their live shares. Every change drops the affected grantees' cached scopes and
// announces owner.changed for each of them (the gateways' identity caches drop on it); expiring shares (from a
// code) are removed by a timer set to the next expiry, so access ends when the code does, not at the next purge.
import { randomBytes } from 'node:crypto';
import type { AuditPublisher } from '../../shared/audit.js';
import type { CallContext } from '../../shared/contracts/index.js';
import { errors } from '../../shared/errors.js';
import type { Logger } from '../../shared/log.js';
import type { UserFacts } from '../../shared/roles.js';
import { expandScopes, META_SCOPES, missingScopes, parseScope, scopeOnServer, validateScopes } from '../../shared/scopes.js';
import { GENERATED_ROUNDS, hashSecret, tokenPrefix, verifySecret } from '../../shared/secrets.js';
import { SHARE_CODE_DEFAULT_SECONDS, SHARE_CODE_MAX_SECONDS, SHARE_CODE_MIN_SECONDS } from '../../shared/shares.js';
import { isoNow } from '../../shared/time.js';
import type { ShareCodeRow, ShareRow, TokenStore } from './store.js';

export interface ShareDeps {
  store: TokenStore;
  audit: AuditPublisher;
  log: Logger;
  lookupUser: (name: string) => Promise<UserFacts | null>;
  /** a group's members, or null when there is no such group */
  groupMembers: (name: string) => Promise<string[] | null>;
  /** drops the users' cached owner scopes and announces owner.changed for each */
  forgetUsers: (names: Iterable<string>) => void;
}

type Grantee = { kind: 'user' | 'group'; name: string };
type SentGrantee = { kind: string; name: string } | null | undefined;

const DEFAULT_SCOPES = ['access:servers'];
/** setTimeout's longest delay; a later expiry is looked at again after this */
const MAX_TIMER_MS = 2_147_483_647;

function granteeOf(g: SentGrantee): Grantee {
  if (!g || (g.kind !== 'user' && g.kind !== 'group') || !g.name) throw errors.badRequest("Specify exactly one of 'user' or 'group'", 'HUB_ERR_SHARE_INVALID');
  return { kind: g.kind, name: g.name };
}

const bases = (row: { scopes: string }): string[] => JSON.parse(row.scopes);

/** A share's scopes as granted: every base limited to its server. */
export const shareScopes = (row: ShareRow | ShareCodeRow): string[] => bases(row).map((b) => scopeOnServer(b, row.owner, row.server_name));

/** The expanded scopes a grantee's live shares give (added to their roles' scopes), and when the first of them ends. */
export function scopesOfShares(rows: ShareRow[]): { scopes: Set<string>; untilMs: number } {
  const scopes = expandScopes(rows.flatMap(shareScopes));
  let untilMs = 0;
  for (const r of rows) {
    const end = r.expires_at ? Date.parse(r.expires_at) : 0;
    if (end && (!untilMs || end < untilMs)) untilMs = end;
  }
  return { scopes, untilMs };
}

/**
 * Requested scopes → the bases to store. A scope may be unfiltered or filtered to this very server; anything
 * else (another filter, a metascope, an unknown scope) is the client's mistake.
 */
export function shareBases(scopes: string[] | null, owner: string, server: string): string[] {
  if (scopes === null) return DEFAULT_SCOPES;
  const v = validateScopes(scopes);
  if (!v.ok) throw errors.badRequest(v.reason, 'HUB_ERR_SCOPE_INVALID');
  const out = new Set<string>();
  for (const s of scopes) {
    const p = parseScope(s)!;
    if (META_SCOPES.has(p.base)) throw errors.badRequest(`Scope '${s}' cannot be shared`, 'HUB_ERR_SCOPE_INVALID');
    const fits = !p.selfFilter && (!p.filter || (p.filter.kind === 'server' && p.filter.value === `${owner}/${server}`));
    if (!fits) throw errors.badRequest(`Shared scopes may only be limited to the shared server (!server=${owner}/${server}), not '${s}'`, 'HUB_ERR_SCOPE_INVALID');
    out.add(p.base);
  }
  if (!out.size) throw errors.badRequest('Specify at least one scope to share, or none for access', 'HUB_ERR_SCOPE_INVALID');
  return [...out].sort();
}

export function createShareHandlers({ store, audit, log, lookupUser, groupMembers, forgetUsers }: ShareDeps) {
  const label = (owner: string, server: string) => `${owner}/${server}`;
  const granteeLabel = (row: { grantee_kind: string; grantee: string }) => `${row.grantee_kind}:${row.grantee}`;

  function model(row: ShareRow) {
    return {
      owner: row.owner, server_name: row.server_name, grantee: { kind: row.grantee_kind, name: row.grantee }, scopes: shareScopes(row),
      created_at: row.created_at, expires_at: row.expires_at ?? '', created_by: row.created_by,
    };
  }

  function codeModel(row: ShareCodeRow) {
    return {
      id: `sc_${row.id}`, owner: row.owner, server_name: row.server_name, scopes: shareScopes(row), created_at: row.created_at,
      expires_at: row.expires_at, exchange_count: row.exchange_count, last_exchanged_at: row.last_exchanged_at ?? '', created_by: row.created_by,
    };
  }

  /** The users whose scopes these shares touched: user grantees, and every member of a group grantee. */
  async function affectedBy(rows: ShareRow[]): Promise<string[]> {
    const users = new Set<string>();
    for (const r of rows) {
      if (r.grantee_kind === 'user') users.add(r.grantee);
      else for (const m of (await groupMembers(r.grantee)) ?? []) users.add(m);
    }
    return [...users];
  }

  async function changed(rows: ShareRow[]): Promise<string[]> {
    const affected = await affectedBy(rows);
    forgetUsers(affected);
    return affected;
  }

  /** Nothing is granted beyond what the requester holds (checked against the server's owner's groups too). */
  async function mustHold(owner: string, server: string, scopeBases: string[], held: ReadonlySet<string>): Promise<void> {
    const groups = (await lookupUser(owner))?.groups ?? [];
    const ctx = { groupsOfUser: (u: string) => (u === owner ? groups : []) };
    for (const b of scopeBases) {
      const scope = scopeOnServer(b, owner, server);
      if (missingScopes(expandScopes([scope]), held, ctx).length) {
        throw errors.forbidden(`Do not have permission to grant share with scope ${scope}`, 'HUB_ERR_SHARE_SCOPE_NOT_HELD');
      }
    }
  }

  async function mustOwner(owner: string): Promise<void> {
    if (!owner || !(await lookupUser(owner))) throw errors.notFound(`No such user: ${owner}`, 'HUB_ERR_USER_NOT_FOUND');
  }

  async function mustGrantee(g: Grantee, owner: string): Promise<void> {
    if (g.kind === 'user') {
      if (!(await lookupUser(g.name))) throw errors.badRequest(`No such user: ${g.name}`, 'HUB_ERR_SHARE_TARGET_NOT_FOUND');
      if (g.name === owner) throw errors.badRequest(`${owner} owns this server: it needs no share`, 'HUB_ERR_SHARE_INVALID');
    } else if ((await groupMembers(g.name)) === null) {
      throw errors.badRequest(`No such group: ${g.name}`, 'HUB_ERR_SHARE_TARGET_NOT_FOUND');
    }
  }

  async function findCode(code: string): Promise<ShareCodeRow> {
    if (typeof code === 'string' && code.length >= 8 && code.length <= 512) {
      for (const row of await store.codesByPrefix(tokenPrefix(code), isoNow())) if (verifySecret(code, row.hashed)) return row;
    }
    throw errors.notFound('This share code is unknown or has expired', 'HUB_ERR_SHARE_CODE_NOT_FOUND');
  }

  // ---- expiry: one timer, set to the next share or code expiry ----------------------------------

  let timer: NodeJS.Timeout | undefined;
  let stopped = false;

  async function expireDue(): Promise<void> {
    const now = isoNow();
    const gone = await store.deleteExpiredShares(now);
    const codes = await store.deleteExpiredCodes(now);
    if (gone.length) {
      const affected = await changed(gone);
      for (const row of gone) void audit.publish('share', 'expire', { who: 'actor:tokens', what: label(row.owner, row.server_name), outcome: 'ok', grantee: granteeLabel(row), affected });
    }
    if (codes) log.info({ event: 'share_code.expired', count: codes }, 'share codes expired');
  }

  /** Looks for the next expiry and sets the timer for it (a few ms after, so the row is due when it fires). */
  async function schedule(): Promise<void> {
    if (stopped) return;
    const next = await store.nextExpiry(isoNow());
    clearTimeout(timer);
    timer = undefined;
    if (!next) return;
    const delay = Math.min(Math.max(Date.parse(next) - Date.now() + 5, 0), MAX_TIMER_MS);
    timer = setTimeout(() => {
      void expireDue()
        .catch((err) => log.error({ event: 'share.expire.failed', err }, 'expired shares not removed'))
        .finally(() => void schedule().catch((err) => log.error({ event: 'share.schedule.failed', err }, 'next share expiry not scheduled')));
    }, delay);
    timer.unref();
  }

  return {
    model,
    codeModel,
    /** at start: what expired while the actor was down goes now, then the timer */
    async start(): Promise<void> {
      await expireDue();
      await schedule();
    },
    stop(): void {
      stopped = true;
      clearTimeout(timer);
    },

    async grantShare(r: {
      owner: string; server_name: string; grantee: SentGrantee; has_scopes: boolean; scopes: string[]; requester_scopes: string[]; by: string;
    }, call?: CallContext) {
      const grantee = granteeOf(r.grantee);
      await mustOwner(r.owner);
      const scopeBases = shareBases(r.has_scopes ? r.scopes : null, r.owner, r.server_name);
      await mustGrantee(grantee, r.owner);
      await mustHold(r.owner, r.server_name, scopeBases, new Set(r.requester_scopes));
      if (call?.cancelled) throw errors.timeout('granting the share');
      const before = await store.share(r.owner, r.server_name, grantee.kind, grantee.name, isoNow());
      const row = await store.upsertShare({
        owner: r.owner, server_name: r.server_name, grantee_kind: grantee.kind, grantee: grantee.name, scopes: scopeBases,
        created_at: isoNow(), created_by: r.by, expires_at: null,
      });
      const affected = await changed([row]);
      void audit.publish('share', before ? 'change' : 'grant', {
        who: r.by, what: label(r.owner, r.server_name), outcome: 'ok', grantee: granteeLabel(row), scopes: shareScopes(row), affected,
      });
      return { found: true, share: model(row), affected };
    },

    async revokeShare(r: { owner: string; server_name: string; grantee: SentGrantee; has_scopes: boolean; scopes: string[]; by: string }) {
      const grantee = granteeOf(r.grantee);
      // no scopes listed (absent or empty): everything goes
      const revoked = r.has_scopes && r.scopes.length ? shareBases(r.scopes, r.owner, r.server_name) : null;
      const row = await store.share(r.owner, r.server_name, grantee.kind, grantee.name, isoNow());
      if (!row) return { found: false, affected: [] };
      const remaining = revoked === null ? [] : bases(row).filter((b) => !revoked.includes(b));
      if (remaining.length) await store.setShareScopes(row.id, remaining);
      else await store.deleteShare(row.id);
      const affected = await changed([row]);
      void audit.publish('share', remaining.length ? 'change' : 'revoke', {
        who: r.by, what: label(r.owner, r.server_name), outcome: 'ok', grantee: granteeLabel(row), revoked: revoked ?? 'all', affected,
      });
      return remaining.length ? { found: true, share: model({ ...row, scopes: JSON.stringify(remaining) }), affected } : { found: false, affected };
    },

    /** Every share of a server (DELETE /shares/<o>/<s>), or one grantee's (leaving a share); count 0 when there was none. */
    async deleteShares(q: { owner: string; has_server: boolean; server_name: string; grantee: SentGrantee; by: string }) {
      if (!q.has_server) throw errors.badRequest('Name the server whose shares go');
      let rows: ShareRow[];
      if (q.grantee?.name) {
        const g = granteeOf(q.grantee);
        const row = await store.share(q.owner, q.server_name, g.kind, g.name, isoNow());
        if (row) await store.deleteShare(row.id);
        rows = row ? [row] : [];
      } else {
        rows = await store.deleteSharesOfServer(q.owner, q.server_name);
      }
      const affected = await changed(rows);
      for (const row of rows) {
        void audit.publish('share', 'revoke', { who: q.by, what: label(row.owner, row.server_name), outcome: 'ok', grantee: granteeLabel(row), affected });
      }
      return { count: rows.length, affected };
    },

    /** By owner (and server), or by grantee (a user's with with_groups: direct and through their groups). */
    async listShares(q: { owner: string; has_server: boolean; server_name: string; grantee: SentGrantee; with_groups: boolean }) {
      const now = isoNow();
      let rows: ShareRow[];
      if (q.grantee?.name) {
        const g = granteeOf(q.grantee);
        const groups = g.kind === 'user' && q.with_groups ? (await lookupUser(g.name))?.groups ?? [] : [];
        rows = g.kind === 'user' ? await store.sharesFor(g.name, groups, now) : await store.sharesFor(null, [g.name], now);
        if (q.owner) rows = rows.filter((r) => r.owner === q.owner && (!q.has_server || r.server_name === q.server_name));
      } else {
        rows = await store.sharesOf(q.owner, q.has_server ? q.server_name : null, now);
      }
      return { shares: rows.map(model) };
    },

    /** A removed server takes its shares and codes along. */
    async forgetServer(r: { owner: string; server_name: string; by: string }) {
      const rows = await store.deleteSharesOfServer(r.owner, r.server_name);
      const codes = await store.deleteCodesOfServer(r.owner, r.server_name);
      const affected = await changed(rows);
      if (rows.length || codes) {
        void audit.publish('share', 'revoke', { who: r.by, what: label(r.owner, r.server_name), outcome: 'ok', reason: 'server removed', shares: rows.length, codes, affected });
      }
      return { count: rows.length, affected };
    },

    /** A deleted user takes along the shares of their servers, the shares granted to them, and their codes. */
    async forgetUser(name: string): Promise<void> {
      const rows = await store.deleteSharesOfUser(name);
      const codes = await store.deleteCodesOfOwner(name);
      const affected = (await affectedBy(rows)).filter((u) => u !== name);
      forgetUsers(affected);
      if (rows.length || codes) void audit.publish('share', 'revoke', { who: 'actor:tokens', what: `user:${name}`, outcome: 'ok', reason: 'user deleted', shares: rows.length, codes, affected });
    },

    async renameUser(from: string, to: string): Promise<void> {
      await store.renameInShares(from, to);
      // the grantees of the renamed owner's servers now hold scopes under the new name
      forgetUsers(await affectedBy(await store.sharesOf(to, null, isoNow())));
    },

    async forgetGroup(name: string): Promise<void> {
      const rows = await store.deleteSharesToGroup(name);
      if (rows.length) void audit.publish('share', 'revoke', { who: 'actor:tokens', what: `group:${name}`, outcome: 'ok', reason: 'group deleted', shares: rows.length });
      // the members were told by the group event itself (handlers.ts onGroupEvent)
    },

    // ---- share codes ----------------------------------------------------------------------------

    async createShareCode(r: {
      owner: string; server_name: string; has_scopes: boolean; scopes: string[]; expires_in: number; requester_scopes: string[]; by: string;
    }, call?: CallContext) {
      await mustOwner(r.owner);
      const expiresIn = r.expires_in || SHARE_CODE_DEFAULT_SECONDS;
      if (!Number.isFinite(expiresIn) || expiresIn < SHARE_CODE_MIN_SECONDS || expiresIn > SHARE_CODE_MAX_SECONDS) {
        throw errors.badRequest(`expires_in must be between ${SHARE_CODE_MIN_SECONDS} and ${SHARE_CODE_MAX_SECONDS} seconds`, 'HUB_ERR_SHARE_INVALID');
      }
      const scopeBases = shareBases(r.has_scopes ? r.scopes : null, r.owner, r.server_name);
      await mustHold(r.owner, r.server_name, scopeBases, new Set(r.requester_scopes));
      if (call?.cancelled) throw errors.timeout('creating the share code');
      const code = randomBytes(32).toString('base64url'); // 43 URL-safe characters
      const id = await store.insertCode({
        prefix: tokenPrefix(code), hashed: hashSecret(code, GENERATED_ROUNDS), owner: r.owner, server_name: r.server_name,
        scopes: JSON.stringify(scopeBases), created_at: isoNow(), created_by: r.by, expires_at: new Date(Date.now() + expiresIn * 1000).toISOString(),
      });
      await schedule();
      const row = (await store.codeById(id))!;
      void audit.publish('share_code', 'create', { who: r.by, what: label(r.owner, r.server_name), outcome: 'ok', id: `sc_${id}`, scopes: shareScopes(row), expires_at: row.expires_at });
      return { model: codeModel(row), code };
    },

    async listShareCodes(q: { owner: string; has_server: boolean; server_name: string }) {
      return { codes: (await store.codesOf(q.owner, q.has_server ? q.server_name : null, isoNow())).map(codeModel) };
    },

    /** One code by id (`sc_<n>`) or by the code itself, or (neither) every code of the server. */
    async deleteShareCodes(r: { owner: string; server_name: string; id: string; code: string; by: string }) {
      let ids: number[];
      if (r.id || r.code) {
        let row: ShareCodeRow | undefined;
        if (r.id) {
          const m = /^sc_([1-9][0-9]{0,15})$/.exec(r.id);
          row = m ? await store.codeById(Number(m[1])) : undefined;
        } else {
          row = await findCode(r.code).catch(() => undefined);
        }
        if (!row || row.owner !== r.owner || row.server_name !== r.server_name || row.expires_at <= isoNow()) {
          throw errors.notFound(`No such share code for ${label(r.owner, r.server_name)}`, 'HUB_ERR_SHARE_CODE_NOT_FOUND');
        }
        await store.deleteCode(row.id);
        ids = [row.id];
      } else {
        ids = (await store.codesOf(r.owner, r.server_name, isoNow())).map((c) => c.id);
        await store.deleteCodesOfServer(r.owner, r.server_name);
      }
      if (ids.length) void audit.publish('share_code', 'revoke', { who: r.by, what: label(r.owner, r.server_name), outcome: 'ok', ids: ids.map((i) => `sc_${i}`) });
      return { count: ids.length, affected: [] };
    },

    async peekShareCode(r: { code: string }) {
      return codeModel(await findCode(r.code));
    },

    /** The visitor gets (or extends) a share with the code's scopes, lasting as long as the code. */
    async exchangeShareCode(r: { code: string; user: string; by: string }, call?: CallContext) {
      const code = await findCode(r.code);
      if (code.owner === r.user) throw errors.badRequest('This is a share of your own server: you have access already', 'HUB_ERR_SHARE_INVALID');
      if (!(await lookupUser(r.user))) throw errors.notFound(`No such user: ${r.user}`, 'HUB_ERR_USER_NOT_FOUND');
      if (call?.cancelled) throw errors.timeout('accepting the share code');
      const now = isoNow();
      const before = await store.share(code.owner, code.server_name, 'user', r.user, now);
      const row = await store.upsertShare({
        owner: code.owner, server_name: code.server_name, grantee_kind: 'user', grantee: r.user, scopes: bases(code),
        created_at: now, created_by: r.by, expires_at: code.expires_at,
      });
      await store.recordExchange(code.id, now);
      await schedule();
      const affected = await changed([row]);
      void audit.publish('share_code', 'use', { who: r.by, what: label(code.owner, code.server_name), outcome: 'ok', id: `sc_${code.id}`, grantee: `user:${r.user}` });
      void audit.publish('share', before ? 'change' : 'grant', {
        who: r.by, what: label(code.owner, code.server_name), outcome: 'ok', grantee: `user:${r.user}`, scopes: shareScopes(row), via: `sc_${code.id}`, expires_at: row.expires_at,
      });
      return { found: true, share: model(row), affected };
    },
  };
}

export type ShareHandlers = ReturnType<typeof createShareHandlers>;
