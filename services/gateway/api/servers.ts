// /hub/api/users/<u>/server[s/<s>][/progress|/location]: start, stop, read, create, modify, follow a start, and a
// starting server's report of where it listens.
import type { CallOptions } from '../../../shared/contracts/index.js';
import { restartWaitMs, within } from '../../../shared/grpc.js';
import { errors } from '../../../shared/errors.js';
import { hasScope } from '../../../shared/scopes.js';
import { invalidLocationReason, lastOutcome, serverModel, serverUrl, type ProgressEvent, type ServerRecord } from '../../../shared/servers.js';
import { startSse } from '../sse.js';
import { isPlainObject, jsonBody, onlyKeys, type ApiDeps } from './deps.js';
import { forgetGrantees } from './shares.js';
import type { ApiRequest, Route } from './router.js';

const KEEPALIVE_MS = 8000;

/**
 * Before a start: the auth actor refreshes the login with its authenticator when Authenticator.refresh_pre_spawn
 * (the browser's own login, or the user's newest for an API token), and gives the environment
 * Authenticator.auth_state_environment takes from the auth state. A refused login ends and the start does not happen.
 */
export async function prepareSpawn(deps: ApiDeps, user: string, sessionId: string | undefined, by: string, call: CallOptions): Promise<Record<string, string>> {
  const A = deps.config.Authenticator;
  if (!A.refresh_pre_spawn && !Object.keys(A.auth_state_environment).length) return {};
  const r = await deps.auth.prepareSpawn({ user, session_id: sessionId ?? '', by }, call);
  if (!r.ok) {
    if (sessionId) deps.web.forgetSession(sessionId);
    throw errors.forbidden(r.message || 'Your login has expired; sign in again to start a server', 'HUB_ERR_LOGIN_EXPIRED');
  }
  return r.environment ?? {};
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

  /**
   * `{user_options: {...}, display_name}`, or (the older form) the whole body is the options; no body or
   * `user_options: null` reuses the last start's options.
   */
  function startBody(req: ApiRequest): { user_options_json: string; display_name: string } {
    const body = jsonBody(req);
    if (body === undefined) return { user_options_json: '', display_name: '' };
    if (!isPlainObject(body)) throw errors.badRequest('Body must be a JSON object');
    if ('user_options' in body || 'display_name' in body) {
      if (body.display_name !== undefined && typeof body.display_name !== 'string') throw errors.badRequest('display_name must be a string');
      const display_name = ((body.display_name as string | undefined) ?? '').slice(0, 255);
      if (body.user_options === null || body.user_options === undefined) return { user_options_json: '', display_name };
      if (!isPlainObject(body.user_options)) throw errors.badRequest('user_options must be an object or null');
      return { user_options_json: JSON.stringify(body.user_options), display_name };
    }
    return { user_options_json: JSON.stringify(body), display_name: '' };
  }

  /** The model, with the spawner's state for a requester holding admin:server_state on it. */
  const modelFor = (req: ApiRequest, r: ServerRecord) =>
    serverModel(r, { state: hasScope(req.held, 'admin:server_state', { kind: 'server', user: r.user, name: r.name, groups: [] }), origin: deps.subdomains?.userOrigin(r.user) });

  async function start(req: ApiRequest): Promise<void> {
    const { name: user, server = '' } = req.params;
    const model = await users.get(user);
    if (!model) throw errors.notFound(`No such user: ${user}`, 'HUB_ERR_USER_NOT_FOUND');
    const fromLogin = await prepareSpawn(deps, user, req.identity?.owner.name === user ? req.identity.sessionId : undefined, req.who, req.call);
    // the user's groups go with the start: Spawner.group_overrides (the spawner does not ask again)
    const r = await spawner.startServer({ user, name: server, ...startBody(req), by: req.who, auth_environment: fromLogin, groups: model.groups },
      { ...within((config.Spawner.slow_spawn_timeout + config.Hub.rpc_timeout) * 1000, req.call), waitForCalleeMs: restartWaitMs(config), repeatable: true });
    req.reply.send(r.status === 'ready' ? 201 : 202, '', { 'Content-Type': 'text/plain' });
  }

  async function stop(req: ApiRequest): Promise<void> {
    const { name: user, server = '' } = req.params;
    await mustUser(user);
    if (server && !config.Hub.allow_named_servers) throw errors.badRequest('Named servers are not enabled.');
    const body = jsonBody(req);
    if (body !== undefined && !isPlainObject(body)) throw errors.badRequest('Body must be a JSON object');
    if (body) onlyKeys(body, ['remove']);
    if (body?.remove !== undefined && typeof body.remove !== 'boolean') throw errors.badRequest('remove must be true or false');
    const current = servers.get(user, server);
    // a stopped named server still exists (until removed): stopping it again is fine
    if (server && !current) throw errors.notFound(`${user} has no server named '${server}'`, 'HUB_ERR_SERVER_NOT_FOUND');
    const remove = body?.remove === true;
    const r = await spawner.stopServer({ user, name: server, by: req.who, remove },
      within((config.Spawner.slow_stop_timeout + config.Hub.rpc_timeout) * 1000, req.call));
    // a removed server takes what was shared of it along (a stop alone keeps its shares)
    if (remove) forgetGrantees(deps, (await deps.tokens.forgetServer({ owner: user, server_name: server, by: req.who }, req.call)).affected);
    req.reply.send(r.status === 'stopped' ? 204 : 202, '', { 'Content-Type': 'text/plain' });
  }

  function read(req: ApiRequest): void {
    const { name: user, server = '' } = req.params;
    const r = servers.get(user, server);
    if (!r) throw errors.notFound(`${user} has no server named '${server}'`, 'HUB_ERR_SERVER_NOT_FOUND');
    req.reply.json(200, modelFor(req, r));
  }

  /** PUT: a named server that exists without running (409 when the name is taken). */
  async function create(req: ApiRequest): Promise<void> {
    const { name: user, server } = req.params;
    await mustUser(user);
    const r = await spawner.createServer({ user, name: server, ...startBody(req), by: req.who }, within(config.Hub.rpc_timeout * 1000));
    req.reply.json(201, JSON.parse(r.model_json));
  }

  /** PATCH: rename, display_name, user_options of a stopped server. */
  async function modify(req: ApiRequest): Promise<void> {
    const { name: user, server } = req.params;
    await mustUser(user);
    if (!config.Hub.allow_named_servers) throw errors.badRequest('Named servers are not enabled.');
    const body = jsonBody(req);
    if (!isPlainObject(body) || !['name', 'display_name', 'user_options'].some((k) => k in body)) {
      throw errors.badRequest('Specify at least one of name, display_name, user_options');
    }
    onlyKeys(body, ['name', 'display_name', 'user_options']);
    if (body.name !== undefined && typeof body.name !== 'string') throw errors.badRequest('name must be a string');
    if (body.display_name !== undefined && typeof body.display_name !== 'string') throw errors.badRequest('display_name must be a string');
    if (body.user_options !== undefined && !isPlainObject(body.user_options)) throw errors.badRequest('user_options must be an object');
    const r = await spawner.modifyServer({ user, name: server, changes_json: JSON.stringify(body), by: req.who }, within(config.Hub.rpc_timeout * 1000));
    req.reply.json(200, JSON.parse(r.model_json));
  }

  /**
   * Everything that happened so far (state, not only live events), then live events until ready or failed. A
   * server that is not running says how it last ended when nobody asked for it (a failed start: its events; an
   * end of its own: one failed event with why, as the established hub answers for a failed spawn); else 400.
   */
  async function progress(req: ApiRequest): Promise<void> {
    const { name: user, server = '' } = req.params;
    await mustUser(user);
    const current = servers.get(user, server);
    const outcome = current && lastOutcome(current);
    if (!current || (current.state === 'stopped' && !outcome)) {
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
    if (outcome) {
      // a failed start replays its lines, which end with the outcome; an end of its own is that one event
      if (!deliver(current.state === 'failed' ? current.progress : [outcome])) stream.send(outcome);
      return stream.end();
    }
    // Subscribe first, then replay: nothing that happens in between is lost.
    const unwatch = servers.watch(user, server, (r) => {
      if (!r || r.state === 'stopped') {
        if (sent === 0 || !last) stream.send({ progress: 100, failed: true, message: 'Spawn cancelled' });
        return stream.end();
      }
      if (deliver(r.progress)) stream.end();
    });
    stream.onClose(unwatch);
    if (deliver(servers.get(user, server)?.progress ?? current.progress)) stream.end();
  }

  /**
   * POST …/location `{host, port}`: a server whose place the hub cannot know in advance (a batch job on some
   * node) says where it listens. Only with its own token: the scope `servers:location` is granted to server
   * tokens alone, and the spawner also checks that the token is the one it issued for this start.
   */
  async function location(req: ApiRequest): Promise<void> {
    const { name: user, server = '' } = req.params;
    const body = jsonBody(req);
    if (!isPlainObject(body)) throw errors.badRequest('Body must be a JSON object {"host": ..., "port": ...}');
    onlyKeys(body, ['host', 'port']);
    const why = invalidLocationReason(body.host, body.port);
    if (why) throw errors.badRequest(why);
    await spawner.reportLocation({ user, name: server, host: body.host as string, port: body.port as number, token_id: req.identity?.tokenId ?? '' }, req.call);
    req.reply.json(200, { status: 'ok' });
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
    if (path.endsWith(':server')) {
      routes.push(
        { method: 'PUT', path, access: ['start:servers'], resource: serverResource, handle: create },
        { method: 'PATCH', path, access: ['start:servers'], resource: serverResource, handle: modify },
      );
    }
    routes.push({ method: 'GET', path: `${path}/progress`, access: ['read:servers'], resource: serverResource, handle: progress });
    routes.push({ method: 'POST', path: `${path}/location`, access: ['servers:location'], resource: serverResource, handle: location });
  }
  return routes;
}
