// The gateway's own metrics, and `GET /hub/metrics`: every actor's registry gathered over NATS
// (a request to each actor's `metrics` endpoint, answered by every replica; the gathering waits for each
// replica known alive from the actors' heartbeats, up to a deadline), merged into one Prometheus text answer.
// An actor or a replica that does not answer is reported by a gauge, never a 5xx.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { RequestStrategy } from 'nats';
import { decodeJson, HEARTBEAT_MS, HEARTBEATS_MISSED, INSTANCE_HEADER, type Heartbeat, type NatsConnection } from '../../shared/nats.js';
import {
  FAST_BUCKETS, gauge, HotCounter, HotGauge, HotHistogram, jupyterhubHistogram, mergeExpositions, natsRequestDuration, PROMETHEUS_CONTENT_TYPE,
  SLOW_BUCKETS, secondsSince, type HistogramChild,
} from '../../shared/metrics.js';
import type { ProcessesRecord } from '../../shared/processes.js';
import { ACTORS, runDir } from '../../shared/paths.js';
import { natsServiceName, subjects } from '../../shared/subjects.js';
import { establishedHandler } from './handler-names.js';

// ---- what the gateway measures ----------------------------------------------------------------------

// The established hub's names for the same measurement: by the class that answered (handler-names.ts) and the
// status code; a logout also counts in its logout timing. Each hub_ child finds its twins once, when it is made.
const establishedRequests = jupyterhubHistogram('request_duration_seconds',
  'Requests the hub answered itself, by method, handler (the established hub\'s handler class for the route) and status code',
  ['method', 'handler', 'code']);
const establishedLogout = jupyterhubHistogram('logout_duration_seconds', 'Logout requests').child();
const LOGOUT_ROUTE = '/hub/logout';
const both = (a: HistogramChild, b: HistogramChild): HistogramChild => ({ observe(v) { a.observe(v); b.observe(v); } });

export const requestDuration = new HotHistogram('hub_request_duration_seconds',
  'Requests the hub answered itself (/hub/...), by method, route pattern and status', ['method', 'route', 'status'], FAST_BUCKETS, {
    also: ([method, route, status]) => {
      const established = establishedRequests.child(method, establishedHandler(route), status);
      return route === LOGOUT_ROUTE ? both(established, establishedLogout) : established;
    },
  });

export const identityLookups = new HotCounter('hub_token_cache_requests_total',
  'Token checks by the gateway identity cache: hit (answered from memory) or miss (asked the tokens actor)', ['result']);
export const identityHit = identityLookups.child('hit');
export const identityMiss = identityLookups.child('miss');
gauge('hub_token_cache_hit_ratio', 'Share of token checks answered from the gateway identity cache since it started', [], (g) => {
  const total = identityHit.value + identityMiss.value;
  g.set(total ? identityHit.value / total : 0);
});

export const proxyRequests = new HotCounter('hub_proxy_requests_total',
  'Requests forwarded to servers and services, by outcome (completed, cut, unreachable, timeout, aborted, refused)', ['outcome']);
export const proxyInflight = new HotGauge('hub_proxy_inflight_requests', 'Requests being forwarded right now').child();
const proxyBytes = new HotCounter('hub_proxy_bytes_total', 'Bytes forwarded, by direction (to_target, to_client), HTTP bodies and WebSocket messages', ['direction']);
export const bytesToTarget = proxyBytes.child('to_target');
export const bytesToClient = proxyBytes.child('to_client');
export const webSockets = new HotGauge('hub_websocket_connections', 'WebSocket connections relayed right now').child();

/** Upstream connections of the proxy's keep-alive pools, counted when scraped. */
export function upstreamConnectionsGauge(counts: () => { active: number; idle: number }): void {
  gauge('hub_gateway_upstream_connections', 'Connections from the gateway to servers and services, by state (active, idle)', ['state'], (g) => {
    const c = counts();
    g.set({ state: 'active' }, c.active);
    g.set({ state: 'idle' }, c.idle);
  });
}

