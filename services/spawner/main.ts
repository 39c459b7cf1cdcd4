// The spawner actor: single-user servers as local processes. Wiring only.
import { runActor } from '../../shared/actor.js';
import { createGrpcClient } from '../../shared/grpc.js';
import { decodeJson, encodeJson } from '../../shared/nats.js';
import { grpcSocketPath } from '../../shared/paths.js';
import { subjects } from '../../shared/subjects.js';
import { isShutdownRequest } from '../../shared/supervision.js';
import { createSpawnerHandlers, serverMessage } from './handlers.js';
import { Registry } from './registry.js';

await runActor('spawner', async (ctx) => {
  const { config } = ctx;
  const registry = await Registry.open(ctx.nc);
  const tokens = createGrpcClient('tokens', grpcSocketPath(config.Hub.data_dir, 'tokens'), ctx.rpcTimeoutMs);
  const oauth = createGrpcClient('oauth', grpcSocketPath(config.Hub.data_dir, 'oauth'), ctx.rpcTimeoutMs);
  const h = createSpawnerHandlers({
    config, registry, tokens, oauth, audit: ctx.audit, log: ctx.log, instance: ctx.instance,
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
      if (cleanupServers) await h.stopAll();
      else ctx.log.info({ event: 'spawner.leaving_servers', count: registry.all().length }, 'servers keep running (Hub.cleanup_servers or the shutdown request said so)');
      tokens.close();
      oauth.close();
    },
  };
});
