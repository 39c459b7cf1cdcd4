// The gateway's listeners. Plain HTTP on Hub.port as before (or on Hub.bind_url's unix socket, with Hub.hub_port
// on loopback for the hub's own processes); with HTTPS (Hub.ssl_cert/ssl_key, or a certificate
// the ACME client keeps in the data dir) Hub.port is a uWS SSLApp, plus a plain loopback listener on Hub.hub_port
// for the hub's own processes and local servers, and Hub.http_redirect_port redirecting to https:// (and answering
// ACME HTTP-01 challenges). A new certificate is picked up without a restart: the files are watched (and looked at
// once a minute, in case a watch missed a rename), the pair checked, and a new SSLApp with the same routes listens
// on the same port (uSockets listens with SO_REUSEPORT) before the old listen socket closes. uWS keeps the old
// app's connections open with their own certificate: open connections and WebSockets keep working, new ones get
// the new certificate. (uWS's addServerName only swaps certificates for clients that send that name, never for the
// default one; closing a listen socket of a reuseport group can drop a connection still in its accept queue, once
// per certificate change.)
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, readFile, rmSync, statSync, watch, writeFileSync, type FSWatcher } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import uWS from 'uWebSockets.js';
import type { Logger } from 'pino';
import { bindSocketPath, hubPublicUrl, type HubConfig } from '../../shared/config.js';
import { runDir } from '../../shared/paths.js';
import { CertificateError, challengeDir, frontDoorCertificate, placeholderCertificate, readCertificatePair, TLS12_CIPHERS, type CertificateFiles } from '../../shared/tls.js';

/** Puts the gateway's routes on an app; called once per app (a certificate change makes a new one). */
export type Mount = (app: uWS.TemplatedApp, secure: boolean) => uWS.TemplatedApp;

export interface FrontDoor {
  scheme: 'http' | 'https';
  /** the certificate served now (subject, issuer, expiry), for `details` */
  certificate: () => string;
  /** closes every listen socket (open connections finish) */
  stopIntake: () => void;
  close: () => void;
}

/** How often the files are looked at besides the watch, and how long a burst of file events is let settle. */
const POLL_MS = 60_000;
const SETTLE_MS = 300;

const listen = (app: uWS.TemplatedApp, ip: string, port: number, what: string) =>
  new Promise<uWS.us_listen_socket>((resolve, reject) =>
    app.listen(ip, port, (s) => (s ? resolve(s) : reject(new Error(`gateway cannot listen on ${ip}:${port} for ${what} (in use?)`)))));

/**
 * Hub.bind_url's unix socket as the front door (plain HTTP; Supervisor.gateways is 1), plus the loopback Hub.hub_port
 * for the hub's own processes and local servers, as with HTTPS. A stale socket (a killed gateway's) is replaced; the
 * socket is removed at stop only while it is still the one this process made.
 */
async function openUnixSocket(config: HubConfig, log: Logger, path: string, mount: Mount): Promise<FrontDoor> {
  if (existsSync(path)) {
    if (!lstatSync(path).isSocket()) throw new Error(`Hub.bind_url: ${path} exists and is not a socket`);
    rmSync(path);
  }
  const socket = await new Promise<uWS.us_listen_socket>((resolve, reject) =>
    mount(uWS.App(), false).listen_unix((s) => (s ? resolve(s) : reject(new Error(`gateway cannot listen on the unix socket ${path} (Hub.bind_url)`))), path));
  chmodSync(path, parseInt(config.Hub.hub_socket_mode, 8));
  const made = statSync(path).ino;
  log.info({ event: 'gateway.listening', socket: path, mode: config.Hub.hub_socket_mode }, `listening on the unix socket ${path}`);
  const internal = await listen(mount(uWS.App(), false), '127.0.0.1', config.Hub.hub_port, 'the hub\'s own processes (Hub.hub_port)');
  return {
    scheme: 'http',
    certificate: () => '',
    stopIntake: () => {
      uWS.us_listen_socket_close(socket);
      uWS.us_listen_socket_close(internal);
      try {
        if (statSync(path).ino === made) rmSync(path);
      } catch { /* already gone */ }
    },
    close: () => undefined,
  };
}

/** Challenge tokens are base64url (RFC 8555 §8.1): nothing else names a file. */
const TOKEN_RE = /^[A-Za-z0-9_-]{1,256}$/;
/** A Host header worth redirecting to: a name or an address, with an optional port (no userinfo, no path). */
const HOST_RE = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]{1,253})(:\d{1,5})?$/;

