// Without a running hub, a verb runs the actors' own handlers (services/auth, services/tokens) on their own
// stores, opened here and closed when the verb ends: the same checks, hashing and rows as when the actor does
// it, and no SQL outside the actors' store.ts. Nothing listens for events then (no cache to correct), and with
// no NATS there is no audit trail to write to: verbs tell the operator so (`OFFLINE_NOTE`).
import { mkdirSync } from 'node:fs';
import type { AuditPublisher } from '../shared/audit.js';
import type { HubConfig } from '../shared/config.js';
import { HubError } from '../shared/errors.js';
import { everyMember } from '../shared/lists.js';
import { createLogger } from '../shared/log.js';
import { storeLocation } from '../shared/store.js';

/** No hub, no NATS: the change cannot be published (see OFFLINE_NOTE). */
const NO_AUDIT_TRAIL: AuditPublisher = { publish: async () => undefined, publishMany: async () => undefined };
const NO_LISTENERS = () => undefined;

export const offlineNote = (dataDir: string) =>
  `no hub is running on ${dataDir}: changed its stores directly (not in the audit trail, which needs the running hub)\n`;

export async function openOffline(config: HubConfig) {
  const { AuthStore } = await import('../services/auth/store.js');
  const { createAuthHandlers } = await import('../services/auth/handlers.js');
  const { setHubPassword } = await import('../services/auth/login.js');
  const dataDir = config.Hub.data_dir;
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const authStore = await AuthStore.open(storeLocation(config.Hub, 'auth'));
  const users = createAuthHandlers({ store: authStore, audit: NO_AUDIT_TRAIL, announce: NO_LISTENERS, activityFlushMs: 60_000, maxJsonDepth: config.Hub.max_json_depth, usernameMap: () => config.Authenticator.username_map });
  const login = { setPassword: (r: { name: string; password: string; by: string }) => setHubPassword({ config, store: authStore, audit: NO_AUDIT_TRAIL }, r) };
  let tokenStore: Awaited<ReturnType<typeof import('../services/tokens/store.js').TokenStore.open>> | undefined;

  return {
    users,
    login,
    /** the tokens actor's handlers on its store, asking the auth store about owners */
    async tokens() {
      const { TokenStore } = await import('../services/tokens/store.js');
      const { createTokenHandlers } = await import('../services/tokens/handlers.js');
      tokenStore ??= await TokenStore.open(storeLocation(config.Hub, 'tokens'));
      return createTokenHandlers({
        config, store: tokenStore, audit: NO_AUDIT_TRAIL, announce: NO_LISTENERS, log: createLogger('cli', 'warn'),
        // shares through groups need the auth store; offline verbs never change shares
        groupMembers: async (name) => {
          try {
            return await everyMember(await users.getGroup({ name }), (after) => users.groupMembers({ name, after, limit: 0 }));
          } catch (e) {
            if (e instanceof HubError && e.status === 404) return null;
            throw e;
          }
        },
        lookupUser: async (name) => {
          try {
            return await users.getUser({ name });
          } catch (e) {
            if (e instanceof HubError && e.status === 404) return null;
            throw e;
          }
        },
      });
    },
    async close() {
      users.stop();
      await authStore.close();
      await tokenStore?.close();
    },
  };
}

export type OfflineHub = Awaited<ReturnType<typeof openOffline>>;
