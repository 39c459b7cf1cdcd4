// The running hub's process record, `<data_dir>/run/processes.json`: written by the supervisor, read by the
// supervisor at its next start (leftovers) and by the command line (is a hub running on this data dir?).
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runDir } from './paths.js';

export interface ProcessesRecord {
  supervisor: number;
  /** the supervisor's start time from /proc, so a recycled pid is not taken for a running hub */
  supervisor_start?: string;
  children: Record<string, number | null>;
  /** each child's start time from /proc, so a recycled pid is never taken for a leftover */
  starts?: Record<string, string>;
  /** restarts of each child since the hub started, and those given up on (read by the gateway's /hub/metrics) */
  restarts?: Record<string, number>;
  failed?: string[];
  /** seconds from the supervisor's start until the hub first answered its health check (jupyterhub_hub_startup_duration_seconds) */
  startup_seconds?: number;
  /** the release and commit the supervisor runs (each actor tells its own in its Ping) */
  version?: string;
  commit?: string;
  /**
   * the signals it answers besides SIGTERM/SIGINT (`hub reload`: SIGHUP, `hub restart`: SIGUSR2); a supervisor that
   * does not list one would die of it (their default action), so the command line asks only one that does
   */
  signals?: string[];
}

export function processesFile(dataDir: string): string {
  return join(runDir(dataDir), 'processes.json');
}

/** A process's start time (clock ticks since boot, field 22 of /proc/<pid>/stat), '' when it is gone. */
export function processStart(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? '';
  } catch {
    return '';
  }
}

/** When a process started, as a wall-clock time (its start in ticks after the boot time in /proc/stat); null when gone. */
export function processStartedAt(pid: number): Date | null {
  const ticks = Number(processStart(pid));
  if (!ticks) return null;
  try {
    const boot = Number(/^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1]);
    return boot ? new Date((boot + ticks / CLOCK_TICKS_PER_SECOND) * 1000) : null;
  } catch {
    return null;
  }
}
/** USER_HZ: Linux reports process times to user space in hundredths of a second on every architecture it runs on here. */
const CLOCK_TICKS_PER_SECOND = 100;

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'; // alive, someone else's
  }
}

export function readProcesses(dataDir: string): ProcessesRecord | null {
  try {
    const record = JSON.parse(readFileSync(processesFile(dataDir), 'utf8')) as ProcessesRecord;
    return Number.isInteger(record?.supervisor) && record.children ? record : null;
  } catch {
    return null; // absent, or half-written by a supervisor killed mid-write
  }
}

/** The record of a hub whose supervisor still runs on `dataDir`, or null (none, or a stale record). */
export function liveHub(dataDir: string): ProcessesRecord | null {
  const record = readProcesses(dataDir);
  if (!record || !isAlive(record.supervisor)) return null;
  if (record.supervisor_start && processStart(record.supervisor) !== record.supervisor_start) return null;
  return record;
}

/** The process `root` and every process below it, from the parent ids in /proc/<pid>/stat. */
export function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]); // after "pid (comm) state"
    if (!children.has(ppid)) children.set(ppid, []);
    children.get(ppid)!.push(Number(name));
  }
  const out: number[] = [];
  for (const queue = [root]; queue.length && out.length < 10_000;) {
    const pid = queue.shift()!;
    out.push(pid);
    for (const child of children.get(pid) ?? []) queue.push(child);
  }
  return out;
}

/** Whether the hub's supervisor answers `signal` (see ProcessesRecord.signals); else the command refuses, naming why. */
export function answersSignal(record: ProcessesRecord, signal: string): boolean {
  return record.signals?.includes(signal) ?? false;
}
