// The oauth actor: OAuth clients and authorization codes. Wiring only.
import { Lease, leaseKey } from '../../shared/lease.js';
import { actorClient, runActor, type ActorContext } from '../../shared/actor.js';
import { storeLocation } from '../../shared/store.js';
import { configuredServices } from '../../shared/roles.js';
import { mirrorRuntimeServices } from '../../shared/runtime-services.js';
import { isActive, mirrorServers, serverClientId } from '../../shared/servers.js';
import { decodeJson } from '../../shared/nats.js';
import { subjects } from '../../shared/subjects.js';
import { createOAuthHandlers } from './handlers.js';
import { createOidc } from './oidc.js';
import { SigningKeys, storeKeySource } from './signing-keys.js';
import { OAuthStore } from './store.js';

const HOUR_MS = 3_600_000;

await runActor('oauth', async (ctx) => {
  const store = await OAuthStore.open(storeLocation(ctx.config.Hub, 'oauth'));
  const tokens = actorClient(ctx, 'tokens');
  const auth = actorClient(ctx, 'auth');
  // one set of keys for every node's oauth actor when they share the store; else the data dir's file
  const keys = await SigningKeys.open(store.shared ? storeKeySource(store) : ctx.config.Hub.data_dir);
  const oidc = createOidc({ config: ctx.config, store, tokens, auth, keys, audit: ctx.audit, log: ctx.log });
  const h = createOAuthHandlers({ config: ctx.config, store, tokens, audit: ctx.audit, log: ctx.log, oidc });
  const revoked = ctx.nc.subscribe(subjects.event('token', 'revoked'), {
    callback: (_e, m) => {
      const tokenId = (decodeJson(m.data) as { token_id?: unknown })?.token_id;
      if (typeof tokenId === 'string') void oidc.onTokenRevoked(tokenId).catch((err) => ctx.log.error({ event: 'oauth.token_revoked.failed', err }, 'refresh tokens not revoked with their access token'));
    },
  });

  await h.syncServiceClients(configuredServices(ctx.config), await runtimeServiceNames(ctx));
  await h.syncToolClients(ctx.config.Hub.oauth_clients as Record<string, unknown>[]);
  await h.pruneServerClients(await liveServerClients(ctx));
  await h.purgeCodes();
  // with oauth on several nodes, one of them purges (they share the store)
  const purgeLease = await Lease.start(ctx.nc, leaseKey('oauth', 'purge'), { holder: ctx.instance, log: ctx.log });
  const purge = setInterval(() => void (purgeLease.held ? h.purgeCodes() : Promise.resolve()).catch((err) => ctx.log.warn({ event: 'oauth.purge.failed', err }, 'expired codes not purged')), HOUR_MS);
  purge.unref();

  return {
    // `hub reload`: clients of configured services added, changed (secret, redirect URI) or removed
    reload: async (next) => { await h.syncServiceClients(configuredServices(next), await runtimeServiceNames(ctx)); },
    grpc: {
      RegisterServerClient: h.registerServerClient, RegisterServiceClient: h.registerServiceClient, DeleteClient: h.deleteClient, GetClient: h.getClient,
      IssueCode: h.issueCode, ExchangeCode: h.exchangeCode,
      Refresh: h.refresh, Jwks: oidc.jwks, UserInfo: oidc.userInfo, CheckEndSession: h.checkEndSession, RotateSigningKey: oidc.rotateSigningKey,
    },
    close: async () => {
      clearInterval(purge);
      await purgeLease.stop();
      revoked.unsubscribe();
      tokens.close();
      auth.close();
      await store.close();
    },
  };
});

/** Client ids of the servers the spawner's registry (KV `hub_servers`) holds as active, read once. */
async function liveServerClients(ctx: ActorContext): Promise<Set<string>> {
  const registry = await mirrorServers(ctx.nc, ctx.log, ctx.rpcTimeoutMs * 4);
  registry.stop();
  return new Set([...registry.values()].filter(isActive).map((r) => serverClientId(r.user, r.name)));
}

/** Names of the services added at run time (KV `hub_services`), read once: their clients are theirs, not stale. */
async function runtimeServiceNames(ctx: ActorContext): Promise<Set<string>> {
  const runtime = await mirrorRuntimeServices(ctx.nc, ctx.log, ctx.rpcTimeoutMs * 4);
  runtime.stop();
  return new Set([...runtime.values()].map((s) => s.name));
}
