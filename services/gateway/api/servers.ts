// /hub/api/users/<u>/server[s/<s>][/progress]: start, stop, read, and follow a start.
import { within } from '../../../shared/grpc.js';
import { errors } from '../../../shared/errors.js';
import { serverModel, serverUrl, type ProgressEvent } from '../../../shared/servers.js';
import { startSse } from '../sse.js';
import { isPlainObject, jsonBody, type ApiDeps } from './deps.js';
import { forgetGrantees } from './shares.js';
import type { ApiRequest, Route } from './router.js';

const KEEPALIVE_MS = 8000;

/**
 * With Authenticator.refresh_pre_spawn, a browser login is re-checked with its authenticator before a
 * server starts (a token carries no login to re-check).
 */
export async function refreshBeforeSpawn(deps: ApiDeps, sessionId: string | undefined): Promise<void> {
  if (!deps.config.Authenticator.refresh_pre_spawn || !sessionId) return;
  const r = await deps.auth.refreshUser({ session_id: sessionId, by: 'actor:gateway (pre-spawn)' });
  if (!r.valid) {
    deps.web.forgetSession(sessionId);
    throw errors.forbidden('Your login has expired; sign in again to start a server', 'HUB_ERR_LOGIN_EXPIRED');
  }
}

export function serverRoutes(deps: ApiDeps): Route[] {
  const { config, spawner, servers, users } = deps;
  const serverResource = async (params: Record<string, string>) => {
    const user = await users.get(params.name);
    return { kind: 'server' as const, user: params.name, name: params.server ?? '', groups: user?.groups ?? [] };
  };
  const label = (user: string, name: string) => (name ? `${user}:${name}` : user);

  async function mustUser(name: string): Promise<void> {
    if (!(await users.get(name))) throw errors.notFound(`No such user: ${name}`, 'HUB_ERR_USER_NOT_FOUND');
  }

  /** `{user_options: {...}}`, or (the older form) the whole body is the options; empty reuses the last ones. */
  function userOptions(req: ApiRequest): string {
    const body = jsonBody(req);
    if (body === undefined) return '';
    if (!isPlainObject(body)) throw errors.badRequest('Body must be a JSON object');
    if ('user_options' in body || 'display_name' in body) {
      if (body.user_options === null || body.user_options === undefined) return '';
      if (!isPlainObject(body.user_options)) throw errors.badRequest('user_options must be an object or null');
      return JSON.stringify(body.user_options);
    }
    return JSON.stringify(body);
  }

  async function start(req: ApiRequest): Promise<void> {
    const { name: user, server = '' } = req.params;
    await mustUser(user);
    await refreshBeforeSpawn(deps, req.identity?.sessionId);
    const r = await spawner.startServer({ user, name: server, user_options_json: userOptions(req), by: req.who },
      within((config.Spawner.slow_spawn_timeout + config.Hub.rpc_timeout) * 1000));
    req.reply.send(r.status === 'ready' ? 201 : 202, '', { 'Content-Type': 'text/plain' });
  }

  async function stop(req: ApiRequest): Promise<void> {
    const { name: user, server = '' } = req.params;
    await mustUser(user);
    if (server && !config.Hub.allow_named_servers) throw errors.badRequest('Named servers are not enabled.');
    // {"remove": true} also forgets a named server; without it a stopped named server stays listed until removed
    const body = jsonBody(req);
    const remove = Boolean(server && isPlainObject(body) && body.remove === true);
    const current = servers.get(user, server);
    if (server && (!current || (!servers.isActive(current) && !remove))) throw errors.notFound(`${user} has no server named '${server}'`, 'HUB_ERR_SERVER_NOT_FOUND');
    const r = await spawner.stopServer({ user, name: server, by: req.who, remove },
      within((config.Spawner.slow_stop_timeout + config.Hub.rpc_timeout) * 1000));
    // a removed server takes what was shared of it along (a stop alone keeps its shares)
    if (remove) forgetGrantees(deps, (await deps.tokens.forgetServer({ owner: user, server_name: server, by: req.who })).affected);
    req.reply.send(r.status === 'stopped' ? 204 : 202, '', { 'Content-Type': 'text/plain' });
  }

  function read(req: ApiRequest): void {
    const { name: user, server = '' } = req.params;
    const r = servers.get(user, server);
    if (!r || !servers.isActive(r)) throw errors.notFound(`${user} has no server named '${server}'`, 'HUB_ERR_SERVER_NOT_FOUND');
    req.reply.json(200, serverModel(r));
  }

  /** Everything that happened so far (state, not only live events), then live events until ready or failed. */
  async function progress(req: ApiRequest): Promise<void> {
    const { name: user, server = '' } = req.params;
    await mustUser(user);
    const current = servers.get(user, server);
    if (!current || current.state === 'stopped') {
      if (server && !config.Hub.allow_named_servers) throw errors.notFound(`${user} has no server named '${server}'`);
      throw errors.badRequest(`${label(user, server)} is not starting...`, 'HUB_ERR_SERVER_NOT_STARTING');
    }
    if (current.state === 'stop') throw errors.badRequest(`${label(user, server)} is stopping`, 'HUB_ERR_SERVER_NOT_STARTING');
    const stream = startSse(req.reply, KEEPALIVE_MS);
    const url = serverUrl(user, server);
    if (current.state === 'running') {
      stream.send({ progress: 100, ready: true, message: `Server ready at ${url}`, html_message: `Server ready at <a href="${url}">${url}</a>`, url });
      return stream.end();
    }
    let sent = 0;
    let last = 0;
    const deliver = (events: ProgressEvent[]): boolean => {
      for (; sent < events.length; sent++) {
        const e = { ...events[sent], progress: Math.max(last, events[sent].progress) }; // never backwards
        last = e.progress;
        stream.send(e);
        if (e.ready || e.failed) return true;
      }
      return false;
    };
    // Subscribe first, then replay: nothing that happens in between is lost.
    const unwatch = servers.watch(user, server, (r) => {
      if (!r) {
        if (sent === 0 || !last) stream.send({ progress: 100, failed: true, message: 'Spawn cancelled' });
        return stream.end();
      }
      if (deliver(r.progress)) stream.end();
    });
    stream.onClose(unwatch);
    if (deliver(servers.get(user, server)?.progress ?? current.progress)) stream.end();
  }

  const routes: Route[] = [];
  for (const path of ['/users/:name/server', '/users/:name/servers', '/users/:name/servers/:server']) {
    routes.push(
      { method: 'POST', path, access: ['start:servers'], resource: serverResource, handle: start },
      { method: 'DELETE', path, access: ['delete:servers'], resource: serverResource, handle: stop },
    );
  }
  for (const path of ['/users/:name/server', '/users/:name/servers/:server']) {
    routes.push({ method: 'GET', path, access: ['read:servers'], resource: serverResource, handle: read });
    routes.push({ method: 'GET', path: `${path}/progress`, access: ['read:servers'], resource: serverResource, handle: progress });
  }
  return routes;
}
