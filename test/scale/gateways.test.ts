// Several gateways on one node share the public port (SO_REUSEPORT, set by uWebSockets.js on Linux): each is
// a supervised child of its own, tells itself apart in health and metrics, routes the same table, and when
// one dies (kill -9) under load only its in-flight requests fail. The metrics scrape waits for every gateway
// alive by its heartbeats, and reports one that is alive but silent (SIGSTOP) as `hub_scrape_replica_up 0`.
import test from 'ava';
import http from 'node:http';
import type { Socket } from 'node:net';
import { RequestStrategy } from 'nats';
import { apiClient, randomToken } from '../api/client.js';
import { isAlive, sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { FIXTURE } from '../spawner/helpers.js';
import { METRICS_MAX_AGE_MS } from '../../services/gateway/metrics.js';
import { decodeJson, encodeJson, type Heartbeat } from '../../shared/nats.js';
import { SERVERS_BUCKET, serverKey } from '../../shared/servers.js';
import { natsServiceName, subjects } from '../../shared/subjects.js';
import { load, natsClient, serverRecords, sharedConfig } from './helpers.js';

const ADMIN = randomToken();

/** `GET /hub/metrics` as the admin, bounded. */
async function scrape(url: string): Promise<string> {
  const r = await fetch(`${url}/hub/metrics`, { headers: { authorization: `token ${ADMIN}` }, signal: AbortSignal.timeout(10_000) });
  if (r.status !== 200) throw new Error(`scrape answered ${r.status}`);
  return r.text();
}

/** `hub_scrape_replica_up` of one actor: instance -> 0 or 1. */
function replicaUp(text: string, actor: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^hub_scrape_replica_up\{actor="([^"]*)",replica="([^"]*)"\} (\d+)$/gm)) if (m[1] === actor) out.set(m[2], Number(m[3]));
  return out;
}

/**
 * Requests over one kept-alive connection that reached the gateway labelled `replica`: gateways sharing a port
 * get new connections from the kernel, but a connection stays with the one that accepted it. Every request is
 * checked to go over that same connection.
 */
async function connectionTo(hub: HubUnderTest, replica: string) {
  for (let attempt = 0; attempt < 40; attempt++) {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    let pinned: Socket | undefined;
    const get = (path: string, timeoutMs = 10_000) => new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = http.get(`${hub.url}${path}`, { agent, headers: { authorization: `token ${ADMIN}` }, timeout: timeoutMs }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => { text += d; });
        res.on('end', () => {
          if (pinned && res.socket !== pinned) reject(new Error('the kept-alive connection was replaced'));
          pinned = res.socket;
          resolve({ status: res.statusCode ?? 0, text });
        });
      });
      req.on('timeout', () => req.destroy(new Error(`no answer to ${path} within ${timeoutMs} ms`)));
      req.on('error', reject);
    });
    const health = JSON.parse((await get('/hub/health')).text);
    if (health.actors.gateway?.details?.replica === replica) return { get, close: () => agent.destroy() };
    agent.destroy();
  }
  throw new Error(`40 connections in a row reached other gateways than ${replica}`);
}