function redirectApp(config: HubConfig, log: Logger): uWS.TemplatedApp {
  const challenges = challengeDir(config.Hub.data_dir);
  // with a public URL (or certified names) the redirect goes there: a client's Host header never picks the origin
  const fixedOrigin = config.Hub.public_url || config.Hub.letsencrypt_domains.length ? hubPublicUrl(config) : null;
  const portSuffix = config.Hub.port === 443 ? '' : `:${config.Hub.port}`;
  return uWS.App().any('/*', (res, req) => {
    const path = req.getUrl();
    const query = req.getQuery();
    const method = req.getCaseSensitiveMethod().toUpperCase();
    if (path.startsWith('/.well-known/acme-challenge/')) {
      const token = path.slice('/.well-known/acme-challenge/'.length);
      let aborted = false;
      res.onAborted(() => { aborted = true; });
      if (!TOKEN_RE.test(token)) return void res.writeStatus('404 Not Found').end('no such challenge');
      readFile(join(challenges, token), 'utf8', (err, answer) => {
        if (aborted) return;
        res.cork(() => (err ? res.writeStatus('404 Not Found').end('no such challenge') : res.writeHeader('Content-Type', 'text/plain').end(answer)));
        log.info({ event: 'acme.challenge_served', found: !err }, 'ACME HTTP-01 challenge asked for');
      });
      return;
    }
    let origin = fixedOrigin;
    if (!origin) {
      const host = req.getHeader('host');
      if (!HOST_RE.test(host)) return void res.writeStatus('400 Bad Request').end('HTTPS only: ask with a Host header');
      origin = `https://${host.replace(/:\d+$/, '')}${portSuffix}`;
    }
    // GET and HEAD move for good; other methods keep their method and body on the way (308)
    res.writeStatus(method === 'GET' || method === 'HEAD' ? '301 Moved Permanently' : '308 Permanent Redirect')
      .writeHeader('Location', `${origin}${path}${query ? `?${query}` : ''}`).end();
  });
}

/** What a certificate is, for log lines (never the key). */
function describe(pair: { leaf: { subject: string; issuer: string; validTo: string; fingerprint256: string } }) {
  const one = (s: string) => s.replace(/\n/g, ', ');
  return { subject: one(pair.leaf.subject), issuer: one(pair.leaf.issuer), not_after: new Date(pair.leaf.validTo).toISOString(), sha256: pair.leaf.fingerprint256 };
}

interface Loaded { certPem: string; keyPem: string; info: Record<string, string>; digest: string }

/** The pair on disk, checked; null when an automatic certificate has not been issued yet. */
async function loadPair(files: CertificateFiles): Promise<Loaded | null> {
  try {
    const pair = files.automatic
      ? readCertificatePair(files.cert, files.key, { cert: 'certificate', key: 'key' })
      : readCertificatePair(files.cert, files.key);
    return { certPem: pair.certPem, keyPem: pair.keyPem, info: describe(pair), digest: createHash('sha256').update(pair.certPem).update(pair.keyPem).digest('hex') };
  } catch (e) {
    if (files.automatic && e instanceof CertificateError && /no such file/.test(e.message)) return null;
    throw e;
  }
}

/**
 * An SSLApp serving `pair`: uWS reads certificates from files only, so the checked pair is written to files of
 * this process in the run dir (0600) for the constructor and removed at once: uWS serves exactly what was checked,
 * even while the operator's files are being replaced.
 */
function sslApp(pair: Loaded, scratch: string, mount: Mount): uWS.TemplatedApp {
  const cert = `${scratch}.crt`;
  const key = `${scratch}.key`;
  try {
    writeFileSync(key, pair.keyPem, { mode: 0o600 });
    writeFileSync(cert, pair.certPem, { mode: 0o600 });
    return mount(uWS.SSLApp({ cert_file_name: cert, key_file_name: key, ssl_ciphers: TLS12_CIPHERS }), true);
  } finally {
    rmSync(key, { force: true });
    rmSync(cert, { force: true });
  }
}

