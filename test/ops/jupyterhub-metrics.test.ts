// The established hub's metric families under /hub/metrics, beside ours: the community's Grafana dashboards and
// alert rules written for JupyterHub 6.1 read them unchanged. A person signs in, a server starts and stops, and
// the families those dashboards query are there with the labels they filter on, and move as the person would expect.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { randomToken, type ApiCall } from '../api/client.js';
import { Browser, formLogin } from '../auth/helpers.js';
import { freePort, runHubCommand, sleep, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { startOperatedHub } from './hub.js';
import { sample, samples, typeOf } from './prometheus.js';

let hub: HubUnderTest;
let api: ApiCall;
const ADMIN = randomToken();
const PASSWORD = 'open-sesame';

/** A gathering answers scrapes for 1 s (services/gateway/metrics.ts METRICS_MAX_AGE_MS): wait it out to see changes. */
const FRESH_MS = 1100;

/**
 * Every series the community dashboards (github.com/jupyterhub/grafana-dashboards) query from the hub, with the labels
 * their queries filter or group on, and the label values they name.
 * - dashboards/jupyterhub.jsonnet: the request-latency heatmap (`sum by (le)` of `_bucket`, without
 *   `handler="jupyterhub.apihandlers.users.SpawnProgressAPIHandler"`), responses by `code`, the spawn-time heatmap, and
 *   start failures (`_count{status!="success"}` by status).
 * - dashboards/activity.jsonnet: running servers, and active users for `period` 24h, 7d and 30d.
 * Not listed: their `namespace` and `app` labels come from Prometheus's Kubernetes discovery, not from any hub (a
 * scrape config adds them: README, Metrics); `jupyterhub_user_group_info` (common.libsonnet, group.jsonnet,
 * user.jsonnet) comes from a separate exporter of group memberships, not from the hub.
 */
const DASHBOARD_SERIES: { name: string; labels: string[]; values?: Record<string, string> }[] = [
  { name: 'jupyterhub_request_duration_seconds_bucket', labels: ['le', 'handler'] },
  { name: 'jupyterhub_request_duration_seconds_bucket', labels: ['le', 'handler'], values: { handler: 'jupyterhub.apihandlers.users.SpawnProgressAPIHandler' } },
  { name: 'jupyterhub_request_duration_seconds_count', labels: ['code'] },
  { name: 'jupyterhub_server_spawn_duration_seconds_bucket', labels: ['le'] },
  { name: 'jupyterhub_server_spawn_duration_seconds_count', labels: ['status'], values: { status: 'success' } },
  { name: 'jupyterhub_server_spawn_duration_seconds_count', labels: ['status'], values: { status: 'failure' } },
  { name: 'jupyterhub_running_servers', labels: [] },
  { name: 'jupyterhub_active_users', labels: ['period'], values: { period: '24h' } },
  { name: 'jupyterhub_active_users', labels: ['period'], values: { period: '7d' } },
  { name: 'jupyterhub_active_users', labels: ['period'], values: { period: '30d' } },
];

/** Every family of the established hub 6.1 (its jupyterhub/metrics.py), with its type and labels (`le` aside). */
const ESTABLISHED_FAMILIES: { family: string; type: string; labels: string[] }[] = [
  { family: 'jupyterhub_request_duration_seconds', type: 'histogram', labels: ['method', 'handler', 'code'] },
  { family: 'jupyterhub_server_spawn_duration_seconds', type: 'histogram', labels: ['status', 'reason'] },
  { family: 'jupyterhub_running_servers', type: 'gauge', labels: [] },
  { family: 'jupyterhub_total_users', type: 'gauge', labels: [] },
  { family: 'jupyterhub_active_users', type: 'gauge', labels: ['period'] },
  { family: 'jupyterhub_check_routes_duration_seconds', type: 'histogram', labels: [] },
  { family: 'jupyterhub_hub_startup_duration_seconds', type: 'histogram', labels: [] },
  { family: 'jupyterhub_init_spawners_duration_seconds', type: 'histogram', labels: [] },
  { family: 'jupyterhub_proxy_poll_duration_seconds', type: 'histogram', labels: [] },
  { family: 'jupyterhub_login_duration_seconds', type: 'histogram', labels: ['status'] },
  { family: 'jupyterhub_logout_duration_seconds', type: 'histogram', labels: [] },
  { family: 'jupyterhub_proxy_add_duration_seconds', type: 'histogram', labels: ['status'] },
  { family: 'jupyterhub_server_poll_duration_seconds', type: 'histogram', labels: ['status'] },
  { family: 'jupyterhub_server_stop_seconds', type: 'histogram', labels: ['status'] },
  { family: 'jupyterhub_proxy_delete_duration_seconds', type: 'histogram', labels: ['status'] },
];

/** Our own series labels, which the established hub's have too here (every actor's series carry them). */
const OURS = new Set(['actor', 'node', 'replica', 'le']);

test.before(async () => {
  ({ hub, api } = await startOperatedHub(ADMIN, PASSWORD));
});
test.after.always(async () => {
  await hub?.stop();
});

async function scrape(url = hub.url): Promise<string> {
  const r = await fetch(`${url}/hub/metrics`, { headers: { authorization: `token ${ADMIN}` } });
  if (r.status !== 200) throw new Error(`scrape: ${r.status}`);
  return r.text();
}

/** A fresh gathering (the previous one answers for 1 s). */
async function freshScrape(): Promise<string> {
  await sleep(FRESH_MS);
  return scrape();
}

test.serial('jupyterhub metrics: a sign-in, a start and a stop show in the families the community dashboards read', async (t) => {
  // the supervisor records its start-up once /hub/health first answers, a moment after the harness saw it answer
  const before = await waitFor('the start-up time to be reported', async () => {
    const text = await scrape();
    return sample(text, 'jupyterhub_hub_startup_duration_seconds_count') === 1 ? text : undefined;
  }, 15_000, 300);
  t.true(sample(before, 'jupyterhub_hub_startup_duration_seconds_sum') > 0);
  t.is(sample(before, 'jupyterhub_init_spawners_duration_seconds_count', { actor: 'spawner' }), 1, 'the spawner looked at its servers once, at its start');
  t.true(sample(before, 'jupyterhub_check_routes_duration_seconds_count', { actor: 'proxy-router' }) >= 1, 'the routes were checked at start');
  t.true(sample(before, 'jupyterhub_proxy_poll_duration_seconds_count', { actor: 'proxy-router' }) >= 1);
  t.is(sample(before, 'jupyterhub_running_servers'), 0);
  const users = await api('GET', '/users', { token: ADMIN });
  t.is(users.status, 200);
  t.is(sample(before, 'jupyterhub_total_users'), users.body.length, 'every user counted');
  t.is(users.body.length, 3); // boss, alice, bob
  t.is(sample(before, 'jupyterhub_server_spawn_duration_seconds_count', { status: 'failure', reason: 'throttled' }), 0, 'made ahead, at zero');

  // alice signs in, her server starts, she follows its progress
  const alice = new Browser();
  const signedIn = await formLogin(alice, hub.url, 'alice', PASSWORD);
  t.is(signedIn.status, 302);
  t.is((await api('POST', '/users/alice/server', { token: ADMIN })).status, 201);
  const progress = await fetch(`${hub.url}/hub/api/users/alice/server/progress`, { headers: { authorization: `token ${ADMIN}` } });
  t.is(progress.status, 200);
  t.regex(await progress.text(), /"ready":true/);

  const running = await freshScrape();
  const moved = (after: string, was: string, name: string, labels: Record<string, string> = {}) => sample(after, name, labels) - sample(was, name, labels);
  t.is(sample(running, 'jupyterhub_running_servers'), 1);
  t.is(moved(running, before, 'jupyterhub_server_spawn_duration_seconds_count', { status: 'success', reason: '' }), 1);
  t.is(moved(running, before, 'jupyterhub_server_spawn_duration_seconds_count', { status: 'failure' }), 0);
  t.is(moved(running, before, 'jupyterhub_server_spawn_duration_seconds_count', { status: 'error' }), 0);
  // one measurement, both names: the same spawn time under ours and the established hub's
  t.is(moved(running, before, 'jupyterhub_server_spawn_duration_seconds_sum'), moved(running, before, 'hub_server_spawn_duration_seconds_sum', { status: 'success' }));
  t.is(moved(running, before, 'jupyterhub_proxy_add_duration_seconds_count', { status: 'success' }), 1, 'its route added once');
  t.is(moved(running, before, 'jupyterhub_login_duration_seconds_count', { status: 'success' }), 1);
  t.is(moved(running, before, 'jupyterhub_request_duration_seconds_count',
    { method: 'POST', handler: 'jupyterhub.apihandlers.users.UserServerAPIHandler', code: '201' }), 1);
  t.is(moved(running, before, 'jupyterhub_request_duration_seconds_count',
    { method: 'GET', handler: 'jupyterhub.apihandlers.users.SpawnProgressAPIHandler', code: '200' }), 1);
  t.is(moved(running, before, 'jupyterhub_request_duration_seconds_count',
    { method: 'POST', handler: 'jupyterhub.handlers.login.LoginHandler', code: '302' }), 1);
  // buckets written as the established hub writes them (rules may name one)
  t.true(sample(running, 'jupyterhub_server_spawn_duration_seconds_bucket', { le: '600.0' }) >= 1);
  t.is(sample(running, 'jupyterhub_server_spawn_duration_seconds_bucket', { status: 'success', le: '+Inf' }),
    sample(running, 'jupyterhub_server_spawn_duration_seconds_count', { status: 'success' }));

  // the server stops, alice signs out
  t.is((await api('DELETE', '/users/alice/server', { token: ADMIN })).status, 204);
  t.is((await alice.get(`${hub.url}/hub/logout`)).status, 302);
  const stopped = await freshScrape();
  t.is(sample(stopped, 'jupyterhub_running_servers'), 0);
  t.is(moved(stopped, running, 'jupyterhub_server_stop_seconds_count', { status: 'success' }), 1);
  t.is(moved(stopped, running, 'jupyterhub_server_stop_seconds_count', { status: 'failure' }), 0);
  t.is(moved(stopped, running, 'jupyterhub_proxy_delete_duration_seconds_count', { status: 'success' }), 1, 'its route removed once');
  t.is(moved(stopped, running, 'jupyterhub_logout_duration_seconds_count'), 1);
  t.is(sample(stopped, 'jupyterhub_total_users'), 3);
  const active = ['24h', '7d', '30d'].map((period) => sample(stopped, 'jupyterhub_active_users', { period }));
  t.true(active[0] <= active[1] && active[1] <= active[2] && active[2] <= 3, `active users by period: ${active}`);

  // (1) every series the dashboards query, with their labels (and the values they name)
  const all = samples(stopped);
  for (const { name, labels, values = {} } of DASHBOARD_SERIES) {
    const found = all.filter((s) => s.name === name && labels.every((l) => l in s.labels) && Object.entries(values).every(([k, v]) => s.labels[k] === v));
    t.true(found.length > 0, `${name} with ${[...labels, ...Object.entries(values).map(([k, v]) => `${k}="${v}"`)].join(', ')}`);
  }
  // and every family of the established hub, with its type and exactly its labels
  for (const { family, type, labels } of ESTABLISHED_FAMILIES) {
    t.is(typeOf(stopped, family), type, family);
    const series = all.filter((s) => s.name === family || s.name.startsWith(`${family}_`));
    t.true(series.length > 0, `${family} has series`);
    for (const s of series) t.deepEqual(Object.keys(s.labels).filter((l) => !OURS.has(l)).sort(), [...labels].sort(), `${s.name} labels`);
  }
  // our own families are all still there
  t.is(sample(stopped, 'hub_running_servers'), 0);
  t.is(moved(stopped, running, 'hub_server_stop_seconds_count', { status: 'success' }), 1);
});

test.serial('jupyterhub metrics: JUPYTERHUB_METRICS_PREFIX renames them as in the established hub; a wrong one stops the start', async (t) => {
  const previous = process.env.JUPYTERHUB_METRICS_PREFIX;
  process.env.JUPYTERHUB_METRICS_PREFIX = 'campus';
  let renamed: HubUnderTest | undefined;
  try {
    renamed = await startHub({ config: { Hub: { api_tokens: { [ADMIN]: 'boss' } }, Authenticator: { admin_users: ['boss'] } } });
    const text = await scrape(renamed.url);
    t.is(typeOf(text, 'campus_running_servers'), 'gauge');
    t.is(typeOf(text, 'campus_request_duration_seconds'), 'histogram');
    t.is(sample(text, 'campus_total_users'), 1);
    t.false(text.includes('jupyterhub_'), 'nothing left under the default prefix');
    t.is(typeOf(text, 'hub_running_servers'), 'gauge', 'ours keep their names');
  } finally {
    if (previous === undefined) delete process.env.JUPYTERHUB_METRICS_PREFIX;
    else process.env.JUPYTERHUB_METRICS_PREFIX = previous;
    await renamed?.stop();
  }

  const dataDir = mkdtempSync(join(tmpdir(), 'hub-test-'));
  try {
    const config = join(dataDir, 'hub.json');
    writeFileSync(config, JSON.stringify({ Hub: { data_dir: dataDir, port: await freePort(), nats_port: await freePort() } }));
    const bad = await runHubCommand(['start', '--config', config], { env: { JUPYTERHUB_METRICS_PREFIX: '9lives', JUPYTERHUB_SERVER_STOP_DURATION_SECONDS_BUCKETS: '1,0.5' } });
    t.is(bad.code, 2);
    t.regex(bad.stderr, /JUPYTERHUB_METRICS_PREFIX: "9lives" is not a Prometheus metric name prefix/);
    t.regex(bad.stderr, /JUPYTERHUB_SERVER_STOP_DURATION_SECONDS_BUCKETS: expected increasing numbers/);
    const ours = await runHubCommand(['start', '--config', config], { env: { JUPYTERHUB_METRICS_PREFIX: 'hub' } });
    t.is(ours.code, 2);
    t.regex(ours.stderr, /JUPYTERHUB_METRICS_PREFIX: "hub" would give the established hub's families this hub's own names/);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
