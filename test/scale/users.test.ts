// A hub with 200,000 users, as a university keeps them: created through the API in bulk, started again (the
// auth actor once could not start past ~125,000), paged in every order, searched, a group of all of them, the
// metrics, and kill -9 of the auth actor and of the gateway: each comes back and nothing is lost.
import test from 'ava';
import { apiClient, randomToken } from '../api/client.js';
import { isAlive, startHub, waitFor, type HubUnderTest } from '../harness.js';

const ADMIN = randomToken();
const USERS = 200_000;
/** names sort the same by id and by name; `u0123456` */
const nameOf = (i: number) => `u${String(i).padStart(7, '0')}`;
const PAGED = { accept: 'application/jupyterhub-pagination+json' };
const CONFIG = { Hub: { api_tokens: { [ADMIN]: 'boss' } }, Authenticator: { admin_users: ['boss'] } };

async function createUsers(hub: HubUnderTest, from: number, to: number, batch: number): Promise<void> {
  const api = apiClient(hub.url);
  for (let i = from; i < to; i += batch) {
    const usernames = Array.from({ length: Math.min(batch, to - i) }, (_, k) => nameOf(i + k));
    const r = await api('POST', '/users', { token: ADMIN, body: { usernames } });
    if (r.status !== 201 || r.body.length !== usernames.length) throw new Error(`creating ${usernames[0]}…: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
  }
}

/** Answers as soon as the API does (the ready line waits for every actor; this is what a client sees). */
async function apiAnswers(hub: HubUnderTest, what: string): Promise<void> {
  await waitFor(what, async () => {
    const r = await fetch(`${hub.url}/hub/api/users?limit=1`, { headers: { authorization: `token ${ADMIN}` } }).catch(() => null);
    return r?.status === 200 ? true : undefined;
  }, 10_000, 20);
}

test('200,000 users: created in bulk, the hub restarts, every order pages right at any offset, search, a group of all, metrics, kill -9 of auth and of the gateway', async (t) => {
  let hub = await startHub({ config: CONFIG });
  try {
    await createUsers(hub, 1, USERS + 1, 5_000);
    const api = apiClient(hub.url);
    await api('POST', `/users/${nameOf(150_000)}/activity`, { token: ADMIN, body: { last_activity: new Date().toISOString() } });

    // start again on the same data dir: the API answers, with every user, at once
    const { dataDir, port, natsPort } = hub;
    t.deepEqual((await hub.stop({ keepDataDir: true })).leftovers, []);
    hub = await startHub({ config: CONFIG, reuse: { dataDir, port, natsPort } });
    const again = apiClient(hub.url);
    const first = await again('GET', `/users?offset=${USERS / 2}&limit=3&sort=name`, { token: ADMIN, headers: PAGED });
    t.is(first.status, 200);
    t.is(first.body._pagination.total, USERS + 1, 'every user and the admin');
    t.deepEqual(first.body.items.map((u: { name: string }) => u.name), [0, 1, 2].map((k) => nameOf(USERS / 2 + k)), "'boss' first, then u0000001 …");

    // every order at the start, the middle and the end (the admin 'boss' is user 1 and sorts after every 'u…')
    const page = async (query: string) => {
      const r = await again('GET', `/users?${query}`, { token: ADMIN, headers: PAGED });
      t.is(r.status, 200, query);
      return r.body.items.map((u: { name: string }) => u.name);
    };
    t.deepEqual(await page('offset=0&limit=2&sort=id'), ['boss', nameOf(1)]);
    t.deepEqual(await page(`offset=${USERS}&limit=5&sort=id`), [nameOf(USERS)]);
    t.deepEqual(await page('offset=0&limit=2&sort=-id'), [nameOf(USERS), nameOf(USERS - 1)]);
    t.deepEqual(await page('offset=0&limit=2&sort=name'), ['boss', nameOf(1)]);
    t.deepEqual(await page(`offset=${USERS - 1}&limit=5&sort=name`), [nameOf(USERS - 1), nameOf(USERS)]);
    t.deepEqual(await page('offset=0&limit=2&sort=-name'), [nameOf(USERS), nameOf(USERS - 1)]);
    t.deepEqual(await page('offset=0&limit=1&sort=-last_activity'), [nameOf(150_000)], 'the one active user first');
    t.deepEqual(await page(`offset=${USERS}&limit=2&sort=last_activity`), [nameOf(150_000)], 'and last the other way');
    t.deepEqual(await page('name_filter=U019999&sort=-name&limit=3'), [nameOf(199_999), nameOf(199_998), nameOf(199_997)]);
    const found = await again('GET', '/users?name_filter=u00012&limit=1', { token: ADMIN, headers: PAGED });
    t.is(found.body._pagination.total, 100, 'u0001200 … u0001299');

    // a group of every user, in requests of the size the hub takes; its model lists them all
    t.is((await again('POST', '/groups/everyone', { token: ADMIN })).status, 201);
    for (let i = 1; i <= USERS; i += 50_000) {
      const users = Array.from({ length: Math.min(50_000, USERS + 1 - i) }, (_, k) => nameOf(i + k));
      const r = await again('POST', '/groups/everyone/users', { token: ADMIN, body: { users } });
      t.is(r.status, 200, JSON.stringify(r.body).slice(0, 300));
    }
    const tooMany = await again('POST', '/groups/everyone/users', { token: ADMIN, body: { users: Array.from({ length: 50_001 }, (_, k) => `x${k}`) } });
    t.is(tooMany.status, 413);
    t.regex(tooMany.body.message, /50001 users in one request: at most 50000 \(Hub\.max_names_per_request\)/);
    // the model of a group of 200,000 is streamed from pages of the auth actor: every member, in id order, once
    const group = await again('GET', '/groups/everyone', { token: ADMIN });
    t.is(group.status, 200);
    t.is(group.body.users.length, USERS);
    t.true(group.body.users.every((n: string, k: number) => n === nameOf(k + 1)), 'every member in id order');
    t.is(group.body.name, 'everyone');
    t.deepEqual((await again('GET', `/users/${nameOf(12_345)}`, { token: ADMIN })).body.groups, ['everyone']);

    const metrics = await (await fetch(`${hub.url}/hub/metrics`, { headers: { authorization: `token ${ADMIN}` } })).text();
    t.regex(metrics, new RegExp(`^hub_total_users\\{[^}]*\\} ${USERS + 1}$`, 'm'));

    // kill -9 of the auth actor, then of the gateway: each is restarted and the API answers again with everyone
    for (const actor of ['auth', 'gateway']) {
      const pid = hub.children()[actor]!;
      process.kill(pid, 'SIGKILL');
      await waitFor(`${actor} to be gone`, async () => (isAlive(pid) ? undefined : true), 5000, 10);
      await apiAnswers(hub, `the API to answer after kill -9 of ${actor}`);
      t.not(hub.children()[actor], pid, `${actor} was restarted`);
      const r = await again('GET', `/users?offset=${USERS - 1}&limit=5&sort=name`, { token: ADMIN, headers: PAGED });
      t.is(r.body._pagination.total, USERS + 1, `no user lost with ${actor}`);
      t.deepEqual(r.body.items.map((u: { name: string }) => u.name), [nameOf(USERS - 1), nameOf(USERS)]);
    }
  } finally {
    await hub.stop();
  }
});
