// Per-user subdomains over HTTP, as a browser addresses them: Hub.subdomain_host `http://hub.localhost:<port>`,
// every request carrying the Host a browser would send for `hub.localhost`, `alice.hub.localhost`, … (resolved to
// the gateway on 127.0.0.1). Routing by host (a user's host reaches only that user's servers, named ones included),
// redirects between the hub's host and users' hosts, a clear 404 for unknown hosts under the domain, services at
// their own host, the hub's cookies host-only (`__Host-` with cookie_host_prefix_enabled), the environment a server
// gets, the models' whole URLs, and OAuth redirect URIs registered exactly at the server's own host.
import test from 'ava';
import { request, createServer, type Server } from 'node:http';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { FIXTURE, serverRecord } from '../spawner/helpers.js';
import { hiddenField } from '../oauth/browser.js';

const ADMIN = randomToken();
const SERVICE_TOKEN = randomToken();
const PASSWORD = 'correct horse battery';

interface Answer { status: number; headers: Record<string, string | string[] | undefined>; body: string }

let hub: HubUnderTest;
let api: ApiCall;
let port: number;
let service: Server;
let hubOrigin: string;
const origin = (host: string) => `http://${host}:${port}`;

/** Every name resolves to the gateway's loopback address (as Chromium resolves `*.localhost`). */
const toLoopback = ((_host: string, options: { all?: boolean }, cb: (...a: unknown[]) => void) =>
  (options.all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4))) as unknown as NonNullable<Parameters<typeof request>[0] extends infer O ? O extends { lookup?: infer L } ? L : never : never>;

/** One HTTP request to `http://<host>:<port><path>` as a browser sends it: the name resolves to the gateway, Host is the name. */
function send(method: string, host: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({
      method, host, port, path, headers: { ...(body ? { 'content-length': String(Buffer.byteLength(body)) } : {}), ...headers },
      lookup: toLoopback, timeout: 15_000,
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${host}${path}: no answer in 15 s`)));
    req.on('error', reject);
    req.end(body);
  });
}
const get = (host: string, path: string, headers: Record<string, string> = {}) => send('GET', host, path, headers);
const json = (a: Answer) => JSON.parse(a.body) as Record<string, any>;

async function startServer(user: string, name = ''): Promise<void> {
  const r = await api('POST', name ? `/users/${user}/servers/${name}` : `/users/${user}/server`, { token: ADMIN });
  if (r.status !== 201 && r.status !== 202) throw new Error(`start ${user}/${name}: ${r.status} ${JSON.stringify(r.body)}`);
  await waitFor(`${user}/${name} to run`, async () => ((await serverRecord(hub.natsUrl, user, name))?.state === 'running' ? true : undefined), 20_000, 100);
}

/** Logs in through the hub's form on the hub's host; the login's Set-Cookie lines and the Cookie header a browser would send back. */
async function login(user: string): Promise<{ setCookies: string[]; cookie: string }> {
  const form = await get('hub.localhost', '/hub/login');
  const xsrf = hiddenField(form.body, '_xsrf');
  const formCookies = ([form.headers['set-cookie']].flat().filter(Boolean) as string[]).map((c) => c.split(';')[0]);
  const posted = await send('POST', 'hub.localhost', '/hub/login', { 'content-type': 'application/x-www-form-urlencoded', cookie: formCookies.join('; ') },
    new URLSearchParams({ _xsrf: xsrf, username: user, password: PASSWORD }).toString());
  if (posted.status !== 302) throw new Error(`login of ${user}: ${posted.status} ${posted.body.slice(0, 300)}`);
  const setCookies = [posted.headers['set-cookie']].flat().filter(Boolean) as string[];
  return { setCookies, cookie: [...formCookies, ...setCookies.map((c) => c.split(';')[0])].join('; ') };
}

test.before(async () => {
  port = await freePort();
  hubOrigin = origin('hub.localhost');
  service = createServer((req, res) => res.end(`service saw ${req.headers.host} ${req.url}`));
  await new Promise<void>((r) => service.listen(0, '127.0.0.1', r));
  const servicePort = (service.address() as { port: number }).port;
  hub = await startHub({
    reuse: { dataDir: mkdtempSync(join(tmpdir(), 'hub-test-')), port, natsPort: await freePort() },
    config: {
      Hub: {
        subdomain_host: hubOrigin, cookie_host_prefix_enabled: true, authenticator_class: 'dummy', allow_named_servers: true,
        env_prefix_aliases: ['JUPYTERHUB_'], api_tokens: { [ADMIN]: 'boss' },
        services: [{ name: 'svc', url: `http://127.0.0.1:${servicePort}`, api_token: SERVICE_TOKEN }],
      },
      Authenticator: { admin_users: ['boss'] },
      DummyAuthenticator: { password: PASSWORD },
      Spawner: { cmd: [process.execPath, FIXTURE] },
    },
  });
  api = apiClient(hub.url);
  const made = await api('POST', '/users', { token: ADMIN, body: { usernames: ['alice', 'bob', 'carol'] } });
  if (made.status !== 201) throw new Error(`users: ${made.status}`);
  await startServer('alice');
  await startServer('alice', 'work');
  await startServer('bob');
});

