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
import { connect } from 'nats';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { natsServiceName } from '../../shared/subjects.js';
import { freePort, NATS_ADMIN, runHubCommand, startHub, stopChild, waitFor, type HubUnderTest } from '../harness.js';

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

test.serial('internal ssl: a plain client is refused, even with the admin password', async (t) => {
  const outcome = await new Promise<{ info: string; rest: string }>((resolve) => {
    const socket = tcpConnect({ host: '127.0.0.1', port: hub.natsPort });
    let text = '';
    let sent = false;
    const timer = setTimeout(() => { socket.destroy(); resolve({ info: text.split('\r\n')[0], rest: 'still open after 5 s' }); }, 5000);
    socket.on('data', (d) => {
      text += d.toString('latin1');
      if (!sent && text.includes('\r\n')) {
        sent = true;
        socket.write(`CONNECT ${JSON.stringify({ user: NATS_ADMIN.user, pass: NATS_ADMIN.pass, verbose: false, pedantic: false })}\r\nPING\r\n`);
      }
    });
    const end = () => { clearTimeout(timer); resolve({ info: text.split('\r\n')[0], rest: text.slice(text.indexOf('\r\n') + 2) }); };
    socket.on('close', end);
    socket.on('error', () => undefined);
  });
  t.regex(outcome.info, /"tls_required":true/);
  t.regex(outcome.info, /"tls_verify":true/);
  t.false(outcome.rest.includes('PONG'), 'never answered as a connected client');
  t.not(outcome.rest, 'still open after 5 s');
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
