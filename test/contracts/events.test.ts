// One meaning per event: activity moves a time and nothing else; it never makes a gateway forget
// who a token belongs to (only owner.changed and token.revoked do).
import test from 'ava';
import { connect, type NatsConnection } from 'nats';
import { apiClient, randomToken } from '../api/client.js';
import { NATS_ADMIN, sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';

const ADMIN_TOKEN = randomToken();
const ALICE_TOKEN = randomToken();
let hub: HubUnderTest;
let nc: NatsConnection;

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: { activity_resolution: 1, rpc_timeout: 1, api_tokens: { [ADMIN_TOKEN]: 'boss', [ALICE_TOKEN]: 'alice' } },
      Authenticator: { admin_users: ['boss'] },
    },
  });
  nc = await connect({ servers: hub.natsUrl, ...NATS_ADMIN });
});
test.after.always(async () => {
  await nc?.close();
  await hub?.stop();
});

test.serial('events: an activity flush publishes user.activity, no owner.changed, and the token is not resolved again', async (t) => {
  const api = apiClient(hub.url);
  const seen: string[] = [];
  const sub = nc.subscribe('hub.evt.>', { callback: (_e, m) => seen.push(`${m.subject} ${new TextDecoder().decode(m.data)}`) });
  t.teardown(() => sub.unsubscribe());
  t.is((await api('GET', '/user', { token: ALICE_TOKEN })).status, 200); // alice's token is now resolved and cached
  const at = new Date(Date.now() + 1000).toISOString();
  const posted = await api('POST', '/users/alice/activity', { token: ADMIN_TOKEN, body: { last_activity: at } });
  t.is(posted.status, 200);
  await waitFor('the activity flush event', async () => (seen.some((e) => e.startsWith('hub.evt.user.activity') && e.includes('"alice"')) ? true : undefined), 10_000);
  await sleep(500); // anything the flush would set off has happened by now

  // With the tokens actor frozen, only a cached resolution can answer.
  const pid = hub.children().tokens!;
  process.kill(pid, 'SIGSTOP');
  let again;
  try {
    again = await api('GET', '/user', { token: ALICE_TOKEN });
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  t.is(again.status, 200, JSON.stringify(again.body));
  t.is(again.body.name, 'alice');
  t.false(seen.some((e) => e.startsWith('hub.evt.owner.changed')), seen.join('\n'));
  // and the user model shows the new time at once (the gateway's cached record moved forward)
  const model = await api('GET', '/users/alice', { token: ADMIN_TOKEN });
  t.is(Date.parse(model.body.last_activity), Date.parse(at));
});