test.after.always(async () => {
  await hub?.stop();
  service?.close();
});

test.serial('subdomains: a user\'s host reaches that user\'s servers (named ones too) and nobody else\'s', async (t) => {
  const alice = await get('alice.hub.localhost', '/user/alice/');
  t.is(alice.status, 200);
  t.is(alice.body.trim(), 'fixture for alice');
  const work = await get('alice.hub.localhost', '/user/alice/work/env');
  t.is(work.status, 200);
  t.like(json(work).hub, { HUB_USER: 'alice', HUB_SERVER_NAME: 'work', HUB_SERVICE_PREFIX: '/user/alice/work/' });
  t.is((await get('bob.hub.localhost', '/user/bob/')).body.trim(), 'fixture for bob');
  // another person's path on one's host, and one's path on another's host: refused, never forwarded
  for (const [host, path] of [['alice.hub.localhost', '/user/bob/'], ['bob.hub.localhost', '/user/alice/'], ['bob.hub.localhost', '/user/alice/work/env'], ['alice.hub.localhost', '/user/alice/../bob/']]) {
    const r = await get(host, path);
    t.is(r.status, 404, `${host}${path}`);
    t.regex(json(r).message, new RegExp(`the hub is at ${hubOrigin}/hub/`), `${host}${path}`);
  }
  // Host spelled otherwise than browsers do (capitals, a trailing dot) is the same host
  t.is((await get('ALICE.Hub.localhost', '/user/alice/')).body.trim(), 'fixture for alice');
  t.is((await send('GET', 'alice.hub.localhost', '/user/alice/', { host: `alice.hub.localhost.:${port}` })).body.trim(), 'fixture for alice');
});

test.serial('subdomains: hub pages and servers are each sent to their own host; unknown hosts under the domain get a clear 404', async (t) => {
  // the hub's host: a server's path goes to its user's host, query kept
  const toAlice = await get('hub.localhost', '/user/alice/lab?x=1');
  t.is(toAlice.status, 302);
  t.is(toAlice.headers.location, `${origin('alice.hub.localhost')}/user/alice/lab?x=1`);
  // a user's host: the hub's pages are on the hub's host
  for (const path of ['/hub/home', '/hub/login?next=%2Fhub%2Fhome', '/hub/api/user']) {
    const r = await get('alice.hub.localhost', path);
    t.is(r.status, 302, path);
    t.is(r.headers.location, `${hubOrigin}${path}`, path);
  }
  // … but never a write: a form posted to a user's host is not passed on to the hub
  const post = await send('POST', 'alice.hub.localhost', '/hub/login', { 'content-type': 'application/x-www-form-urlencoded' }, 'username=alice&password=x');
  t.is(post.status, 404);
  // a user without a running server: the hub's page for it, on the hub's host
  const carol = await get('carol.hub.localhost', '/user/carol/tree', { accept: 'text/html' });
  t.is(carol.status, 302);
  t.is(carol.headers.location, `${hubOrigin}/hub/user/carol/tree`);
  // an unknown host under the domain: a readable 404 for a browser, JSON for others
  const page = await get('nobody.hub.localhost', '/', { accept: 'text/html' });
  t.is(page.status, 404);
  t.regex(page.headers['content-type'] as string, /^text\/html/);
  t.regex(page.body, /this host serves only its own servers/);
  t.is(json(await get('nobody.hub.localhost', '/tree/')).status, 404);
  t.is(json(await get('nobody.hub.localhost', '/user/alice/')).status, 404);
  // the hub's own host and its address still answer the hub
  t.is((await get('hub.localhost', '/hub/api')).status, 200);
  t.is((await fetch(`${hub.url}/hub/health`)).status, 200);
});

test.serial('subdomains: a service is at its own host (<name>--service), and its prefix on the hub\'s host goes there', async (t) => {
  const r = await get('svc--service.hub.localhost', '/services/svc/x?y=1');
  t.is(r.status, 200);
  t.is(r.body, `service saw svc--service.hub.localhost:${port} /services/svc/x?y=1`);
  const moved = await get('hub.localhost', '/services/svc/x');
  t.is(moved.status, 302);
  t.is(moved.headers.location, `${origin('svc--service.hub.localhost')}/services/svc/x`);
  t.is((await get('alice.hub.localhost', '/services/svc/')).status, 404, 'not on a user\'s host');
});

test.serial('subdomains: the API names servers by their whole URL at their user\'s host; routes are <host>/<path>', async (t) => {
  const alice = (await api('GET', '/users/alice', { token: ADMIN })).body;
  t.is(alice.server, `${origin('alice.hub.localhost')}/user/alice/`);
  t.is(alice.servers[''].url, `${origin('alice.hub.localhost')}/user/alice/`);
  t.is(alice.servers.work.url, `${origin('alice.hub.localhost')}/user/alice/work/`);
  const routes = (await api('GET', '/proxy', { token: ADMIN })).body as Record<string, { routespec: string }>;
  const specs = Object.values(routes).map((r) => r.routespec).sort();
  t.deepEqual(specs, ['/', 'alice.hub.localhost/user/alice/', 'alice.hub.localhost/user/alice/work/', 'bob.hub.localhost/user/bob/', 'svc--service.hub.localhost/services/svc/']);
});

