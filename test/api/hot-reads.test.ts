// The hot path stays in the gateway's memory: an admin's repeated read of a user (whose model has the auth_state
// key) asks no other actor when auth state is off — counted by the gateway's own gRPC client metrics.
import test from 'ava';
import { METRICS_MAX_AGE_MS } from '../../services/gateway/metrics.js';
import { sleep, startHub } from '../harness.js';
import { apiClient, randomToken } from './client.js';

/** The gateway's count of calls to the auth actor, by method, from one scrape. */
async function authCalls(url: string, token: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${url}/hub/metrics`, { headers: { authorization: `token ${token}` } })).text();
  const counts = new Map<string, number>();
  for (const m of text.matchAll(/^hub_grpc_client_duration_seconds_count\{([^}]*)\} (\d+)/gm)) {
    const labels = Object.fromEntries([...m[1].matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    // the gateway's calls to the auth actor; its health checks (Ping) come on their own timer
    if (labels.service !== 'auth' || labels.actor !== 'gateway' || labels.method === 'Ping') continue;
    counts.set(labels.method, (counts.get(labels.method) ?? 0) + Number(m[2]));
  }
  return counts;
}

test('hot reads: 50 admin reads of a user ask the auth actor nothing once the model is cached (auth state off)', async (t) => {
  const ADMIN = randomToken();
  const hub = await startHub({ config: { Hub: { api_tokens: { [ADMIN]: 'boss' } }, Authenticator: { admin_users: ['boss'] } } });
  try {
    const api = apiClient(hub.url);
    t.is((await api('POST', '/users/ria', { token: ADMIN })).status, 201);
    const first = await api('GET', '/users/ria', { token: ADMIN });
    t.is(first.status, 200);
    t.is(first.body.auth_state, null, 'the key is there for an admin, null without auth state');
    const before = await authCalls(hub.url, ADMIN);
    for (let i = 0; i < 50; i++) t.is((await api('GET', '/users/ria', { token: ADMIN })).status, 200);
    // the gateway answers scrapes from one gathering for METRICS_MAX_AGE_MS: the next one is a new gathering
    await sleep(METRICS_MAX_AGE_MS + 100);
    const after = await authCalls(hub.url, ADMIN);
    t.true(after.size > 0, 'the gateway\'s calls to the auth actor are counted (the first read asked for the user)');
    const asked = [...after].filter(([method, n]) => n !== (before.get(method) ?? 0));
    t.deepEqual(asked, [], `calls to the auth actor during the reads: ${JSON.stringify(asked)}`);
  } finally {
    await hub.stop();
  }
});
