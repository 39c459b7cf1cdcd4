// The spawner actor: single-user servers, run by the backend `Hub.spawner_class` names. Wiring only.
import { actorClient, runActor } from '../../shared/actor.js';
import { decodeJson, encodeJson, gatewaysHaveApplied } from '../../shared/nats.js';

import { subjects } from '../../shared/subjects.js';
import { createActivityBuffer } from './activity.js';
import { isShutdownRequest } from '../../shared/supervision.js';
import type { SpawnerBackend } from './backend.js';
import { backendContext, BACKENDS } from './backends/index.js';
import { createSpawnerHandlers, serverMessage } from './handlers.js';
import { Registry } from './registry.js';

await runActor('spawner', async (ctx) => {
  const { config } = ctx;
  const registry = await Registry.open(ctx.nc, ctx.log, ctx.rpcTimeoutMs * 4);
  const tokens = actorClient(ctx, 'tokens');
  const oauth = actorClient(ctx, 'oauth');
  // records name the backend that started them, so servers of a previous spawner_class are still adopted and stopped
  const backends = new Map<string, SpawnerBackend>();
  const backend = (name: string) => {
    let b = backends.get(name);
    if (!b) backends.set(name, (b = (BACKENDS[name] ?? BACKENDS.simple).create(backendContext(config, ctx.log.child({ backend: name })))));
    return b;
  };
  backend(config.Hub.spawner_class);
  const h = createSpawnerHandlers({
    config, registry, tokens, oauth, audit: ctx.audit, log: ctx.log, instance: ctx.instance, backend,
    gatewaysHaveApplied: (revision) => gatewaysHaveApplied(ctx.nc, revision, ctx.rpcTimeoutMs),
    announce: (change, record) => ctx.nc.publish(subjects.event('server', change), encodeJson(serverMessage(record))),
  });

  const activity = createActivityBuffer((batch) => h.recordActivity(batch), Math.max(1000, config.Hub.activity_resolution * 1000));
  const proxyActivity = ctx.nc.subscribe(subjects.event('activity', 'proxy'), {
    callback: (_e, m) => activity.noteRoutes(decodeJson<{ routes?: Record<string, string> }>(m.data)?.routes ?? {}, registry.all()),
  });

  // POST /hub/api/shutdown may say whether servers stop with the hub (passed on by the supervisor)
  let cleanupServers = config.Hub.cleanup_servers;
  process.on('message', (m) => {
    if (isShutdownRequest(m) && typeof m.servers === 'boolean') cleanupServers = m.servers;
  });

  await h.adoptAll();
  const poll = setInterval(() => void h.pollAdopted(), config.Spawner.poll_interval * 1000);
  poll.unref();

  return {
    grpc: {
      StartServer: h.startServer, StopServer: h.stopServer, StopUserServers: h.stopUserServers,
      CreateServer: h.createServer, ModifyServer: h.modifyServer,
      UserServers: h.userServers, ListServers: h.listServers, ReportLocation: h.reportLocation,
    },
    nats: {
      // POST /hub/api/users/<u>/activity with `servers`: {user, servers: {name: iso}}
      activity: (body) => {
        const b = body as { user: string; servers: Record<string, string> };
        for (const [name, at] of Object.entries(b.servers ?? {})) activity.note(b.user, name, at);
        return {};
      },
    },
    close: async () => {
      clearInterval(poll);
      activity.stop();
      proxyActivity.unsubscribe();
      await activity.flush();
      if (cleanupServers) await h.stopAll();
      else ctx.log.info({ event: 'spawner.leaving_servers', count: registry.all().length }, 'servers keep running (Hub.cleanup_servers or the shutdown request said so)');
      tokens.close();
      oauth.close();
    },
  };
});
