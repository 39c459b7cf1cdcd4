// /hub/api/users…: identity lives in the auth actor; reads come from the gateway's cache.
import { within } from '../../../shared/grpc.js';
import { errors } from '../../../shared/errors.js';
import { listFilter } from '../../../shared/scopes.js';
import type { UserRecord } from '../caches.js';
import { holdsAdminScopes, isPlainObject, jsonBody, nameList, onlyKeys, userResource, type ApiDeps } from './deps.js';
import { userModel } from './models.js';
import { pageBody, parsePage } from './pagination.js';
import type { ApiRequest, Route } from './router.js';
import { parseTimestamp } from '../../../shared/time.js';
import { encodeJson } from '../../../shared/nats.js';
import { subjects } from '../../../shared/subjects.js';
import { parseSort } from '../../../shared/lists.js';
import { collectAfterBurst } from '../../../shared/idle-gc.js';

export function userRoutes(deps: ApiDeps): Route[] {
  const { config, auth, tokens, users, book, identities, servers, spawner, nc, subdomains } = deps;
  /** `?include_stopped_servers` (present = yes, as the established hub reads it) shows stopped servers too. */
  const model = (held: ReadonlySet<string>, u: UserRecord, req?: ApiRequest) =>
    userModel(held, u, book, servers.of(u.name), { includeStopped: req?.query.has('include_stopped_servers') && !/^(0|false)$/i.test(req.query.get('include_stopped_servers') ?? ''), subdomains });
  const resource = userResource(deps);
  /** Granting admin needs every scope admin gives, so admin:users alone cannot make an admin. */
  const mayGrantAdmin = (req: ApiRequest) => holdsAdminScopes(req.held, book);

  async function mustGet(name: string): Promise<UserRecord> {
    const user = await users.get(name);
    if (!user) throw errors.notFound(`No such user: ${name}`, 'HUB_ERR_USER_NOT_FOUND');
    return user;
  }

  function respondUser(req: ApiRequest, status: number, user: UserRecord, authState?: unknown): void {
    users.remember(user);
    const out = model(req.held, user, req) ?? { kind: 'user', name: user.name };
    if (authState !== undefined && 'auth_state' in out) out.auth_state = authState;
    req.reply.json(status, out);
  }

  /** A single user's auth state, for a requester whose model of them shows it (admin:auth_state): never cached. */
  async function authStateFor(req: ApiRequest, shown: Record<string, unknown> | null, name: string): Promise<unknown> {
    // without auth state there is nothing to ask: an admin's read of a user stays an answer from memory
    if (!shown || !('auth_state' in shown) || !config.Authenticator.enable_auth_state) return undefined;
    return JSON.parse((await auth.getAuthState({ name }, req.call)).state_json || 'null') as unknown;
  }

  return [
    {
      method: 'GET', path: '/users', access: 'list',
      async handle(req) {
        const filter = listFilter(req.held, 'list:users');
        if (!filter) throw errors.forbidden('Action is not authorized with current scopes; requires any of [list:users]');
        if (filter !== 'all' && (filter.servers.size || filter.services.size)) {
          throw errors.forbidden('list:users may only be filtered by user or group');
        }
        const sort = req.query.get('sort') ?? 'id';
        parseSort(sort); // a 400 here, before anything is asked of the auth actor
        const state = req.query.get('state');
        if (state !== null && !['active', 'ready', 'inactive'].includes(state)) throw errors.badRequest(`Unrecognized state filter: ${JSON.stringify(state.slice(0, 40))}`);
        const page = parsePage(req.info, req.query, config.Hub.api_page_default_limit, config.Hub.api_page_max_limit);
        const withServers = state === 'ready' ? servers.usersWith((r) => r.state === 'running') : servers.usersWith(servers.isActive);
        // The state filter is applied in the query when the scope filter allows it, else after (a page may then be short).
        const byState = state !== null && filter === 'all';
        const r = await auth.listUsers({
          offset: page.offset, limit: page.limit, restricted: filter !== 'all' || (byState && state !== 'inactive'),
          names: filter === 'all' ? (byState && state !== 'inactive' ? withServers : []) : [...filter.users],
          groups: filter === 'all' ? [] : [...filter.groups],
          exclude_names: byState && state === 'inactive' ? withServers : [], sort,
          name_filter: req.query.get('name_filter') ?? '',
        }, req.call);
        const inState = (name: string) => state === null || byState || (state === 'inactive') !== withServers.includes(name);
        const items = r.users.filter((u) => inState(u.name)).map((u) => { users.remember(u); return model(req.held, u, req); }).filter(Boolean);
        req.reply.json(200, pageBody(req.info, req.query, page, items, r.total));
      },
    },
    {
      method: 'POST', path: '/users', access: ['admin:users'],
      async handle(req) {
        const body = jsonBody(req);
        if (!isPlainObject(body)) throw errors.badRequest('Must specify at least one user to create');
        onlyKeys(body, ['usernames', 'admin']);
        if (body.admin !== undefined && typeof body.admin !== 'boolean') throw errors.badRequest('admin must be true or false');
        const names = body.usernames === undefined ? [] : nameList(body.usernames, 'usernames', config.Hub.max_names_per_request);
        if (!names.length) throw errors.badRequest('Must specify at least one user to create');
        if (body.admin && !mayGrantAdmin(req)) throw errors.forbidden('Only admins can grant admin permissions');
        const r = await auth.createUsers({ names, admin: Boolean(body.admin), by: req.who }, req.call);
        req.reply.json(201, r.users.map((u) => { users.remember(u); return model(req.held, u); }));
        if (r.users.length > 1000) collectAfterBurst();
      },
    },
    {
      method: 'GET', path: '/users/:name', access: ['read:users', 'read:users:name', 'read:servers', 'read:users:groups', 'read:users:activity', 'read:roles:users'], resource,
      async handle(req) {
        const user = await mustGet(req.params.name);
        const out = model(req.held, user, req);
        const authState = await authStateFor(req, out, user.name);
        if (out && authState !== undefined) out.auth_state = authState;
        req.reply.json(200, out);
      },
    },
    {
      method: 'POST', path: '/users/:name', access: ['admin:users'], resource,
      async handle(req) {
        const body = jsonBody(req) ?? {};
        if (!isPlainObject(body)) throw errors.badRequest('Body must be a JSON object');
        onlyKeys(body, ['name', 'admin']);
        if (body.admin !== undefined && typeof body.admin !== 'boolean') throw errors.badRequest('admin must be true or false');
        if (body.admin && !mayGrantAdmin(req)) throw errors.forbidden('Only admins can grant admin permissions');
        respondUser(req, 201, await auth.createUser({ name: req.params.name, admin: Boolean(body.admin), by: req.who }, req.call));
      },
    },
    {
      method: 'PATCH', path: '/users/:name', access: ['admin:users'], resource,
      async handle(req) {
        const body = jsonBody(req);
        if (!isPlainObject(body) || !Object.keys(body).length) throw errors.badRequest('Invalid JSON data: must be an object with name, admin and/or auth_state');
        onlyKeys(body, ['name', 'admin', 'auth_state']);
        if (body.name !== undefined && typeof body.name !== 'string') throw errors.badRequest('name must be a string');
        if (body.admin !== undefined && typeof body.admin !== 'boolean') throw errors.badRequest('admin must be true or false');
        if (body.auth_state !== undefined && body.auth_state !== null && !isPlainObject(body.auth_state)) throw errors.badRequest('auth_state must be an object or null');
        const target = await mustGet(req.params.name);
        if (!mayGrantAdmin(req)) {
          if (target.admin) throw errors.forbidden('Only admins can modify other admins');
          if (body.admin) throw errors.forbidden('Only admins can grant admin permissions');
        }
        // auth state first: a refused change (auth state off) leaves the name and admin flag as they were
        if (body.auth_state !== undefined) await auth.setAuthState({ name: req.params.name, state_json: JSON.stringify(body.auth_state), by: req.who }, req.call);
        const updated = body.name === undefined && body.admin === undefined ? target
          : await auth.updateUser({ name: req.params.name, new_name: body.name, admin: body.admin, by: req.who }, req.call);
        users.forget(req.params.name);
        const shown = model(req.held, updated, req);
        respondUser(req, 200, updated, await authStateFor(req, shown, updated.name));
      },
    },
    {
      method: 'DELETE', path: '/users/:name', access: ['delete:users'], resource,
      async handle(req) {
        if (req.identity?.owner.kind === 'user' && req.identity.owner.name === req.params.name) throw errors.badRequest('Cannot delete yourself!');
        await mustGet(req.params.name);
        // servers first: a user is never deleted from under a running server
        try {
          await spawner.stopUserServers({ user: req.params.name, by: req.who }, within((config.Spawner.slow_stop_timeout + config.Hub.rpc_timeout) * 1000, req.call));
        } catch (e) {
          if ((e as { status?: number }).status === 504) throw errors.badRequest(`${req.params.name}'s server is in the process of stopping, please wait.`);
          throw e;
        }
        await auth.deleteUser({ name: req.params.name, by: req.who }, req.call);
        // their tokens go before the answer (not only when user.deleted reaches the tokens actor): the next request
        // carrying one is refused, at the API and at the front door (services/gateway/proxy/token-gate.ts). Should the
        // tokens actor not answer, this gateway forgets them all the same (the tokens actor then finds no owner for them)
        try {
          await tokens.revokeTokens({ ids: [], oauth_client: '', user: req.params.name, by: req.who, reason: 'user deleted' }, req.call);
        } finally {
          users.forget(req.params.name);
          identities.forgetOwner({ kind: 'user', name: req.params.name });
        }
        req.reply.send(204, '');
      },
    },
    {
      method: 'POST', path: '/users/:name/activity', access: ['users:activity'], resource,
      async handle(req) {
        const body = jsonBody(req);
        if (!isPlainObject(body)) throw errors.badRequest('body must be a json dict');
        if (body.last_activity === undefined && body.servers === undefined) throw errors.badRequest('body must contain at least one of `last_activity` or `servers`');
        await mustGet(req.params.name);
        const times: string[] = [];
        if (body.last_activity !== undefined) times.push(checkTime(body.last_activity));
        if (body.servers !== undefined) {
          if (!isPlainObject(body.servers) || !Object.values(body.servers).every((v) => isPlainObject(v) && v.last_activity !== undefined)) {
            throw errors.badRequest('servers must be a dict of the form {server_name: {last_activity: timestamp}}');
          }
          const reported: Record<string, string> = {};
          for (const [name, entry] of Object.entries(body.servers as Record<string, { last_activity: unknown }>)) {
            const r = servers.get(req.params.name, name);
            if (!r || !servers.isActive(r)) throw errors.badRequest(`No such server '${name.slice(0, 60)}' for user ${req.params.name}`);
            reported[name] = checkTime(entry.last_activity);
          }
          for (const at of Object.values(reported)) times.push(at);
          // validated in full before anything is written; the spawner buffers and writes in batches
          if (Object.keys(reported).length) nc.publish(subjects.command('spawner', 'activity'), encodeJson({ user: req.params.name, servers: reported }));
        }
        const latest = times.sort().at(-1)!;
        await auth.recordActivity({ name: req.params.name, last_activity: latest }, req.call);
        users.touch(req.params.name, latest); // this gateway at once; the others on hub.evt.user.activity
        req.reply.send(200, '', { 'Content-Type': 'application/json' });
      },
    },
  ];

  function checkTime(v: unknown): string {
    const at = typeof v === 'string' ? parseTimestamp(v) : null;
    if (!at) throw errors.badRequest(`Not a valid timestamp: ${JSON.stringify(v).slice(0, 60)}`);
    if (at.getTime() - Date.now() > 59 * 60_000) throw errors.badRequest(`Rejecting activity from more than an hour in the future: ${at.toISOString()}`);
    return at.toISOString();
  }
}
