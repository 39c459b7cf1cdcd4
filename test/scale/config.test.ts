// The options of several nodes: defaults, every mistake named, and options that need each other.
import test from 'ava';
import { hostname } from 'node:os';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig, natsServers, validateConfig } from '../../shared/config.js';
import { freePort, runHubCommand } from '../harness.js';

test('scale config: one node runs everything by default, named after its host', async (t) => {
  const c = validateConfig({});
  t.deepEqual(c.Supervisor.actors, ['tokens', 'auth', 'oauth', 'spawner', 'proxy-router', 'gateway']);
  t.is(c.Supervisor.gateways, 1);
  t.is(c.Hub.nats_replicas, 1);
  t.is(c.Hub.nats_cluster_port, 0);
  const loaded = await loadConfig({ argv: [], env: {} });
  t.is(loaded.Hub.node_name, hostname().replace(/[^A-Za-z0-9_.-]/g, '-').slice(0, 63));
  t.is((await loadConfig({ argv: ['--Hub.node_name=edge-2'], env: {} })).Hub.node_name, 'edge-2');
  t.deepEqual(natsServers(' nats://a:4222, nats://b:4222 ,'), ['nats://a:4222', 'nats://b:4222']);
});

test('scale config: every mistake is named, including options that need each other', (t) => {
  const err = t.throws(() => validateConfig({
    Hub: { nats_url: 'nats://ok:4222,http://no', node_name: 'no spaces', nats_routes: ['10.0.0.2:6222'], nats_replicas: 9 },
    Supervisor: { actors: ['spawner', 'spawner', 'web'], gateways: 0 },
  }), { instanceOf: ConfigError });
  const p = err!.problems.join('\n');
  t.regex(p, /Hub\.nats_url: "http:\/\/no" is not nats:\/\/host:port/);
  t.regex(p, /Hub\.node_name: "no spaces"/);
  t.regex(p, /Hub\.nats_routes: "10\.0\.0\.2:6222" is not nats:\/\/host:port/);
  t.regex(p, /Hub\.nats_replicas: expected an integer between 1 and 5/);
  t.regex(p, /Supervisor\.actors: unknown actor "web"/);
  t.regex(p, /Supervisor\.actors: "spawner" is listed twice/);
  t.regex(p, /Supervisor\.gateways: expected an integer between 1 and 32/);

  const cross = t.throws(() => validateConfig({
    Hub: { nats_routes: ['nats://10.0.0.2:6222'], nats_replicas: 3 }, Supervisor: { actors: ['spawner'], gateways: 2 },
  }), { instanceOf: ConfigError });
  t.deepEqual(cross!.problems.map((l) => l.split(':')[0]), ['Hub.nats_routes', 'Hub.nats_replicas', 'Supervisor.gateways']);
  t.notThrows(() => validateConfig({ Hub: { nats_cluster_port: 6222, nats_routes: ['nats://10.0.0.2:6222'], nats_replicas: 3 } }));
});

test('scale config: a cluster member refuses to start without the shared NATS token, saying so', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-scale-cfg-'));
  try {
    const file = join(dir, 'hub.json');
    writeFileSync(file, JSON.stringify({ Hub: { data_dir: join(dir, 'data'), port: await freePort(), nats_port: await freePort(), nats_cluster_port: await freePort() } }));
    const r = await runHubCommand(['start', '--config', file], { env: { HUB_NATS_TOKEN: '' } });
    t.is(r.code, 2);
    t.regex(r.stderr, /every member of a NATS cluster needs the same token: set HUB_NATS_TOKEN/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
