// For operators: /hub/metrics gathered from every actor, the audit trail with the right "who" through every
// hop, and one log line per request carrying its request id into the actors it reached.
import test from 'ava';
import { connect } from 'nats';
import { randomToken, type ApiCall } from '../api/client.js';
import { Browser, field, formLogin } from '../auth/helpers.js';
import { NATS_ADMIN, runHubCommand, sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { startOperatedHub } from './hub.js';
import { sample } from './prometheus.js';

let hub: HubUnderTest;
let api: ApiCall;
const ADMIN = randomToken();
const PASSWORD = 'open-sesame';

test.before(async () => {
  ({ hub, api } = await startOperatedHub(ADMIN, PASSWORD, { log_level: 'info', log_format: 'json' }));
});
test.after.always(async () => {
  await hub?.stop();
});

/** A gathering answers scrapes for 1 s (services/gateway/metrics.ts METRICS_MAX_AGE_MS): wait it out to see changes. */
const FRESH_MS = 1100;

async function scrape(token: string | null = ADMIN): Promise<{ status: number; text: string; type: string }> {
  const r = await fetch(`${hub.url}/hub/metrics`, { headers: token ? { authorization: `token ${token}` } : {} });
  return { status: r.status, text: await r.text(), type: r.headers.get('content-type') ?? '' };
}

interface AuditEvent {
  v: number; time: string; type: string; who: string; what: string; outcome: string; reason: string | null;
  client: string | null; request_id: string | null; actor: string; node: string; details: Record<string, unknown>;
}

/** Everything in the HUB_AUDIT stream, read with a JetStream consumer as an operator's tool would. */
async function auditTrail(): Promise<AuditEvent[]> {
  const nc = await connect({ servers: hub.natsUrl, ...NATS_ADMIN });
  try {
    const js = nc.jetstream();
    const consumer = await js.consumers.get('HUB_AUDIT'); // an ordered consumer, from the first event
    const out: AuditEvent[] = [];
    const pending = (await consumer.info()).num_pending;
    if (!pending) return out;
    const batch = await consumer.fetch({ max_messages: pending, expires: 3000 });
    for await (const m of batch) {
      out.push(m.json<AuditEvent>());
      if (m.info.pending === 0) break;
    }
    return out;
  } finally {
    await nc.close();
  }
}

test.serial('metrics: a scrape sees every actor, and its counters move after a spawn and a failed login', async (t) => {
  const before = await scrape();
  t.is(before.status, 200);
  t.regex(before.type, /^text\/plain; version=0\.0\.4/);
  for (const actor of ['tokens', 'auth', 'oauth', 'spawner', 'proxy-router', 'gateway']) {
    t.is(sample(before.text, 'hub_scrape_actor_up', { actor }), 1, `${actor} answered the scrape`);
    // each actor's own series carry its actor and node labels
    t.true(sample(before.text, 'hub_process_resident_memory_bytes', { actor }) > 0, `${actor} reports its memory`);
  }
  t.is(before.text.split('\n').filter((l) => l.startsWith('# TYPE hub_grpc_server_duration_seconds ')).length, 1, 'one family per metric across actors');

  const failed = await formLogin(new Browser(), hub.url, 'alice', 'wrong password');
  t.is(failed.status, 403);
  const started = await api('POST', '/users/bob/server', { token: ADMIN });
  t.is(started.status, 201);

  await sleep(FRESH_MS);
  const after = await scrape();
  const moved = (name: string, labels: Record<string, string>) => sample(after.text, name, labels) - sample(before.text, name, labels);
  t.is(moved('hub_login_duration_seconds_count', { status: 'failure', actor: 'auth' }), 1);
  t.is(moved('hub_server_spawn_duration_seconds_count', { status: 'success', actor: 'spawner' }), 1);
  t.is(sample(after.text, 'hub_running_servers', { actor: 'spawner' }), 1);
  t.is(moved('hub_request_duration_seconds_count', { method: 'POST', route: '/hub/api/users/:name/server', status: '201', actor: 'gateway' }), 1);
  t.is(moved('hub_request_duration_seconds_count', { method: 'POST', route: '/hub/login', status: '403', actor: 'gateway' }), 1);
  t.true(moved('hub_grpc_client_duration_seconds_count', { actor: 'gateway', service: 'spawner', method: 'StartServer', code: 'ok' }) >= 1);
  t.true(moved('hub_grpc_server_duration_seconds_count', { actor: 'spawner', method: 'StartServer', code: 'ok' }) >= 1);
  t.true(moved('hub_grpc_client_duration_seconds_count', { actor: 'spawner', service: 'tokens', method: 'IssueServerToken' }) >= 1);
  t.true(moved('hub_proxy_route_changes_total', { change: 'add', actor: 'proxy-router' }) >= 0);
  t.true(sample(after.text, 'hub_token_cache_requests_total', { result: 'hit' }) >= 1);
  t.is(sample(after.text, 'hub_actor_restarts_total', { child: 'spawner' }), 0);
  t.true(sample(after.text, 'hub_nodejs_eventloop_lag_seconds', { actor: 'gateway' }) >= 0);

  t.is((await api('DELETE', '/users/bob/server', { token: ADMIN })).status, 204);
  await sleep(FRESH_MS);
  const stopped = await scrape();
  t.is(sample(stopped.text, 'hub_server_stop_seconds_count', { status: 'success' }) - sample(after.text, 'hub_server_stop_seconds_count', { status: 'success' }), 1);
  t.is(sample(stopped.text, 'hub_running_servers'), 0);
});

test.serial('metrics: 403 without read:metrics, for tokens and anonymous callers alike', async (t) => {
  const alice = await api('POST', '/users/alice/tokens', { token: ADMIN, body: { note: 'no metrics' } });
  t.is(alice.status, 201);
  const denied = await scrape(alice.body.token);
  t.is(denied.status, 403);
  t.is(JSON.parse(denied.text).status, 403);
  t.is((await scrape(null)).status, 403);
});

test.serial('audit: login → spawn → stop → token → denied call → logout, each event naming who asked, through every hop', async (t) => {
  const b = new Browser();
  const since = new Date().toISOString();
  const login = await formLogin(b, hub.url, 'alice', PASSWORD);
  t.is(login.status, 302);
  const home = await b.get(`${hub.url}/hub/home`);
  const xsrf = field(home.body, '_xsrf')!;
  const spawnId = `ops-spawn-${randomToken().slice(0, 8)}`;
  const spawn = await b.post(`${hub.url}/hub/spawn/alice`, { _xsrf: xsrf }, { 'x-request-id': spawnId });
  t.is(spawn.status, 302);
  await waitFor('alice\'s server to run', async () => ((await api('GET', '/users/alice', { token: ADMIN })).body.servers['']?.ready ? true : undefined), 20_000);
  const stop = await b.post(`${hub.url}/hub/stop/alice/`, { _xsrf: xsrf });
  t.is(stop.status, 302);
  const requested = await b.post(`${hub.url}/hub/token`, { _xsrf: xsrf, note: 'audit test', expires_in: '' });
  t.is(requested.status, 302); // POST, then the page shows the new token once
  const tokenPage = await b.get(`${hub.url}/hub/token`);
  const token = /<code class="token" id="new-token">([^<]+)<\/code>/.exec(tokenPage.body)?.[1];
  t.truthy(token);
  const denied = await api('POST', '/users/mallory', { token: token! });
  t.is(denied.status, 403);
  const logout = await b.get(`${hub.url}/hub/logout`);
  t.is(logout.status, 302);

  const want: [string, Partial<AuditEvent>][] = [
    ['login.success', { who: 'user:alice', what: 'alice', outcome: 'ok', client: '127.0.0.1' }],
    ['server.start', { who: 'user:alice', what: 'alice', outcome: 'ok', request_id: spawnId, actor: 'spawner' }],
    ['token.create', { who: 'user:alice', outcome: 'ok', request_id: spawnId, actor: 'tokens' }], // the server's token, asked for by the spawner for alice
    ['oauth_client.register', { who: 'user:alice', what: 'hub-user-alice', request_id: spawnId, actor: 'oauth' }],
    ['server.stop', { who: 'user:alice', what: 'alice', outcome: 'ok', actor: 'spawner' }],
    ['token.delete', { who: 'user:alice', outcome: 'ok', actor: 'tokens' }], // the server's token, revoked with its stop
    ['access.denied', { who: 'user:alice', what: 'POST /hub/api/users/:name', outcome: 'denied', actor: 'gateway', client: '127.0.0.1' }],
    ['login.logout', { who: 'user:alice', what: 'alice', outcome: 'ok' }],
  ];
  const matches = (e: AuditEvent, type: string, fields: Partial<AuditEvent>) =>
    e.type === type && Object.entries(fields).every(([k, v]) => e[k as keyof AuditEvent] === v);
  let seen: AuditEvent[] = [];
  const trail = await waitFor('every event in the audit stream', async () => {
    seen = (await auditTrail()).filter((e) => e.time >= since);
    return want.every(([type, fields]) => seen.some((e) => matches(e, type, fields))) ? seen : undefined;
  }, 15_000, 250).catch(async (e) => {
    (await import('node:fs')).writeFileSync(`/tmp/opslog-${process.pid}.txt`, hub.logs());
    t.log(seen.map((x) => `${x.type} ${x.who} ${x.what} ${x.outcome} ${x.request_id} ${x.actor}`).join('\n'));
    throw e;
  });
  for (const [type, fields] of want) t.truthy(trail.find((e) => matches(e, type, fields)), type);
  // the page's token and the failed login from the metrics test are there too, by whom they were asked
  t.truthy(trail.find((e) => e.type === 'token.create' && e.who === 'user:alice' && e.details.kind !== 'server'));
  for (const e of trail) {
    t.is(e.v, 1);
    t.regex(e.type, /^[a-z_-]+\.[a-z_-]+$/);
    // what someone asked for (it carries their request id) names them, never the spawner; the spawner may still
    // report on its own what nobody asked for (a server it finds gone)
    t.false(Boolean(e.request_id) && /actor:spawner/.test(e.who) && e.type.startsWith('server.') && e.what === 'alice', `the spawner never stands in for the person who asked: ${JSON.stringify(e)}`);
    t.false(JSON.stringify(e).includes(token!), 'no secret in an audit event');
  }

  // the request id reached the spawner's log line, and the gateway logged the request with it
  const lines = hub.logs().split('\n').filter((l) => l.includes(spawnId)).map((l) => JSON.parse(l));
  t.truthy(lines.find((l) => l.actor === 'gateway' && l.event === 'http.request' && l.route === '/hub/spawn/*' && l.user === 'user:alice' && l.status === 302));
  t.truthy(lines.find((l) => l.actor === 'spawner' && l.event === 'server.started' && l.reqId === spawnId));
});

test.serial('audit: failed logins, the lockout they start and a refused attempt during it are events, without the password', async (t) => {
  const b = new Browser('127.0.0.5'); // its own client address: the lockout per address must not lock the other tests out
  for (let i = 0; i < 6; i++) t.is((await formLogin(b, hub.url, 'carol', `wrong-${i}`)).status, 403);
  const events = await waitFor('the lockout events', async () => {
    const e = (await auditTrail()).filter((x) => x.what === 'carol');
    return e.some((x) => x.type === 'login.failure' && x.outcome === 'denied') ? e : undefined;
  });
  const failures = events.filter((e) => e.type === 'login.failure' && e.outcome === 'failed');
  t.is(failures.length, 5);
  t.like(failures[0], { who: 'anonymous', client: '127.0.0.5', reason: 'invalid credentials', actor: 'auth' });
  t.like(events.find((e) => e.type === 'login.lockout'), { who: 'anonymous', outcome: 'denied', client: '127.0.0.5' });
  t.like(events.find((e) => e.type === 'login.failure' && e.outcome === 'denied'), { reason: 'locked out' });
  t.false(JSON.stringify(events).includes('wrong-'));
});

test('metrics: open to anyone when Hub.authenticate_prometheus is false; a wrong value is refused at start', async (t) => {
  const open = await startHub({ config: { Hub: { authenticate_prometheus: false } } });
  try {
    const r = await fetch(`${open.url}/hub/metrics`);
    t.is(r.status, 200);
    t.true((await r.text()).includes('hub_scrape_actor_up{actor="spawner"} 1'));
  } finally {
    await open.stop();
  }
  const bad = await runHubCommand(['status', '--Hub.authenticate_prometheus="sometimes"']);
  t.is(bad.code, 2);
  t.regex(bad.stderr, /Hub\.authenticate_prometheus: expected a boolean/);
});
