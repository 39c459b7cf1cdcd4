// Ready means routed: the moment a start answers 201, or its progress stream says ready, the server's URL
// reaches the server on every gateway — never a redirect to the hub's page for a server that is not running.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { startHub, type HubUnderTest } from '../harness.js';
import { startExtraGateway } from '../proxy/helpers.js';
import { FIXTURE, readProgress } from '../spawner/helpers.js';

const ADMIN = randomToken();
const COUNT = 20;
let hub: HubUnderTest;
let second: Awaited<ReturnType<typeof startExtraGateway>>;

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: { api_tokens: { [ADMIN]: 'boss' } },
      Authenticator: { admin_users: ['boss'] },
      // a short slow_spawn_timeout: some starts answer 201, others 202 and then the progress stream's ready
      Spawner: { cmd: [process.execPath, FIXTURE], slow_spawn_timeout: 1 },
    },
  });
  second = await startExtraGateway(hub.dataDir);
});
test.after.always(async () => {
  second?.proc.kill('SIGTERM');
  await hub?.stop();
});

test(`ready: ${COUNT} servers started at once are each reachable on both gateways the moment they are reported ready`, async (t) => {
  const api = apiClient(hub.url);
  const names = Array.from({ length: COUNT }, (_, i) => `ready${i}`);
  t.is((await api('POST', '/users', { token: ADMIN, body: { usernames: names } })).status, 201);
  const outcomes = await Promise.all(names.map(async (name) => {
    const started = await api('POST', `/users/${name}/server`, { token: ADMIN });
    if (started.status === 202) {
      const stream = await readProgress(`${hub.url}/hub/api/users/${name}/server/progress`, ADMIN, 30_000);
      if (!stream.events.at(-1)?.ready) return { name, how: 'progress', status: -1, body: JSON.stringify(stream.events) };
    } else if (started.status !== 201) {
      return { name, how: 'start', status: started.status, body: JSON.stringify(started.body) };
    }
    // the first request, on both gateways at once, right now
    const answers = await Promise.all([hub.url, second.url].map((base) => fetch(`${base}/user/${name}/`, { redirect: 'manual' })));
    const bodies = await Promise.all(answers.map((a) => a.text()));
    return { name, how: started.status === 201 ? '201' : 'progress', status: Math.max(...answers.map((a) => a.status)), body: bodies.join(' | ') };
  }));
  for (const o of outcomes) t.is(o.status, 200, `${o.name} (${o.how}): ${o.body.slice(0, 200)}`);
  for (const o of outcomes) t.true(o.body.includes(`fixture for ${o.name}`), `${o.name} (${o.how}): ${o.body.slice(0, 300)}`);
  t.log(`answered 201: ${outcomes.filter((o) => o.how === '201').length}, ready by progress: ${outcomes.filter((o) => o.how === 'progress').length}`);
});
