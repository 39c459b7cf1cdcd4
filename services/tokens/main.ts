// The tokens actor: API tokens, roles, scopes. Wiring only.
import { join } from 'node:path';
import { runActor, type ActorContext } from '../../shared/actor.js';
import type { HubError } from '../../shared/errors.js';
import { createGrpcClient } from '../../shared/grpc.js';
import { decodeJson, encodeJson } from '../../shared/nats.js';
import { grpcSocketPath } from '../../shared/paths.js';
import { configuredServices } from '../../shared/roles.js';
import { SUPPLIED_ROUNDS, verifySecret } from '../../shared/secrets.js';
import { subjects } from '../../shared/subjects.js';
import { createTokenHandlers, type TokenHandlers } from './handlers.js';
import { TokenStore } from './store.js';

const HOUR_MS = 3_600_000;

await runActor('tokens', async (ctx) => {
  const store = await TokenStore.open(join(ctx.config.Hub.data_dir, 'tokens.sqlite'));
  const auth = createGrpcClient('auth', grpcSocketPath(ctx.config.Hub.data_dir, 'auth'), ctx.rpcTimeoutMs);
  const h = createTokenHandlers({
    config: ctx.config,
    store,
    audit: ctx.audit,
    lookupUser: async (name) => {
      try {
        return await auth.call<{ name: string; admin: boolean; groups: string[] }>('GetUser', { name });
      } catch (e) {
        if ((e as HubError).status === 404) return null;
        throw e;
      }
    },
    announce: (change, body) => ctx.nc.publish(subjects.event(change === 'token_revoked' ? 'token' : 'owner', change === 'token_revoked' ? 'revoked' : 'changed'), encodeJson(body)),
  });

  const subs = [
    ctx.nc.subscribe('hub.evt.user.*', { callback: (_e, m) => void h.onUserEvent(m.subject.split('.')[3], decodeJson(m.data)).catch((err) => ctx.log.error({ event: 'tokens.user_event.failed', err }, 'user event not applied')) }),
    ctx.nc.subscribe('hub.evt.group.*', { callback: (_e, m) => h.onGroupEvent(decodeJson(m.data)) }),
  ];
  await registerConfiguredTokens(ctx, h, store, auth);
  const purge = setInterval(() => void h.purgeExpired(), HOUR_MS);
  purge.unref();
  const flushUse = setInterval(() => void h.flushUse().catch((err) => ctx.log.error({ event: 'tokens.activity.flush_failed', err }, 'token activity not written')),
    Math.max(1000, ctx.config.Hub.activity_resolution * 1000));
  flushUse.unref();

  return {
    grpc: {
      ResolveToken: h.resolveToken, OwnerScopes: h.ownerScopes, CreateToken: h.createToken,
      ListTokens: h.listTokens, GetToken: h.getToken, DeleteToken: h.deleteToken, IssueServerToken: h.issueServerToken,
      RevokeSessionTokens: h.revokeSessionTokens, IssueOAuthToken: h.issueOAuthToken, RevokeTokens: h.revokeTokens,
    },
    // gateways publish token uses here once a second (services/gateway/token-activity.ts)
    nats: { activity: (body) => h.noteUse(body as { tokens?: Record<string, string> }) },
    close: async () => {
      clearInterval(purge);
      clearInterval(flushUse);
      await h.flushUse();
      for (const s of subs) s.unsubscribe();
      auth.close();
      await store.close();
    },
  };
});

/**
 * `Hub.api_tokens` (token → user; missing users are created) and services' `api_token` are registered
 * at start; config tokens no longer in the config are revoked.
 */
async function registerConfiguredTokens(ctx: ActorContext, h: TokenHandlers, store: TokenStore, auth: ReturnType<typeof createGrpcClient>): Promise<void> {
  const wanted: { token: string; owner: { kind: 'user' | 'service'; name: string } }[] = [
    ...Object.entries(ctx.config.Hub.api_tokens).map(([token, name]) => ({ token, owner: { kind: 'user' as const, name } })),
    ...configuredServices(ctx.config).filter((s) => s.api_token).map((s) => ({ token: s.api_token!, owner: { kind: 'service' as const, name: s.name } })),
  ];
  for (const { token, owner } of wanted) {
    if (owner.kind === 'user') await ensureUser(ctx, auth, owner.name);
    const existing = await h.findByToken(token);
    if (existing && (existing.owner_kind !== owner.kind || existing.owner_name !== owner.name)) {
      throw new Error(`a configured token for ${owner.kind} ${owner.name} is already the token of ${existing.owner_kind} ${existing.owner_name}`);
    }
    if (!existing) await h.register(owner, token, ['inherit'], 'from config', { rounds: SUPPLIED_ROUNDS, source: 'config' });
  }
  for (const row of await store.bySource('config')) {
    if (!wanted.some((w) => verifySecret(w.token, row.hashed))) {
      await store.delete(row.id);
      ctx.log.info({ event: 'tokens.config_token_removed', token_id: `a${row.id}`, owner: row.owner_name }, 'configured token no longer in config: revoked');
    }
  }
}

/** The auth actor starts beside us: retry briefly (bounded) until it answers. */
async function ensureUser(ctx: ActorContext, auth: ReturnType<typeof createGrpcClient>, name: string): Promise<void> {
  for (let attempt = 0, delay = 50; ; attempt++, delay = Math.min(delay * 2, 1000)) {
    try {
      await auth.call('CreateUser', { name, admin: false, by: 'config' });
      return;
    } catch (e) {
      const status = (e as HubError).status;
      if (status === 409) return;
      if (status !== 503 && status !== 504) throw e;
      if (attempt >= 30) throw new Error(`auth actor did not answer while registering Hub.api_tokens user ${name}`);
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}
