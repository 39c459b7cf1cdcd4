// The hub the operations tests watch: sign-ins with the dummy authenticator's one password, an admin `boss` with an
// API token, the people alice and bob, and short spawner timeouts.
import { apiClient, type ApiCall } from '../api/client.js';
import { startHub, type HubUnderTest } from '../harness.js';

export async function startOperatedHub(admin: string, password: string, hubOptions: Record<string, unknown> = {}): Promise<{ hub: HubUnderTest; api: ApiCall }> {
  const hub = await startHub({
    config: {
      Hub: { api_tokens: { [admin]: 'boss' }, authenticator_class: 'dummy', ...hubOptions },
      DummyAuthenticator: { password },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { slow_spawn_timeout: 20, slow_stop_timeout: 10, stop_signal_timeout: 0.5 },
    },
  });
  const api = apiClient(hub.url);
  const made = await api('POST', '/users', { token: admin, body: { usernames: ['alice', 'bob'] } });
  if (made.status !== 201) {
    await hub.stop();
    throw new Error(`setup: ${made.status}`);
  }
  return { hub, api };
}
