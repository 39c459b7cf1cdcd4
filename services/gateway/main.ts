// Gateway actor: the only public listener. Wiring only; see app.ts for the routes.
import { consumedEntities, subjects } from '../../shared/subjects.js';
import { actorClient, runActor } from '../../shared/actor.js';
import { decodeJson } from '../../shared/nats.js';
import { subdomainsOf } from '../../shared/subdomains.js';

import { roleBook } from '../../shared/roles.js';
import { mirrorRuntimeServices, serviceDirectory } from '../../shared/runtime-services.js';
import { createApi, createIdentify } from './api/index.js';
import { createApp } from './app.js';
import { createIdentityCache, createUserCache } from './caches.js';
import { applyEvent } from './events.js';
import { createHealthChecker } from './health.js';
import { createScraper, supervisorGauges } from './metrics.js';
import { createServerMirror } from './servers.js';
import { createTokenActivity } from './token-activity.js';
import { adminRoutes } from './web/admin.js';
import { acceptShareRoutes } from './web/accept-share.js';
import { externalLoginRoutes } from './web/external-login.js';
import { oauthProviderRoutes } from './web/oauth-provider.js';
import { oidcProviderRoutes } from './web/oidc-provider.js';
import { createPages } from './web/pages.js';
import { createWebSessions } from './web/sessions.js';
import { UWS_BUILD } from './http.js';
import { createActivityRecorder } from './proxy/activity.js';
import { createProxy } from './proxy/index.js';
import { createTokenGate } from './proxy/token-gate.js';
import { useForwardedProto } from './proxy/headers.js';
import { openFrontDoor } from './front-door.js';
import { frontDoorCertificate } from '../../shared/tls.js';
import { createRouting } from './proxy/sync.js';
import { ACTORS } from '../../shared/paths.js';
import { FRONT_DOOR_FAILED_MESSAGE, GATEWAY_BOOTED_MESSAGE, type FrontDoorFailed } from '../../shared/supervision.js';
import { drain } from './drain.js';
import { liveConfig } from '../../shared/reload.js';

/** Extra gateways on one hub take their port from HUB_GATEWAY_PORT; the rest of the config is shared. */
const portOf = (configured: number) => Number(process.env.HUB_GATEWAY_PORT) || configured;
/**
 * With `Supervisor.gateways` > 1 the supervisor numbers the gateways of a node (HUB_GATEWAY_INDEX, 1 for the
 * first): they share the port, so socket and metrics are told apart by `<port>-<index>` (the first keeps `<port>`).
 */
const isFirstGateway = () => (Number(process.env.HUB_GATEWAY_INDEX) || 1) === 1;
const replicaOf = (configured: number) => {
  const index = Number(process.env.HUB_GATEWAY_INDEX) || 1;
  return index > 1 ? `${portOf(configured)}-${index}` : String(portOf(configured));
};

