// The proxy-router on two nodes: one writes the routing table (the holder of the lease proxy-router.reconcile),
// the other waits. kill -9 of the writer's whole node (its NATS member too, of a three-member cluster): the other
// router holds the lease within the lease's TTL and a retry, and writes — it removes a route nothing asks for, which
// the dead writer never would have.
import test from 'ava';
import { randomToken } from '../api/client.js';
import { waitFor } from '../harness.js';
import { FIXTURE } from '../spawner/helpers.js';
import { LEASE_TTL_MS, leaseKey } from '../../shared/lease.js';
import { decodeJson } from '../../shared/nats.js';
import { putRoute, routeKey, ROUTES_BUCKET } from '../../shared/routes.js';
import { LEASE_BUCKET } from '../../shared/subjects.js';
import { clusterPorts, killNode, memberOptions, natsClient, nodeConfig, sharedConfig, startHub } from './helpers.js';

const ADMIN = randomToken();

test.serial('proxy-router on two nodes: the writer\'s node killed, the other router takes the lease within seconds and writes the table', async (t) => {
  const shared = sharedConfig(ADMIN, FIXTURE);
  const ports = await clusterPorts(3);
  // three nodes, each a member of the NATS cluster (started together: JetStream needs two members to answer);
  // a and b run a proxy-router each, c only a gateway
  const own = [
    { Hub: { node_name: 'node-a', ...memberOptions(ports, 0) }, Supervisor: { actors: ['tokens', 'auth', 'oauth', 'spawner', 'proxy-router', 'gateway'] } },
    { Hub: { node_name: 'node-b', ...memberOptions(ports, 1) }, Supervisor: { actors: ['proxy-router', 'gateway'] } },
    { Hub: { node_name: 'node-c', ...memberOptions(ports, 2) }, Supervisor: { actors: ['gateway'] } },
  ];
  const nodes = await Promise.all(own.map((o) => startHub({ config: nodeConfig(shared, o), healthTimeoutMs: 40_000 })));
  const nc = await natsClient(`nats://127.0.0.1:${ports.client[2]}`);
  t.teardown(async () => {
    await nc.close().catch(() => undefined);
    for (const n of [...nodes].reverse()) await n.stop();
  });
  const leases = await nc.jetstream().views.kv(LEASE_BUCKET, { bindOnly: true });
  const routes = await nc.jetstream().views.kv(ROUTES_BUCKET, { bindOnly: true });
  const holder = async () => {
    const e = await leases.get(leaseKey('proxy-router', 'reconcile')).catch(() => null);
    return e && e.operation === 'PUT' ? decodeJson<{ holder: string }>(e.value).holder : null;
  };
  const first = await waitFor('a router to hold the lease', holder, 10_000, 100);
  t.regex(first, /^proxy-router-\S+@node-[ab]$/);
  const writerNode = first.endsWith('@node-a') ? 0 : 1;

  // a route nothing asks for, written behind the writer's back: the writer's memory does not have it, so it stays
  const stray = { routespec: '/stray/', target: 'http://127.0.0.1:9', data: {} };
  await putRoute(routes, stray as never);
  t.truthy(await routes.get(routeKey('/stray/')));
  t.is(await holder(), first, 'the writer keeps its lease');

  const killed = Date.now();
  await killNode(nodes[writerNode]);
  const second = await waitFor('node b\'s router to hold the lease', async () => {
    const h = await holder().catch(() => null);
    return h && h !== first ? h : undefined;
  }, LEASE_TTL_MS + 15_000, 200);
  const tookMs = Date.now() - killed;
  t.log(`lease taken over ${tookMs} ms after node a was killed`);
  t.regex(second, new RegExp(`^proxy-router-\\S+@node-${writerNode ? 'a' : 'b'}$`), 'the other node\'s router');
  // the new writer starts from the bucket as it stands and reconciles: the stray route goes
  await waitFor('the new writer to remove the stray route', async () => {
    const e = await routes.get(routeKey('/stray/')).catch(() => undefined);
    return !e || e.operation !== 'PUT' ? true : undefined;
  }, 15_000, 200);
  t.truthy(await routes.get(routeKey('/')), 'the hub\'s own route is still there');
});
