// Services added and removed at run time (POST/DELETE /hub/api/services/<name>, the established hub 5.0's, scope
// admin:services): a real whoami service (a child process of this test, run as an externally managed service) is
// added over the API, reached through the gateway and its OAuth client by a logged-in browser, kept across a hub
// restart, then removed: its route, token and OAuth tokens go, and the audit stream says who removed it.
import test from 'ava';
import type { ChildProcess } from 'node:child_process';
import { connect, type NatsConnection } from 'nats';
import { freePort, NATS_ADMIN, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { Browser, loggedInBrowser, startWhoami, stopChild } from '../oauth/browser.js';
import { AUDIT_STREAM } from '../../shared/subjects.js';

let hub: HubUnderTest;
let api: ApiCall;
let whoami: ChildProcess & { output: () => string };
let whoamiPort: number;
const ADMIN = randomToken();
const ALICE = randomToken();
const KEEPER = randomToken(); // a service that holds admin:services only
const CONFIGURED = randomToken();
const WHOAMI_TOKEN = randomToken();
const PW = 'correct horse';

const config = () => ({
  Hub: {
    authenticator_class: 'dummy',
    api_tokens: { [ADMIN]: 'boss', [ALICE]: 'alice' },
    services: [{ name: 'configured', api_token: CONFIGURED }, { name: 'keeper', api_token: KEEPER }],
    load_roles: [{ name: 'service-keeper', scopes: ['admin:services'], services: ['keeper'] }],
  },
  DummyAuthenticator: { password: PW },
  Authenticator: { admin_users: ['boss'] },
});

test.before(async () => {
  whoamiPort = await freePort();
  hub = await startHub({ config: config() });
  api = apiClient(hub.url);
  whoami = await startWhoami({ hubPort: hub.port, port: whoamiPort, token: WHOAMI_TOKEN });
});
test.after.always(async () => {
  await stopChild(whoami);
  await hub?.stop();
});

const loggedIn = (user: string) => loggedInBrowser(hub.url, user, PW);

/** A browser logged in as boss opens the service through the gateway and the service's OAuth client (no consent page). */
async function whoamiAsBoss(): Promise<{ statuses: number[]; body: string }> {
  const b = await loggedIn('boss');
  const hops = await b.follow('/services/whoami/');
  return { statuses: hops.map((h) => h.status), body: hops.at(-1)!.body };
}

async function lastAudit(subject: string): Promise<Record<string, unknown>> {
  const nc: NatsConnection = await connect({ servers: hub.natsUrl, ...NATS_ADMIN });
  try {
    return (await (await nc.jetstreamManager()).streams.getMessage(AUDIT_STREAM, { last_by_subj: subject })).json();
  } finally {
    await nc.close();
  }
}

test.serial('runtime services: bad requests are refused with the established hub\'s answers, nothing is added', async (t) => {
  const post = (name: string, body: unknown, token = ADMIN) => api('POST', `/services/${name}`, { token, body });
  t.is((await post('x', { url: 'http://127.0.0.1:1' }, ALICE)).status, 403, 'admin:services is needed');
  t.like((await post('configured', { url: 'http://127.0.0.1:1' })).body, { status: 409, message: 'Service configured already exists' });
  t.like((await post('x', {})).body, { status: 400, message: 'Invalid service data' });
  t.like((await post('x', { command: ['sleep', '9'] })).body, { status: 400, message: 'Can not create managed service x at runtime' });
  t.regex((await post('x', { url: 'http://127.0.0.1:1', colour: 'red' })).body.message, /Invalid JSON keys: "colour"/);
  t.regex((await post('x', { url: 'ftp://example.org' })).body.message, /url: expected an http\(s\) URL/);
  t.regex((await post('x', { display: 'yes' })).body.message, /display: expected a boolean/);
  t.regex((await post('x', { api_token: 'short' })).body.message, /api_token: must be longer than 8 characters/);
  t.regex((await post('x', { api_token: CONFIGURED })).body.message, /already the token of another/);
  t.regex((await post('x', { oauth_no_confirm: true })).body.message, /missing required oauth_redirect_uri/);
  t.regex((await post('x', { url: 'http://127.0.0.1:1', oauth_client_allowed_scopes: ['no-such-scope'] })).body.message, /no-such-scope/);
  // a requester may not give a service more than it holds itself
  t.like((await post('x', { admin: true }, KEEPER)).body, { status: 400, message: 'Not assigning requested scopes admin not held by service keeper' });
  t.like((await post('x', { url: 'http://127.0.0.1:1', oauth_client_allowed_scopes: ['read:users'] }, KEEPER)).body,
    { status: 400, message: 'Not assigning requested scopes read:users not held by service keeper' });
  t.deepEqual(Object.keys((await api('GET', '/services', { token: ADMIN })).body).sort(), ['configured', 'keeper']);
  t.like((await api('DELETE', '/services/configured', { token: ADMIN })).body, { status: 405, message: 'Service configured is not modifiable at runtime' });
  t.like((await api('DELETE', '/services/nothing', { token: ADMIN })).body, { status: 404, message: 'Service nothing does not exist' });
});

test.serial('runtime services: an added service is listed, routed, in the menu, its token and OAuth client work at once', async (t) => {
  const added = await api('POST', '/services/whoami', {
    token: ADMIN,
    body: { url: `http://127.0.0.1:${whoamiPort}`, api_token: WHOAMI_TOKEN, oauth_no_confirm: true, info: { team: 'ops' } },
  });
  t.is(added.status, 201, JSON.stringify(added.body));
  t.deepEqual(added.body, {
    kind: 'service', name: 'whoami', admin: false, roles: [], url: `http://127.0.0.1:${whoamiPort}`, prefix: '/services/whoami/',
    command: [], pid: 0, info: { team: 'ops' }, display: true,
  }, 'the service model; a token the request gave is not echoed');
  t.is((await api('POST', '/services/whoami', { token: ADMIN, body: { url: 'http://127.0.0.1:1' } })).status, 409);
  // listed and readable on the gateway that answered
  t.true('whoami' in (await api('GET', '/services', { token: ADMIN })).body);
  t.like((await api('GET', '/services/whoami', { token: ADMIN })).body, { name: 'whoami', info: { team: 'ops' } });
  // its token resolves on the very next request
  t.like((await api('GET', '/user', { token: WHOAMI_TOKEN })).body, { kind: 'service', name: 'whoami' });
  // the route follows (the proxy-router reconciles when the service appears), then the OAuth client works
  await waitFor('the route to the service', async () => ((await new Browser(hub.url).get('/services/whoami/')).status === 302 ? true : undefined), 10_000, 100);
  const seen = await whoamiAsBoss();
  t.deepEqual(seen.statuses, [302, 302, 302, 200], 'authorize, no consent (oauth_no_confirm), callback, the page');
  t.is(JSON.parse(seen.body).name, 'boss');
  // the services menu of a person who may use it
  const home = await (await loggedIn('boss')).get('/hub/home');
  t.regex(home.body, /href="\/services\/whoami\/"/);
  const aliceHome = await (await loggedIn('alice')).get('/hub/home');
  t.notRegex(aliceHome.body, /\/services\/whoami\//, 'alice holds no access:services for it');
  t.like(await lastAudit('hub.audit.service.add'), { who: 'user:boss', what: 'service:whoami', outcome: 'ok' });
});

test.serial('runtime services: a service added without a token gets one, shown once', async (t) => {
  const added = await api('POST', '/services/reporter', { token: KEEPER, body: { info: { by: 'keeper' } } });
  t.is(added.status, 201, JSON.stringify(added.body));
  t.regex(added.body.api_token, /^[0-9a-f]{32,}$/);
  t.like((await api('GET', '/user', { token: added.body.api_token })).body, { kind: 'service', name: 'reporter' });
  t.false('api_token' in (await api('GET', '/services/reporter', { token: ADMIN })).body);
  t.is((await api('GET', '/services', { token: ADMIN })).body.reporter.url, '', 'no url: no route, no OAuth client');
});

test.serial('runtime services: kept across a restart of the hub, token, route and OAuth client included', async (t) => {
  const { dataDir, port, natsPort } = hub;
  await hub.stop({ keepDataDir: true });
  hub = await startHub({ config: config(), reuse: { dataDir, port, natsPort } });
  t.deepEqual(Object.keys((await api('GET', '/services', { token: ADMIN })).body).sort(), ['configured', 'keeper', 'reporter', 'whoami']);
  t.like((await api('GET', '/user', { token: WHOAMI_TOKEN })).body, { kind: 'service', name: 'whoami' });
  await waitFor('the route to the service', async () => ((await new Browser(hub.url).get('/services/whoami/')).status === 302 ? true : undefined), 10_000, 100);
  const seen = await whoamiAsBoss();
  t.deepEqual(seen.statuses, [302, 302, 302, 200]);
  t.is(JSON.parse(seen.body).name, 'boss');
});

test.serial('runtime services: removal takes the route, the token and the OAuth tokens, and is audited', async (t) => {
  const before = (await api('GET', '/users/boss/tokens', { token: ADMIN })).body.api_tokens.filter((tk: { oauth_client: string }) => tk.oauth_client === 'service-whoami');
  t.true(before.length > 0, 'boss holds OAuth tokens the service obtained');
  const removed = await api('DELETE', '/services/whoami', { token: ADMIN });
  t.is(removed.status, 200);
  t.is(removed.body, null, 'no body');
  t.is((await api('GET', '/services/whoami', { token: ADMIN })).status, 404);
  t.false('whoami' in (await api('GET', '/services', { token: ADMIN })).body);
  t.is((await api('GET', '/user', { token: WHOAMI_TOKEN })).status, 403, 'its token is refused at once');
  const after = (await api('GET', '/users/boss/tokens', { token: ADMIN })).body.api_tokens.filter((tk: { oauth_client: string }) => tk.oauth_client === 'service-whoami');
  t.deepEqual(after, [], 'the tokens its OAuth client obtained are revoked');
  await waitFor('the route to go', async () => ((await new Browser(hub.url).get('/services/whoami/')).status === 404 ? true : undefined), 10_000, 100);
  const home = await (await loggedIn('boss')).get('/hub/home');
  t.notRegex(home.body, /\/services\/whoami\//);
  t.like(await lastAudit('hub.audit.service.remove'), { who: 'user:boss', what: 'service:whoami', outcome: 'ok' });
  // the name is free again
  const again = await api('POST', '/services/whoami', { token: ADMIN, body: { url: `http://127.0.0.1:${whoamiPort}`, api_token: WHOAMI_TOKEN } });
  t.is(again.status, 201);
});
