// /hub/api/users/<name>/tokens…: tokens live in the tokens actor, which also checks requested scopes.
import { errors } from '../../../shared/errors.js';
import { hasScope } from '../../../shared/scopes.js';
import { isPlainObject, jsonBody, stringList, userResource, type ApiDeps } from './deps.js';
import { tokenModel } from './models.js';
import type { Route } from './router.js';

export function tokenRoutes(deps: ApiDeps): Route[] {
  const { tokens, users, identities } = deps;
  const resource = userResource(deps);
  const owner = (name: string) => ({ kind: 'user', name });

  return [
    {
      method: 'GET', path: '/users/:name/tokens', access: ['read:tokens'], resource,
      async handle(req) {
        const r = await tokens.listTokens(owner(req.params.name), req.call);
        req.reply.json(200, { api_tokens: r.tokens.map(tokenModel) });
      },
    },
    {
      // No declared scope: a requester without `tokens` on this user learns nothing about whether it exists.
      method: 'POST', path: '/users/:name/tokens', access: 'in-handler',
      async handle(req) {
        const target = await users.get(req.params.name);
        const denied = errors.forbidden(`User ${req.params.name} not found or no permissions to generate tokens`);
        if (!target || !hasScope(req.held, 'tokens', { kind: 'user', name: target.name, groups: target.groups })) throw denied;
        const body = jsonBody(req) ?? {};
        if (!isPlainObject(body)) throw errors.badRequest('Body must be a JSON dict or empty');
        // the type here; the range (not negative, a date that exists) in the tokens actor, which computes the expiry
        const expiresIn = body.expires_in ?? 0;
        if (typeof expiresIn !== 'number' || !Number.isInteger(expiresIn)) {
          throw errors.badRequest(`token expires_in must be null or an integer number of seconds, not ${JSON.stringify(expiresIn).slice(0, 40)}`);
        }
        if (body.note !== undefined && typeof body.note !== 'string') throw errors.badRequest('note must be a string');
        const scopes = body.scopes === undefined ? undefined : stringList(body.scopes, 'scopes');
        const roles = body.roles === undefined ? undefined : stringList(body.roles, 'roles');
        const r = await tokens.createToken({
          owner: owner(target.name), requester: req.identity!.owner, note: (body.note as string | undefined)?.slice(0, 1000) ?? '',
          expires_in: expiresIn, has_scopes: scopes !== undefined, scopes: scopes ?? [], has_roles: roles !== undefined, roles: roles ?? [],
          requester_scopes: [...req.held],
        }, req.call);
        req.reply.json(201, { ...tokenModel(r.model!), token: r.token });
      },
    },
    {
      method: 'GET', path: '/users/:name/tokens/:id', access: ['read:tokens'], resource,
      async handle(req) {
        req.reply.json(200, tokenModel(await tokens.getToken({ owner: owner(req.params.name), id: req.params.id }, req.call)));
      },
    },
    {
      method: 'DELETE', path: '/users/:name/tokens/:id', access: ['tokens'], resource,
      async handle(req) {
        await tokens.deleteToken({ owner: owner(req.params.name), id: req.params.id, by: req.who }, req.call);
        identities.forgetToken(req.params.id);
        req.reply.send(204, '');
      },
    },
  ];
}
