// Hub.internal_ssl (issue 29): every NATS connection is TLS with certificates on both sides, from the CA the hub
// makes in its data dir. The hub starts and answers; a plain client and a TLS client without a certificate are
// refused by the real nats-server even with the admin's password; a NATS that accepts plain connections stops
// the start; no private key reaches a log.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { connect, type NatsConnection } from 'nats';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { validateConfig } from '../../shared/config.js';
import { offMachineNatsPeers } from '../../shared/internal-ssl.js';
import { natsServiceName } from '../../shared/subjects.js';
import { clusterPorts, memberOptions, nodeConfig } from '../scale/helpers.js';
import { freePort, NATS_ADMIN, NATS_TOKEN, runHubCommand, startHub, stopChild, waitFor, type HubUnderTest } from '../harness.js';

let hub: HubUnderTest;
let api: ApiCall;
const ADMIN = randomToken();

test.before(async () => {
  hub = await startHub({ config: { Hub: { internal_ssl: true, api_tokens: { [ADMIN]: 'boss' } }, Authenticator: { admin_users: ['boss'] } } });
  api = apiClient(hub.url);
});
test.after.always(async () => {
  await hub?.stop();
});

const files = () => ({
  caFile: join(hub.dataDir, 'internal-ssl', 'ca.crt'),
  certFile: join(hub.dataDir, 'run', 'internal-ssl', 'node.crt'),
  keyFile: join(hub.dataDir, 'run', 'internal-ssl', 'node.key'),
});

test.serial('internal ssl: the hub starts with its own CA and answers its API, over actors that reach NATS by TLS only', async (t) => {
  t.is((await api('POST', '/users/alice', { token: ADMIN })).status, 201); // gateway -> auth, an event, an audit write
  t.is((await api('POST', '/users/alice/server', { token: ADMIN })).status, 201); // spawner -> the registry -> the gateway
  t.is((await api('GET', '/users/alice', { token: ADMIN })).body.servers['']?.ready, true);
  t.is((await api('DELETE', '/users/alice/server', { token: ADMIN })).status, 204);
  t.is(statSync(join(hub.dataDir, 'internal-ssl', 'ca.key')).mode & 0o777, 0o600);
  t.is(statSync(files().keyFile).mode & 0o777, 0o600);
  const conf = readFileSync(join(hub.dataDir, 'run', 'nats.conf'), 'utf8');
  t.regex(conf, /tls \{[^}]*verify: true/);
});

/**
 * A peer that speaks plain NATS at `port`: it sends `line` once the server has said something (or at once, when
 * `eager`), and reports what it heard before the server closed the connection (bounded: 5 s).
 */
function plainPeer(port: number, line: string, eager = false): Promise<{ heard: string; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: '127.0.0.1', port }, () => { if (eager) socket.write(line); });
    let heard = '';
    let sent = eager;
    const timer = setTimeout(() => { socket.destroy(); resolve({ heard, closed: false }); }, 5000);
    socket.on('data', (d) => {
      heard += d.toString('latin1');
      if (!sent && heard.includes('\r\n')) {
        sent = true;
        socket.write(line);
      }
    });
    socket.on('close', () => { clearTimeout(timer); resolve({ heard, closed: true }); });
    socket.on('error', () => undefined);
  });
}

test.serial('internal ssl: a plain client is refused, even with the admin password', async (t) => {
  const { heard, closed } = await plainPeer(hub.natsPort, `CONNECT ${JSON.stringify({ user: NATS_ADMIN.user, pass: NATS_ADMIN.pass, verbose: false, pedantic: false })}\r\nPING\r\n`);
  const [info, ...rest] = heard.split('\r\n');
  t.regex(info, /"tls_required":true/);
  t.regex(info, /"tls_verify":true/);
  t.false(rest.join('').includes('PONG'), 'never answered as a connected client');
  t.true(closed, 'the server hangs up');
});

