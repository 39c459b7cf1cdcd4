// Least privilege on the bus (issue 29): every actor connects to NATS as its own user, allowed only its own
// subjects, and the operators' `audit` and `metrics` credentials may read what they are for and nothing else.
// Against the real nats-server the supervisor configures: what a user may not do is NATS's permission error.
import { statSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { connect, type NatsConnection, type NatsError } from 'nats';
import { randomToken, type ApiCall } from '../api/client.js';
import { busPassword, BUS_USERS } from '../../shared/nats-auth.js';
import { subjects } from '../../shared/subjects.js';
import { NATS_TOKEN, natsUser, runHubCommand, startHub, type HubUnderTest } from '../harness.js';
import { startOperatedHub } from './hub.js';

let hub: HubUnderTest;
let api: ApiCall;
const ADMIN = randomToken();
const opened: NatsConnection[] = [];

test.before(async () => {
  ({ hub, api } = await startOperatedHub(ADMIN, 'open-sesame'));
});
test.after.always(async () => {
  await Promise.all(opened.map((nc) => nc.close().catch(() => undefined)));
  await hub?.stop();
});

async function as(user: Parameters<typeof natsUser>[0]): Promise<NatsConnection> {
  const nc = await connect({ servers: hub.natsUrl, ...natsUser(user), maxReconnectAttempts: 0, timeout: 3000 });
  opened.push(nc);
  return nc;
}

const PERMISSION = 'PERMISSIONS_VIOLATION';

/** A request on a subject the user may not publish to: rejected with NATS's permission error (else its reply or timeout). */
async function requestError(nc: NatsConnection, subject: string): Promise<string> {
  try {
    await nc.request(subject, new TextEncoder().encode('{}'), { timeout: 3000 });
    return 'answered';
  } catch (e) {
    return (e as NatsError).code;
  }
}

/** A subscription the user may not make: its callback gets NATS's permission error; a message or silence says otherwise. */
function subscriptionError(nc: NatsConnection, subject: string, timeoutMs = 3000): Promise<string> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { sub.unsubscribe(); resolve('no error'); }, timeoutMs);
    const sub = nc.subscribe(subject, { callback: (err) => { clearTimeout(timer); resolve(err ? err.code : 'a message'); } });
  });
}

test.serial('bus: each actor does its job as its own user (a server starts, routes, stops; no permission error in any log)', async (t) => {
  t.is((await api('POST', '/users/alice/server', { token: ADMIN })).status, 201);
  const r = await fetch(`${hub.url}/user/alice/api/status`, { headers: { authorization: `token ${(await api('POST', '/users/alice/tokens', { token: ADMIN, body: {} })).body.token}` } });
  t.is(r.status, 200, 'the gateway routes the server the spawner registered');
  t.is((await r.json()).user, 'alice');
  t.is((await api('DELETE', '/users/alice/server', { token: ADMIN })).status, 204);
  t.is((await fetch(`${hub.url}/hub/metrics`, { headers: { authorization: `token ${ADMIN}` } })).status, 200);
  t.is((await fetch(`${hub.url}/hub/health`)).status, 200);
  t.notRegex(hub.logs(), /Violation/i, 'nats-server logs every refused publish or subscription');
});

test.serial('bus: the audit credential reads hub.audit.> and nothing that would let it act or snoop', async (t) => {
  const nc = await as('audit');
  // what it is for: live audit events
  const seen = new Promise<string>((resolve) => nc.subscribe(subjects.allAudit, { max: 1, callback: (_e, m) => resolve(m.subject) }));
  await nc.flush();
  t.is((await api('POST', '/users/carol', { token: ADMIN })).status, 201);
  t.regex(await seen, /^hub\.audit\./);
  // a command, the shutdown, an event: refused
  t.is(await requestError(nc, subjects.command('spawner', 'activity')), PERMISSION);
  t.is(await requestError(nc, subjects.command('supervisor', 'shutdown')), PERMISSION);
  t.is(await requestError(nc, subjects.event('token', 'revoked')), PERMISSION);
  // the server registry: neither its stream's API nor its subjects
  const jsm = await nc.jetstreamManager();
  const registry = await jsm.streams.info('KV_hub_servers').then(() => 'read', (e: NatsError) => e.code);
  t.is(registry, PERMISSION);
  t.is(await requestError(nc, '$JS.API.DIRECT.GET.KV_hub_servers.$KV.hub_servers.x'), PERMISSION);
  t.is(await subscriptionError(nc, '$KV.hub_servers.>'), PERMISSION);
  // an rpc subject (answering as if it were the tokens actor), another user's replies
  t.is(await subscriptionError(nc, `${subjects.rpc('tokens', '')}*`), PERMISSION);
  t.is(await subscriptionError(nc, '_INBOX.gateway.>'), PERMISSION);
  t.is(await subscriptionError(nc, 'hub.evt.>'), PERMISSION);
});