await runActor('gateway', async (ctx) => {
  if (UWS_BUILD !== 'native') throw new Error('uWebSockets.js native binary did not load (fallback shim in use): reinstall with `npm ci` on Node 20');
  const { ip, data_dir: dataDir } = ctx.config.Hub;
  const port = portOf(ctx.config.Hub.port);
  const maxAgeMs = ctx.config.Hub.cache_max_age * 1000;
  const auth = actorClient(ctx, 'auth');
  const tokens = actorClient(ctx, 'tokens');
  const spawner = actorClient(ctx, 'spawner');
  const oauth = actorClient(ctx, 'oauth');
  const router = actorClient(ctx, 'proxy-router');
  const servers = await createServerMirror(ctx.nc, ctx.log, ctx.rpcTimeoutMs * 6);
  const cacheBytes = ctx.config.Hub.cache_max_bytes;
  // identities 36 %, and 4 % for what is known of tokens that name none (revoked, or not this hub's)
  const identities = createIdentityCache(tokens, maxAgeMs, cacheBytes * 0.36, cacheBytes * 0.04);
  const users = createUserCache(auth, maxAgeMs, cacheBytes * 0.4);

  // Caches are only as fresh as the events: subscribe before serving, forget everything after a reconnect.
  const web = createWebSessions(ctx.config, auth, tokens, users);
  // (each entity it consumes, and no more: its NATS user may read only those, shared/nats-auth.ts)
  const events = consumedEntities('gateway').map((entity) => ctx.nc.subscribe(subjects.eventsOf(entity), {
    callback: (_e, m) => applyEvent(m.subject, decodeJson(m.data), { identities, users, web }),
  }));
  // The routing table is complete before the gateway listens; after a reconnect it is loaded again.
  const subdomains = subdomainsOf(ctx.config);
  const routes = await createRouting(ctx.nc, servers, ctx.log, ctx.rpcTimeoutMs * 6, subdomains);
  // configured services and, live, those added at run time (KV hub_services)
  const directory = serviceDirectory(ctx.config, await mirrorRuntimeServices(ctx.nc, ctx.log, ctx.rpcTimeoutMs * 6), ctx.log);
  ctx.onNatsStatus((type) => {
    if (type === 'reconnect') {
      identities.clear();
      users.clear();
      web.clear();
      void servers.reload();
      void routes.reload();
      void directory.reload();
    }
  });
  const activity = createActivityRecorder(ctx.nc, ctx.config.Hub.activity_resolution * 1000, ctx.log);
  const proxy = createProxy({
    routes: () => routes.table, activity, nc: ctx.nc, log: ctx.log,
    connectTimeoutMs: ctx.config.Proxy.connect_timeout * 1000, idleTimeoutMs: ctx.config.Proxy.idle_timeout * 1000,
    keepAliveTimeoutMs: ctx.config.Proxy.keepalive_timeout * 1000, subdomains,
    gate: createTokenGate(identities, users).check,
  });

  const tokenUse = createTokenActivity(ctx.nc, ctx.log);
  // the API and pages read options at use through a view that `hub reload` moves on (shared/reload.ts)
  const live = liveConfig(ctx.config);
  const apiDeps = {
    config: live.config, auth, tokens, users, identities, spawner, router, servers, web, nc: ctx.nc, book: roleBook(ctx.config), audit: ctx.audit,
    services: directory.all, directory, tokenUse, subdomains,
  };
  const api = createApi(apiDeps);
  const pages = createPages({ ...apiDeps, hasRoute: (spec: string) => routes.table.get(spec) !== null },
    (kit) => [...externalLoginRoutes(apiDeps, kit), ...oauthProviderRoutes(apiDeps, kit, oauth), ...oidcProviderRoutes(apiDeps, kit, oauth), ...adminRoutes(apiDeps, kit), ...acceptShareRoutes(apiDeps, kit)]);
  const health = createHealthChecker(dataDir, ctx.config.Hub.health_timeout * 1000, replicaOf(ctx.config.Hub.port),
    (actor) => actorClient(ctx, actor, ctx.config.Hub.health_timeout * 1000, 0)); // health reports, never waits
  // a scrape waits for every actor at most as long as /hub/health does
  const scraper = createScraper(ctx.nc, ctx.config.Hub.health_timeout * 1000);
  supervisorGauges(dataDir);
  const mount = createApp({ ctx, health, api, pages, proxy, identify: createIdentify(apiDeps), scraper });
  const config = { ...ctx.config, Hub: { ...ctx.config.Hub, port } };
  // The front door opens only when the hub can serve: once this node's other actors answer (bounded by
  // Supervisor.startup_timeout; /hub/health is the truth after that). The supervisor starts the actors off the API's
  // path when the gateways have booted this far.
  process.send?.({ type: GATEWAY_BOOTED_MESSAGE });
  const localActors = ACTORS.filter((a) => a !== 'gateway' && ctx.config.Supervisor.actors.includes(a));
  const silent = await health.awaitActors(localActors, ctx.config.Supervisor.startup_timeout * 1000);
  if (silent.length) ctx.log.warn({ event: 'gateway.opening_without', actors: silent }, `opening the front door without ${silent.join(', ')} (not answering within Supervisor.startup_timeout)`);
  const frontDoor = await openFrontDoor(config, ctx.log, replicaOf(ctx.config.Hub.port), mount).catch((err: Error) => {
    process.send?.({ type: FRONT_DOOR_FAILED_MESSAGE, reason: err.message } satisfies FrontDoorFailed);
    throw err;
  });
  useForwardedProto(frontDoor.scheme);
  // automatic certificates: ordered by the node's first gateway only; every gateway serves them (file watch)
  // (acme-client imported only then: ~20 MB of a gateway that orders nothing)
  const certificates = frontDoorCertificate(config)?.automatic && isFirstGateway() ? (await import('./acme.js')).startAcme(ctx) : null;
  return {
    details: () => ({ uws: UWS_BUILD, listen: ctx.config.Hub.bind_url || `${frontDoor.scheme}://${ip}:${port}`, replica: replicaOf(ctx.config.Hub.port), node: ctx.config.Hub.node_name, routes: String(routes.table.size),
      ...(frontDoor.scheme === 'https' ? { certificate: frontDoor.certificate() } : {}) }),
    stopIntake: () => frontDoor.stopIntake(),
    drain: (ms) => drain.wait(ms, ctx.log),
    // `hub reload`: services, roles, extra_headers, auth_refresh_age; every cached resolution is worked out again (as after a reconnect)
    reload: (next) => {
      live.use(next);
      web.useConfig(next);
      directory.useConfig(next);
      mount.useConfig(next);
      apiDeps.book.clear();
      for (const [name, role] of roleBook(next)) apiDeps.book.set(name, role);
      identities.clear();
      users.clear();
      web.clear();
    },
    close: () => {
      certificates?.stop();
      frontDoor.close();
      routes.stop();
      activity.stop();
      tokenUse.stop();
      proxy.close();
      for (const sub of events) sub.unsubscribe();
      health.close();
      auth.close();
      tokens.close();
      spawner.close();
      oauth.close();
      router.close();
      servers.stop();
      directory.stop();
    },
  };
}, { grpcInstance: (config) => replicaOf(config.Hub.port) });