test.serial('gateways: two gateways share the port, are told apart, both route every change, and kill -9 of one under load fails under 1 % of requests, none after 1 s', async (t) => {
  const hub = await startHub({ config: { ...sharedConfig(ADMIN, FIXTURE), Supervisor: { gateways: 2 } } });
  const nc = await natsClient(hub.natsUrl);
  try {
    const api = apiClient(hub.url);
    const children = hub.children();
    t.truthy(children.gateway);
    t.truthy(children['gateway-2'], 'the second gateway is a supervised child of its own');
    t.not(children.gateway, children['gateway-2']);

    // both answer on the one port: the kernel spreads new connections over them
    const seen = new Map<string, string>(); // replica label -> instance
    await waitFor('connections to reach both gateways', async () => {
      const r = await fetch(`${hub.url}/hub/health`, { headers: { connection: 'close' } });
      const { instance, details } = (await r.json()).actors.gateway;
      seen.set(details.replica, instance);
      return seen.size === 2 ? true : undefined;
    }, 10_000, 10);
    t.deepEqual([...seen.keys()].sort(), [String(hub.port), `${hub.port}-2`]);
    // metrics: the scrape waits for every gateway alive by its heartbeats, each with its own `replica` label.
    // A gateway answers health a moment before its first heartbeat: until then a scrape need not list it, but
    // once listed it must have answered.
    const metrics = await waitFor('a scrape that knows both gateways', async () => {
      const text = await scrape(hub.url);
      const up = replicaUp(text, 'gateway');
      return [...seen.values()].every((i) => up.has(i)) ? text : undefined;
    }, 15_000, 100);
    const up = replicaUp(metrics, 'gateway');
    t.deepEqual([...seen.values()].map((i) => up.get(i)), [1, 1], `both gateways answered: ${JSON.stringify([...up])}`);
    t.is(up.size, 2, 'no other gateway is alive');
    t.regex(metrics, /hub_scrape_actor_replicas\{actor="gateway"\} 2/);
    t.regex(metrics, new RegExp(`replica="${hub.port}-2"`));

    // a server made ready is routed by both: each confirms its copy of the registry has the write
    t.is((await api('POST', '/users/boss/server', { token: ADMIN })).status, 201);
    const kv = await nc.jetstream().views.kv(SERVERS_BUCKET);
    const revision = (await kv.get(serverKey('boss', '')))!.revision;
    const confirmations = await nc.requestMany(subjects.command('gateway', 'servers-applied'), encodeJson({ revision, wait_ms: 1000 }), {
      strategy: RequestStrategy.Timer, maxWait: 1000,
    });
    let confirmed = 0;
    for await (const m of confirmations) if (m.data.length) confirmed++;
    t.is(confirmed, 2, 'both gateways have the route');

    // load on the API, then kill -9 of the second gateway
    // 8 closed loops: about 4 requests are in flight on the gateway that dies (the machine is shared: absolute
    // rates vary 10×, so the run is long enough for 1 % to be more than those few at a low rate too)
    const traffic = load(`${hub.url}/hub/api/users/boss`, ADMIN, 8, 8);
    await sleep(2000);
    const victim = children['gateway-2']!;
    const killedAt = Date.now();
    process.kill(victim, 'SIGKILL');
    const { total, failures: failed } = await traffic;
    const late = failed.filter((r) => r.at > killedAt + 1000);
    t.log(`${total} requests, ${failed.length} failed (${((100 * failed.length) / total).toFixed(2)} %: ${[...new Set(failed.map((f) => f.why))].join(', ')}), ${late.length} later than 1 s after the kill`);
    t.true(total > 500, `enough load to mean something (${total})`);
    t.true(failed.length / total < 0.01, `under 1 % failed: ${JSON.stringify(failed.slice(0, 5))}`);
    t.deepEqual(late, [], 'traffic is clean within 1 s');

    // the supervisor restarted it, and it serves again
    await waitFor('the second gateway to be back', async () => {
      const pid = hub.children()['gateway-2'];
      return pid && pid !== victim && isAlive(pid) ? true : undefined;
    }, 10_000);
    const back = new Set<string>();
    await waitFor('connections to reach both gateways again', async () => {
      const r = await fetch(`${hub.url}/hub/health`, { headers: { connection: 'close' } });
      if (r.status === 200) back.add((await r.json()).actors.gateway.details.replica);
      return back.size === 2 ? true : undefined;
    }, 15_000, 20);
    t.pass();
  } finally {
    for (const r of (await serverRecords(nc, ['boss']).catch(() => new Map())).values()) if (r.pid && isAlive(r.pid)) process.kill(-r.pid, 'SIGKILL');
    await nc.close();
    await hub.stop();
  }
});

