// The gateway's own metrics, and `GET /hub/metrics`: every actor's registry gathered over NATS
// (a request to each actor's `metrics` endpoint, answered by every replica, with a bounded wait),
// merged into one Prometheus text answer. An actor that does not answer is reported by a gauge, never a 5xx.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { RequestStrategy } from 'nats';
import type { NatsConnection } from '../../shared/nats.js';
import {
  gauge, HotCounter, HotGauge, HotHistogram, mergeExpositions, natsRequestDuration, PROMETHEUS_CONTENT_TYPE, SLOW_BUCKETS, secondsSince,
} from '../../shared/metrics.js';
import { ACTORS, runDir } from '../../shared/paths.js';
import { subjects } from '../../shared/subjects.js';

// ---- what the gateway measures ----------------------------------------------------------------------

export const requestDuration = new HotHistogram('hub_request_duration_seconds',
  'Requests the hub answered itself (/hub/...), by method, route pattern and status', ['method', 'route', 'status']);

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
  const read = (): { restarts?: Record<string, number>; failed?: string[]; children?: Record<string, unknown> } => {
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
}

// ---- the scrape -------------------------------------------------------------------------------------

const scrapeDuration = new HotHistogram('hub_scrape_duration_seconds', 'Time the gateway took to gather every actor\'s metrics', [], SLOW_BUCKETS);

/** How long after the last reply of an actor's replicas the gathering waits for another one. */
const REPLICA_STALL_MS = 20;
/**
 * A gathering answers every scrape for this long: Prometheus scrapes every 15 s or more, and a scraper
 * asking 1,000 times a minute then costs the actors one gathering a second, not seventeen.
 */
export const METRICS_MAX_AGE_MS = 1000;

const decoder = new TextDecoder();

export function createScraper(nc: NatsConnection, timeoutMs: number) {
  const perActor = ACTORS.map((actor) => ({ actor, subject: subjects.command(actor, 'metrics') }));
  let inflight: Promise<string> | null = null;
  let last: { text: string; at: number } | null = null;

  /** Every replica's answer (Prometheus text), waiting at most `timeoutMs`. */
  async function ask(subject: string): Promise<string[]> {
    const start = performance.now();
    const out: string[] = [];
    try {
      const replies = await nc.requestMany(subject, undefined, { strategy: RequestStrategy.JitterTimer, jitter: REPLICA_STALL_MS, maxWait: timeoutMs });
      for await (const m of replies) {
        if (m.headers?.get('Nats-Service-Error-Code')) continue;
        if (m.data.length) out.push(decoder.decode(m.data));
      }
    } catch {
      // no responders: the actor is reported missing below
    }
    natsRequestDuration.observe([subject, out.length ? 'ok' : 'missing'], secondsSince(start));
    return out;
  }

  async function gather(): Promise<string> {
    const start = performance.now();
    const results = await Promise.all(perActor.map(({ subject }) => ask(subject)));
    let status = '# HELP hub_scrape_actor_up Whether each actor answered this scrape (1) or not (0)\n# TYPE hub_scrape_actor_up gauge\n';
    results.forEach((replies, i) => { status += `hub_scrape_actor_up{actor="${perActor[i].actor}"} ${replies.length ? 1 : 0}\n`; });
    status += '\n# HELP hub_scrape_actor_replicas Replicas of each actor that answered this scrape\n# TYPE hub_scrape_actor_replicas gauge\n';
    results.forEach((replies, i) => { status += `hub_scrape_actor_replicas{actor="${perActor[i].actor}"} ${replies.length}\n`; });
    const text = mergeExpositions([...results.flat(), status]);
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