test.serial('internal ssl: a TLS client without a client certificate is refused; with the node certificate it connects', async (t) => {
  const { caFile, certFile, keyFile } = files();
  const refused = await connect({ servers: hub.natsUrl, ...NATS_ADMIN, tls: { caFile }, maxReconnectAttempts: 0, timeout: 3000 }).then(
    async (nc) => { await nc.close(); return 'connected'; },
    (e: Error) => e.message,
  );
  t.not(refused, 'connected');
  const nc = await connect({ servers: hub.natsUrl, ...NATS_ADMIN, tls: { caFile, certFile, keyFile }, maxReconnectAttempts: 0, timeout: 3000 });
  try {
    const pong = await nc.request(`$SRV.PING.${natsServiceName('tokens')}`, undefined, { timeout: 3000 });
    t.regex(new TextDecoder().decode(pong.data), /hub-tokens/);
  } finally {
    await nc.close();
  }
});

test.serial('internal ssl: hub credentials and hub audit work over TLS', async (t) => {
  const configArgs = ['--config', join(hub.dataDir, 'hub.json')];
  const printed = await runHubCommand(['credentials', 'audit', ...configArgs]);
  t.is(printed.code, 0, printed.stderr);
  t.regex(printed.stdout.trim(), /^tls:\/\/audit:[^@]+@127\.0\.0\.1:\d+$/);
  const cert = /--tlscert (\S+) --tlskey (\S+)/.exec(printed.stderr);
  t.truthy(cert, printed.stderr);
  const url = new URL(printed.stdout.trim());
  const nc = await connect({
    servers: `127.0.0.1:${url.port}`, user: 'audit', pass: decodeURIComponent(url.password),
    tls: { caFile: files().caFile, certFile: cert![1], keyFile: cert![2] }, maxReconnectAttempts: 0, timeout: 3000,
  });
  const sub = nc.subscribe('hub.audit.>', { max: 1 });
  await nc.flush();
  t.is((await api('POST', '/users/bob', { token: ADMIN })).status, 201);
  for await (const m of sub) t.regex(m.subject, /^hub\.audit\./);
  await nc.close();
  const trail = await runHubCommand(['audit', '--type', 'user.*', ...configArgs]);
  t.is(trail.code, 0, trail.stderr);
  t.regex(trail.stdout, /user\.create  ok  who=user:boss  what=bob/);
});

test.serial('internal ssl: no private key reaches a log', (t) => {
  const logs = hub.logs();
  for (const file of [join(hub.dataDir, 'internal-ssl', 'ca.key'), files().keyFile]) {
    const body = readFileSync(file, 'utf8').split('\n').filter((l) => l && !l.startsWith('-----')).join('');
    t.false(logs.includes(body.slice(10, 50)), file);
  }
});

