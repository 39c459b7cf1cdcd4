// /hub/api/shares, /share-codes, /users/<u>/shared, /groups/<g>/shared (reference §2.11, models §5.7).
// Shares live in the tokens actor (they are part of every scope decision); this file checks who may ask,
// that the owner and the server exist, that the requester may name the person or group shared with, and
// shapes the answers. Each write forgets the affected grantees here at once; other gateways hear owner.changed.
import type { Reply as ActorReply } from '../../../shared/contracts/index.js';
import { hubPublicUrl } from '../../../shared/config.js';
import { errors } from '../../../shared/errors.js';
import { hasScope, type Resource } from '../../../shared/scopes.js';
import { serverUrl } from '../../../shared/servers.js';
import { isPlainObject, jsonBody, onlyKeys, stringList, type ApiDeps } from './deps.js';
import { pageBody, parsePage } from './pagination.js';
import type { ApiRequest, Route } from './router.js';
import { acceptShareUrl, SHARE_CODE_DEFAULT_SECONDS, SHARE_CODE_MAX_SECONDS, SHARE_CODE_MIN_SECONDS } from '../../../shared/shares.js';
import { browserLocation } from '../../../shared/subdomains.js';

type Share = NonNullable<ActorReply<'tokens', 'GrantShare'>['share']>;
type ShareCode = ActorReply<'tokens', 'PeekShareCode'>;

/** The server part of share and share-code models: where it is, whose it is, whether it runs. */
export function sharedServerModel(deps: ApiDeps, owner: string, name: string) {
  // with per-user subdomains the server's URL is whole, at its user's host (as the established hub's)
  const url = browserLocation(deps.subdomains, serverUrl(owner, name));
  const publicUrl = (deps.config.Hub.public_url || deps.config.Hub.subdomain_host) && hubPublicUrl(deps.config); // its origin: `url` has the base
  return { user: { name: owner }, name, url, full_url: url.includes('://') ? url : publicUrl ? `${publicUrl}${url}` : null, ready: deps.servers.get(owner, name)?.state === 'running' };
}

export function shareModel(deps: ApiDeps, s: Share) {
  const kind = s.grantee?.kind === 'group' ? 'group' : 'user';
  const who = { name: s.grantee?.name ?? '' };
  return {
    server: sharedServerModel(deps, s.owner, s.server_name), scopes: s.scopes, kind,
    user: kind === 'user' ? who : null, group: kind === 'group' ? who : null, created_at: s.created_at,
  };
}

export function shareCodeModel(deps: ApiDeps, c: ShareCode) {
  return {
    server: sharedServerModel(deps, c.owner, c.server_name), scopes: c.scopes, id: c.id, created_at: c.created_at,
    expires_at: c.expires_at, exchange_count: c.exchange_count, last_exchanged_at: c.last_exchanged_at || null,
  };
}

/** The users whose scopes a share change touched: forgotten here before the answer, so the next request sees it. */
export function forgetGrantees(deps: ApiDeps, names: string[]): void {
  for (const name of names) {
    deps.identities.forgetOwner({ kind: 'user', name });
    deps.web.forgetUser(name);
  }
}

/** One may share only with names one may read: `read:users:name` / `read:groups:name` for that user or group. */
export async function checkMayName(deps: ApiDeps, held: ReadonlySet<string>, kind: 'user' | 'group', name: string): Promise<void> {
  const resource: Resource = kind === 'user' ? { kind, name, groups: (await deps.users.get(name))?.groups ?? [] } : { kind, name };
  const nameScope = kind === 'user' ? 'read:users:name' : 'read:groups:name';
  if (!hasScope(held, nameScope, resource)) throw errors.forbidden(`Need scope '${nameScope}' to share with ${kind}s by name`, 'HUB_ERR_SHARE_TARGET_FORBIDDEN');
}

/**
 * A server one can share: the default server of an existing user, or a server the spawner's registry knows
 * (running, or kept while stopped).
 */
