// A KV mirror (shared/kv-mirror.ts) on a three-member NATS cluster whose watch consumer lives on a member other
// than the one the mirror's connection uses: that member is killed (kill -9). Nothing tells the mirror's process
// (its own connection is fine), yet a write made right after is in the mirror within 2 s: the watch's heartbeats
// stop, and its consumer is made again on a live member from where it was.
import test from 'ava';
import { connect, type NatsConnection } from 'nats';
import { createLogger } from '../../shared/log.js';
import { mirrorKv, type KvMirror } from '../../shared/kv-mirror.js';
import { openKv, setJetStreamReplicas } from '../../shared/nats.js';
import { NATS_ADMIN, waitFor } from '../harness.js';
import { clusterPorts, startNatsMember } from '../scale/helpers.js';

const log = createLogger('test', 'silent');
const BUCKET = 'mirror_test';
const STREAM = `KV_${BUCKET}`;
const decoder = new TextDecoder();
const encoder = new TextEncoder();

test.serial('kv mirror: its watch consumer\'s member dies while its own connection lives; a write is in the copy within 2 s', async (t) => {
  const ports = await clusterPorts(3);
  const members = await Promise.all([0, 1, 2].map((i) => startNatsMember(ports, i)));
  const conns: NatsConnection[] = [];
  const mirrors: KvMirror<string>[] = [];
  t.teardown(async () => {
    for (const m of mirrors) m.stop();
    for (const c of conns) await c.close().catch(() => undefined);
    for (const m of members) await m.stop();
  });
  const [home] = members;
  const writer = await connect({ servers: home.url, ...NATS_ADMIN, noRandomize: true });
  conns.push(writer);
  setJetStreamReplicas(writer, 3);
  const kv = await openKv(writer, BUCKET, { timeoutMs: 30_000 });
  await kv.put('first', encoder.encode('1'));
  const jsm = await writer.jetstreamManager();
  t.true((await jsm.streams.info(STREAM)).config.allow_direct, 'any replica answers direct gets');

  // a mirror on the first member whose consumer the cluster placed on another (placement is the cluster's: a
  // mirror whose consumer landed on its own member is set aside and another made, each with an inbox of its own)
  let mirror: KvMirror<string> | undefined;
  let host = '';
  for (let attempt = 0; attempt < 12 && !mirror; attempt++) {
    const inboxPrefix = `_INBOX_try${attempt}`;
    const reader = await connect({ servers: home.url, ...NATS_ADMIN, noRandomize: true, inboxPrefix });
    conns.push(reader);
    setJetStreamReplicas(reader, 3); // as every actor's connection with Hub.nats_replicas 3
    const m = await mirrorKv<string>(reader, { bucket: BUCKET, decode: (_k, v) => decoder.decode(v), loadTimeoutMs: 20_000, log });
    mirrors.push(m);
    t.is(m.get('first'), '1');
    for await (const c of jsm.consumers.list(STREAM)) {
      if (c.config.deliver_subject?.startsWith(`${inboxPrefix}.`)) host = c.cluster?.leader ?? '';
    }
    if (host && host !== home.name) mirror = m;
    else m.stop();
  }
  if (!mirror) return t.fail('every mirror\'s consumer was placed on its own member');
  const victim = members.find((m) => m.name === host)!;
  // the stream's leader elsewhere, so the write below is taken at once (the mirror is what is measured)
  await waitFor('the stream to be led by a member that stays', async () => {
    const leader = (await jsm.streams.info(STREAM)).cluster?.leader;
    if (leader && leader !== victim.name) return true;
    await writer.request(`$JS.API.STREAM.LEADER.STEPDOWN.${STREAM}`, undefined, { timeout: 5000 }).catch(() => undefined);
    return undefined;
  }, 30_000, 500);
  // the revision the put returns: a get right after it may be answered by a replica that has not applied the put
  // yet (direct gets), and find nothing
  const before = await kv.put('before', encoder.encode('2'));
  t.true(await mirror.waitForRevision(before, 2000), 'the copy is live before the kill');

  victim.kill();
  const killedAt = Date.now();
  // a write nobody tells the mirror about: its copy has it within 2 s all the same
  await kv.put('after', encoder.encode('3'));
  const written = Date.now();
  await waitFor('the copy to have the write', async () => (mirror!.get('after') === '3' ? true : undefined), 2000, 10);
  t.log(`write taken ${written - killedAt} ms after the kill; in the copy ${Date.now() - written} ms later`);
  // a deletion, and a write someone waits for (as the spawner waits for every gateway's copy)
  await kv.delete('first');
  const revision = await kv.put('waited', encoder.encode('4'));
  const asked = Date.now();
  t.true(await mirror.waitForRevision(revision, 2000), 'the copy has the write it was asked for within 2 s');
  t.log(`a write waited for: in the copy ${Date.now() - asked} ms after it was asked for`);
  t.is(mirror.get('first'), undefined, 'the deletion too');
  t.is(mirror.get('waited'), '4');
  t.is(mirror.staleMs(), 0);
});
