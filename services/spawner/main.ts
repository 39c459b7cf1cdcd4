// The spawner actor: single-user servers, run by the backend `Hub.spawner_class` names. Wiring only.
import { runActor } from '../../shared/actor.js';
import { createGrpcClient } from '../../shared/grpc.js';
import { decodeJson, encodeJson } from '../../shared/nats.js';
import { grpcSocketPath } from '../../shared/paths.js';
import { subjects } from '../../shared/subjects.js';
import type { SpawnerBackend } from './backend.js';
import { backendContext, BACKENDS } from './backends/index.js';
import { createSpawnerHandlers, serverMessage } from './handlers.js';
import { Registry } from './registry.js';

await runActor('spawner', async (ctx) => {
  const { config } = ctx;
  const registry = await Registry.open(ctx.nc);
  const tokens = createGrpcClient('tokens', grpcSocketPath(config.Hub.data_dir, 'tokens'), ctx.rpcTimeoutMs);
  const oauth = createGrpcClient('oauth', grpcSocketPath(config.Hub.data_dir, 'oauth'), ctx.rpcTimeoutMs);
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
    announce: (change, record) => ctx.nc.publish(subjects.event('server', change), encodeJson(serverMessage(record))),
  });

  // Activity (from servers' own reports and from proxied traffic) is buffered and written once per interval.
  const pending = new Map<string, { user: string; name: string; at: string }>();
  const note = (user: string, name: string, at: string) => {
    const key = JSON.stringify([user, name]);
    if (at > (pending.get(key)?.at ?? '')) pending.set(key, { user, name, at });
  };
  const flush = setInterval(() => {
    const batch = [...pending.values()];
    pending.clear();
    if (batch.length) void h.recordActivity(batch);
  }, Math.max(1000, config.Hub.activity_resolution * 1000));
  flush.unref();
  const proxyActivity = ctx.nc.subscribe('hub.evt.activity.proxy', {
    callback: (_e, m) => {
      const routes = decodeJson<{ routes?: Record<string, string> }>(m.data)?.routes ?? {};
      const byUrl = new Map(registry.all().map((r) => [r.url, r]));
      for (const [spec, at] of Object.entries(routes)) {
        const r = byUrl.get(spec);
        if (r) note(r.user, r.name, at);
      }
    },
  });

  await h.adoptAll();
  const poll = setInterval(() => void h.pollAdopted(), config.Spawner.poll_interval * 1000);
  poll.unref();

  return {
    grpc: {
      StartServer: h.startServer, StopServer: h.stopServer, StopUserServers: h.stopUserServers,
      CreateServer: h.createServer, ModifyServer: h.modifyServer,
      UserServers: h.userServers, ListServers: h.listServers,
    },
    nats: {
      // POST /hub/api/users/<u>/activity with `servers`: {user, servers: {name: iso}}
      activity: (body) => {
        const b = body as { user: string; servers: Record<string, string> };
        for (const [name, at] of Object.entries(b.servers ?? {})) note(b.user, name, at);
        return {};
      },
    },
    close: async () => {
      clearInterval(poll);
      clearInterval(flush);
      proxyActivity.unsubscribe();
      await h.recordActivity([...pending.values()]);
      if (config.Hub.cleanup_servers) await h.stopAll();
      else ctx.log.info({ event: 'spawner.leaving_servers', count: registry.all().length }, 'Hub.cleanup_servers is false: servers keep running');
      tokens.close();
      oauth.close();
    },
  };
});
