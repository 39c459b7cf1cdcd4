// The front door's certificate: which files it is read from, how a pair is checked (the supervisor's preflight
// and every gateway's reload use the same check), the TLS settings of the public port, and the placeholder an
// ACME-configured hub serves until its first certificate is issued. Never logs or returns a private key's text
// beyond the caller that asked for it.
import { createPrivateKey, webcrypto, X509Certificate, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { bindSocketPath, type HubConfig } from './config.js';

/**
 * TLS 1.2 suites of Mozilla's "intermediate" profile: ECDHE key exchange and AEAD ciphers only (TLS 1.3 has only
 * such suites; uWebSockets.js's BoringSSL refuses TLS 1.0 and 1.1 itself).
 */
export const TLS12_CIPHERS = [
  'ECDHE-ECDSA-AES128-GCM-SHA256', 'ECDHE-RSA-AES128-GCM-SHA256', 'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384', 'ECDHE-ECDSA-CHACHA20-POLY1305', 'ECDHE-RSA-CHACHA20-POLY1305',
].join(':');

/** Strict-Transport-Security on every answer over HTTPS: a year, as the common recommendation (no preload). */
export const HSTS = 'max-age=31536000';

/** Where the automatic certificate and its key live (ACME): in the data dir, 0600, written only by the ordering gateway. */
export function acmeDir(dataDir: string): string {
  return join(dataDir, 'tls');
}

/** Where the ordering gateway leaves HTTP-01 answers for whichever gateway of the node the CA reaches. */
export function challengeDir(dataDir: string): string {
  return join(acmeDir(dataDir), 'challenges');
}

export interface CertificateFiles {
  cert: string;
  key: string;
  /** issued by the hub's ACME client: the files may not exist yet (a placeholder is served until they do) */
  automatic: boolean;
}

/** The front door's certificate files, or null when it speaks plain HTTP. */
export function frontDoorCertificate(config: HubConfig): CertificateFiles | null {
  const h = config.Hub;
  if (h.ssl_cert) return { cert: h.ssl_cert, key: h.ssl_key, automatic: false };
  if (h.letsencrypt_domains.length) return { cert: join(acmeDir(h.data_dir), 'cert.pem'), key: join(acmeDir(h.data_dir), 'key.pem'), automatic: true };
  return null;
}

/** With HTTPS or a unix socket, the plain listeners the gateway adds (option, address, port): the supervisor checks they are free. */
export function frontDoorPlainPorts(config: HubConfig): (readonly [string, string, number])[] {
  const h = config.Hub;
  if (bindSocketPath(config)) return [['Hub.hub_port', '127.0.0.1', h.hub_port] as const];
  if (!frontDoorCertificate(config)) return [];
  return [['Hub.hub_port', '127.0.0.1', h.hub_port] as const, ...(h.http_redirect_port ? [['Hub.http_redirect_port', h.ip, h.http_redirect_port] as const] : [])];
}

export interface CertificatePair {
  certPem: string;
  keyPem: string;
  /** the leaf (first) certificate of the chain */
  leaf: X509Certificate;
}

/** An error whose message is one line naming the file and what is wrong with it (never its content). */
export class CertificateError extends Error {}

function readPem(path: string, option: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new CertificateError(`${option}: ${path}: ${code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'not readable by the hub' : (e as Error).message}`);
  }
}

/**
 * Reads and checks a certificate file (the leaf first, then its chain) and its private key: both parse, and the
 * key is the certificate's. Throws a CertificateError naming the file otherwise.
 */
export function readCertificatePair(certPath: string, keyPath: string, names = { cert: 'Hub.ssl_cert', key: 'Hub.ssl_key' }): CertificatePair {
  const certPem = readPem(certPath, names.cert);
  const keyPem = readPem(keyPath, names.key);
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(certPem);
  } catch {
    throw new CertificateError(`${names.cert}: ${certPath}: not a PEM certificate`);
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(keyPem);
  } catch {
    throw new CertificateError(`${names.key}: ${keyPath}: not a PEM private key (or it is encrypted)`);
  }
  if (!leaf.checkPrivateKey(key)) throw new CertificateError(`${names.key}: ${keyPath}: this key does not match the certificate in ${certPath}`);
  return { certPem, keyPem, leaf };
}

/** The supervisor's preflight: one line per problem, before anything starts. */
export function certificateProblems(config: HubConfig): string[] {
  const files = frontDoorCertificate(config);
  if (!files || files.automatic) return [];
  try {
    readCertificatePair(files.cert, files.key);
    return [];
  } catch (e) {
    if (e instanceof CertificateError) return [e.message];
    throw e;
  }
}

/** Days until the certificate stops being valid (negative once it has). */
export function daysLeft(cert: X509Certificate, now = Date.now()): number {
  return (Date.parse(cert.validTo) - now) / 86_400_000;
}

/**
 * A self-signed certificate for `names`, valid one day: what an ACME-configured front door serves before its
 * first certificate is issued (browsers warn; the ACME challenge itself arrives over plain HTTP).
 */
export async function placeholderCertificate(names: readonly string[]): Promise<{ certPem: string; keyPem: string }> {
  // imported here, not at the top: only an ACME-configured gateway makes one, and the supervisor and every gateway
  // read this file (@peculiar/x509 with its ASN.1 schemas is ~7 MB of each process)
  const x509 = await import('@peculiar/x509');
  x509.cryptoProvider.set(webcrypto as Crypto);
  const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
  const keys = await webcrypto.subtle.generateKey(alg, true, ['sign', 'verify']);
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: Buffer.from(webcrypto.getRandomValues(new Uint8Array(8))).toString('hex').replace(/^[89a-f]/, '1'),
    name: `CN=${names[0] ?? 'localhost'} (hub placeholder)`,
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + 86_400_000),
    keys,
    signingAlgorithm: alg,
    extensions: [new x509.SubjectAlternativeNameExtension(names.map((n) => ({ type: 'dns' as const, value: n })))],
  });
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
  const keyPem = `-----BEGIN PRIVATE KEY-----\n${pkcs8.toString('base64').replace(/(.{64})/g, '$1\n').replace(/\n$/, '')}\n-----END PRIVATE KEY-----\n`;
  return { certPem: cert.toString('pem'), keyPem };
}
