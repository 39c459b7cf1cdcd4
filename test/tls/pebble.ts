// Debian's pebble, the ACME test CA, on 127.0.0.1: its API behind a certificate of the test's own CA (the hub trusts
// it through NODE_EXTRA_CA_CERTS), validating HTTP-01 for real on the port the hub redirects from. Fails loudly when
// pebble is missing or does not start (`node scripts/setup.mjs --for-tests` installs it).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { join } from 'node:path';
import { freePort, stopChild, waitFor } from '../harness.js';
import { makeLeaf, type TestCa } from './certs.js';

export const PEBBLE = '/usr/bin/pebble';

export interface Pebble {
  directoryUrl: string;
  /** pebble's root, which every certificate it issues chains to (fetched from its management API) */
  root(): Promise<string>;
  logs(): string;
  stop(): Promise<void>;
}

function get(url: string, ca: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    https.get(url, { ca, timeout: 5000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    }).on('error', reject);
  });
}

/** Starts pebble validating HTTP-01 on `httpPort` of 127.0.0.1 (names resolve through /etc/hosts: `localhost`). */
export async function startPebble(ca: TestCa, httpPort: number): Promise<Pebble> {
  if (!existsSync(PEBBLE)) throw new Error(`${PEBBLE} is missing: run \`node scripts/setup.mjs --for-tests\` (installs Debian's pebble)`);
  const listener = makeLeaf(ca, 'pebble-listener');
  const [apiPort, managementPort, tlsPort] = [await freePort(), await freePort(), await freePort()];
  const config = join(ca.dir, 'pebble.json');
  writeFileSync(config, JSON.stringify({
    pebble: {
      listenAddress: `127.0.0.1:${apiPort}`, managementListenAddress: `127.0.0.1:${managementPort}`,
      certificate: listener.cert, privateKey: listener.key, httpPort, tlsPort, ocspResponderURL: '', externalAccountBindingRequired: false,
    },
  }));
  // NOSLEEP: no random delay before validating; nonces always good (acme-client retries bad ones, but a test should not depend on it)
  const proc: ChildProcess = spawn(PEBBLE, ['-config', config], {
    env: { ...process.env, PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0' }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  const keep = (d: Buffer) => { text = (text + d.toString()).slice(-100_000); };
  proc.stdout!.on('data', keep);
  proc.stderr!.on('data', keep);
  const directoryUrl = `https://127.0.0.1:${apiPort}/dir`;
  try {
    await waitFor('pebble to answer', async () => {
      if (proc.exitCode !== null) throw new Error(`pebble exited with ${proc.exitCode}: ${text.slice(-2000)}`);
      return (await get(directoryUrl, ca.pem).catch(() => ({ status: 0 }))).status === 200 ? true : undefined;
    }, 10_000, 50);
  } catch (e) {
    await stopChild(proc);
    throw e;
  }
  return {
    directoryUrl,
    root: async () => (await get(`https://127.0.0.1:${managementPort}/roots/0`, ca.pem)).body,
    logs: () => text,
    stop: () => stopChild(proc),
  };
}
