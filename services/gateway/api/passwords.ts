// /hub/api/users/<name>/password: an admin sets a user's password (the "password" authenticator's).
// The auth actor hashes it (scrypt) and enforces PasswordAuthenticator.min_password_length.
import { errors } from '../../../shared/errors.js';
import { holdsAdminScopes, isPlainObject, jsonBody, onlyKeys, userResource, type ApiDeps } from './deps.js';
import type { Route } from './router.js';

export function passwordRoutes(deps: ApiDeps): Route[] {
  const { auth, users, book } = deps;

  return [
    {
      method: 'PUT', path: '/users/:name/password', access: ['admin:users'], resource: userResource(deps),
      async handle(req) {
        const body = jsonBody(req);
        if (!isPlainObject(body)) throw errors.badRequest('Body must be a JSON object: {"password": "..."}');
        onlyKeys(body, ['password']);
        if (typeof body.password !== 'string') throw errors.badRequest('password must be a string');
        // Setting an admin's password is becoming that admin: it takes every scope admin gives, as granting admin does.
        const target = await users.get(req.params.name);
        if (target?.admin && !holdsAdminScopes(req.held, book)) throw errors.forbidden(`Only an admin may set the password of admin ${req.params.name}`);
        await auth.setPassword({ name: req.params.name, password: body.password, by: req.who }, req.call);
        req.reply.send(204, '');
      },
    },
  ];
}