test.serial('bus: the metrics credential scrapes and discovers actors, and may not command or read the audit trail', async (t) => {
  const nc = await as('metrics');
  const text = new TextDecoder().decode((await nc.request(subjects.command('tokens', 'metrics'), undefined, { timeout: 3000 })).data);
  t.regex(text, /^# HELP /m);
  t.is(await requestError(nc, subjects.command('spawner', 'activity')), PERMISSION);
  t.is(await requestError(nc, `${subjects.rpc('auth', '')}getuser`), PERMISSION);
  t.is(await subscriptionError(nc, subjects.allAudit), PERMISSION);
});

test.serial('bus: an actor\'s user cannot speak as another actor', async (t) => {
  const spawner = await as('spawner');
  t.is(await requestError(spawner, subjects.event('token', 'revoked')), PERMISSION, 'the spawner may not publish a tokens-actor event');
  t.is(await requestError(spawner, subjects.event('user', 'deleted')), PERMISSION, '... nor an auth event');
  t.is(await requestError(spawner, '$KV.hub_routes.r.x'), PERMISSION, '... nor write the routing table');
  t.is(await subscriptionError(spawner, `${subjects.rpc('auth', '')}*`), PERMISSION, '... nor answer the auth actor\'s rpcs');
  const gateway = await as('gateway');
  t.is(await requestError(gateway, '$KV.hub_servers.alice.x'), PERMISSION, 'the gateway reads the registry but may not write it');
  t.is(await requestError(gateway, subjects.event('server', 'ready')), PERMISSION);
  const auth = await as('auth');
  t.is(await requestError(auth, `${subjects.rpc('spawner', '')}startserver`), PERMISSION, 'the auth actor calls no one');
});

test.serial('bus: hub credentials prints each credential as a URL; hub audit reads with the audit credential', async (t) => {
  const configArgs = ['--config', join(hub.dataDir, 'hub.json')];
  const printed = await runHubCommand(['credentials', 'audit', ...configArgs]);
  t.is(printed.code, 0, printed.stderr);
  const url = new URL(printed.stdout.trim());
  t.is(url.username, 'audit');
  t.is(decodeURIComponent(url.password), busPassword(NATS_TOKEN, 'audit'));
  t.is(url.port, String(hub.natsPort));
  const metrics = await runHubCommand(['credentials', 'metrics', ...configArgs]);
  t.is(new URL(metrics.stdout.trim()).username, 'metrics');
  const conf = await runHubCommand(['credentials', 'nats-config', ...configArgs]);
  for (const user of BUS_USERS) t.true(conf.stdout.includes(`{user: "${user}"`), `nats-config names ${user}`);
  t.is((await runHubCommand(['credentials', 'root', ...configArgs])).code, 2);

  const trail = await runHubCommand(['audit', '--type', 'user.*', ...configArgs]);
  t.is(trail.code, 0, trail.stderr);
  t.regex(trail.stdout, /user\.create  ok  who=user:boss  what=carol/);
  t.is(statSync(join(hub.dataDir, 'nats.secret')).mode & 0o777, 0o600);
  t.is(statSync(join(hub.dataDir, 'run', 'nats.conf')).mode & 0o777, 0o600);
});

test.serial('bus: no NATS secret or password reaches a log', async (t) => {
  const logs = hub.logs();
  t.false(logs.includes(NATS_TOKEN));
  for (const user of BUS_USERS) t.false(logs.includes(busPassword(NATS_TOKEN, user)), `${user}'s password`);
  // (and the refusals above are in the log: the first test's "no violation" could have failed)
  t.regex(logs, /Publish Violation - User "audit", Subject "hub\.spawner\.activity"/);
});

test.serial('bus: a hub that made its own NATS secret keeps it, 0600, for the next start', async (t) => {
  const first = await startHub({ env: { HUB_NATS_TOKEN: '' } });
  const secret = await import('node:fs').then((fs) => fs.readFileSync(join(first.dataDir, 'nats.secret'), 'utf8'));
  await first.stop({ keepDataDir: true });
  const again = await startHub({ reuse: { dataDir: first.dataDir, port: first.port, natsPort: first.natsPort }, env: { HUB_NATS_TOKEN: '' } });
  try {
    t.regex(secret, /^hub_[0-9a-f]{32}$/);
    t.is(await import('node:fs').then((fs) => fs.readFileSync(join(again.dataDir, 'nats.secret'), 'utf8')), secret);
    const nc = await connect({ servers: again.natsUrl, user: 'audit', pass: busPassword(secret, 'audit'), maxReconnectAttempts: 0 });
    await nc.close();
    t.pass();
  } finally {
    await again.stop();
  }
});
