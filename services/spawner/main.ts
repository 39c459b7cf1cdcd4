// The spawner actor: single-user servers, run by the backend `Hub.spawner_class` names. Wiring only.
import { actorClient, runActor } from '../../shared/actor.js';
import { liveConfig } from '../../shared/reload.js';
import { decodeJson, encodeJson, gatewaysHaveApplied } from '../../shared/nats.js';

import { subjects } from '../../shared/subjects.js';
import { createActivityBuffer } from './activity.js';
import { isReplacedNotice, isShutdownRequest } from '../../shared/supervision.js';
import type { SpawnerBackend } from './backend.js';
import { backendContext, BACKENDS } from './backends/index.js';
import { createSpawnerHandlers, serverMessage, type RelayedReport } from './handlers.js';
import { createNodes } from './nodes.js';
import { Registry } from './registry.js';
import { serveGrpcOverNats } from '../../shared/grpc.js';
import { takeImportedServers } from '../../shared/import-journal.js';
import type { Handlers } from '../../shared/contracts/index.js';

await runActor('spawner', async (ctx) => {
  // backends and placement read options at use through a view `hub reload` moves on (what a backend makes once at
  // its start, as a watch or a client, keeps what it was made of: shared/reload.ts RESTART_ONLY)
  const live = liveConfig(ctx.config);
  const { config } = live;
  const registry = await Registry.open(ctx.nc, ctx.log, ctx.rpcTimeoutMs * 4);
  const hubWideId = await registry.hubWideId();
  const tokens = actorClient(ctx, 'tokens');
  const oauth = actorClient(ctx, 'oauth');
  // records name the backend that started them, so servers of a previous spawner_class are still adopted and stopped
  const backends = new Map<string, SpawnerBackend>();
  const backend = (name: string) => {
    let b = backends.get(name);
    if (!b) backends.set(name, (b = (BACKENDS[name] ?? BACKENDS.simple).create(backendContext(config, ctx.log.child({ backend: name }), hubWideId))));
    return b;
  };
  backend(config.Hub.spawner_class);
  const h = createSpawnerHandlers({
    config, registry, tokens, oauth, audit: ctx.audit, log: ctx.log, instance: ctx.instance, backend, predecessor: ctx.predecessor,
    relayReport: (report) => ctx.nc.publish(subjects.command('spawner', 'location-reported'), encodeJson(report)),
    gatewaysHaveApplied: (revision) => gatewaysHaveApplied(ctx.nc, revision, ctx.rpcTimeoutMs),
    announce: (change, record) => ctx.nc.publish(subjects.event('server', change), encodeJson(serverMessage(record))),
  });

  const nodes = createNodes({ config, nc: ctx.nc, registry, audit: ctx.audit, log: ctx.log, rpcTimeoutMs: ctx.rpcTimeoutMs });
  // this node's own subjects: what other nodes' spawners forward here (servers this node runs, starts placed here)
  const forwarded = serveGrpcOverNats(ctx.nc, 'spawner', {
    Ping: () => ({ actor: 'spawner', instance: ctx.instance, pid: process.pid, uptime_seconds: process.uptime(), version: '', details: { node: config.Hub.node_name } }),
    ...nodes.table(h),
  } as Handlers<'spawner'>, ctx.log, config.Hub.node_name);

  const activity = createActivityBuffer((batch) => h.recordActivity(batch), Math.max(1000, config.Hub.activity_resolution * 1000));
  const proxyActivity = ctx.nc.subscribe(subjects.event('activity', 'proxy'), {
    callback: (_e, m) => activity.noteRoutes(decodeJson<{ routes?: Record<string, string> }>(m.data)?.routes ?? {}, registry.all()),
  });
  // POST /hub/api/users/<u>/activity with `servers`: {user, servers: {name: iso}}. Every node's spawner hears it
  // (no queue group) and records its own servers' part.
  const userActivity = ctx.nc.subscribe(subjects.command('spawner', 'activity'), {
    callback: (_e, m) => {
      const b = decodeJson<{ user?: string; servers?: Record<string, string> }>(m.data);
      if (typeof b?.user !== 'string') return;
      for (const [name, at] of Object.entries(b.servers ?? {})) if (typeof at === 'string') activity.note(b.user, name, at);
    },
  });

  // a location report the successor took while this spawner, replaced by `hub restart`, waits for it (every node's
  // spawners hear it; only this node's act)
  const relayedReports = ctx.nc.subscribe(subjects.command('spawner', 'location-reported'), {
    callback: (_e, m) => {
      const report = decodeJson<RelayedReport>(m.data);
      if (report && typeof report.user === 'string' && typeof report.name === 'string' && typeof report.token_id === 'string') h.takeRelayedReport(report);
    },
  });

  // POST /hub/api/shutdown may say whether servers stop with the hub (passed on by the supervisor)
  let cleanupServers = config.Hub.cleanup_servers;
  process.on('message', (m) => {
    if (isShutdownRequest(m) && typeof m.servers === 'boolean') cleanupServers = m.servers;
    if (isReplacedNotice(m)) cleanupServers = false; // `hub restart`: the successor adopts them
  });

  // named servers `hub import jupyterhub` brought over (the file goes once they are in the registry)
  await takeImportedServers<Parameters<typeof h.importServers>[0][number]>(config.Hub.data_dir, async (servers) => {
    const done = await h.importServers(servers);
    ctx.log.info({ event: 'spawner.imported_servers', ...done }, 'named servers of the established hub brought over');
  });
  // this node's servers are adopted by one spawner: with a predecessor still finishing its work (`hub restart`), once
  // it is gone; this one serves meanwhile (requests about servers it is busy with wait for it: handlers.ts)
  let poll: NodeJS.Timeout | undefined;
  const adoption = ctx.predecessor.gone.then(() => h.adoptAll()).then(() => {
    poll = setInterval(() => void h.pollAdopted(), config.Spawner.poll_interval * 1000);
    poll.unref();
  });
  if (ctx.predecessor.running) adoption.catch((err) => ctx.log.error({ event: 'spawner.adopt.failed', err }, 'servers not adopted'));
  else await adoption;
  // other nodes' spawners gone longer than Spawner.node_lost_timeout: their servers marked stopped (one sweep at a time)
  let sweeping = false;
  const lost = setInterval(() => {
    if (sweeping) return;
    sweeping = true;
    void nodes.sweepLost().catch((e: Error) => ctx.log.warn({ event: 'spawner.lost_sweep.failed', err: e.message }, 'lost-node check failed'))
      .finally(() => { sweeping = false; });
  }, Math.min(5000, Math.max(500, config.Spawner.node_lost_timeout * 250)));
  lost.unref();

  return {
    // what other actors call: requests about another node's servers go there, starts are placed (nodes.ts)
    grpc: nodes.routed(h),
    reload: (next) => {
      live.use(next);
      h.useConfig(next);
    },
    // replaced by `hub restart`: no more forwarded requests; the starts and stops under way finish (bounded)
    stopIntake: () => forwarded.drain().catch(() => undefined),
    drain: (ms) => Promise.race([h.workInProgress(), new Promise((r) => setTimeout(r, ms).unref())]).then(() => undefined),
    close: async () => {
      clearInterval(poll);
      clearInterval(lost);
      await forwarded.drain().catch(() => undefined);
      activity.stop();
      proxyActivity.unsubscribe();
      userActivity.unsubscribe();
      relayedReports.unsubscribe();
      await activity.flush();
      if (cleanupServers) await h.stopAll();
      else ctx.log.info({ event: 'spawner.leaving_servers', count: registry.all().length }, 'servers keep running (Hub.cleanup_servers or the shutdown request said so)');
      tokens.close();
      oauth.close();
      registry.stop();
    },
  };
});
