// Prometheus metrics of one process. Each actor keeps its own registry (prom-client), labelled with the
// actor and the node it runs on; the gateway gathers every actor's registry over NATS for `GET /hub/metrics`
// (services/gateway/metrics.ts). Names start with `hub_`; the list is in the README ("Operating it").
//
// Hot paths (a request, a gRPC call) must pay no more than an increment: prom-client's own `labels(...)`
// children build a label object and a hash string on every observe, so the hub's counters, gauges and
// histograms here are small classes of our own whose label children are created once, kept in nested Maps,
// and updated with plain arithmetic; prom-client renders them (they implement its metric interface).
//
// Of prom-client only the registry (and with it the text format) is loaded: its index also loads its
// metric classes, pushgateway and OpenTelemetry exemplars, which cost each actor as much start-up time as
// grpc-js (an actor's restart is what /hub/health waits for). The process metrics its
// collectDefaultMetrics would add are made here, with its names, from the same Node sources.
import { readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { hostname } from 'node:os';
import { monitorEventLoopDelay, performance as perf, PerformanceObserver, type EventLoopUtilization } from 'node:perf_hooks';
import type * as PromClient from 'prom-client';

/** Where this process runs: `Hub.node_name` (set by shared/actor.ts before anything is measured), else the host name. */
export let NODE_NAME = hostname();

export function setNodeName(name: string): void {
  if (name) NODE_NAME = name;
}

/** The Prometheus text format's content type (prom-client's PROMETHEUS_CONTENT_TYPE). */
export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

interface Exportable { name: string; get(): unknown }

const made = new Map<string, Exportable>();
let labels: Record<string, string> = {};
let registry: PromClient.Registry | null = null;

function register(metric: Exportable): void {
  made.set(metric.name, metric);
  if (registry) {
    registry.removeSingleMetric(metric.name); // made again (a component re-created in one process): the newest reads
    registry.registerMetric(metric as unknown as PromClient.Metric);
  }
}

/** The registry (prom-client's, its module alone), made at the first scrape. */
function promRegistry(): PromClient.Registry {
  if (registry) return registry;
  // CommonJS, required by path: `require('prom-client')` would load every part of the library
  const Registry = createRequire(import.meta.url)('prom-client/lib/registry') as typeof PromClient.Registry;
  registry = new Registry();
  registry.setDefaultLabels(labels);
  for (const m of made.values()) registry.registerMetric(m as unknown as PromClient.Metric);
  return registry;
}

/**
 * Called once by shared/actor.ts: labels every series with actor and node (and `replica` for an actor that
 * runs several times on one node, such as extra gateways), and starts the process metrics.
 */
export function initMetrics(actor: string, replica = ''): void {
  labels = replica ? { actor, node: NODE_NAME, replica } : { actor, node: NODE_NAME };
  processMetrics(actor === 'gateway' ? FRONT_DOOR_LAG_PROBE_MS : LAG_PROBE_MS);
}

/**
 * How often the runtime probes the event loop's lag (a libuv timer, no JavaScript). The gateway, which every
 * request waits on, at 50 ms as the established hub probes its loop; the other actors every second: their probe's
 * 20 wake-ups a second each were a third of what an idle hub's actors spent (2026-11-28, 30 s after 45 s of
 * quiet: 32 against 21 ms of CPU a second over the six actors). A stall shorter than the interval may be missed.
 */
export const FRONT_DOOR_LAG_PROBE_MS = 50;
export const LAG_PROBE_MS = 1000;

/** Seconds since `start` (a `performance.now()` reading). */
export const secondsSince = (start: number): number => (performance.now() - start) / 1000;

// ---- buckets ---------------------------------------------------------------------------------------

/** Fast internal calls and HTTP requests: 0.1 ms to 10 s. */
export const FAST_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Server starts (the established hub's spawn buckets): 0.5 s to 10 min. */
export const SPAWN_BUCKETS = [0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 180, 300, 600];
/** Stops, logins, reconciliations: 5 ms to 10 s. */
export const SLOW_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

// ---- the established hub's families -------------------------------------------------------------------
// Beside the hub_ families, the ones JupyterHub 6.1 exports, with its names, types, labels, label values and
// buckets, so its community's Grafana dashboards and alert rules work unchanged. Each is fed by the same
// measurement as its hub_ twin where there is one (HistogramOptions.also), never by a second timer.

/** Its environment variables, read as it reads them: the prefix (`jupyterhub` unless set; set empty, no prefix), and bucket lists. */
export const METRICS_PREFIX_ENV = 'JUPYTERHUB_METRICS_PREFIX';
const SPAWN_BUCKETS_ENV = 'JUPYTERHUB_SERVER_SPAWN_DURATION_SECONDS_BUCKETS';
const STOP_BUCKETS_ENV = 'JUPYTERHUB_SERVER_STOP_DURATION_SECONDS_BUCKETS';
/** What the supervisor passes on to every actor (children get a chosen environment, not the whole). */
export const METRICS_ENV = [METRICS_PREFIX_ENV, SPAWN_BUCKETS_ENV, STOP_BUCKETS_ENV] as const;

/** prometheus_client's default buckets, which the established hub's unlabelled timings keep. */
export const PROMETHEUS_DEFAULT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

/** A bucket list from `a,b,c` (`inf` allowed and dropped: +Inf is always there), or why not. */
function parseBuckets(text: string): number[] | string {
  const values = text.split(',').map((p) => Number(/^\s*[+]?inf(inity)?\s*$/i.test(p) ? Infinity : p.trim() === '' ? NaN : p));
  if (values.some((v) => Number.isNaN(v))) return 'expected numbers separated by commas';
  if (values.some((v, i) => i > 0 && v <= values[i - 1])) return 'expected increasing numbers';
  return values.filter((v) => v !== Infinity);
}

/** What is wrong with those variables (the supervisor refuses to start with them), one line each. */
export function metricsEnvProblems(env: NodeJS.ProcessEnv): string[] {
  const problems: string[] = [];
  const prefix = env[METRICS_PREFIX_ENV];
  if (prefix && !METRIC_NAME.test(prefix)) problems.push(`${METRICS_PREFIX_ENV}: "${prefix}" is not a Prometheus metric name prefix (letters, digits, "_" and ":", not starting with a digit)`);
  if (prefix === 'hub') problems.push(`${METRICS_PREFIX_ENV}: "hub" would give the established hub's families this hub's own names (hub_running_servers, …)`);
  for (const name of [SPAWN_BUCKETS_ENV, STOP_BUCKETS_ENV]) {
    const text = env[name]?.trim();
    const parsed = text ? parseBuckets(text) : [];
    if (typeof parsed === 'string') problems.push(`${name}: ${parsed}`);
  }
  return problems;
}

function envBuckets(name: string, fallback: readonly number[]): readonly number[] {
  const text = process.env[name]?.trim();
  const parsed = text ? parseBuckets(text) : fallback;
  if (typeof parsed === 'string') throw new Error(`${name}: ${parsed}`);
  return parsed;
}

/** `jupyterhub_<name>`, or another prefix by JUPYTERHUB_METRICS_PREFIX. */
export function jupyterhubName(name: string): string {
  const prefix = process.env[METRICS_PREFIX_ENV] ?? 'jupyterhub';
  if ((prefix && !METRIC_NAME.test(prefix)) || prefix === 'hub') throw new Error(metricsEnvProblems(process.env)[0]);
  return prefix ? `${prefix}_${name}` : name;
}

/** Its spawn buckets (SPAWN_BUCKETS) and stop buckets (prometheus_client's), each replaceable by its variable. */
export const jupyterhubSpawnBuckets = () => envBuckets(SPAWN_BUCKETS_ENV, SPAWN_BUCKETS);
export const jupyterhubStopBuckets = () => envBuckets(STOP_BUCKETS_ENV, PROMETHEUS_DEFAULT_BUCKETS);

/**
 * One of the established hub's histograms: exported from the start, every label set in `ahead` at zero (it makes
 * its status series ahead so that dashboards and alerts see them before the first event); unlabelled ones too.
 */
export function jupyterhubHistogram(name: string, help: string, labelNames: Values = [], buckets: readonly number[] = PROMETHEUS_DEFAULT_BUCKETS,
  ahead: readonly Values[] = labelNames.length ? [] : [[]], collect?: () => void): HotHistogram {
  const h = new HotHistogram(jupyterhubName(name), help, labelNames, buckets, { exportEmpty: true, pythonLe: true, collect });
  for (const values of ahead) h.childOf(values);
  return h;
}

// ---- label children ---------------------------------------------------------------------------------

type Values = readonly string[];

/** Children by their label values, in nested Maps: a lookup of known values allocates nothing. */
class Children<C> {
  private readonly root = new Map<string, unknown>();
  readonly all: { values: Values; child: C }[] = [];

  constructor(private readonly arity: number, private readonly make: (values: Values) => C) {}

  get(values: Values): C {
    if (values.length !== this.arity) throw new Error(`expected ${this.arity} label values, got ${values.length}`);
    let node: Map<string, unknown> = this.root;
    for (let i = 0; i < this.arity - 1; i++) {
      let next = node.get(values[i]) as Map<string, unknown> | undefined;
      if (!next) node.set(values[i], (next = new Map()));
      node = next;
    }
    const last = this.arity ? values[this.arity - 1] : '';
    let child = node.get(last) as C | undefined;
    if (!child) {
      child = this.make(values);
      node.set(last, child);
      this.all.push({ values: [...values], child });
    }
    return child;
  }
}

const labelsOf = (names: Values, values: Values): Record<string, string> => {
  const out: Record<string, string> = {};
  for (let i = 0; i < names.length; i++) out[names[i]] = values[i];
  return out;
};

interface MetricValue { value: number; labels: Record<string, string | number>; metricName?: string }

export interface CounterChild { inc(n?: number): void; readonly value: number }

class CounterCell implements CounterChild {
  value = 0;
  inc(n = 1): void {
    this.value += n;
  }
}

/** Counters and gauges alike: children made once per label values, each a plain number moved in place. */
abstract class HotCells<C extends CounterCell> {
  abstract readonly type: string;
  readonly aggregator = 'sum';
  protected readonly children: Children<C>;

  constructor(readonly name: string, readonly help: string, readonly labelNames: Values, make: () => C) {
    this.children = new Children(labelNames.length, make);
    register(this);
  }

  get(): { name: string; help: string; type: string; values: MetricValue[]; aggregator: string } {
    return {
      name: this.name, help: this.help, type: this.type, aggregator: this.aggregator,
      values: this.children.all.map(({ values, child }) => ({ value: child.value, labels: labelsOf(this.labelNames, values) })),
    };
  }

  reset(): void {
    for (const { child } of this.children.all) child.value = 0;
  }
}

/** A counter whose children are created once; `child(...)` is for set-up, `inc` for the hot path. */
export class HotCounter extends HotCells<CounterCell> {
  readonly type: string = 'counter';

  constructor(name: string, help: string, labelNames: Values = []) {
    super(name, help, labelNames, () => new CounterCell());
  }

  /** The child for these label values (created at first use, then the same object). */
  child(...values: string[]): CounterChild {
    return this.children.get(values);
  }

  inc(...values: string[]): void {
    this.children.get(values).inc();
  }
}

export interface GaugeChild extends CounterChild { dec(n?: number): void }

class GaugeCell extends CounterCell implements GaugeChild {
  dec(n = 1): void {
    this.value -= n;
  }
}

/** A gauge moved by events (connections opened and closed): an addition each, no allocation. */
export class HotGauge extends HotCells<GaugeCell> {
  readonly type = 'gauge';

  constructor(name: string, help: string, labelNames: Values = []) {
    super(name, help, labelNames, () => new GaugeCell());
  }

  child(...values: string[]): GaugeChild {
    return this.children.get(values);
  }
}

export interface HistogramChild { observe(seconds: number): void }

class HistogramCell implements HistogramChild {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(private readonly bounds: readonly number[], private readonly also: HistogramChild | null) {
    this.counts = new Float64Array(bounds.length);
  }
  observe(v: number): void {
    const b = this.bounds;
    let i = 0;
    while (i < b.length && v > b[i]) i++;
    if (i < b.length) this.counts[i]++;
    this.sum += v;
    this.count++;
    if (this.also !== null) this.also.observe(v);
  }
}

export interface HistogramOptions {
  /**
   * Another family the same measurement feeds (the established hub's name for it): the child of that family for
   * these label values, looked up once when this child is made, so an observation costs one more addition, no lookup.
   */
  also?: (values: Values) => HistogramChild;
  /** Children made ahead are exported before their first observation, with zero counts (the established hub's families). */
  exportEmpty?: boolean;
  /** `le` written as Python's prometheus_client writes it (`1.0`, not `1`), for rules that name a bucket. */
  pythonLe?: boolean;
  /** Called before each export (a value known only from outside, read when scraped). */
  collect?: () => void;
}

/** 1 → `1.0`, 0.25 → `0.25`: how Python writes a float. */
const pythonFloat = (n: number): string => (Number.isInteger(n) ? `${n}.0` : String(n));

/** A histogram whose children are created once: an observation is a bucket search and three additions. */
export class HotHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly children: Children<HistogramCell>;
  private readonly le: readonly (number | string)[];

  constructor(readonly name: string, readonly help: string, readonly labelNames: Values, readonly buckets: readonly number[] = FAST_BUCKETS,
    private readonly options: HistogramOptions = {}) {
    const { also } = options;
    this.children = new Children(labelNames.length, (values) => new HistogramCell(buckets, also ? also(values) : null));
    this.le = options.pythonLe ? buckets.map(pythonFloat) : buckets;
    register(this);
  }

  child(...values: string[]): HistogramChild {
    return this.children.get(values);
  }

  /** `child` for label values already in a list (no spread into a call: test/contracts/no-spread.test.ts). */
  childOf(values: readonly string[]): HistogramChild {
    return this.children.get(values as string[]);
  }

  observe(values: string[], seconds: number): void {
    this.children.get(values).observe(seconds);
  }

  get(): { name: string; help: string; type: string; values: MetricValue[]; aggregator: string } {
    this.options.collect?.();
    const out: MetricValue[] = [];
    for (const { values, child } of this.children.all) {
      // made ahead (every rpc of a client), never observed: not a series yet, unless asked to be one
      if (child.count === 0 && !this.options.exportEmpty) continue;
      const labels = labelsOf(this.labelNames, values);
      let acc = 0;
      for (let i = 0; i < this.buckets.length; i++) {
        acc += child.counts[i];
        out.push({ value: acc, labels: { ...labels, le: this.le[i] }, metricName: `${this.name}_bucket` });
      }
      out.push({ value: child.count, labels: { ...labels, le: '+Inf' }, metricName: `${this.name}_bucket` });
      out.push({ value: child.sum, labels, metricName: `${this.name}_sum` });
      out.push({ value: child.count, labels, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, values: out, aggregator: this.aggregator };
  }

  reset(): void {
    for (const { child } of this.children.all) {
      child.counts.fill(0);
      child.sum = 0;
      child.count = 0;
    }
  }
}

/** What a scrape-time gauge's `collect` sets. */
export interface GaugeSetter {
  set(value: number): void;
  set(labels: Record<string, string>, value: number): void;
  reset(): void;
}

class CollectedGauge implements GaugeSetter {
  readonly aggregator = 'sum';
  private values: MetricValue[] = [];

  constructor(readonly name: string, readonly help: string, private readonly collect: (g: GaugeSetter) => void | Promise<void>, readonly type: 'gauge' | 'counter' = 'gauge') {
    register(this);
  }

  set(a: number | Record<string, string>, b?: number): void {
    const labels = typeof a === 'number' ? {} : a;
    const value = typeof a === 'number' ? a : b!;
    const key = JSON.stringify(labels);
    const i = this.values.findIndex((v) => JSON.stringify(v.labels) === key);
    if (i >= 0) this.values[i] = { value, labels };
    else this.values.push({ value, labels });
  }

  reset(): void {
    this.values = [];
  }

  async get() {
    this.values = [];
    await this.collect(this);
    return { name: this.name, help: this.help, type: this.type, values: this.values, aggregator: this.aggregator };
  }
}

/** A gauge read when scraped (`collect` sets its values): nothing to update on any path. */
export function gauge(name: string, help: string, _labelNames: string[], collect: (g: GaugeSetter) => void | Promise<void>): void {
  new CollectedGauge(name, help, collect);
}


// ---- the process: CPU, memory, event loop, GC (prom-client's default names, prefixed hub_) ------------------

function processMetrics(lagProbeMs: number): void {
  const startSeconds = Math.round(Date.now() / 1000 - process.uptime());
  gauge('hub_process_start_time_seconds', 'Start time of the process since unix epoch in seconds.', [], (g) => g.set(startSeconds));
  let cpuBase = process.cpuUsage();
  const cpu = { user: 0, system: 0 };
  const cpuNow = () => {
    const now = process.cpuUsage();
    cpu.user += (now.user - cpuBase.user) / 1e6;
    cpu.system += (now.system - cpuBase.system) / 1e6;
    cpuBase = now;
  };
  // counters read at scrape time: exported as counters, filled by collect
  new CollectedGauge('hub_process_cpu_user_seconds_total', 'Total user CPU time spent in seconds.', (g) => { cpuNow(); g.set(cpu.user); }, 'counter');
  new CollectedGauge('hub_process_cpu_system_seconds_total', 'Total system CPU time spent in seconds.', (g) => g.set(cpu.system), 'counter');
  new CollectedGauge('hub_process_cpu_seconds_total', 'Total user and system CPU time spent in seconds.', (g) => g.set(cpu.user + cpu.system), 'counter');
  gauge('hub_process_resident_memory_bytes', 'Resident memory size in bytes.', [], (g) => g.set(process.memoryUsage.rss()));
  gauge('hub_process_open_fds', 'Number of open file descriptors.', [], (g) => {
    try {
      g.set(readdirSync('/proc/self/fd').length - 1);
    } catch {
      // not Linux: left out
    }
  });
  gauge('hub_nodejs_heap_size_used_bytes', 'Process heap size used from Node.js in bytes.', [], (g) => g.set(process.memoryUsage().heapUsed));
  gauge('hub_nodejs_heap_size_total_bytes', 'Process heap size from Node.js in bytes.', [], (g) => g.set(process.memoryUsage().heapTotal));
  gauge('hub_nodejs_external_memory_bytes', 'Node.js external memory size in bytes.', [], (g) => g.set(process.memoryUsage().external));
  gauge('hub_nodejs_active_handles_total', 'Number of active libuv handles.', [], (g) => g.set((process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles().length));

  // Event-loop lag: sampled by the runtime every lagProbeMs (see FRONT_DOOR_LAG_PROBE_MS), read at scrape
  const delay = monitorEventLoopDelay({ resolution: lagProbeMs });
  delay.enable();
  const lag = (name: string, help: string, read: () => number) => gauge(name, help, [], (g) => g.set(read() / 1e9));
  lag('hub_nodejs_eventloop_lag_seconds', 'Event-loop lag (mean since the last scrape) in seconds.', () => delay.mean || 0);
  lag('hub_nodejs_eventloop_lag_p50_seconds', 'The 50th percentile of the event-loop lag since the last scrape.', () => delay.percentile(50));
  lag('hub_nodejs_eventloop_lag_p90_seconds', 'The 90th percentile of the event-loop lag since the last scrape.', () => delay.percentile(90));
  lag('hub_nodejs_eventloop_lag_p99_seconds', 'The 99th percentile of the event-loop lag since the last scrape.', () => delay.percentile(99));
  lag('hub_nodejs_eventloop_lag_max_seconds', 'The longest event-loop lag since the last scrape.', () => {
    const max = delay.max;
    delay.reset(); // each scrape sees the window since the one before (read last: the max is the final gauge read)
    return max;
  });
  let elu: EventLoopUtilization = perf.eventLoopUtilization();
  gauge('hub_nodejs_eventloop_utilization', 'Share of time the event loop was busy since the last scrape (0 to 1).', [], (g) => {
    const now = perf.eventLoopUtilization();
    g.set(perf.eventLoopUtilization(now, elu).utilization);
    elu = now;
  });

  const gc = new HotHistogram('hub_nodejs_gc_duration_seconds', 'Garbage collection duration by kind (major, minor, incremental, weakcb).', ['kind'], [0.001, 0.01, 0.1, 1, 2, 5]);
  const KINDS: Record<number, HistogramChild> = { 1: gc.child('minor'), 2: gc.child('major'), 4: gc.child('incremental'), 8: gc.child('weakcb') };
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) KINDS[(e as { detail?: { kind?: number } }).detail?.kind ?? 0]?.observe(e.duration / 1000);
  }).observe({ entryTypes: ['gc'] });
}

// ---- metrics every actor has -------------------------------------------------------------------------

/** gRPC calls made by this process (shared/grpc.ts): callee actor, rpc, outcome (gRPC-ish code name). */
export const grpcClientDuration = new HotHistogram('hub_grpc_client_duration_seconds',
  'Duration of gRPC calls this actor made to another actor, by service, rpc and outcome', ['service', 'method', 'code']);
/** gRPC calls served by this process. */
export const grpcServerDuration = new HotHistogram('hub_grpc_server_duration_seconds',
  'Duration of gRPC calls this actor served, by rpc and outcome', ['method', 'code']);
/** NATS requests made by this process (shared/nats.ts requestJson, the gateway's scrape). */
export const natsRequestDuration = new HotHistogram('hub_nats_request_duration_seconds',
  'Duration of NATS requests this actor made, by subject and outcome', ['subject', 'outcome']);

/** A HubError's code, or `ok`: the outcome label of internal calls (bounded: the error catalogue). */
export function outcomeOf(e: unknown): string {
  const code = (e as { code?: unknown })?.code;
  return typeof code === 'string' && code.startsWith('HUB_ERR_') ? code.slice('HUB_ERR_'.length).toLowerCase() : 'error';
}

const encoder = new TextEncoder();

/**
 * The registry in the Prometheus text format, as bytes, for the gateway's scatter-gather (shared/actor.ts
 * serves it on `hub.<actor>.metrics`): rendered here, in the actor's own process, so the gateway only
 * regroups text.
 */
export async function metricsSnapshot(): Promise<Uint8Array> {
  return encoder.encode(await promRegistry().metrics());
}

/**
 * Several processes' text answers as one: each metric family once (its HELP and TYPE lines, then the
 * samples of every process in turn). Series of different processes differ by their actor/node/replica
 * labels, so nothing needs adding up.
 */
export function mergeExpositions(texts: readonly string[]): string {
  const families = new Map<string, { head: string; samples: string[] }>();
  for (const text of texts) {
    for (const block of text.split('\n\n')) {
      if (!block.startsWith('# HELP ')) continue;
      const nameEnd = block.indexOf(' ', 7);
      const name = block.slice(7, nameEnd);
      const typeLine = block.indexOf('\n', block.indexOf('\n') + 1); // end of the TYPE line
      const head = typeLine < 0 ? block : block.slice(0, typeLine);
      const samples = typeLine < 0 ? '' : block.slice(typeLine + 1).trimEnd();
      let f = families.get(name);
      if (!f) families.set(name, (f = { head, samples: [] }));
      if (samples) f.samples.push(samples);
    }
  }
  let out = '';
  for (const { head, samples } of families.values()) out += samples.length ? `${head}\n${samples.join('\n')}\n\n` : `${head}\n\n`;
  return out;
}