test.serial('subdomains: a server\'s environment names the hub\'s host and its own, as the established hub 6.1\'s with subdomains', async (t) => {
  const env = json(await get('alice.hub.localhost', '/user/alice/env'));
  const aliceUrl = `${origin('alice.hub.localhost')}/user/alice/`;
  t.like(env.jupyterhub, {
    JUPYTERHUB_HOST: hubOrigin, JUPYTERHUB_PUBLIC_URL: aliceUrl, JUPYTERHUB_PUBLIC_HUB_URL: `${hubOrigin}/hub/`,
    JUPYTERHUB_OAUTH_CALLBACK_URL: `${aliceUrl}oauth_callback`, JUPYTERHUB_SERVICE_PREFIX: '/user/alice/', JUPYTERHUB_BASE_URL: '/',
    JUPYTERHUB_COOKIE_HOST_PREFIX_ENABLED: '1', JUPYTERHUB_COOKIE_OPTIONS: '{"secure":true}', JUPYTERHUB_API_URL: `${hub.url}/hub/api`,
  });
  t.is(json(await get('alice.hub.localhost', '/user/alice/work/env')).jupyterhub.JUPYTERHUB_PUBLIC_URL, `${aliceUrl}work/`);
});

test.serial('subdomains: the hub\'s cookies are host-only (`__Host-`, no Domain): a user\'s host never gets them, and a write from there without XSRF is refused', async (t) => {
  // the login form's XSRF cookie is `__Host-` too: a user's server cannot plant one to sign a visitor in as someone else
  const form = await get('hub.localhost', '/hub/login');
  const formCookie = [form.headers['set-cookie']].flat().find((c) => c?.startsWith('__Host-_xsrf='));
  t.truthy(formCookie, JSON.stringify(form.headers['set-cookie']));
  t.regex(formCookie!, /; Path=\/;.*; Secure/);
  const { setCookies, cookie } = await login('alice');
  t.true(setCookies.length >= 2, setCookies.join('\n'));
  for (const line of setCookies) t.notRegex(line, /;\s*domain=/i, `no Domain attribute: ${line}`);
  const loginCookie = setCookies.find((c) => c.startsWith('__Host-hub-hub-login='));
  t.truthy(loginCookie, setCookies.join('\n'));
  t.regex(loginCookie!, /; Path=\/;/);
  t.regex(loginCookie!, /; Secure/);
  t.regex(loginCookie!, /; HttpOnly/);
  // the cookie works on the hub's host
  t.is(json(await get('hub.localhost', '/hub/api/user', { cookie })).name, 'alice');
  // sent to a user's host anyway (a browser would not), it never makes the hub answer there
  const there = await get('alice.hub.localhost', '/hub/api/user', { cookie });
  t.is(there.status, 302);
  t.is(there.headers.location, `${hubOrigin}/hub/api/user`);
  // a script on alice's host posting to the hub's API with her cookie (a same-site request) lacks the XSRF token
  const forged = await send('POST', 'hub.localhost', '/hub/api/users/alice/tokens',
    { cookie, origin: origin('alice.hub.localhost'), 'content-type': 'text/plain' }, JSON.stringify({ note: 'stolen' }));
  t.is(forged.status, 403, forged.body);
  const tokens = (await api('GET', '/users/alice/tokens', { token: ADMIN })).body;
  t.false(JSON.stringify(tokens).includes('stolen'), 'no token was made');
});

test.serial('subdomains: a server\'s OAuth redirect URI is registered exactly, at its own host', async (t) => {
  const { cookie } = await login('alice');
  const authorize = (redirectUri: string) => get('hub.localhost', `/hub/api/oauth2/authorize?${new URLSearchParams({
    client_id: 'hub-user-alice', redirect_uri: redirectUri, response_type: 'code', state: 's1',
  })}`, { cookie, accept: 'text/html' });
  const aliceCallback = `${origin('alice.hub.localhost')}/user/alice/oauth_callback`;
  const ok = await authorize(aliceCallback);
  t.is(ok.status, 302, ok.body.slice(0, 300));
  t.regex(ok.headers.location as string, new RegExp(`^${aliceCallback.replace(/[.?]/g, '\\$&')}\\?code=[^&]+&state=s1$`));
  for (const other of ['/user/alice/oauth_callback', `${origin('bob.hub.localhost')}/user/alice/oauth_callback`, `${hubOrigin}/user/alice/oauth_callback`]) {
    const refused = await authorize(other);
    t.is(refused.status, 400, other);
    t.falsy(refused.headers.location, other);
  }
});
