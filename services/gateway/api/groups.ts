// /hub/api/groups…: groups live in the auth actor.
import { randomBytes } from 'node:crypto';
import { errors } from '../../../shared/errors.js';
import { within } from '../../../shared/grpc.js';
import { listFilter } from '../../../shared/scopes.js';
import { groupResource, isPlainObject, jsonBody, nameList, onlyKeys, stringList, type ApiDeps } from './deps.js';
import { groupModel, type GroupRecord } from './models.js';
import { pageBody, parsePage } from './pagination.js';
import type { ApiRequest, Route } from './router.js';

/**
 * Stands in for a big group's member list while its answer is made: the JSON text is cut at each one and the
 * members are written there a page at a time (a random part: nothing a client stored can look like it).
 */
const MEMBERS_MARK = `\u0000members:${randomBytes(16).toString('hex')}:`;
const MARK_IN_JSON = new RegExp(`"${JSON.stringify(MEMBERS_MARK).slice(1, -1).replace(/[\\^$.*+?()[\]{}|]/g, '\\$&')}(\\d+)\\\\u0000"`, 'g');
const JSON_TYPE = { 'Content-Type': 'application/json' };

/** Authenticator.manage_groups: memberships follow the authenticator, so the API does not change them (as the established hub 5). */
function groupsManagedError() {
  return errors.badRequest('Group management via API is disabled: Authenticator.manage_groups is set', 'HUB_ERR_GROUPS_MANAGED');
}

export function groupRoutes({ config, auth, users, book }: ApiDeps): Route[] {
  const maxNames = config.Hub.max_names_per_request;
  const unlessManaged = () => {
    if (config.Authenticator.manage_groups) throw groupsManagedError();
  };

  /**
   * Group models as JSON. A group of more than the auth actor lists at once (10,000) is streamed: its first
   * members, then GroupMembers pages, written as the client takes them, never the whole list in memory.
   */
  async function sendGroups(req: ApiRequest, status: number, groups: GroupRecord[], wrap: (models: unknown[]) => unknown): Promise<void> {
    const big: GroupRecord[] = [];
    const models = groups.map((g) => {
      const streamed = g.more_members_after ? { ...g, users: `${MEMBERS_MARK}${big.push(g) - 1}\u0000` as unknown as string[] } : g;
      return groupModel(req.held, streamed, book);
    }).filter(Boolean);
    const body = wrap(models);
    if (!big.length) return req.reply.json(status, body);
    const text = JSON.stringify(body);
    async function* members(g: GroupRecord): AsyncGenerator<string> {
      yield JSON.stringify(g.users).slice(0, -1);
      for (let after = g.more_members_after ?? 0; after > 0;) {
        const page = await auth.groupMembers({ name: g.name, after, limit: 0 }, within(config.Hub.rpc_timeout * 1000, req.call));
        if (page.users.length) yield `,${JSON.stringify(page.users).slice(1, -1)}`;
        after = page.next_after;
      }
      yield ']';
    }
    async function* parts(): AsyncGenerator<string> {
      let from = 0;
      for (const m of text.matchAll(MARK_IN_JSON)) {
        yield text.slice(from, m.index);
        yield* members(big[Number(m[1])]);
        from = m.index + m[0].length;
      }
      yield text.slice(from);
    }
    await req.reply.stream(status, JSON_TYPE, parts());
  }
  const respond = (req: ApiRequest, status: number, g: GroupRecord) => sendGroups(req, status, [g], (models) => models[0] ?? { kind: 'group', name: g.name });
  /** Membership changes alter the members' `groups`: drop them from the user cache now (events follow). */
  const forgetMembers = (names: string[]) => names.forEach((n) => users.forget(n));

  function membersBody(req: ApiRequest, verb: 'add' | 'delete'): string[] {
    const body = jsonBody(req);
    if (!isPlainObject(body)) throw errors.badRequest('Invalid JSON data: expected {"users": [...]}');
    onlyKeys(body, ['users', 'name']);
    if (body.users === undefined) throw errors.badRequest(`Must specify users to ${verb}`);
    return nameList(body.users, 'users', maxNames);
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
        await sendGroups(req, 200, r.groups, (items) => pageBody(req.info, req.query, page, items, r.total));
      },
    },
    {
      method: 'POST', path: '/groups', access: ['admin:groups'],
      async handle(req) {
        unlessManaged();
        const body = jsonBody(req);
        if (!isPlainObject(body)) throw errors.badRequest('Must specify at least one group to create');
        onlyKeys(body, ['groups', 'users']);
        const names = body.groups === undefined ? [] : nameList(body.groups, 'groups', maxNames);
        if (!names.length) throw errors.badRequest('Must specify at least one group to create');
        const members = body.users === undefined ? [] : nameList(body.users, 'users', maxNames);
        const r = await auth.createGroups({ names, users: members, by: req.who }, req.call);
        forgetMembers(members);
        await sendGroups(req, 201, r.groups, (models) => models);
      },
    },
    {
      method: 'GET', path: '/groups/:name', access: ['read:groups', 'read:groups:name', 'read:roles:groups'], resource: groupResource,
      async handle(req) {
        await respond(req, 200, await auth.getGroup({ name: req.params.name }, req.call));
      },
    },
    {
      method: 'POST', path: '/groups/:name', access: ['admin:groups'], resource: groupResource,
      async handle(req) {
        unlessManaged();
        const body = jsonBody(req) ?? {};
        if (!isPlainObject(body)) throw errors.badRequest('Body must be a JSON object');
        onlyKeys(body, ['users']);
        const members = body.users === undefined ? [] : nameList(body.users, 'users', maxNames);
        const r = await auth.createGroups({ names: [req.params.name], users: members, by: req.who }, req.call);
        forgetMembers(members);
        await respond(req, 201, r.groups[0]);
      },
    },
    {
      method: 'DELETE', path: '/groups/:name', access: ['delete:groups'], resource: groupResource,
      async handle(req) {
        unlessManaged();
        // the members' cached models lose the group on the group.deleted events (one per 10,000 members)
        await auth.deleteGroup({ name: req.params.name, by: req.who }, req.call);
        req.reply.send(204, '');
      },
    },
    ...(['POST', 'DELETE'] as const).map((method): Route => ({
      method, path: '/groups/:name/users', access: ['groups'], resource: groupResource,
      async handle(req) {
        unlessManaged();
        const members = membersBody(req, method === 'POST' ? 'add' : 'delete');
        const g = await auth.changeGroupMembers({ name: req.params.name, users: members, add: method === 'POST', by: req.who }, req.call);
        forgetMembers(members);
        await respond(req, 200, g);
      },
    })),
    {
      method: 'PUT', path: '/groups/:name/properties', access: ['groups'], resource: groupResource,
      async handle(req) {
        const body = jsonBody(req);
        if (!isPlainObject(body)) throw errors.badRequest('Must specify properties (a JSON object)');
        await respond(req, 200, await auth.setGroupProperties({ name: req.params.name, properties_json: JSON.stringify(body), by: req.who }, req.call));
      },
    },
  ];
}
