// Revocation at the front door (issue 25 item 4): a proxied request carrying a hub API token that was revoked,
// whose owner was deleted, or whose share was revoked is refused by the gateway (403) and never reaches the server
// or service, which may still hold the token's answer in its cache; the server's own cookie, and tokens that are not
// the hub's (a server's own token), pass as before. Each backend lists what reached it.
import test from 'ava';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { startHub, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { listen } from './helpers.js';

const FIXTURE = fileURLToPath(new URL('./fixture-server.mjs', import.meta.url));
const ADMIN = randomToken();
let hub: HubUnderTest;
let api: ApiCall;

/** What reached the service `counter`: path and Authorization of every request and upgrade. */
interface Seen { url: string; authorization: string; cookie: string }
const counterSeen: Seen[] = [];
const counter = http.createServer((req, res) => {
  counterSeen.push({ url: req.url!, authorization: req.headers.authorization ?? '', cookie: req.headers.cookie ?? '' });
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end('counted\n');
});
counter.on('upgrade', (req, socket) => {
  counterSeen.push({ url: req.url!, authorization: req.headers.authorization ?? '', cookie: req.headers.cookie ?? '' });
  socket.end('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n');
});

test.before(async () => {
  const port = await listen(counter);
  hub = await startHub({
    config: {
      Hub: {
        api_tokens: { [ADMIN]: 'boss' },
        services: [{ name: 'counter', url: `http://127.0.0.1:${port}` }],
        load_roles: [{ name: 'user', scopes: ['self', 'shares!user', 'read:users:name'] }],
      },
      Authenticator: { admin_users: ['boss'] },
      Spawner: { cmd: [process.execPath, FIXTURE], start_timeout: 10, slow_spawn_timeout: 8, slow_stop_timeout: 8, stop_signal_timeout: 3 },
    },
  });
  api = apiClient(hub.url);
  const made = await api('POST', '/users', { token: ADMIN, body: { usernames: ['alice', 'bob', 'carol', 'erin'] } });
  if (made.status !== 201) throw new Error(`setup: ${made.status} ${JSON.stringify(made.body)}`);
});
test.after.always(async () => {
  await hub?.stop();
  counter.close();
});

async function newToken(user: string): Promise<{ token: string; id: string }> {
  const r = await api('POST', `/users/${user}/tokens`, { token: ADMIN, body: {} });
  if (r.status !== 201) throw new Error(`token for ${user}: ${r.status} ${JSON.stringify(r.body)}`);
  return { token: r.body.token, id: r.body.id };
}

interface Answer { status: number; type: string; body: string }

async function get(path: string, headers: Record<string, string> = {}): Promise<Answer> {
  const r = await fetch(`${hub.url}${path}`, { headers, redirect: 'manual', signal: AbortSignal.timeout(10_000) });
  return { status: r.status, type: r.headers.get('content-type') ?? '', body: await r.text() };
}

const withToken = (token: string) => ({ authorization: `token ${token}` });
const seenWith = (seen: Seen[], token: string) => seen.filter((s) => s.authorization.includes(token) || s.url.includes(token)).length;

/** A WebSocket upgrade through the gateway: the status of the answer that refused it (or 101). */
function upgradeStatus(path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${hub.url.replace('http', 'ws')}${path}`, { handshakeTimeout: 10_000 });
    ws.once('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      ws.terminate();
    });
    ws.once('open', () => {
      resolve(101);
      ws.terminate();
    });
    ws.once('error', reject);
  });
}

test.serial('front door: a revoked token is refused before the service, as JSON or a page; other tokens and cookies pass', async (t) => {
  const { token, id } = await newToken('bob');
  t.is((await get('/services/counter/x', withToken(token))).status, 200);
  t.is(seenWith(counterSeen, token), 1, 'a valid token reaches the service');

  t.is((await api('DELETE', `/users/bob/tokens/${id}`, { token: ADMIN })).status, 204);
  const refused = await get('/services/counter/x', withToken(token));
  t.is(refused.status, 403);
  t.regex(refused.type, /application\/json/);
  t.like(JSON.parse(refused.body), { status: 403, code: 'HUB_ERR_TOKEN_REVOKED' });
  const page = await get('/services/counter/x', { ...withToken(token), accept: 'text/html' });
  t.is(page.status, 403);
  t.regex(page.type, /text\/html/);
  t.regex(page.body, /no longer valid/);
  t.is((await get(`/services/counter/x?token=${token}`)).status, 403, 'in the query too');
  t.is((await get('/services/counter/x', { authorization: `Bearer ${token}` })).status, 403, 'as a bearer token too');
  t.is(await upgradeStatus(`/services/counter/ws?token=${token}`), 403, 'and on a WebSocket upgrade');
  t.is(seenWith(counterSeen, token), 1, 'nothing with the revoked token reached the service');

  // what the gateway cannot judge goes through: a token that is not the hub's (a server's own), a cookie, Basic
  const own = randomToken();
  t.is((await get('/services/counter/x', withToken(own))).status, 200);
  t.is((await get(`/services/counter/x?token=${own}`)).status, 200);
  t.is(seenWith(counterSeen, own), 2);
  const before = counterSeen.length;
  t.is((await get('/services/counter/y', { cookie: 'counter-session=abc' })).status, 200);
  t.is((await get('/services/counter/y', { authorization: 'Basic dXNlcjpwdw==' })).status, 200);
  t.is(counterSeen.length, before + 2);
  t.is(counterSeen.at(-2)!.cookie, 'counter-session=abc');
});

test.serial('front door: the tokens of a deleted user are refused at once', async (t) => {
  const { token } = await newToken('carol');
  t.is((await get('/services/counter/c', withToken(token))).status, 200);
  t.is((await api('DELETE', '/users/carol', { token: ADMIN })).status, 204);
  const refused = await get('/services/counter/c', withToken(token));
  t.is(refused.status, 403);
  t.like(JSON.parse(refused.body), { code: 'HUB_ERR_TOKEN_REVOKED' });
  t.is(seenWith(counterSeen, token), 1, 'the service saw only the request before the deletion');
});

test.serial('front door: a revoked share closes the server to the grantee\'s token before the server; its own cookie still passes', async (t) => {
  const started = await api('POST', '/users/alice/server', { token: ADMIN });
  t.is(started.status, 201);
  const routes = (await api('GET', '/proxy', { token: ADMIN })).body;
  const target: string = routes['/user/alice/'].target;
  const serverSeen = async (): Promise<Seen[]> => (await fetch(`${target}/__seen`, { signal: AbortSignal.timeout(10_000) })).json() as Promise<Seen[]>;
  const alice = await newToken('alice');
  const bob = await newToken('bob');
  const erin = await newToken('erin');

  t.is((await get('/user/alice/tree', withToken(bob.token))).status, 403, 'no share yet: no access');
  t.is((await get('/user/alice/tree', withToken(erin.token))).status, 403);
  t.is((await api('POST', '/shares/alice/', { token: alice.token, body: { user: 'bob' } })).status, 200);
  t.is((await get('/user/alice/tree', withToken(bob.token))).status, 200, 'shared: bob reaches it');
  t.is((await get('/user/alice/tree', withToken(alice.token))).status, 200, 'the owner reaches it');

  t.is((await api('PATCH', '/shares/alice/', { token: alice.token, body: { user: 'bob' } })).status, 200);
  const refused = await get('/user/alice/tree', withToken(bob.token));
  t.is(refused.status, 403);
  t.like(JSON.parse(refused.body), { status: 403, code: 'HUB_ERR_AUTH_FORBIDDEN' });
  t.is(await upgradeStatus(`/user/alice/api/kernels/k/channels?token=${bob.token}`), 403);
  // the server's own cookie (the gateway cannot judge it) and a token of the server's own still reach it
  const cookie = await get('/user/alice/tree', { cookie: 'jupyterhub-user-alice=sealed-by-the-server' });
  t.is(cookie.status, 200);
  t.is((await get(`/user/alice/tree?token=${randomToken()}`)).status, 200);

  const seen = await serverSeen();
  t.is(seenWith(seen, bob.token), 1, 'the server saw bob only while the share was there');
  t.is(seenWith(seen, erin.token), 0);
  t.is(seenWith(seen, alice.token), 1);
  t.true(seen.some((s) => s.cookie === 'jupyterhub-user-alice=sealed-by-the-server'));
});
