// Services added and removed at run time (shared/runtime-services.ts). This actor writes the KV record, registers
// the service's token (hashed; generated when none is given) and has the oauth actor register its client; a
// failure at any step undoes the earlier ones, so a service exists whole or not at all. Removal: the record goes
// first (from then on its tokens resolve to nothing, here and on every gateway), then its tokens and OAuth client.
import type { KV } from 'nats';
import type { AuditPublisher } from '../../shared/audit.js';
import type { CallContext, OAuthClient } from '../../shared/contracts/index.js';
import { errors } from '../../shared/errors.js';
import type { KvMirror } from '../../shared/kv-mirror.js';
import type { Logger } from '../../shared/log.js';
import { encodeJson } from '../../shared/nats.js';
import {
  isOAuthService, KEPT_SERVICE_KEYS, serviceClientId, serviceKey, type RuntimeService, type ServiceDirectory,
} from '../../shared/runtime-services.js';
import { GENERATED_ROUNDS, newToken, SUPPLIED_ROUNDS } from '../../shared/secrets.js';
import { isoNow } from '../../shared/time.js';
import type { Owner, TokenHandlers } from './handlers.js';
import type { TokenStore } from './store.js';

export interface RuntimeServiceDeps {
  kv: KV;
  mirror: KvMirror<RuntimeService>;
  directory: ServiceDirectory;
  tokens: Pick<TokenHandlers, 'findByToken' | 'register' | 'forgetOwner'>;
  store: TokenStore;
  oauth: OAuthClient;
  audit: AuditPublisher;
  log: Logger;
  /** how long a change may take to show in this actor's own copy */
  waitMs: number;
}

export function createRuntimeServiceHandlers(d: RuntimeServiceDeps) {
  const { kv, mirror, directory, store, oauth, audit, log } = d;

  /** The tokens of a service, revoked; every gateway forgets their resolutions. */
  async function revokeTokensOf(owner: Owner, by: string): Promise<string[]> {
    const ids = (await store.deleteOwner(owner.kind, owner.name)).map((id) => `a${id}`);
    d.tokens.forgetOwner(owner);
    if (ids.length) void audit.publish('token', 'delete', { who: by, what: `service:${owner.name}`, outcome: 'ok', reason: 'service removed', tokens: ids });
    return ids;
  }

  return {
    async addService(r: { spec_json: string; api_token: string; by: string }, call: CallContext) {
      let sent: Record<string, unknown>;
      try {
        sent = JSON.parse(r.spec_json);
      } catch {
        throw errors.badRequest('Invalid service data');
      }
      const name = typeof sent?.name === 'string' ? sent.name : '';
      if (!name) throw errors.badRequest('Invalid service data');
      if (directory.all.has(name)) throw errors.conflict(`Service ${name} already exists`);
      const given = r.api_token;
      if (given) {
        if (given.length <= 8) throw errors.badRequest('api_token must be longer than 8 characters');
        if (await d.tokens.findByToken(given)) throw errors.badRequest('api_token is already the token of another user or service');
      }
      const token = given || newToken();
      const record: RuntimeService = { name, added_by: r.by, added_at: isoNow() };
      for (const key of KEPT_SERVICE_KEYS) if (sent[key] !== undefined) (record as Record<string, unknown>)[key] = sent[key];
      if (call.cancelled) throw errors.timeout('adding the service');

      let revision: number;
      try {
        revision = await kv.create(serviceKey(name), encodeJson(record));
      } catch (e) {
        if (/wrong last sequence|key exists/i.test((e as Error).message)) throw errors.conflict(`Service ${name} already exists`);
        throw e;
      }
      const owner: Owner = { kind: 'service', name };
      let tokenId = 0;
      try {
        tokenId = await d.tokens.register(owner, token, ['inherit'], 'added at run time', { rounds: given ? SUPPLIED_ROUNDS : GENERATED_ROUNDS, source: 'runtime' });
        if (isOAuthService(record)) await oauth.registerServiceClient({ spec_json: JSON.stringify(record), secret: token }, { deadline: call.deadline });
      } catch (e) {
        if (tokenId) await store.delete(tokenId);
        await kv.delete(serviceKey(name));
        log.warn({ event: 'services.add_failed', service: name, err: (e as Error).message }, 'service not added: undone');
        throw e;
      }
      // its token resolves as soon as the answer is out: this actor's copy has the record, no absence is remembered
      if (!(await mirror.waitForRevision(revision, d.waitMs))) log.warn({ event: 'services.mirror_late', service: name, revision }, 'own copy of hub_services is late');
      d.tokens.forgetOwner(owner);
      log.info({ event: 'services.added', service: name, url: record.url ?? null, oauth: isOAuthService(record) }, 'service added at run time');
      void audit.publish('service', 'add', { who: r.by, what: `service:${name}`, outcome: 'ok', url: record.url ?? null });
      return { api_token: given ? '' : token, revision };
    },

    async removeService(r: { name: string; by: string }) {
      const svc = directory.all.get(r.name);
      if (!svc) throw errors.notFound(`Service ${r.name} does not exist`, 'HUB_ERR_SERVICE_NOT_FOUND');
      if (directory.fromConfig(r.name)) throw errors.methodNotAllowed(`Service ${r.name} is not modifiable at runtime`);
      const key = serviceKey(r.name);
      await kv.delete(key);
      const revision = (await kv.get(key))?.revision ?? 0;
      await mirror.waitForRevision(revision, d.waitMs);
      const revoked = await revokeTokensOf({ kind: 'service', name: r.name }, r.by);
      if (isOAuthService(svc)) await oauth.deleteClient({ client_id: serviceClientId(svc), by: r.by });
      log.info({ event: 'services.removed', service: r.name, revoked }, 'service removed');
      void audit.publish('service', 'remove', { who: r.by, what: `service:${r.name}`, outcome: 'ok', tokens: revoked });
      return { revision, revoked };
    },

    /** At start: tokens of runtime services removed while this actor was down (or half-way) are revoked. */
    async sweep(): Promise<void> {
      for (const name of await store.ownersOfSource('service', 'runtime')) {
        if (!directory.all.has(name)) await revokeTokensOf({ kind: 'service', name }, 'actor:tokens (service gone)');
      }
    },
  };
}
