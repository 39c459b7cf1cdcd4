// Two nodes, each running auth, tokens, oauth, spawner and a gateway, on one PostgreSQL (Hub.db_url) and one NATS:
// a user made through one node is read, listed and logged in through the other; a token made on one works on the
// other; a deletion on one leaves the other's user list; each node's auth keeps its user index from the events.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { Browser, formLogin, whoami } from '../auth/helpers.js';
import { waitFor, type HubUnderTest } from '../harness.js';
import { startPostgres, type PostgresUnderTest } from '../postgres.js';
import { FIXTURE } from '../spawner/helpers.js';
import { nodeConfig, sharedConfig, startHub } from './helpers.js';

const ADMIN = randomToken();
let postgres: PostgresUnderTest | undefined;
const nodes: HubUnderTest[] = [];
test.after.always(async () => {
  for (const n of nodes.reverse()) await n.stop();
  await postgres?.stop();
});

// How long an event may take from one node's actor to the other's: a bound on "eventually", not a speed figure
// (on two cores at load 20 a hop of NATS plus an actor's event loop took over 2 s once)
const EVENT_BOUND_MS = 10_000;
const names = (body: { name: string }[]) => body.map((u) => u.name).sort();

test.serial('shared database: auth, tokens and oauth on two nodes answer alike; users, tokens and logins cross nodes', async (t) => {
  postgres = await startPostgres();
  await postgres.createDatabase('hub');
  const shared = nodeConfig(sharedConfig(ADMIN, FIXTURE), {
    Hub: { db_url: postgres.url('hub'), db_kwargs: { max: 3 }, authenticator_class: 'dummy' },
    DummyAuthenticator: { password: 'pw' },
  });
  const a = await startHub({ config: nodeConfig(shared, { Hub: { node_name: 'node-a' } }) });
  nodes.push(a);
  const b = await startHub({
    config: nodeConfig(shared, { Hub: { node_name: 'node-b', nats_url: a.natsUrl }, Supervisor: { actors: ['tokens', 'auth', 'oauth', 'spawner', 'gateway'] } }),
  });
  nodes.push(b);
  t.deepEqual(Object.keys(b.children()).sort(), ['auth', 'gateway', 'oauth', 'spawner', 'tokens']);
  const onA = apiClient(a.url);
  const onB = apiClient(b.url);

  // users made through either node: each reads the other's at once and lists them once its auth has the event
  t.is((await onB('POST', '/users/ann', { token: ADMIN })).status, 201);
  t.is((await onA('POST', '/users', { token: ADMIN, body: { usernames: ['bob', 'cat'] } })).status, 201);
  t.is((await onA('GET', '/users/ann', { token: ADMIN })).body.name, 'ann');
  t.is((await onB('GET', '/users/cat', { token: ADMIN })).body.name, 'cat');
  for (const api of [onA, onB]) {
    const listed = await waitFor('both nodes to list the three users', async () => {
      const r = await api('GET', '/users', { token: ADMIN });
      const got = names(r.body).filter((n) => n !== 'boss');
      return got.length === 3 ? got : undefined;
    }, EVENT_BOUND_MS, 50);
    t.deepEqual(listed, ['ann', 'bob', 'cat']);
  }

  // a token made on one node works on the other; revoked on the other, refused on the first
  const made = await onB('POST', '/users/ann/tokens', { token: ADMIN, body: { scopes: ['self'] } });
  t.is(made.status, 201);
  t.is((await onA('GET', '/user', { token: made.body.token })).body.name, 'ann');
  t.is((await onA('DELETE', `/users/ann/tokens/${made.body.id}`, { token: ADMIN })).status, 204);
  await waitFor('node b to refuse the revoked token', async () => ((await onB('GET', '/user', { token: made.body.token })).status === 403 ? true : undefined), EVENT_BOUND_MS, 50);

  // a login through node a is a login on node b (one cookie secret, the session in the database)
  const browser = new Browser();
  t.is((await formLogin(browser, a.url, 'bob', 'pw')).status, 302);
  for (const [name, value] of browser.cookies(a.url)) browser.setCookie(b.url, name, value.value, value.path);
  t.like((await whoami(browser, b.url)).body, { name: 'bob' });

  // a deletion through node b leaves node a's list too
  t.is((await onB('DELETE', '/users/cat', { token: ADMIN })).status, 204);
  await waitFor('node a to list cat no more', async () => {
    const r = await onA('GET', '/users', { token: ADMIN });
    return names(r.body).includes('cat') ? undefined : true;
  }, EVENT_BOUND_MS, 50);
  // node a's gateway may have cat's model cached: the same event drops it (no ordering between two subscribers)
  await waitFor('node a to answer 404 for cat', async () => ((await onA('GET', '/users/cat', { token: ADMIN })).status === 404 ? true : undefined), EVENT_BOUND_MS, 50);
});