/** Restarts of the supervisor's children, read from the record it keeps in the data dir (run/processes.json). */
export function supervisorGauges(dataDir: string): void {
  const file = join(runDir(dataDir), 'processes.json');
  const read = (): Partial<ProcessesRecord> => {
    try {
      return JSON.parse(readFileSync(file, 'utf8'));
    } catch {
      return {};
    }
  };
  let last: ReturnType<typeof read> = {};
  gauge('hub_actor_restarts_total', 'Times the supervisor restarted each of its children (actors, NATS, services) since the hub started', ['child'], (g) => {
    last = read();
    g.reset();
    for (const [child, n] of Object.entries(last.restarts ?? {})) g.set({ child }, n);
  });
  gauge('hub_actor_failed', 'Children the supervisor gave up restarting (1) after too many restarts', ['child'], (g) => {
    g.reset();
    for (const child of Object.keys(last.children ?? {})) g.set({ child }, last.failed?.includes(child) ? 1 : 0);
  });
  // the established hub's start-up time: the supervisor records how long this hub took to answer its health check
  // (once per start of the supervisor; a restarted gateway reports the same start again, as a restarted process would)
  let startupOf = '';
  const startup = jupyterhubHistogram('hub_startup_duration_seconds', 'Time the hub took from its start to every actor answering', [], undefined, [[]], () => {
    const record = read();
    const which = `${record.supervisor}:${record.supervisor_start}`;
    if (typeof record.startup_seconds !== 'number' || which === startupOf) return;
    startupOf = which;
    startup.observe([], record.startup_seconds);
  });
}

// ---- the scrape -------------------------------------------------------------------------------------

const scrapeDuration = new HotHistogram('hub_scrape_duration_seconds', 'Time the gateway took to gather every actor\'s metrics', [], SLOW_BUCKETS);

/** With no replica of an actor known alive: how long after its last reply the gathering waits for another. */
const REPLICA_STALL_MS = 20;
/**
 * A gathering answers every scrape for this long: Prometheus scrapes every 15 s or more, and a scraper
 * asking 1,000 times a minute then costs the actors one gathering a second, not seventeen.
 */
export const METRICS_MAX_AGE_MS = 1000;

const decoder = new TextDecoder();

type Actor = (typeof ACTORS)[number];

/**
 * The replicas of every actor that are alive, kept from their heartbeats (shared/nats.ts startHeartbeat):
 * an instance is alive from its first heartbeat until its goodbye, or until it has missed HEARTBEATS_MISSED.
 * Heartbeats sent before this gateway subscribed are made up for by one `$SRV.PING` of every actor at start
 * (the services framework answers it with the same instance ids); `ready` settles when that has had `seedMs`.
 */
function watchReplicas(nc: NatsConnection, seedMs: number) {
  const lastSeen = new Map<Actor, Map<string, number>>(ACTORS.map((actor) => [actor, new Map()]));
  const seen = (actor: Actor, instance: string) => lastSeen.get(actor)!.set(instance, Date.now());
  // kept for the gateway's life (the connection's drain at stop ends them)
  for (const actor of ACTORS) nc.subscribe(subjects.command(actor, 'heartbeat'), {
    callback: (_e, m) => {
      let beat: Heartbeat;
      try {
        beat = decodeJson<Heartbeat>(m.data);
      } catch {
        return;
      }
      if (typeof beat?.instance !== 'string' || !beat.instance) return;
      if (beat.gone) lastSeen.get(actor)!.delete(beat.instance);
      else seen(actor, beat.instance);
    },
  });
  // subscribed first: an actor starting meanwhile is heard by its first heartbeat if the ping misses it
  const pings = nc.services.client({ strategy: RequestStrategy.Timer, maxWait: seedMs });
  const ready = Promise.all(ACTORS.map(async (actor) => {
    try {
      for await (const identity of await pings.ping(natsServiceName(actor))) {
        if (identity.metadata?.instance) seen(actor, identity.metadata.instance);
      }
    } catch {
      // no responders: none of it runs yet, its heartbeat will say when one does
    }
  })).then(() => undefined);

  return {
    ready,
    /** Instances of `actor` heard within the last HEARTBEATS_MISSED heartbeats (older ones are forgotten). */
    alive(actor: Actor): Set<string> {
      const oldest = Date.now() - HEARTBEATS_MISSED * HEARTBEAT_MS;
      const instances = lastSeen.get(actor)!;
      for (const [instance, at] of instances) if (at < oldest) instances.delete(instance);
      return new Set(instances.keys());
    },
  };
}

