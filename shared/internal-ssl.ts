// Hub.internal_ssl: TLS with certificates on both sides for every NATS connection (actors to NATS, routes between
// cluster members). The hub makes a small CA once (Hub.internal_certs_location, default <data_dir>/internal-ssl:
// ca.crt, ca.key 0600) and, at each start, a certificate for this node (<data_dir>/run/internal-ssl/node.crt,
// serverAuth + clientAuth, its names: loopback, the host name, Hub.nats_cluster_ip, Hub.trusted_alt_names) that both
// its nats-server and its actors present. Or the operator gives Hub.internal_ssl_ca, _cert and _key.
// Certificates are made with the openssl command (node:crypto makes keys but cannot sign certificates).
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, chmodSync, constants, existsSync, linkSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect, isIP } from 'node:net';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import type { HubConfig } from './config.js';
import { natsServers } from './config.js';
import { runDir } from './paths.js';

/** What nats.js (`tls`) and nats-server (`tls {}`) are given. */
export interface NatsTlsFiles { caFile: string; certFile: string; keyFile: string }

export const caDirOf = (config: HubConfig): string => config.Hub.internal_certs_location || join(config.Hub.data_dir, 'internal-ssl');

/** The files this node's NATS and actors use with Hub.internal_ssl (paths only: the supervisor makes them). */
export function internalTlsFiles(config: HubConfig): NatsTlsFiles | undefined {
  const h = config.Hub;
  if (!h.internal_ssl) return undefined;
  if (h.internal_ssl_ca) return { caFile: h.internal_ssl_ca, certFile: h.internal_ssl_cert, keyFile: h.internal_ssl_key };
  const node = join(runDir(h.data_dir), 'internal-ssl');
  return { caFile: join(caDirOf(config), 'ca.crt'), certFile: join(node, 'node.crt'), keyFile: join(node, 'node.key') };
}

