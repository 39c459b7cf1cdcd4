// `hub reload --all-nodes` (issue 24 item 2) on a hub of two nodes: node a runs every actor, node b a spawner and a
// gateway on a's NATS. One command, run on either node, makes every node's supervisor read its own configuration file
// again: each node answers once, what changed is applied on each (a service's token works through both gateways, each
// gateway's headers are its own file's), 0 requests fail meanwhile; a node whose file is invalid keeps what it runs and
// says why, while the other node applies its own.
import test from 'ava';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomToken } from '../api/client.js';
import { NATS_TOKEN, runHubCommand, type HubUnderTest } from '../harness.js';
import { apiLoad } from '../ops/load.js';
import { FIXTURE } from '../spawner/helpers.js';
import { nodeConfig, sharedConfig, startHub } from './helpers.js';

const ADMIN = randomToken();
const ENV = { HUB_NATS_TOKEN: NATS_TOKEN };
const nodes: HubUnderTest[] = [];
test.after.always(async () => {
  for (const n of nodes.reverse()) await n.stop();
});

const fileOf = (hub: HubUnderTest) => join(hub.dataDir, 'hub.json');
/** Rewrites a node's configuration file with `change` applied to its Hub section. */
function editHub(hub: HubUnderTest, change: (h: Record<string, unknown>) => Record<string, unknown>): void {
  const config = JSON.parse(readFileSync(fileOf(hub), 'utf8'));
  writeFileSync(fileOf(hub), JSON.stringify({ ...config, Hub: change(config.Hub) }));
}

const asService = (hub: HubUnderTest, token: string) => fetch(`${hub.url}/hub/api/user`, { headers: { authorization: `token ${token}` } });

test.serial('hub reload --all-nodes: both nodes reload their own file from one command, 0 requests fail; an invalid file on one node changes nothing there', async (t) => {
  const shared = sharedConfig(ADMIN, FIXTURE);
  const a = await startHub({ config: nodeConfig(shared, { Hub: { node_name: 'node-a' } }) });
  nodes.push(a);
  const b = await startHub({ config: nodeConfig(shared, { Hub: { node_name: 'node-b', nats_url: a.natsUrl }, Supervisor: { actors: ['spawner', 'gateway'] } }) });
  nodes.push(b);
  const token = randomToken();
  t.is((await asService(a, token)).status, 403);
  const loads = [apiLoad(a.url, ADMIN, 1), apiLoad(b.url, ADMIN, 1)];

  // every node's file gains the service; each its own header
  for (const [hub, name] of [[a, 'node-a'], [b, 'node-b']] as const) {
    editHub(hub, (h) => ({ ...h, services: [{ name: 'everywhere', api_token: token }], extra_headers: { 'X-Reloaded-On': name } }));
  }
  const r = await runHubCommand(['reload', '--all-nodes', '--config', fileOf(b)], { env: ENV });
  t.is(r.code, 0, `${r.stdout}${r.stderr}`);
  t.deepEqual(r.stdout.trim().split('\n'), [
    'node-a: configuration reloaded: applied Hub.extra_headers, Hub.services',
    'node-b: configuration reloaded: applied Hub.extra_headers, Hub.services',
  ]);
  // the command returns once every node's actors have applied it: the token works through both gateways at once
  for (const [hub, name] of [[a, 'node-a'], [b, 'node-b']] as const) {
    const who = await asService(hub, token);
    t.is(who.status, 200, name);
    t.like(await who.json(), { kind: 'service', name: 'everywhere' });
    t.is(who.headers.get('x-reloaded-on'), name);
  }

  // node b's file made invalid, node a's header removed: a applies, b refuses with why and keeps what it runs
  editHub(b, (h) => ({ ...h, services: [{ name: 'everywhere', api_token: 'short' }], extra_headers: {} }));
  editHub(a, (h) => ({ ...h, extra_headers: {} }));
  const mixed = await runHubCommand(['reload', '--all-nodes', '--config', fileOf(a)], { env: ENV });
  t.is(mixed.code, 1, `${mixed.stdout}${mixed.stderr}`);
  t.is(mixed.stdout.trim(), 'node-a: configuration reloaded: applied Hub.extra_headers');
  t.regex(mixed.stderr, /^node-b: .*not reloaded \(nothing changed\)[\s\S]*api_token/m);
  t.is((await fetch(`${a.url}/hub/api/`)).headers.get('x-reloaded-on'), null);
  t.is((await fetch(`${b.url}/hub/api/`)).headers.get('x-reloaded-on'), 'node-b');
  t.is((await asService(b, token)).status, 200);

  const results = await Promise.all(loads.map((l) => l.stop()));
  const failures = results.flatMap((x) => x.failures);
  t.deepEqual(failures, [], `${failures.length} of ${results.reduce((n, x) => n + x.done, 0)} failed`);
  for (const x of results) t.true(x.done > 0);

  // each node's reload is in the audit trail, by the command
  const audit = await runHubCommand(['audit', '--config', fileOf(a), '--type', 'config.reload', '--json'], { env: ENV });
  t.is(audit.code, 0, audit.stderr);
  const events = audit.stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));
  t.is(events.filter((e) => /hub reload --all-nodes/.test(e.who)).length, 3, audit.stdout);
});