export function createScraper(nc: NatsConnection, timeoutMs: number) {
  const perActor = ACTORS.map((actor) => ({ actor, subject: subjects.command(actor, 'metrics') }));
  const replicas = watchReplicas(nc, timeoutMs);
  let inflight: Promise<string> | null = null;
  let last: { text: string; at: number } | null = null;

  /**
   * Every replica's answer (Prometheus text) and the instances that gave them: waits until each replica known
   * alive has answered, at most until `deadline`; replies of replicas not known yet are taken too. With none
   * known it stops REPLICA_STALL_MS after the last reply (as good as a guess gets).
   */
  async function ask(subject: string, expected: Set<string>, deadline: number): Promise<{ texts: string[]; answered: Set<string> }> {
    const start = performance.now();
    const texts: string[] = [];
    const answered = new Set<string>();
    const waiting = new Set(expected);
    const maxWait = Math.max(1, deadline - Date.now());
    try {
      const replies = await nc.requestMany(subject, undefined, expected.size
        ? { strategy: RequestStrategy.Timer, maxWait }
        : { strategy: RequestStrategy.JitterTimer, jitter: REPLICA_STALL_MS, maxWait });
      for await (const m of replies) {
        if (m.headers?.get('Nats-Service-Error-Code') || !m.data.length) continue;
        texts.push(decoder.decode(m.data));
        // a reply without the header (an actor of an older version) is counted, not named
        const instance = m.headers?.get(INSTANCE_HEADER);
        if (instance) answered.add(instance);
        waiting.delete(instance ?? '');
        if (expected.size && !waiting.size) break;
      }
    } catch {
      // no responders: the actor is reported missing below
    }
    natsRequestDuration.observe([subject, texts.length ? 'ok' : 'missing'], secondsSince(start));
    return { texts, answered };
  }

  async function gather(): Promise<string> {
    const start = performance.now();
    await replicas.ready; // settles `timeoutMs` after the gateway started: only its first scrapes wait for it
    const deadline = Date.now() + timeoutMs;
    const results = await Promise.all(perActor.map(async ({ actor, subject }) => {
      const expected = replicas.alive(actor);
      return { actor, expected, ...await ask(subject, expected, deadline) };
    }));
    let status = '# HELP hub_scrape_actor_up Whether each actor answered this scrape (1) or not (0)\n# TYPE hub_scrape_actor_up gauge\n';
    for (const { actor, texts } of results) status += `hub_scrape_actor_up{actor="${actor}"} ${texts.length ? 1 : 0}\n`;
    status += '\n# HELP hub_scrape_actor_replicas Replicas of each actor that answered this scrape\n# TYPE hub_scrape_actor_replicas gauge\n';
    for (const { actor, texts } of results) status += `hub_scrape_actor_replicas{actor="${actor}"} ${texts.length}\n`;
    status += '\n# HELP hub_scrape_replica_up Whether each replica (instance) answered this scrape (1), or is alive by its heartbeats and did not answer in time (0)\n'
      + '# TYPE hub_scrape_replica_up gauge\n';
    for (const { actor, expected, answered } of results) {
      for (const instance of [...new Set([...expected, ...answered])].sort()) {
        status += `hub_scrape_replica_up{actor="${actor}",replica="${instance}"} ${answered.has(instance) ? 1 : 0}\n`;
      }
    }
    const text = mergeExpositions([...results.flatMap(({ texts }) => texts), status]);
    scrapeDuration.observe([], secondsSince(start));
    return text;
  }

  return {
    contentType: PROMETHEUS_CONTENT_TYPE,
    /** The merged answer: at most METRICS_MAX_AGE_MS old; concurrent scrapes share one gathering. */
    scrape(): Promise<string> {
      if (last && Date.now() - last.at < METRICS_MAX_AGE_MS) return Promise.resolve(last.text);
      inflight ??= gather().then((text) => {
        last = { text, at: Date.now() };
        return text;
      }).finally(() => { inflight = null; });
      return inflight;
    },
  };
}

export type Scraper = ReturnType<typeof createScraper>;