function openssl(args: string[]): void {
  try {
    execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (e) {
    const err = e as { code?: string; stderr?: Buffer };
    if (err.code === 'ENOENT') throw new Error('Hub.internal_ssl: the openssl command is not installed (apt-get install -y openssl), or give Hub.internal_ssl_ca, _cert and _key');
    throw new Error(`Hub.internal_ssl: openssl ${args[0]} failed: ${String(err.stderr ?? '').trim().split('\n')[0]}`);
  }
}

const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/** The hub's CA, made once; two nodes sharing the directory and starting together keep whichever was made first. */
function ensureCa(dir: string): void {
  if (existsSync(join(dir, 'ca.crt')) && existsSync(join(dir, 'ca.key'))) return;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const tag = randomBytes(4).toString('hex');
  const [crt, key] = [join(dir, `.ca-${tag}.crt`), join(dir, `.ca-${tag}.key`)];
  try {
    openssl(['req', '-x509', '-new', ...EC_KEY, '-keyout', key, '-out', crt, '-days', '3650', '-subj', '/CN=hub internal CA',
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
    chmodSync(key, 0o600);
    try {
      linkSync(key, join(dir, 'ca.key')); // the key first: a ca.crt without its key is never seen
      linkSync(crt, join(dir, 'ca.crt'));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  } finally {
    rmSync(crt, { force: true });
    rmSync(key, { force: true });
  }
}

/** The names this node's certificate carries: where its NATS is reached. */
export function nodeAltNames(config: HubConfig): string[] {
  const h = config.Hub;
  const names = ['IP:127.0.0.1', 'IP:::1', 'DNS:localhost', `DNS:${hostname()}`];
  if (h.nats_cluster_ip && !['0.0.0.0', '::'].includes(h.nats_cluster_ip)) names.push(`${isIP(h.nats_cluster_ip) ? 'IP' : 'DNS'}:${h.nats_cluster_ip}`);
  return [...new Set([...names, ...h.trusted_alt_names])];
}

/** A certificate signed by the hub's CA in `caDir` (a new key, 0600), written whole or not at all. */
export function issueCertificate(caDir: string, out: { certFile: string; keyFile: string }, commonName: string, usages: string[], altNames: string[] = []): void {
  mkdirSync(dirname(out.certFile), { recursive: true, mode: 0o700 });
  const tag = randomBytes(4).toString('hex');
  const [csr, ext, crt, key] = ['csr', 'ext', 'crt', 'key'].map((x) => `${out.certFile}.${tag}.${x}`);
  writeFileSync(ext, [
    'basicConstraints=CA:FALSE', 'keyUsage=critical,digitalSignature,keyEncipherment', `extendedKeyUsage=${usages.join(',')}`,
    ...(altNames.length ? [`subjectAltName=${altNames.join(',')}`] : []),
  ].join('\n'));
  try {
    openssl(['req', '-new', ...EC_KEY, '-keyout', key, '-out', csr, '-subj', `/CN=${commonName.replace(/[/=+,\\]/g, '_')}`]);
    chmodSync(key, 0o600);
    openssl(['x509', '-req', '-in', csr, '-CA', join(caDir, 'ca.crt'), '-CAkey', join(caDir, 'ca.key'), '-set_serial', `0x${randomBytes(16).toString('hex')}`,
      '-days', '825', '-extfile', ext, '-out', crt]);
    renameSync(key, out.keyFile);
    renameSync(crt, out.certFile);
  } finally {
    for (const f of [csr, ext, crt, key]) rmSync(f, { force: true });
  }
}

/**
 * A client certificate for an operator's credential (`hub credentials audit`), from the hub's own CA, kept in
 * <internal_certs_location>/clients/<name>.crt|.key; null with the operator's own PKI (they issue their own).
 */
export function operatorClientCertificate(config: HubConfig, name: string): NatsTlsFiles | null {
  if (config.Hub.internal_ssl_ca) return null;
  const caDir = caDirOf(config);
  ensureCa(caDir);
  const out = { certFile: join(caDir, 'clients', `${name}.crt`), keyFile: join(caDir, 'clients', `${name}.key`) };
  if (!existsSync(out.certFile) || !existsSync(out.keyFile)) issueCertificate(caDir, out, `hub ${name}`, ['clientAuth']);
  return { caFile: join(caDir, 'ca.crt'), ...out };
}

/**
 * Makes what internal_ssl needs before NATS starts: the CA (once) and this node's certificate (each start, so
 * its names follow the configuration). With the operator's files, checks that they can be read. Returns the files.
 */
export function prepareInternalTls(config: HubConfig): NatsTlsFiles {
  const files = internalTlsFiles(config)!;
  if (config.Hub.internal_ssl_ca) {
    for (const [option, file] of [['internal_ssl_ca', files.caFile], ['internal_ssl_cert', files.certFile], ['internal_ssl_key', files.keyFile]]) {
      try {
        accessSync(file, constants.R_OK);
      } catch (e) {
        throw new Error(`Hub.${option}: cannot read ${file} (${(e as NodeJS.ErrnoException).code})`);
      }
    }
    return files;
  }
  const caDir = caDirOf(config);
  ensureCa(caDir);
  issueCertificate(caDir, { certFile: files.certFile, keyFile: files.keyFile }, `hub node ${config.Hub.node_name}`,
    ['serverAuth', 'clientAuth'], nodeAltNames(config));
  return files;
}

/**
 * What a NATS server says of TLS in the INFO line it sends first: 'tls' (it requires TLS and a client
 * certificate), 'plain' (it takes plain connections, or TLS without a client certificate), or why it could not be asked.
 */
export function natsTlsStance(url: string, timeoutMs: number): Promise<'tls' | 'plain' | { unreachable: string }> {
  const u = new URL(url.includes('://') ? url : `nats://${url}`);
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: u.hostname.replace(/^\[|\]$/g, ''), port: Number(u.port || 4222) });
    let text = '';
    const done = (v: 'tls' | 'plain' | { unreachable: string }) => { socket.destroy(); clearTimeout(timer); resolve(v); };
    const timer = setTimeout(() => done({ unreachable: `no INFO within ${timeoutMs} ms` }), timeoutMs);
    socket.on('error', (e) => done({ unreachable: e.message }));
    socket.on('data', (chunk) => {
      text += chunk.toString('latin1');
      const end = text.indexOf('\r\n');
      if (end < 0) return text.length > 65_536 ? done({ unreachable: 'not a NATS server' }) : undefined;
      const m = /^INFO\s+(\{.*\})\s*$/.exec(text.slice(0, end));
      if (!m) return done({ unreachable: 'not a NATS server' });
      try {
        const info = JSON.parse(m[1]) as { tls_required?: boolean; tls_verify?: boolean };
        done(info.tls_required && info.tls_verify ? 'tls' : 'plain');
      } catch {
        done({ unreachable: 'not a NATS server' });
      }
    });
  });
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|\[::1\]|localhost)$/i;

/**
 * The addresses off this machine that the hub's NATS traffic crosses (routes, the cluster port, NATS URLs):
 * without internal_ssl the supervisor warns about them once.
 */
export function offMachineNatsPeers(config: HubConfig): string[] {
  const h = config.Hub;
  const hosts = [...natsServers(h.nats_url), ...h.nats_routes].map((u) => {
    try {
      return new URL(u).hostname;
    } catch {
      return '';
    }
  });
  if (h.nats_cluster_port) hosts.push(h.nats_cluster_ip);
  return [...new Set(hosts.filter((host) => host && !LOOPBACK.test(host)))];
}