test('internal ssl: a NATS that accepts plain connections stops the start, naming it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-plain-nats-'));
  const natsPort = await freePort();
  let nats: ChildProcess | undefined;
  try {
    nats = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(natsPort), '-js', '-sd', join(dir, 'js')], { stdio: 'ignore' });
    await waitFor('the plain nats-server to listen', () => new Promise<true | undefined>((resolve) => {
      const s = tcpConnect({ host: '127.0.0.1', port: natsPort }, () => { s.destroy(); resolve(true); });
      s.on('error', () => resolve(undefined));
    }), 10_000);
    const file = join(dir, 'hub.json');
    writeFileSync(file, JSON.stringify({ Hub: { data_dir: join(dir, 'data'), port: await freePort(), nats_url: `nats://127.0.0.1:${natsPort}`, internal_ssl: true } }));
    const r = await runHubCommand(['start', '--config', file]);
    t.is(r.code, 2);
    t.regex(r.stderr, new RegExp(`Hub\\.internal_ssl: the NATS at nats://127\\.0\\.0\\.1:${natsPort} accepts plain connections`));
  } finally {
    await stopChild(nats);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('internal ssl: the operator\'s CA files must come as a set', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hub-pki-'));
  try {
    const file = join(dir, 'hub.json');
    writeFileSync(file, JSON.stringify({ Hub: { data_dir: join(dir, 'data'), internal_ssl: true, internal_ssl_ca: join(dir, 'ca.crt') } }));
    const r = await runHubCommand(['start', '--config', file]);
    t.is(r.code, 2);
    t.regex(r.stderr, /Hub\.internal_ssl_ca, Hub\.internal_ssl_cert, Hub\.internal_ssl_key: give all three or none/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('internal ssl: two cluster members share the CA and route to each other over TLS; the cluster port refuses plain peers', async (t) => {
  const certs = mkdtempSync(join(tmpdir(), 'hub-internal-ca-'));
  const ports = await clusterPorts(2);
  const shared = { Hub: { api_tokens: { [ADMIN]: 'boss' }, internal_ssl: true, internal_certs_location: certs }, Authenticator: { admin_users: ['boss'] } };
  const own = [
    { Hub: { node_name: 'node-a', ...memberOptions(ports, 0) } },
    { Hub: { node_name: 'node-b', ...memberOptions(ports, 1) }, Supervisor: { actors: ['gateway'] } },
  ];
  const nodes = await Promise.all(own.map((o) => startHub({ config: nodeConfig(shared, o), healthTimeoutMs: 40_000 })));
  const ncs: NatsConnection[] = [];
  try {
    // node b's gateway answers the API through node a's actors
    t.is((await apiClient(nodes[1].url)('POST', '/users/dora', { token: ADMIN })).status, 201);
    // a message published at member a reaches a subscriber at member b: the route between them works, and it is TLS
    const tlsOf = (dataDir: string) => ({
      caFile: join(certs, 'ca.crt'), certFile: join(dataDir, 'run', 'internal-ssl', 'node.crt'), keyFile: join(dataDir, 'run', 'internal-ssl', 'node.key'),
    });
    for (const [i, node] of nodes.entries()) {
      ncs.push(await connect({ servers: `nats://127.0.0.1:${ports.client[i]}`, ...NATS_ADMIN, tls: tlsOf(node.dataDir), maxReconnectAttempts: 0, timeout: 3000 }));
    }
    const sub = ncs[1].subscribe('test.across', { max: 1 });
    await ncs[1].flush();
    await waitFor('the subscription to reach member a', async () => {
      ncs[0].publish('test.across', new TextEncoder().encode('hello'));
      await ncs[0].flush();
      return sub.getReceived() > 0 ? true : undefined;
    }, 10_000, 100);
    t.is(sub.getReceived(), 1);
    // a plain peer at the cluster port: the server expects a TLS handshake first and hangs up
    const peer = await plainPeer(ports.cluster[0], `CONNECT ${JSON.stringify({ user: 'hub', pass: NATS_TOKEN })}\r\nPING\r\n`, true);
    t.false(peer.heard.includes('PONG'));
    t.true(peer.closed);
    t.is(statSync(join(certs, 'ca.key')).mode & 0o777, 0o600);
    // the routes' credentials (the hub's NATS secret) are in their URLs: nats-server must not log them
    for (const node of nodes) t.false(node.logs().includes(NATS_TOKEN), 'the NATS secret in a node\'s log');
  } finally {
    await Promise.all(ncs.map((nc) => nc.close().catch(() => undefined)));
    await Promise.all(nodes.map((n) => n.stop()));
    rmSync(certs, { recursive: true, force: true });
  }
});

test('internal ssl: NATS traffic that leaves the machine is named (for the start\'s one warning); loopback is not', (t) => {
  const peers = (hub: Record<string, unknown>) => offMachineNatsPeers(validateConfig({ Hub: hub }));
  t.deepEqual(peers({}), []);
  t.deepEqual(peers({ nats_cluster_port: 6222, nats_routes: ['nats://127.0.0.1:6223'] }), []);
  t.deepEqual(peers({ nats_cluster_port: 6222, nats_cluster_ip: '10.0.0.1', nats_routes: ['nats://10.0.0.2:6222', 'nats://node-c:6222'] }), ['10.0.0.2', 'node-c', '10.0.0.1']);
  t.deepEqual(peers({ nats_url: 'nats://127.0.0.1:4222,nats://nats.example:4222' }), ['nats.example']);
});