export async function openFrontDoor(config: HubConfig, log: Logger, replica: string, mount: Mount): Promise<FrontDoor> {
  const { ip, port, data_dir: dataDir } = config.Hub;
  const files = frontDoorCertificate(config);
  const socketPath = bindSocketPath(config);
  if (socketPath) return openUnixSocket(config, log, socketPath, mount);
  if (!files) {
    const socket = await listen(mount(uWS.App(), false), ip, port, 'the front door');
    log.info({ event: 'gateway.listening', ip, port }, `listening on http://${ip}:${port}`);
    return { scheme: 'http', certificate: () => '', stopIntake: () => uWS.us_listen_socket_close(socket), close: () => undefined };
  }

  const scratch = join(runDir(dataDir), `tls-${replica}-${process.pid}`);
  // a copy an earlier process of this gateway left behind (killed between writing and removing it)
  const leftover = new RegExp(`^tls-${replica}-\\d+\\.(crt|key)$`); // this replica's only (`8000-2`'s files are not `8000`'s)
  for (const name of readdirSync(runDir(dataDir))) if (leftover.test(name)) rmSync(join(runDir(dataDir), name), { force: true });
  let current: Loaded | null;
  try {
    current = await loadPair(files);
  } catch (e) {
    // the operator's files were checked by the supervisor; the ACME client's own are replaced at its next order
    if (!files.automatic) throw e;
    log.error({ event: 'tls.reload_failed', problem: (e as Error).message }, `the issued certificate cannot be served: ${(e as Error).message}`);
    current = null;
  }
  if (!current) {
    // automatic, not issued yet: a self-signed stand-in until the ACME client writes the first certificate
    const stand = await placeholderCertificate(config.Hub.letsencrypt_domains);
    current = { ...stand, info: { subject: 'placeholder (self-signed)', issuer: 'self', not_after: '', sha256: '' }, digest: 'placeholder' };
    log.warn({ event: 'tls.placeholder' }, 'no certificate issued yet: serving a self-signed placeholder until the ACME CA issues one');
  }
  let socket = await listen(sslApp(current, scratch, mount), ip, port, 'HTTPS');
  log.info({ event: 'gateway.listening', ip, port, ...current.info }, `listening on https://${ip}:${port}`);
  const internal = await listen(mount(uWS.App(), false), '127.0.0.1', config.Hub.hub_port, 'the hub\'s own processes (Hub.hub_port)');
  const redirect = config.Hub.http_redirect_port ? await listen(redirectApp(config, log), ip, config.Hub.http_redirect_port, 'Hub.http_redirect_port') : null;
  if (redirect) log.info({ event: 'gateway.redirecting', ip, port: config.Hub.http_redirect_port }, `http://${ip}:${config.Hub.http_redirect_port} redirects to https`);

  let closed = false;
  let reloading: Promise<void> | null = null;
  let again = false;
  let lastProblem = '';
  /** Reads the files; a changed, valid pair becomes the served one. A bad pair keeps the last good one (logged once). */
  const reload = async (): Promise<void> => {
    if (reloading) {
      again = true;
      return reloading;
    }
    reloading = (async () => {
      do {
        again = false;
        if (closed) return;
        let next: Loaded | null;
        try {
          next = await loadPair(files);
        } catch (e) {
          const problem = e instanceof CertificateError ? e.message : (e as Error).message;
          if (problem !== lastProblem) log.error({ event: 'tls.reload_failed', problem }, `certificate not reloaded, still serving the last good one: ${problem}`);
          lastProblem = problem;
          continue;
        }
        lastProblem = '';
        if (!next || next.digest === current!.digest) continue;
        try {
          const fresh = await listen(sslApp(next, scratch, mount), ip, port, 'HTTPS');
          if (closed) { uWS.us_listen_socket_close(fresh); return; }
          uWS.us_listen_socket_close(socket);
          socket = fresh;
          current = next;
          log.info({ event: 'tls.certificate_loaded', ...next.info }, 'new certificate served (open connections keep theirs)');
        } catch (e) {
          log.error({ event: 'tls.reload_failed', problem: (e as Error).message }, 'certificate not reloaded, still serving the last good one');
        }
      } while (again);
    })().finally(() => { reloading = null; });
    return reloading;
  };

  let settle: NodeJS.Timeout | null = null;
  const soon = () => {
    if (settle || closed) return;
    settle = setTimeout(() => { settle = null; void reload(); }, SETTLE_MS);
  };
  const watched = new Set([basename(files.cert), basename(files.key)]);
  const watchers: FSWatcher[] = [];
  if (files.automatic) mkdirSync(dirname(files.cert), { recursive: true, mode: 0o700 });
  for (const dir of new Set([dirname(files.cert), dirname(files.key)])) {
    try {
      watchers.push(watch(dir, { persistent: false }, (_type, name) => { if (!name || watched.has(String(name))) soon(); }));
    } catch (e) {
      log.warn({ event: 'tls.watch_failed', dir, err: (e as Error).message }, 'cannot watch the certificate\'s directory: changes are seen within a minute');
    }
  }
  const poll = setInterval(() => void reload(), POLL_MS);
  poll.unref();

  return {
    scheme: 'https',
    certificate: () => `${current!.info.subject}; ${current!.info.issuer}; ${current!.info.not_after}`,
    stopIntake: () => {
      closed = true; // no certificate change listens again
      uWS.us_listen_socket_close(socket);
      uWS.us_listen_socket_close(internal);
      if (redirect) uWS.us_listen_socket_close(redirect);
    },
    close: () => {
      closed = true;
      if (settle) clearTimeout(settle);
      clearInterval(poll);
      for (const w of watchers) w.close();
    },
  };
}