export async function checkShareable(deps: ApiDeps, owner: string, name: string): Promise<void> {
  if (!(await deps.users.get(owner))) throw errors.notFound(`No such user: ${owner}`, 'HUB_ERR_USER_NOT_FOUND');
  if (name && !deps.servers.get(owner, name)) throw errors.notFound(`No such server: ${owner}/${name}`, 'HUB_ERR_SERVER_NOT_FOUND');
}

export function shareRoutes(deps: ApiDeps): Route[] {
  const { config, tokens, users } = deps;
  const groupsOf = async (name: string) => (await users.get(name))?.groups ?? [];
  const ownerResource = async (p: Record<string, string>): Promise<Resource> => ({ kind: 'user', name: p.owner, groups: await groupsOf(p.owner) });
  const serverResource = async (p: Record<string, string>): Promise<Resource> => ({ kind: 'server', user: p.owner, name: p.server, groups: await groupsOf(p.owner) });
  const userResource = async (p: Record<string, string>): Promise<Resource> => ({ kind: 'user', name: p.name, groups: await groupsOf(p.name) });
  const groupResource = (p: Record<string, string>): Resource => ({ kind: 'group', name: p.name });

  async function mustOwner(owner: string): Promise<void> {
    if (!(await users.get(owner))) throw errors.notFound(`No such user: ${owner}`, 'HUB_ERR_USER_NOT_FOUND');
  }

  const mustServer = (owner: string, name: string) => checkShareable(deps, owner, name);

  async function mustGroup(name: string): Promise<void> {
    await deps.auth.getGroup({ name }); // NOT_FOUND → 404 "No such group"
  }

  /** Lists always answer with the envelope; only what the requester may read of them is listed. */
  function page<T>(req: ApiRequest, items: T[]): void {
    const p = parsePage(req.info, req.query, config.Hub.api_page_default_limit, config.Hub.api_page_max_limit, true);
    req.reply.json(200, pageBody(req.info, req.query, p, items.slice(p.offset, p.offset + p.limit), items.length));
  }

  /** `{"user": name}` xor `{"group": name}`, optional `scopes`; the requester must be allowed to name the target. */
  async function shareBody(req: ApiRequest): Promise<{ grantee: { kind: 'user' | 'group'; name: string }; scopes: string[] | undefined }> {
    const body = jsonBody(req);
    if (!isPlainObject(body)) throw errors.badRequest('Body must be a JSON object: {"user" or "group": name, "scopes"?: [...]}');
    onlyKeys(body, ['user', 'group', 'scopes']);
    const named = (['user', 'group'] as const).filter((k) => body[k] !== undefined && body[k] !== null);
    if (named.length !== 1) throw errors.badRequest("Specify exactly one of 'user' or 'group'", 'HUB_ERR_SHARE_INVALID');
    const kind = named[0];
    const name = body[kind];
    if (typeof name !== 'string' || !name) throw errors.badRequest(`${kind} must be a name`, 'HUB_ERR_SHARE_INVALID');
    const scopes = body.scopes === undefined ? undefined : stringList(body.scopes, 'scopes');
    await checkMayName(deps, req.held, kind, name);
    return { grantee: { kind, name }, scopes };
  }

  /** The shares a user or group received, limited to one server when the path names it. */
  async function received(req: ApiRequest, kind: 'user' | 'group', withGroups: boolean): Promise<Share[]> {
    const { name, owner, server } = req.params;
    if (kind === 'user') await mustOwner(name);
    else await mustGroup(name);
    const r = await tokens.listShares({
      owner: owner ?? '', has_server: server !== undefined, server_name: server ?? '', grantee: { kind, name }, with_groups: withGroups,
    });
    return r.shares;
  }

  /** GET and DELETE of one received share (only a direct one, not one through a group). */
  function receivedOne(kind: 'user' | 'group'): Route[] {
    const base = kind === 'user' ? '/users/:name/shared/:owner/:server' : '/groups/:name/shared/:owner/:server';
    const resource = kind === 'user' ? userResource : groupResource;
    const one = async (req: ApiRequest): Promise<Share> => {
      const [s] = await received(req, kind, false);
      if (!s) throw errors.notFound(`${req.params.owner}/${req.params.server} is not shared with ${kind} ${req.params.name}`, 'HUB_ERR_SHARE_NOT_FOUND');
      return s;
    };
    return [
      {
        method: 'GET', path: base, access: [`read:${kind}s:shares`], resource,
        async handle(req) {
          req.reply.json(200, shareModel(deps, await one(req)));
        },
      },
      {
        // leaving a share
        method: 'DELETE', path: base, access: [`${kind}s:shares`], resource,
        async handle(req) {
          await one(req);
          const r = await tokens.deleteShares({
            owner: req.params.owner, has_server: true, server_name: req.params.server, grantee: { kind, name: req.params.name }, with_groups: false, by: req.who,
          });
          forgetGrantees(deps, r.affected);
          req.reply.send(204, '');
        },
      },
    ];
  }

  return [
    // ---- what an owner shares ------------------------------------------------------------------
    {
      method: 'GET', path: '/shares/:owner', access: ['read:shares'], resource: ownerResource,
      async handle(req) {
        await mustOwner(req.params.owner);
        const groups = await groupsOf(req.params.owner);
        const r = await tokens.listShares({ owner: req.params.owner, has_server: false, server_name: '', grantee: null, with_groups: false });
        // a requester allowed only some of the owner's servers sees only their shares
        const mine = r.shares.filter((s) => hasScope(req.held, 'read:shares', { kind: 'server', user: s.owner, name: s.server_name, groups }));
        page(req, mine.map((s) => shareModel(deps, s)));
      },
    },
    {
      method: 'GET', path: '/shares/:owner/:server', access: ['read:shares'], resource: serverResource,
      async handle(req) {
        await mustOwner(req.params.owner);
        const r = await tokens.listShares({ owner: req.params.owner, has_server: true, server_name: req.params.server, grantee: null, with_groups: false });
        page(req, r.shares.map((s) => shareModel(deps, s)));
      },
    },
    {
      method: 'POST', path: '/shares/:owner/:server', access: ['shares'], resource: serverResource,
      async handle(req) {
        await mustServer(req.params.owner, req.params.server);
        const { grantee, scopes } = await shareBody(req);
        const r = await tokens.grantShare({
          owner: req.params.owner, server_name: req.params.server, grantee, has_scopes: scopes !== undefined, scopes: scopes ?? [],
          requester_scopes: [...req.held], by: req.who,
        });
        forgetGrantees(deps, r.affected);
        req.reply.json(200, shareModel(deps, r.share!));
      },
    },
    {
      method: 'PATCH', path: '/shares/:owner/:server', access: ['shares'], resource: serverResource,
      async handle(req) {
        await mustOwner(req.params.owner);
        const { grantee, scopes } = await shareBody(req);
        const r = await tokens.revokeShare({
          owner: req.params.owner, server_name: req.params.server, grantee, has_scopes: scopes !== undefined, scopes: scopes ?? [], by: req.who,
        });
        forgetGrantees(deps, r.affected);
        req.reply.json(200, r.found && r.share ? shareModel(deps, r.share) : {});
      },
    },
    {
      method: 'DELETE', path: '/shares/:owner/:server', access: ['shares'], resource: serverResource,
      async handle(req) {
        await mustOwner(req.params.owner);
        const r = await tokens.deleteShares({ owner: req.params.owner, has_server: true, server_name: req.params.server, grantee: null, with_groups: false, by: req.who });
        forgetGrantees(deps, r.affected);
        req.reply.send(204, '');
      },
    },

    // ---- what a user or group received ------------------------------------------------------------
    {
      method: 'GET', path: '/users/:name/shared', access: ['read:users:shares'], resource: userResource,
      async handle(req) {
        page(req, (await received(req, 'user', true)).map((s) => shareModel(deps, s)));
      },
    },
    ...receivedOne('user'),
    {
      method: 'GET', path: '/groups/:name/shared', access: ['read:groups:shares'], resource: groupResource,
      async handle(req) {
        page(req, (await received(req, 'group', false)).map((s) => shareModel(deps, s)));
      },
    },
    ...receivedOne('group'),

    // ---- share codes ------------------------------------------------------------------------------
    {
      method: 'GET', path: '/share-codes/:owner', access: ['read:shares'], resource: ownerResource,
      async handle(req) {
        await mustOwner(req.params.owner);
        const groups = await groupsOf(req.params.owner);
        const r = await tokens.listShareCodes({ owner: req.params.owner, has_server: false, server_name: '' });
        const mine = r.codes.filter((c) => hasScope(req.held, 'read:shares', { kind: 'server', user: c.owner, name: c.server_name, groups }));
        page(req, mine.map((c) => shareCodeModel(deps, c)));
      },
    },
    {
      method: 'GET', path: '/share-codes/:owner/:server', access: ['read:shares'], resource: serverResource,
      async handle(req) {
        await mustOwner(req.params.owner);
        const r = await tokens.listShareCodes({ owner: req.params.owner, has_server: true, server_name: req.params.server });
        page(req, r.codes.map((c) => shareCodeModel(deps, c)));
      },
    },
    {
      method: 'POST', path: '/share-codes/:owner/:server', access: ['shares'], resource: serverResource,
      async handle(req) {
        await mustServer(req.params.owner, req.params.server);
        const body = jsonBody(req) ?? {};
        if (!isPlainObject(body)) throw errors.badRequest('Body must be a JSON object: {"scopes"?: [...], "expires_in"?: seconds}');
        onlyKeys(body, ['scopes', 'expires_in']);
        const expiresIn = body.expires_in ?? SHARE_CODE_DEFAULT_SECONDS;
        if (typeof expiresIn !== 'number' || !Number.isInteger(expiresIn) || expiresIn < SHARE_CODE_MIN_SECONDS || expiresIn > SHARE_CODE_MAX_SECONDS) {
          throw errors.badRequest(`expires_in must be a whole number of seconds from ${SHARE_CODE_MIN_SECONDS} to ${SHARE_CODE_MAX_SECONDS}`, 'HUB_ERR_SHARE_INVALID');
        }
        const scopes = body.scopes === undefined ? undefined : stringList(body.scopes, 'scopes');
        const r = await tokens.createShareCode({
          owner: req.params.owner, server_name: req.params.server, has_scopes: scopes !== undefined, scopes: scopes ?? [],
          expires_in: expiresIn, requester_scopes: [...req.held], by: req.who,
        });
        const acceptUrl = acceptShareUrl(r.code);
        const publicUrl = (config.Hub.public_url || config.Hub.subdomain_host) && hubPublicUrl(config);
        req.reply.json(200, {
          ...shareCodeModel(deps, r.model!), code: r.code, accept_url: acceptUrl, full_accept_url: publicUrl ? `${publicUrl}${acceptUrl}` : null,
        });
      },
    },
    {
      method: 'DELETE', path: '/share-codes/:owner/:server', access: ['shares'], resource: serverResource,
      async handle(req) {
        await mustOwner(req.params.owner);
        const id = req.query.get('id');
        const code = req.query.get('code');
        if (id !== null && code !== null) throw errors.badRequest('Specify at most one of id or code', 'HUB_ERR_SHARE_INVALID');
        // an empty `?id=` names no code: it must not read as "every code"
        if (id === '' || code === '') throw errors.notFound('No such share code', 'HUB_ERR_SHARE_CODE_NOT_FOUND');
        await tokens.deleteShareCodes({ owner: req.params.owner, server_name: req.params.server, id: id ?? '', code: code ?? '', by: req.who });
        req.reply.send(204, '');
      },
    },
  ];
}
