// POST and DELETE /hub/api/services/<name> (the established hub 5.0's, scope admin:services): services added and
// removed at run time, kept by the tokens actor in KV hub_services (shared/runtime-services.ts). The body is
// checked here, with the configuration's own rules for a service; the tokens actor writes, all or nothing.
import { checkServices } from '../../../shared/config.js';
import { errors } from '../../../shared/errors.js';
import { POSTABLE_SERVICE_KEYS, type ServiceDirectory } from '../../../shared/runtime-services.js';
import { expandScopes, missingScopes, validateScopes } from '../../../shared/scopes.js';
import { holdsAdminScopes, isPlainObject, jsonBody, onlyKeys, serviceResource, type ApiDeps } from './deps.js';
import { serviceModel } from './models.js';
import type { Route } from './router.js';

/** The body's problems in the configuration checker's words, without its `Hub.services "<name>".` prefix. */
function serviceProblems(name: string, body: Record<string, unknown>): string[] {
  const prefix = `Hub.services ${JSON.stringify(name)}`;
  return checkServices([body]).map((p) => (p.startsWith(`${prefix}.`) ? p.slice(prefix.length + 1) : p.startsWith(prefix) ? `${name}${p.slice(prefix.length)}` : p));
}

export function serviceRoutes(deps: ApiDeps & { directory: ServiceDirectory }): Route[] {
  const { tokens, book, directory, identities, config } = deps;
  const waitMs = config.Hub.rpc_timeout * 1000;
  return [
    {
      method: 'POST', path: '/services/:name', access: ['admin:services'], resource: serviceResource,
      async handle(req) {
        const name = req.params.name;
        const body = jsonBody(req);
        if (directory.all.has(name)) throw errors.conflict(`Service ${name} already exists`);
        if (!isPlainObject(body) || !Object.keys(body).length) throw errors.badRequest('Invalid service data');
        onlyKeys(body, [...POSTABLE_SERVICE_KEYS]);
        const spec: Record<string, unknown> = { ...body, name };
        if (Array.isArray(spec.command) ? spec.command.length : spec.command) throw errors.badRequest(`Can not create managed service ${name} at runtime`);
        delete spec.command;
        const problems = serviceProblems(name, spec);
        if (typeof spec.url === 'string' && /^[a-z]+:\/\/[^/]*@/i.test(spec.url)) problems.push('url: must not carry credentials');
        if (!spec.url && spec.oauth_redirect_uri === undefined && (spec.oauth_no_confirm !== undefined || spec.oauth_client_id !== undefined)) {
          problems.push(`Service ${name} has oauth configured, but is missing required oauth_redirect_uri`);
        }
        if (problems.length) throw errors.badRequest(problems.join('; '));
        // what the service may do (admin) or ask users for (OAuth) must be the requester's to give
        const requested = [...(spec.admin === true ? book.get('admin')!.scopes : []), ...((spec.oauth_client_allowed_scopes as string[] | undefined) ?? [])];
        const valid = validateScopes(requested);
        if (!valid.ok) throw errors.badRequest(valid.reason, 'HUB_ERR_SCOPE_INVALID');
        const lacking = spec.admin === true && !holdsAdminScopes(req.held, book) ? ['admin'] : [];
        for (const s of (spec.oauth_client_allowed_scopes as string[] | undefined) ?? []) if (missingScopes(expandScopes([s]), req.held).length) lacking.push(s);
        if (lacking.length) throw errors.badRequest(`Not assigning requested scopes ${lacking.join(', ')} not held by ${req.who.replace(':', ' ')}`, 'HUB_ERR_SCOPE_NOT_HELD');

        const { api_token: given, ...kept } = spec;
        const added = await tokens.addService({ spec_json: JSON.stringify(kept), api_token: typeof given === 'string' ? given : '', by: req.who }, req.call);
        // this gateway shows the service before it answers; a name remembered as unknown is forgotten
        await directory.waitForRevision(added.revision, waitMs);
        identities.forgetOwner({ kind: 'service', name });
        const svc = directory.all.get(name);
        if (!svc) throw errors.unavailable('the new service is not visible yet');
        // a generated token is shown once, here (the established hub makes none for a service added at run time)
        req.reply.json(201, { ...serviceModel(req.held, svc, book), ...(added.api_token ? { api_token: added.api_token } : {}) });
      },
    },
    {
      // 200 with no body, as the established hub answers; a configured service is 405 (the tokens actor decides)
      method: 'DELETE', path: '/services/:name', access: ['admin:services'], resource: serviceResource,
      async handle(req) {
        const name = req.params.name;
        if (!directory.all.has(name)) throw errors.notFound(`Service ${name} does not exist`, 'HUB_ERR_SERVICE_NOT_FOUND');
        const removed = await tokens.removeService({ name, by: req.who }, req.call);
        await directory.waitForRevision(removed.revision, waitMs);
        identities.forgetOwner({ kind: 'service', name });
        req.reply.send(200, '');
      },
    },
  ];
}
