// Tokens that come from the configuration (`Hub.api_tokens`, services' `api_token`): registered at start,
// their users created when missing, and revoked once they leave the configuration.
import type { ActorContext } from '../../shared/actor.js';
import type { AuthClient } from '../../shared/contracts/index.js';
import type { HubConfig } from '../../shared/config.js';
import type { HubError } from '../../shared/errors.js';
import { configuredServices } from '../../shared/roles.js';
import { SUPPLIED_ROUNDS, verifySecret } from '../../shared/secrets.js';
import type { TokenHandlers } from './handlers.js';
import type { TokenStore } from './store.js';

/**
 * `Hub.api_tokens` (token → user; missing users are created) and services' `api_token` are registered
 * at start and at each `hub reload` (`config`); config tokens no longer in the config are revoked.
 */
export async function registerConfiguredTokens(ctx: ActorContext, config: HubConfig, h: TokenHandlers, store: TokenStore, auth: AuthClient): Promise<void> {
  const wanted: { token: string; owner: { kind: 'user' | 'service'; name: string } }[] = [
    ...Object.entries(config.Hub.api_tokens).map(([token, name]) => ({ token, owner: { kind: 'user' as const, name } })),
    ...configuredServices(config).filter((s) => s.api_token).map((s) => ({ token: s.api_token!, owner: { kind: 'service' as const, name: s.name } })),
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
      h.forgetOwner({ kind: row.owner_kind, name: row.owner_name }); // every gateway forgets what it resolved
      ctx.log.info({ event: 'tokens.config_token_removed', token_id: `a${row.id}`, owner: row.owner_name }, 'configured token no longer in config: revoked');
    }
  }
}

/** The auth actor starts beside us: retry briefly (bounded) until it answers. */
async function ensureUser(ctx: ActorContext, auth: AuthClient, name: string): Promise<void> {
  for (let attempt = 0, delay = 50; ; attempt++, delay = Math.min(delay * 2, 1000)) {
    try {
      await auth.createUser({ name, admin: false, by: 'config' });
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
