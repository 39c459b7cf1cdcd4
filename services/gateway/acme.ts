// Automatic certificates (Hub.letsencrypt_domains): the node's first gateway orders one from the ACME CA
// (Hub.acme_directory_url) with acme-client, answering HTTP-01 through files the redirect listener of every gateway
// on the node reads (front-door.ts), and writes the certificate and its key into <data_dir>/tls (0600), where every
// gateway's watch picks it up. It renews 30 days before expiry; a failed order is a log line and an audit event,
// retried with a bounded backoff, and the gateways keep serving the last good certificate meanwhile. A CA of one's
// own is trusted through NODE_EXTRA_CA_CERTS (read by Node at start; the supervisor passes it on).
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { join } from 'node:path';
import acme from 'acme-client';
import type { ActorContext } from '../../shared/actor.js';
import { acmeDir, challengeDir, daysLeft, frontDoorCertificate, readCertificatePair } from '../../shared/tls.js';

/** Renew this long before the certificate expires (Let's Encrypt's certificates last 90 days). */
export const RENEW_DAYS_BEFORE = 30;
/** A valid certificate is looked at again at least this often (renewal time, a file replaced by hand). */
const CHECK_MS = 12 * 3_600_000;
/** Backoff after a failed order: 1 min doubling to 6 h, ±20 % jitter (Let's Encrypt limits failed validations per hour). */
const RETRY_FIRST_MS = 60_000;
const RETRY_MAX_MS = 6 * 3_600_000;

// acme-client retries a failed request 5 times, 5 s more each time (75 s); the order's own backoff below does that job,
// so a request is tried at most twice within a few seconds and a failed order is reported promptly
(acme.axios.defaults as unknown as { acmeSettings: { retryMaxAttempts: number; retryDefaultDelay: number } }).acmeSettings.retryMaxAttempts = 2;
(acme.axios.defaults as unknown as { acmeSettings: { retryMaxAttempts: number; retryDefaultDelay: number } }).acmeSettings.retryDefaultDelay = 1;

function writePrivate(path: string, text: string | Buffer): void {
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, text, { mode: 0o600 });
  renameSync(tmp, path);
}

/**
 * The CA's directory answers: asked first so that an unreachable CA is reported as such (acme-client 5.4 loses a
 * network error's cause once its retries are spent and throws a TypeError instead).
 */
function reachDirectory(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { timeout: 10_000 }, (res) => {
      res.resume();
      if (res.statusCode === 200) resolve();
      else reject(new Error(`the ACME directory ${url} answered ${res.statusCode}`));
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 10 s')));
    req.on('error', (e: NodeJS.ErrnoException) => reject(new Error(`cannot reach the ACME directory ${url}: ${e.code ?? e.message}${e.code && e.message.includes(e.code) ? '' : ` (${e.message})`}`)));
  });
}

/** Why the certificate on disk needs replacing, or null when it is good for now. */
function renewalReason(cert: string, key: string, domains: readonly string[]): string | null {
  if (!existsSync(cert)) return 'no certificate yet';
  let pair;
  try {
    pair = readCertificatePair(cert, key, { cert: 'certificate', key: 'key' });
  } catch (e) {
    return (e as Error).message;
  }
  const left = daysLeft(pair.leaf);
  if (left < RENEW_DAYS_BEFORE) return `expires in ${Math.max(0, Math.floor(left))} days`;
  const names = new Set((pair.leaf.subjectAltName ?? '').split(', ').filter((n) => n.startsWith('DNS:')).map((n) => n.slice(4).toLowerCase()));
  const missing = domains.filter((d) => !names.has(d.toLowerCase()));
  if (missing.length) return `does not name ${missing.join(', ')}`;
  return null;
}

export function startAcme(ctx: ActorContext): { stop: () => void } {
  const { config, log, audit } = ctx;
  const files = frontDoorCertificate(config)!;
  const domains = config.Hub.letsencrypt_domains;
  const dir = acmeDir(config.Hub.data_dir);
  const challenges = challengeDir(config.Hub.data_dir);
  mkdirSync(challenges, { recursive: true, mode: 0o700 });
  const accountKeyFile = join(dir, 'account.key');

  let timer: NodeJS.Timeout | null = null;
  let stopped = false;
  let failures = 0;
  const later = (ms: number) => {
    if (stopped) return;
    timer = setTimeout(() => void check(), Math.max(1000, ms));
    timer.unref();
  };

  async function order(reason: string): Promise<void> {
    await reachDirectory(config.Hub.acme_directory_url);
    log.info({ event: 'acme.ordering', domains, directory: config.Hub.acme_directory_url, reason }, `ordering a certificate for ${domains.join(', ')} (${reason})`);
    if (!existsSync(accountKeyFile)) writePrivate(accountKeyFile, await acme.crypto.createPrivateEcdsaKey());
    const client = new acme.Client({ directoryUrl: config.Hub.acme_directory_url, accountKey: readFileSync(accountKeyFile), backoffMin: 500, backoffMax: 10_000 });
    const [key, csr] = await acme.crypto.createCsr({ commonName: domains[0], altNames: [...domains] }, await acme.crypto.createPrivateEcdsaKey());
    const chain = await client.auto({
      csr, email: config.Hub.letsencrypt_email, termsOfServiceAgreed: true, challengePriority: ['http-01'],
      // the CA's own validation decides; a self-check from here would need port 80 routed back to this machine
      skipChallengeVerification: true,
      challengeCreateFn: async (_authz, challenge, keyAuthorization) => writePrivate(join(challenges, challenge.token), keyAuthorization),
      challengeRemoveFn: async (_authz, challenge) => rmSync(join(challenges, challenge.token), { force: true }),
    });
    // key first, then the certificate: the gateways reload once both are in place (a burst of changes settles)
    writePrivate(files.key, key);
    writePrivate(files.cert, chain);
    const pair = readCertificatePair(files.cert, files.key, { cert: 'certificate', key: 'key' });
    const notAfter = new Date(pair.leaf.validTo).toISOString();
    log.info({ event: 'acme.issued', domains, issuer: pair.leaf.issuer.replace(/\n/g, ', '), not_after: notAfter }, `certificate issued for ${domains.join(', ')}, valid until ${notAfter}`);
    void audit.publish('certificate', 'issued', { what: domains.join(','), outcome: 'ok', not_after: notAfter, reason });
  }

  async function check(): Promise<void> {
    timer = null;
    if (stopped) return;
    const reason = renewalReason(files.cert, files.key, domains);
    if (!reason) {
      failures = 0;
      const pair = readCertificatePair(files.cert, files.key, { cert: 'certificate', key: 'key' });
      return later(Math.min(CHECK_MS, (daysLeft(pair.leaf) - RENEW_DAYS_BEFORE) * 86_400_000));
    }
    try {
      await order(reason);
      failures = 0;
      later(CHECK_MS);
    } catch (e) {
      failures++;
      const retryMs = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** (failures - 1)) * (0.8 + Math.random() * 0.4);
      const problem = String((e as Error).message ?? e).slice(0, 500);
      log.error({ event: 'acme.failed', domains, directory: config.Hub.acme_directory_url, problem, attempt: failures, retry_in_s: Math.round(retryMs / 1000) },
        `certificate order for ${domains.join(', ')} failed (still serving the last good certificate; next try in ${Math.round(retryMs / 1000)} s): ${problem}`);
      void audit.publish('certificate', 'order_failed', { what: domains.join(','), outcome: 'failed', reason: problem, attempt: failures });
      later(retryMs);
    }
  }

  void check();
  return {
    stop: () => {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}
