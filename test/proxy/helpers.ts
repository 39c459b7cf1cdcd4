// Backends and measuring tools for proxy tests: small node:http servers on 127.0.0.1, the gateway's
// RSS, and requests that fetch() cannot make (Host, Connection, streamed bodies).
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { busEnv } from '../../shared/nats-auth.js';
import { freePort, NATS_TOKEN, REPO, waitFor } from '../harness.js';

export async function listen(server: http.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** Resident memory of a process in MB. */
export function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) / 1024;
}

/** Samples a process's RSS every 50 ms while `work` runs; returns the highest seen and work's result. */
export async function peakRss<T>(pid: number, work: () => Promise<T>): Promise<{ peak: number; result: T }> {
  let peak = rssMb(pid);
  const timer = setInterval(() => { peak = Math.max(peak, rssMb(pid)); }, 50);
  try {
    const result = await work();
    return { peak: Math.max(peak, rssMb(pid)), result };
  } finally {
    clearInterval(timer);
  }
}

/** A deterministic 1 MiB block; bodies are this block repeated. */
export const BLOCK = Buffer.from(Array.from({ length: 1024 * 1024 }, (_, i) => (i * 7919 + (i >> 10)) & 0xff));

export function sha256OfRepeated(blocks: number): string {
  const h = createHash('sha256');
  for (let i = 0; i < blocks; i++) h.update(BLOCK);
  return h.digest('hex');
}

export interface RawResponse { status: number; headers: http.IncomingHttpHeaders; rawHeaders: string[]; body: Buffer }

/** A request with any headers (Host, Connection, ...) through node:http, body optional. */
export function rawRequest(port: number, method: string, path: string, headers: Record<string, string | string[]> = {}, body?: Buffer): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers, agent: false, setHost: !('host' in headers) }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, rawHeaders: res.rawHeaders, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(15_000, () => req.destroy(new Error('request timed out')));
    req.end(body);
  });
}

/** Uploads `blocks` MiB with backpressure; resolves with the response body. */
export function upload(port: number, path: string, blocks: number): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path, agent: false, headers: { 'content-length': String(blocks * BLOCK.length), 'content-type': 'application/octet-stream' } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, rawHeaders: res.rawHeaders, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    let sent = 0;
    const pump = () => {
      while (sent < blocks) {
        sent++;
        if (!req.write(BLOCK)) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}

/** Downloads, hashing as it goes; resolves with the byte count and digest. */
export function download(port: number, path: string): Promise<{ status: number; bytes: number; sha256: string; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      const h = createHash('sha256');
      let bytes = 0;
      res.on('data', (c: Buffer) => { bytes += c.length; h.update(c); });
      res.on('end', () => resolve({ status: res.statusCode!, bytes, sha256: h.digest('hex'), headers: res.headers }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

/** Writes `blocks` MiB to a response, respecting backpressure. */
export function writeBlocks(res: http.ServerResponse, blocks: number): void {
  let sent = 0;
  const pump = () => {
    while (sent < blocks) {
      sent++;
      if (!res.write(BLOCK)) return void res.once('drain', pump);
    }
    res.end();
  };
  pump();
}

/** A second gateway on the same hub (own port, same config and NATS); stop it with kill(). */
export async function startExtraGateway(dataDir: string): Promise<{ url: string; proc: ChildProcess; pid: number }> {
  const port = await freePort();
  const proc = spawn(process.execPath, [join(REPO, 'dist', 'services', 'gateway', 'main.js')], {
    env: { ...process.env, HUB_RESOLVED_CONFIG: join(dataDir, 'run', 'config.json'), HUB_GATEWAY_PORT: String(port), ...busEnv(NATS_TOKEN, 'gateway') },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (c: Buffer) => { stderr = (stderr + c.toString()).slice(-4000); });
  const url = `http://127.0.0.1:${port}`;
  await waitFor('the second gateway to listen', async () => {
    if (proc.exitCode !== null) throw new Error(`the second gateway exited with ${proc.exitCode}: ${stderr}`);
    return (await fetch(`${url}/hub/api`)).ok ? true : undefined;
  }, 15_000).catch((e: Error) => { throw new Error(`${e.message}; its stderr: ${stderr.slice(-1500)}`); });
  return { url, proc, pid: proc.pid! };
}
