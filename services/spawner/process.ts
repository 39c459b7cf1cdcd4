// Local processes for single-user servers: launched in their own process group with output to a file
// (so they outlive the spawner), recognised again by pid and start time, stopped by escalating signals.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { dirname } from 'node:path';
import type { Logger } from '../../shared/log.js';


export interface LaunchSpec {
  cmd: string[];
  env: NodeJS.ProcessEnv;
  logFile: string;
}

export function launch(spec: LaunchSpec): ChildProcess {
  mkdirSync(dirname(spec.logFile), { recursive: true, mode: 0o700 });
  const fd = openSync(spec.logFile, 'a', 0o600);
  try {
    const child = spawn(spec.cmd[0], spec.cmd.slice(1), { env: spec.env, stdio: ['ignore', fd, fd], detached: true });
    child.unref(); // the spawner may exit (or die) while its servers keep serving
    return child;
  } finally {
    closeSync(fd);
  }
}

/** Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), and whether it is a zombie. */
function procStat(pid: number): { start: string; zombie: boolean } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { start: fields[19], zombie: fields[0] === 'Z' };
  } catch {
    return null;
  }
}

export function processStartTime(pid: number): string {
  return procStat(pid)?.start ?? '';
}

/** True while the process that we started (same pid and start time) is alive. */
export function isSameProcess(pid: number, start: string): boolean {
  const s = pid > 0 ? procStat(pid) : null;
  return s !== null && !s.zombie && s.start === start;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitGone(pid: number, start: string, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (!isSameProcess(pid, start)) return true;
    await sleep(25);
  }
  return !isSameProcess(pid, start);
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal); // the whole process group: the server and anything it started
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      // already gone
    }
  }
}

/** SIGINT, then SIGTERM, then SIGKILL, `stepMs` apart; resolves only when the process is gone. */
export async function stopProcess(pid: number, start: string, stepMs: number, log: Logger): Promise<void> {
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGKILL'] as const) {
    if (!isSameProcess(pid, start)) return;
    signalGroup(pid, signal);
    if (await waitGone(pid, start, signal === 'SIGKILL' ? 5000 : stepMs)) return;
    log.warn({ event: 'server.stop.escalate', pid, after: signal }, 'server did not stop, escalating');
  }
  throw new Error(`process ${pid} survived SIGKILL`);
}


/** One GET; any HTTP answer means the server is up (it may well answer 302 or 403 to us). */
function probe(url: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request(url, { method: 'GET', timeout: timeoutMs }, (res) => {
      res.resume();
      resolve(true);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
    req.end();
  });
}

export interface WaitOptions {
  timeoutMs: number;
  requestTimeoutMs: number;
  alive: () => boolean;
  signal: AbortSignal;
}

/** Polls `url` with backoff until it answers; fails when the process dies, the time is up, or on abort. */
export async function waitForHttp(url: string, o: WaitOptions): Promise<void> {
  const deadline = Date.now() + o.timeoutMs;
  for (let delay = 20; ; delay = Math.min(delay * 1.5, 1000)) {
    if (o.signal.aborted) throw new Error('cancelled');
    if (!o.alive()) throw new Error('the server exited before it answered');
    if (await probe(url, Math.min(o.requestTimeoutMs, Math.max(100, deadline - Date.now())))) return;
    if (Date.now() + delay > deadline) throw new Error(`the server did not answer within ${Math.round(o.timeoutMs / 1000)} s`);
    await sleep(delay);
  }
}
