// The oauth actor: OAuth clients and authorization codes. Wiring only.
import { runActor } from '../../shared/actor.js';
import { createGrpcClient } from '../../shared/grpc.js';
import { decodeJson, type NatsConnection } from '../../shared/nats.js';
import { grpcSocketPath, storePath } from '../../shared/paths.js';
import { configuredServices } from '../../shared/roles.js';
import { isActive, SERVERS_BUCKET, serverClientId, type ServerRecord } from '../../shared/servers.js';
import { createOAuthHandlers } from './handlers.js';
import { OAuthStore } from './store.js';

const HOUR_MS = 3_600_000;

await runActor('oauth', async (ctx) => {
  const store = await OAuthStore.open(storePath(ctx.config.Hub.data_dir, 'oauth'));
  const tokens = createGrpcClient('tokens', grpcSocketPath(ctx.config.Hub.data_dir, 'tokens'), ctx.rpcTimeoutMs);
  const h = createOAuthHandlers({ config: ctx.config, store, tokens, audit: ctx.audit, log: ctx.log });

  await h.syncServiceClients(configuredServices(ctx.config));
  await h.pruneServerClients(await liveServerClients(ctx.nc));
  await h.purgeCodes();
  const purge = setInterval(() => void h.purgeCodes().catch((err) => ctx.log.warn({ event: 'oauth.purge.failed', err }, 'expired codes not purged')), HOUR_MS);
  purge.unref();

  return {
    grpc: {
      RegisterServerClient: h.registerServerClient, DeleteClient: h.deleteClient, GetClient: h.getClient,
      IssueCode: h.issueCode, ExchangeCode: h.exchangeCode,
    },
    close: async () => {
      clearInterval(purge);
      tokens.close();
      await store.close();
    },
  };
});

/** Client ids of the servers the spawner's registry (KV `hub_servers`) holds as active. */
async function liveServerClients(nc: NatsConnection): Promise<Set<string>> {
  const kv = await nc.jetstream().views.kv(SERVERS_BUCKET, { history: 1 });
  const keys: string[] = [];
  for await (const key of await kv.keys()) keys.push(key); // collect first: awaiting inside the iteration ends it early
  const live = new Set<string>();
  for (const key of keys) {
    const entry = await kv.get(key);
    if (!entry || entry.operation !== 'PUT') continue;
    const r = decodeJson<ServerRecord>(entry.value);
    if (isActive(r)) live.add(serverClientId(r.user, r.name));
  }
  return live;
}