test.serial('gateways: a gateway alive but silent (SIGSTOP) is reported as hub_scrape_replica_up 0 and the scrape still answers within its deadline; after SIGCONT it is 1 again', async (t) => {
  const deadlineMs = 1000;
  const hub = await startHub({ config: { ...sharedConfig(ADMIN, FIXTURE), Supervisor: { gateways: 2 } } });
  const nc = await natsClient(hub.natsUrl);
  let silent = 0;
  let stopped = false;
  let first: Awaited<ReturnType<typeof connectionTo>> | undefined;
  try {
    // the hub is healthy as soon as one gateway says so: the second may still be starting. Its instance id comes
    // from the services framework's ping once it has registered (the metadata names pid and instance).
    let silentInstance = '';
    await waitFor('the second gateway to register on NATS', async () => {
      silent = hub.children()['gateway-2'] ?? 0;
      const identities = await nc.services.client({ strategy: RequestStrategy.Timer, maxWait: 500 }).ping(natsServiceName('gateway'));
      for await (const identity of identities) if (silent && identity.metadata?.pid === String(silent)) silentInstance = identity.metadata.instance;
      return silentInstance || undefined;
    }, 20_000, 100);
    const beats = new Map<string, number>();
    nc.subscribe(subjects.command('gateway', 'heartbeat'), {
      callback: (_e, m) => {
        const beat = decodeJson<Heartbeat>(m.data);
        beats.set(beat.instance, (beats.get(beat.instance) ?? 0) + 1);
      },
    });

    // scrapes through the first gateway only (the second will not answer HTTP either while stopped)
    first = await connectionTo(hub, String(hub.port));
    const scrapeFirst = async () => {
      const r = await first!.get('/hub/metrics');
      if (r.status !== 200) throw new Error(`scrape answered ${r.status}`);
      return r.text;
    };
    await waitFor('the first gateway to know the second alive', async () => (replicaUp(await scrapeFirst(), 'gateway').get(silentInstance) === 1 ? true : undefined), 15_000, 100);
    await sleep(METRICS_MAX_AGE_MS + 100); // the next scrape gathers afresh
    // stopped right after a heartbeat: it stays alive to the others for HEARTBEATS_MISSED heartbeats
    const before = beats.get(silentInstance) ?? 0;
    await waitFor('a heartbeat of the second gateway', async () => ((beats.get(silentInstance) ?? 0) > before ? true : undefined), 10_000, 10);
    process.kill(silent, 'SIGSTOP');
    stopped = true;

    // the gathering gives up on the silent one at Hub.health_timeout; the bound here only says it does not hang
    // (five times that, for a loaded machine)
    const started = performance.now();
    const r = await first.get('/hub/metrics', 5 * deadlineMs);
    const tookMs = performance.now() - started;
    t.log(`scrape with one gateway stopped: ${r.status} in ${tookMs.toFixed(0)} ms (deadline ${deadlineMs} ms)`);
    t.is(r.status, 200);
    const up = replicaUp(r.text, 'gateway');
    t.is(up.get(silentInstance), 0, `the silent gateway is reported, as not answering: ${JSON.stringify([...up])}`);
    t.deepEqual([...up.values()].sort(), [0, 1], 'the first gateway answered');
    t.regex(r.text, /hub_scrape_actor_up\{actor="gateway"\} 1/);
    t.regex(r.text, /hub_scrape_actor_replicas\{actor="gateway"\} 1/);
    t.regex(r.text, /hub_scrape_actor_up\{actor="spawner"\} 1/, 'the other actors answered meanwhile');

    process.kill(silent, 'SIGCONT');
    stopped = false;
    await waitFor('the second gateway to answer scrapes again', async () => (replicaUp(await scrapeFirst(), 'gateway').get(silentInstance) === 1 ? true : undefined), 15_000, 200);
    t.true(isAlive(silent) && hub.children()['gateway-2'] === silent, 'it was never restarted');
  } finally {
    if (stopped) process.kill(silent, 'SIGCONT');
    first?.close();
    await nc.close();
    await hub.stop();
  }
});
