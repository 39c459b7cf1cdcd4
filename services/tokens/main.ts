// The tokens actor: API tokens, roles, scopes. Wiring only.
import { Lease, leaseKey } from '../../shared/lease.js';
import { actorClient, runActor } from '../../shared/actor.js';
import type { HubError } from '../../shared/errors.js';
import { everyMember } from '../../shared/lists.js';
import { createAnnouncer, decodeJson } from '../../shared/nats.js';
import { storeLocation } from '../../shared/store.js';
import { parseEventSubject, subjects } from '../../shared/subjects.js';
import { mirrorRuntimeServices, serviceDirectory } from '../../shared/runtime-services.js';
import { registerConfiguredTokens } from './config-tokens.js';
import { createTokenHandlers } from './handlers.js';
import { createRuntimeServiceHandlers } from './runtime-services.js';
import { TokenStore } from './store.js';

const HOUR_MS = 3_600_000;

/** The auth actor's answer, or null when it says there is no such user or group. */
async function orNullWhenAbsent<T>(p: Promise<T>): Promise<T | null> {
  try {
    return await p;
  } catch (e) {
    if ((e as HubError).status === 404) return null;
    throw e;
  }
}

await runActor('tokens', async (ctx) => {
  const store = await TokenStore.open(storeLocation(ctx.config.Hub, 'tokens'));
  const auth = actorClient(ctx, 'auth');
  const oauth = actorClient(ctx, 'oauth');
  // this actor writes hub_services; its copy (live, so another node's reload is seen too) answers whose a token is
  const runtime = await mirrorRuntimeServices(ctx.nc, ctx.log, ctx.rpcTimeoutMs * 4);
  const directory = serviceDirectory(ctx.config, runtime, ctx.log);
  const h = createTokenHandlers({
    services: directory.all,
    config: ctx.config,
    store,
    audit: ctx.audit,
    lookupUser: (name) => orNullWhenAbsent(auth.getUser({ name })),
    groupMembers: async (name) => {
      const group = await orNullWhenAbsent(auth.getGroup({ name }));
      return group && everyMember(group, (after) => auth.groupMembers({ name, after, limit: 0 }));
    },
    log: ctx.log,
    announce: createAnnouncer(ctx.nc),
  });

  const subs = [
    ctx.nc.subscribe(subjects.eventsOf('user'), { callback: (_e, m) => void h.onUserEvent(parseEventSubject(m.subject).change, decodeJson(m.data)).catch((err) => ctx.log.error({ event: 'tokens.user_event.failed', err }, 'user event not applied')) }),
    ctx.nc.subscribe(subjects.eventsOf('group'), { callback: (_e, m) => void h.onGroupEvent(parseEventSubject(m.subject).change, decodeJson(m.data)).catch((err) => ctx.log.error({ event: 'tokens.group_event.failed', err }, 'group event not applied')) }),
    ctx.nc.subscribe(subjects.event('owner', 'changed'), { callback: (_e, m) => h.onOwnerChanged(decodeJson(m.data)) }),
  ];
  await registerConfiguredTokens(ctx, ctx.config, h, store, auth);
  const services = createRuntimeServiceHandlers({
    kv: runtime.kv, mirror: runtime, directory, tokens: h, store, oauth, audit: ctx.audit, log: ctx.log, waitMs: ctx.rpcTimeoutMs,
  });
  // (after a predecessor `hub restart` replaces is gone: a service it is adding may not show in this copy yet)
  if (ctx.predecessor.running) void ctx.predecessor.gone.then(() => services.sweep()).catch((err) => ctx.log.error({ event: 'tokens.sweep.failed', err }, 'tokens of removed services not swept'));
  else await services.sweep();
  // a runtime service that goes (or comes back with another node's copy) changes what its tokens may do
  directory.onChange((name) => (name ? h.forgetOwner({ kind: 'service', name }) : undefined));
  await h.shares.start();
  // with tokens on several nodes, one of them purges (they share the store)
  const purgeLease = await Lease.start(ctx.nc, leaseKey('tokens', 'purge'), { holder: ctx.instance, log: ctx.log });
  const purge = setInterval(() => void (purgeLease.held ? h.purgeExpired() : undefined), HOUR_MS);
  purge.unref();
  const flushUse = setInterval(() => void h.flushUse().catch((err) => ctx.log.error({ event: 'tokens.activity.flush_failed', err }, 'token activity not written')),
    Math.max(1000, ctx.config.Hub.activity_resolution * 1000));
  flushUse.unref();

  return {
    grpc: {
      ResolveToken: h.resolveToken, OwnerScopes: h.ownerScopes, CreateToken: h.createToken,
      ListTokens: h.listTokens, GetToken: h.getToken, DeleteToken: h.deleteToken, IssueServerToken: h.issueServerToken,
      RevokeSessionTokens: h.revokeSessionTokens, IssueOAuthToken: h.issueOAuthToken, RevokeTokens: h.revokeTokens,
      IssueUserToken: h.issueUserToken, AddService: services.addService, RemoveService: services.removeService,
      GrantShare: h.shares.grantShare, RevokeShare: h.shares.revokeShare, DeleteShares: h.shares.deleteShares, ListShares: h.shares.listShares,
      ForgetServer: h.shares.forgetServer, CreateShareCode: h.shares.createShareCode, ListShareCodes: h.shares.listShareCodes,
      DeleteShareCodes: h.shares.deleteShareCodes, PeekShareCode: h.shares.peekShareCode, ExchangeShareCode: h.shares.exchangeShareCode,
    },
    // gateways publish token uses here once a second (services/gateway/token-activity.ts)
    nats: { activity: (body) => h.noteUse(body as { tokens?: Record<string, string> }) },
    // `hub reload`: roles, configured services and their tokens, Hub.api_tokens
    reload: async (next) => {
      h.useRoles(next);
      for (const name of directory.useConfig(next)) h.forgetOwner({ kind: 'service', name });
      await registerConfiguredTokens(ctx, next, h, store, auth);
    },
    close: async () => {
      h.shares.stop();
      clearInterval(purge);
      await purgeLease.stop();
      clearInterval(flushUse);
      await h.flushUse();
      for (const s of subs) s.unsubscribe();
      directory.stop();
      auth.close();
      oauth.close();
      await store.close();
    },
  };
});
