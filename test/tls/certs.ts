// Certificates for the TLS tests, made by the real openssl: a CA of the test's own and leaves it signs (or ones
// that are self-signed, or about to expire). Files land in a temp dir the caller removes.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import https from 'node:https';
import tls from 'node:tls';

const openssl = (args: string[], cwd: string) => execFileSync('/usr/bin/openssl', args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });

export interface TestCa { dir: string; cert: string; key: string; pem: string }

export function makeCa(name = 'Hub Test CA'): TestCa {
  const dir = mkdtempSync(join(tmpdir(), 'hub-tls-'));
  openssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt',
    '-days', '2', '-subj', `/CN=${name}`, '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], dir);
  return { dir, cert: join(dir, 'ca.crt'), key: join(dir, 'ca.key'), pem: readFileSync(join(dir, 'ca.crt'), 'utf8') };
}

export interface Leaf { cert: string; key: string; certPem: string; keyPem: string }

/** A server certificate for localhost and 127.0.0.1 signed by `ca`, valid `days` days (the chain: leaf, then CA). */
export function makeLeaf(ca: TestCa, name: string, { days = 2, names = ['localhost'] }: { days?: number; names?: string[] } = {}): Leaf {
  const { dir } = ca;
  const ext = join(dir, `${name}.ext`);
  writeFileSync(ext, `subjectAltName=${[...names.map((n) => `DNS:${n}`), 'IP:127.0.0.1'].join(',')}\nextendedKeyUsage=serverAuth\n`);
  openssl(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`], dir);
  openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-days', String(days), '-extfile', ext, '-out', `${name}.leaf`], dir);
  const certPem = readFileSync(join(dir, `${name}.leaf`), 'utf8') + ca.pem;
  writeFileSync(join(dir, `${name}.crt`), certPem);
  return { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`), certPem, keyPem: readFileSync(join(dir, `${name}.key`), 'utf8') };
}

/** Replaces a file whole (write aside, rename), as certbot and the hub's ACME client do. */
export function replaceFile(path: string, text: string): void {
  writeFileSync(`${path}.new`, text, { mode: 0o600 });
  renameSync(`${path}.new`, path);
}

/** The subject CN of the certificate a new TLS connection to `port` is given (trusting `ca`). */
export function servedCertificate(port: number, ca: string, servername = 'localhost'): Promise<tls.PeerCertificate> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, ca, servername }, () => {
      const cert = s.getPeerCertificate();
      s.destroy();
      resolve(cert);
    });
    s.on('error', reject);
    s.setTimeout(5000, () => s.destroy(new Error('TLS handshake timed out')));
  });
}

export interface HttpsAnswer { status: number; headers: Record<string, string | string[] | undefined>; body: string }

/** One HTTPS request trusting `ca`; `agent` keeps a connection open across requests when given. */
export function httpsRequest(url: string, ca: string, { method = 'GET', headers = {}, body, agent }: { method?: string; headers?: Record<string, string>; body?: string; agent?: https.Agent } = {}): Promise<HttpsAnswer> {
  return new Promise((resolve, reject) => {
    const req = https.request(url, { method, headers, ca, agent: agent ?? false, servername: 'localhost', timeout: 10_000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${url} timed out`)));
    req.on('error', reject);
    req.end(body);
  });
}
