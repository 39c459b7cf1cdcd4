// Leases in NATS KV (shared/lease.ts) on a real nats-server configured as the hub configures it (each actor its own
// NATS user): of three contenders exactly one holds a lease; when the holder's connection dies another holds it
// within the TTL plus a retry; a holder that stops hands it over at the next retry; an actor cannot take another
// actor's lease key.
import test from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from 'nats';
import { Lease, LEASE_TTL_MS, leaseKey, openLeaseBucket } from '../../shared/lease.js';
import { createLogger } from '../../shared/log.js';
import { busAuth } from '../../shared/nats-auth.js';
import { natsServerConfig } from '../../shared/nats-server-config.js';
import { encodeJson } from '../../shared/nats.js';
import { freePort, NATS_TOKEN, stopChild, waitFor } from '../harness.js';

const log = createLogger('test', 'silent');
let nats: ChildProcess | undefined;
let url = '';
let dir = '';

test.before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'hub-lease-'));
  const port = await freePort();
  const conf = join(dir, 'nats.conf');
  writeFileSync(conf, natsServerConfig({ port, name: 'lease-test', storeDir: join(dir, 'js'), pidFile: join(dir, 'nats.pid'), secret: NATS_TOKEN }), { mode: 0o600 });
  nats = spawn('nats-server', ['-c', conf], { stdio: 'ignore' });
  url = `nats://127.0.0.1:${port}`;
  await waitFor('nats-server to accept the tokens user', async () => {
    try {
      const nc = await connect({ servers: url, ...busAuth(NATS_TOKEN, 'tokens'), reconnect: false });
      await nc.close();
      return true;
    } catch {
      return undefined;
    }
  }, 15_000, 100);
});
test.after.always(async () => {
  await stopChild(nats);
  rmSync(dir, { recursive: true, force: true });
});

const connectAs = (user: string): Promise<NatsConnection> => connect({ servers: url, ...busAuth(NATS_TOKEN, user), reconnect: false });

/** Waits (bounded) until exactly one of `leases` holds, and returns its index. */
const oneHolder = (leases: (Lease | null)[], timeoutMs: number) => waitFor('exactly one holder', async () => {
  const holding = leases.flatMap((l, i) => (l?.held ? [i] : []));
  return holding.length === 1 ? holding[0] : undefined;
}, timeoutMs, 50);

test.serial('lease: one of three holds it; the holder\'s connection dies and another holds it within the TTL and a retry; a stop hands it over', async (t) => {
  const key = leaseKey('tokens', 'expiry-sweep');
  const conns = await Promise.all([0, 1, 2].map(() => connectAs('tokens')));
  t.teardown(() => Promise.all(conns.map((c) => c.close().catch(() => undefined))).then(() => undefined));
  const leases: (Lease | null)[] = await Promise.all(conns.map((nc, i) => Lease.start(nc, key, { holder: `tokens-${i}`, log })));
  t.teardown(() => Promise.all(leases.map((l) => l?.stop())).then(() => undefined));
  const first = await oneHolder(leases, 3_000);
  // never two holders at once: sampled while the lease is renewed a few times
  for (let i = 0; i < 40; i++) {
    t.is(leases.filter((l) => l?.held).length, 1);
    await new Promise((r) => setTimeout(r, 100));
  }
  t.is(leases.findIndex((l) => l?.held), first, 'the holder renews and keeps it');

  // the holder's bus connection dies (as with kill -9 of its process): another takes over once the key expires
  const died = Date.now();
  await conns[first].close();
  leases[first] = null;
  const second = await oneHolder(leases, LEASE_TTL_MS + 4_000);
  t.not(second, first);
  t.true(Date.now() - died <= LEASE_TTL_MS + 3_000, `taken over after ${Date.now() - died} ms`);

  // a holder that stops deletes its key: the last one takes over at its next retry, well before the TTL
  const stopped = Date.now();
  await leases[second]!.stop();
  leases[second] = null;
  const third = await oneHolder(leases, 3_000);
  t.not(third, second);
  t.true(Date.now() - stopped < LEASE_TTL_MS, `handed over after ${Date.now() - stopped} ms`);
});

test.serial('lease: an actor may write its own lease keys only', async (t) => {
  const auth = await connectAs('auth');
  t.teardown(() => auth.close());
  const kv = await openLeaseBucket(auth, log);
  await t.notThrowsAsync(kv.put(leaseKey('auth', 'check'), encodeJson({ holder: 'auth-1' })));
  const refused = await kv.put(leaseKey('tokens', 'expiry-sweep'), encodeJson({ holder: 'intruder' }), {}).then(() => 'written', (e: Error) => e.message);
  t.not(refused, 'written');
});
