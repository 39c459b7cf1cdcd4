// /hub/api/users…: identity lives in the auth actor; reads come from the gateway's cache.
import { errors } from '../../../shared/errors.js';
import { expandScopes, listFilter } from '../../../shared/scopes.js';
import type { UserRecord } from '../caches.js';
import { isPlainObject, jsonBody, onlyKeys, stringList, userResource, type ApiDeps } from './deps.js';
import { userModel } from './models.js';
import { pageBody, parsePage } from './pagination.js';
import type { ApiRequest, Route } from './router.js';
import { parseTimestamp } from '../../../shared/time.js';

export function userRoutes(deps: ApiDeps): Route[] {
  const { config, auth, users, book, identities } = deps;
  const resource = userResource(deps);
  const adminScopes = expandScopes(book.get('admin')!.scopes);

  /** Granting admin needs every scope admin gives, so admin:users alone cannot make an admin. */
  function mayGrantAdmin(req: ApiRequest): boolean {
    for (const s of adminScopes) if (!req.held.has(s)) return false;
    return true;
  }

  async function mustGet(name: string): Promise<UserRecord> {
    const user = await users.get(name);
    if (!user) throw errors.notFound(`No such user: ${name}`, 'HUB_ERR_USER_NOT_FOUND');
    return user;
  }

  function respondUser(req: ApiRequest, status: number, user: UserRecord): void {
    users.remember(user);
    req.reply.json(status, userModel(req.held, user, book) ?? { kind: 'user', name: user.name });
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
        const state = req.query.get('state');
        if (state !== null && !['active', 'ready', 'inactive'].includes(state)) throw errors.badRequest(`Unrecognized state filter: ${JSON.stringify(state.slice(0, 40))}`);
        const page = parsePage(req.info, req.query, config.Hub.api_page_default_limit, config.Hub.api_page_max_limit);
        // No user has a server yet (the spawner owns servers): active and ready are empty, inactive is everyone.
        const restricted = filter !== 'all' || state === 'active' || state === 'ready';
        const r = await auth.call<{ users: UserRecord[]; total: number }>('ListUsers', {
          offset: page.offset, limit: page.limit, restricted,
          names: filter === 'all' ? [] : [...filter.users], groups: filter === 'all' ? [] : [...filter.groups],
        });
        const items = r.users.map((u) => { users.remember(u); return userModel(req.held, u, book); }).filter(Boolean);
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
        const names = body.usernames === undefined ? [] : stringList(body.usernames, 'usernames');
        if (!names.length) throw errors.badRequest('Must specify at least one user to create');
        if (body.admin && !mayGrantAdmin(req)) throw errors.forbidden('Only admins can grant admin permissions');
        const r = await auth.call<{ users: UserRecord[] }>('CreateUsers', { names, admin: Boolean(body.admin), by: req.who });
        req.reply.json(201, r.users.map((u) => { users.remember(u); return userModel(req.held, u, book); }));
      },
    },
    {
      method: 'GET', path: '/users/:name', access: ['read:users', 'read:users:name', 'read:servers', 'read:users:groups', 'read:users:activity', 'read:roles:users'], resource,
      async handle(req) {
        const user = await mustGet(req.params.name);
        req.reply.json(200, userModel(req.held, user, book));
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
        respondUser(req, 201, await auth.call<UserRecord>('CreateUser', { name: req.params.name, admin: Boolean(body.admin), by: req.who }));
      },
    },
    {
      method: 'PATCH', path: '/users/:name', access: ['admin:users'], resource,
      async handle(req) {
        const body = jsonBody(req);
        if (!isPlainObject(body) || !Object.keys(body).length) throw errors.badRequest('Invalid JSON data: must be an object with name and/or admin');
        onlyKeys(body, ['name', 'admin']);
        if (body.name !== undefined && typeof body.name !== 'string') throw errors.badRequest('name must be a string');
        if (body.admin !== undefined && typeof body.admin !== 'boolean') throw errors.badRequest('admin must be true or false');
        const target = await mustGet(req.params.name);
        if (!mayGrantAdmin(req)) {
          if (target.admin) throw errors.forbidden('Only admins can modify other admins');
          if (body.admin) throw errors.forbidden('Only admins can grant admin permissions');
        }
        const updated = await auth.call<UserRecord>('UpdateUser', { name: req.params.name, new_name: body.name, admin: body.admin, by: req.who });
        users.forget(req.params.name);
        respondUser(req, 200, updated);
      },
    },
    {
      method: 'DELETE', path: '/users/:name', access: ['delete:users'], resource,
      async handle(req) {
        if (req.identity?.owner.kind === 'user' && req.identity.owner.name === req.params.name) throw errors.badRequest('Cannot delete yourself!');
        await auth.call('DeleteUser', { name: req.params.name, by: req.who });
        users.forget(req.params.name);
        identities.forgetOwner({ kind: 'user', name: req.params.name });
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
          const unknown = Object.keys(body.servers)[0];
          // The user has no servers until the spawner starts one.
          if (unknown !== undefined) throw errors.badRequest(`No such server '${unknown.slice(0, 60)}' for user ${req.params.name}`);
        }
        const latest = times.sort().at(-1)!;
        await auth.call('RecordActivity', { name: req.params.name, last_activity: latest });
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
