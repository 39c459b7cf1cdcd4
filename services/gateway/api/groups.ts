// /hub/api/groups…: groups live in the auth actor.
import { errors } from '../../../shared/errors.js';
import { listFilter } from '../../../shared/scopes.js';
import { groupResource, isPlainObject, jsonBody, onlyKeys, stringList, type ApiDeps } from './deps.js';
import { groupModel, type GroupRecord } from './models.js';
import { pageBody, parsePage } from './pagination.js';
import type { ApiRequest, Route } from './router.js';

export function groupRoutes({ config, auth, users, book }: ApiDeps): Route[] {
  const respond = (req: ApiRequest, status: number, g: GroupRecord) => req.reply.json(status, groupModel(req.held, g, book) ?? { kind: 'group', name: g.name });
  /** Membership changes alter the members' `groups`: drop them from the user cache now (events follow). */
  const forgetMembers = (names: string[]) => names.forEach((n) => users.forget(n));

  function membersBody(req: ApiRequest, verb: 'add' | 'delete'): string[] {
    const body = jsonBody(req);
    if (!isPlainObject(body)) throw errors.badRequest('Invalid JSON data: expected {"users": [...]}');
    onlyKeys(body, ['users', 'name']);
    if (body.users === undefined) throw errors.badRequest(`Must specify users to ${verb}`);
    return stringList(body.users, 'users');
  }

  return [
    {
      method: 'GET', path: '/groups', access: 'list',
      async handle(req) {
        const filter = listFilter(req.held, 'list:groups');
        if (!filter) throw errors.forbidden('Action is not authorized with current scopes; requires any of [list:groups]');
        if (filter !== 'all' && (filter.users.size || filter.servers.size || filter.services.size)) throw errors.forbidden('list:groups may only be filtered by group');
        const page = parsePage(req.info, req.query, config.Hub.api_page_default_limit, config.Hub.api_page_max_limit);
        const r = await auth.listGroups({
          offset: page.offset, limit: page.limit, restricted: filter !== 'all', groups: filter === 'all' ? [] : [...filter.groups],
        }, req.call);
        const items = r.groups.map((g) => groupModel(req.held, g, book)).filter(Boolean);
        req.reply.json(200, pageBody(req.info, req.query, page, items, r.total));
      },
    },
    {
      method: 'POST', path: '/groups', access: ['admin:groups'],
      async handle(req) {
        const body = jsonBody(req);
        if (!isPlainObject(body)) throw errors.badRequest('Must specify at least one group to create');
        onlyKeys(body, ['groups', 'users']);
        const names = body.groups === undefined ? [] : stringList(body.groups, 'groups');
        if (!names.length) throw errors.badRequest('Must specify at least one group to create');
        const members = body.users === undefined ? [] : stringList(body.users, 'users');
        const r = await auth.createGroups({ names, users: members, by: req.who }, req.call);
        forgetMembers(members);
        req.reply.json(201, r.groups.map((g) => groupModel(req.held, g, book)));
      },
    },
    {
      method: 'GET', path: '/groups/:name', access: ['read:groups', 'read:groups:name', 'read:roles:groups'], resource: groupResource,
      async handle(req) {
        respond(req, 200, await auth.getGroup({ name: req.params.name }, req.call));
      },
    },
    {
      method: 'POST', path: '/groups/:name', access: ['admin:groups'], resource: groupResource,
      async handle(req) {
        const body = jsonBody(req) ?? {};
        if (!isPlainObject(body)) throw errors.badRequest('Body must be a JSON object');
        onlyKeys(body, ['users']);
        const members = body.users === undefined ? [] : stringList(body.users, 'users');
        const r = await auth.createGroups({ names: [req.params.name], users: members, by: req.who }, req.call);
        forgetMembers(members);
        respond(req, 201, r.groups[0]);
      },
    },
    {
      method: 'DELETE', path: '/groups/:name', access: ['delete:groups'], resource: groupResource,
      async handle(req) {
        const group = await auth.getGroup({ name: req.params.name }, req.call);
        await auth.deleteGroup({ name: req.params.name, by: req.who }, req.call);
        forgetMembers(group.users);
        req.reply.send(204, '');
      },
    },
    ...(['POST', 'DELETE'] as const).map((method): Route => ({
      method, path: '/groups/:name/users', access: ['groups'], resource: groupResource,
      async handle(req) {
        const members = membersBody(req, method === 'POST' ? 'add' : 'delete');
        const g = await auth.changeGroupMembers({ name: req.params.name, users: members, add: method === 'POST', by: req.who }, req.call);
        forgetMembers(members);
        respond(req, 200, g);
      },
    })),
    {
      method: 'PUT', path: '/groups/:name/properties', access: ['groups'], resource: groupResource,
      async handle(req) {
        const body = jsonBody(req);
        if (!isPlainObject(body)) throw errors.badRequest('Must specify properties (a JSON object)');
        respond(req, 200, await auth.setGroupProperties({ name: req.params.name, properties_json: JSON.stringify(body), by: req.who }, req.call));
      },
    },
  ];
}
