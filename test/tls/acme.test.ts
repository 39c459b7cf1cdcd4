// Automatic certificates (Hub.letsencrypt_domains) against Debian's pebble, a real ACME CA: the hub answers HTTP-01 on
// its redirect port, ends up serving a certificate pebble issued (checked by a TLS client that trusts only pebble's
// root), renews one that is about to expire without a restart, and when the CA cannot be reached it logs and audits
// the failure and keeps serving the certificate it has.
import test from 'ava';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { freePort, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { auditTrail } from '../spawner/helpers.js';
import { makeCa, makeLeaf, servedCertificate, type TestCa } from './certs.js';
import { startPebble, type Pebble } from './pebble.js';

let ca: TestCa;
let pebble: Pebble;
let pebbleRoot: string;
let redirectPort: number;

test.before(async () => {
  ca = makeCa();
  redirectPort = await freePort();
  pebble = await startPebble(ca, redirectPort);
  pebbleRoot = await pebble.root();
});

test.after.always(async () => {
  await pebble?.stop();
  if (ca) rmSync(ca.dir, { recursive: true, force: true });
});

/** A hub ordering for `localhost` from `directoryUrl`; `placed`: a certificate already in its data dir. */
async function acmeHub(directoryUrl: string, placed?: { certPem: string; keyPem: string }): Promise<HubUnderTest> {
  const dataDir = mkdtempSync(join(tmpdir(), 'hub-acme-'));
  if (placed) {
    mkdirSync(join(dataDir, 'tls'), { recursive: true, mode: 0o700 });
    writeFileSync(join(dataDir, 'tls', 'key.pem'), placed.keyPem, { mode: 0o600 });
    writeFileSync(join(dataDir, 'tls', 'cert.pem'), placed.certPem, { mode: 0o600 });
  }
  return startHub({
    reuse: { dataDir, port: await freePort(), natsPort: await freePort() },
    config: { Hub: { letsencrypt_email: 'ops@example.org', letsencrypt_domains: ['localhost'], acme_directory_url: directoryUrl, http_redirect_port: redirectPort, log_level: 'info' } },
    env: { NODE_EXTRA_CA_CERTS: ca.cert }, // pebble's API listens behind the test CA's certificate
  });
}

/** The certificate a new connection gets, if it verifies against pebble's root alone (else undefined). */
function issuedByPebble(port: number): Promise<tls.PeerCertificate | undefined> {
  return new Promise((resolve) => {
    const s = tls.connect({ host: '127.0.0.1', port, ca: pebbleRoot, servername: 'localhost' }, () => {
      resolve(s.getPeerCertificate());
      s.destroy();
    });
    s.on('error', () => resolve(undefined));
  });
}

test.serial('acme: a hub without a certificate serves a placeholder, then one pebble issued over HTTP-01; files 0600 in the data dir', async (t) => {
  const hub = await acmeHub(pebble.directoryUrl);
  t.teardown(() => hub.stop());
  const cert = await waitFor('a certificate from pebble', () => issuedByPebble(hub.port), 60_000, 200);
  t.regex(cert.issuer.CN, /^Pebble Intermediate CA/);
  t.regex(cert.subjectaltname, /DNS:localhost/);
  for (const f of ['cert.pem', 'key.pem', 'account.key']) t.is(statSync(join(hub.dataDir, 'tls', f)).mode & 0o777, 0o600, f);
  t.regex(hub.logs(), /tls\.placeholder/);
  t.regex(hub.logs(), /acme\.issued/);
  t.regex(pebble.logs(), /validat/i); // pebble really fetched the challenge (not ALWAYS_VALID)
  t.notRegex(hub.logs(), /PRIVATE KEY/);
  const audit = await auditTrail(hub.natsUrl);
  const issued = audit.find((e) => e.type === 'certificate.issued');
  t.truthy(issued, JSON.stringify(audit.map((e) => e.type)));
  t.is(issued!.outcome, 'ok');
});

test.serial('acme: a certificate expiring within 30 days is renewed and served without a restart', async (t) => {
  const expiring = makeLeaf(ca, 'expiring', { days: 10 });
  const hub = await acmeHub(pebble.directoryUrl, expiring);
  t.teardown(() => hub.stop());
  const cert = await waitFor('the renewed certificate', () => issuedByPebble(hub.port), 60_000, 200);
  t.regex(cert.issuer.CN, /^Pebble Intermediate CA/);
  t.true(Date.parse(cert.valid_to) > Date.now() + 30 * 86_400_000);
  t.regex(hub.logs(), /acme\.ordering[^\n]*expires in 9 days/);
  // the hub never restarted a gateway to get there
  t.notRegex(hub.logs(), /child\.exit[^\n]*gateway/);
  t.not(readFileSync(join(hub.dataDir, 'tls', 'cert.pem'), 'utf8'), expiring.certPem);
});

test.serial('acme: a failed order is a log line and an audit event; the last good certificate is still served', async (t) => {
  const expiring = makeLeaf(ca, 'still-good', { days: 10 });
  const closed = await freePort(); // nothing listens there: the CA cannot be reached
  const hub = await acmeHub(`https://127.0.0.1:${closed}/dir`, expiring);
  t.teardown(() => hub.stop());
  if (process.env.DEBUG_LOGS) t.teardown(() => console.log(hub.logs().split('\n').filter((l) => /gateway/.test(l)).join('\n')));
  await waitFor('the failure in the log', async () => (/acme\.failed/.test(hub.logs()) ? true : undefined), 30_000, 100);
  t.regex(hub.logs(), /certificate order for localhost failed \(still serving the last good certificate; next try in \d+ s\)/);
  const served = await servedCertificate(hub.port, ca.pem);
  t.is(served.subject.CN, 'still-good');
  const failed = await waitFor('the audit event', async () => (await auditTrail(hub.natsUrl)).find((e) => e.type === 'certificate.order_failed'), 10_000, 200);
  t.is(failed.outcome, 'failed');
  t.regex(failed.reason ?? '', /ECONNREFUSED|connect/);
});
