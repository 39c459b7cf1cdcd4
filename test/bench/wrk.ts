// Runs `wrk --latency` against one URL and parses what it prints.
import { spawn } from 'node:child_process';

export interface WrkOptions {
  threads?: number;
  connections?: number;
  seconds?: number;
  headers?: Record<string, string>;
  /** a wrk Lua script (`-s`), e.g. one that sets the method and body */
  script?: string;
}

export interface WrkResult {
  requests: number;
  reqPerSec: number;
  /** latency percentiles in milliseconds */
  p50: number;
  p75: number;
  p90: number;
  p99: number;
  /** responses with a status of 400 or more (wrk counts 3xx as success) */
  non2xx: number;
  socketErrors: { connect: number; read: number; write: number; timeout: number };
  raw: string;
}

const TIME_UNITS: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** `42.10ms`, `812.00us`, `1.20s`, `2.00m` → milliseconds. */
export function parseDuration(text: string): number {
  const m = /^([\d.]+)(us|ms|s|m|h)$/.exec(text.trim());
  if (!m) throw new Error(`wrk: cannot read the duration ${JSON.stringify(text)}`);
  return Number(m[1]) * TIME_UNITS[m[2]];
}

/** `740.12`, `1.23k`, `2.5M` → a number. */
function parseCount(text: string): number {
  const m = /^([\d.]+)([kMG]?)$/.exec(text.trim());
  if (!m) throw new Error(`wrk: cannot read the number ${JSON.stringify(text)}`);
  return Number(m[1]) * ({ '': 1, k: 1e3, M: 1e6, G: 1e9 } as Record<string, number>)[m[2]];
}

export function parseWrk(out: string): WrkResult {
  const pct = (p: string): number => {
    const m = new RegExp(`^\\s*${p}%\\s+(\\S+)`, 'm').exec(out);
    if (!m) throw new Error(`wrk: no ${p}% latency in its output (was --latency given?)\n${out}`);
    return parseDuration(m[1]);
  };
  const rps = /^Requests\/sec:\s+(\S+)/m.exec(out);
  if (!rps) throw new Error(`wrk: no Requests/sec line in its output\n${out}`);
  const total = /^\s*(\d+) requests in /m.exec(out);
  const non2xx = /Non-2xx or 3xx responses:\s+(\d+)/.exec(out);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return {
    requests: total ? Number(total[1]) : 0,
    reqPerSec: parseCount(rps[1]),
    p50: pct('50'), p75: pct('75'), p90: pct('90'), p99: pct('99'),
    non2xx: non2xx ? Number(non2xx[1]) : 0,
    socketErrors: sock
      ? { connect: Number(sock[1]), read: Number(sock[2]), write: Number(sock[3]), timeout: Number(sock[4]) }
      : { connect: 0, read: 0, write: 0, timeout: 0 },
    raw: out,
  };
}

/** Runs wrk to completion (killed if it overruns its duration by 30 s) and returns its parsed figures. */
export function wrk(url: string, { threads = 2, connections = 32, seconds = 10, headers = {}, script }: WrkOptions = {}): Promise<WrkResult> {
  const args = ['--latency', '-t', String(threads), '-c', String(connections), '-d', `${seconds}s`, '--timeout', '10s', ...(script ? ['-s', script] : [])];
  for (const [k, v] of Object.entries(headers)) args.push('-H', `${k}: ${v}`);
  args.push(url);
  return new Promise((resolve, reject) => {
    const p = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), (seconds + 30) * 1000);
    p.on('error', (e) => { clearTimeout(timer); reject(e); });
    p.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`wrk exited with ${code ?? signal}: ${err.trim() || out.trim()}`));
      try {
        resolve(parseWrk(out));
      } catch (e) {
        reject(e);
      }
    });
  });
}

/** Total failed requests: error statuses plus socket errors. */
export const failures = (r: WrkResult): number =>
  r.non2xx + r.socketErrors.connect + r.socketErrors.read + r.socketErrors.write + r.socketErrors.timeout;
