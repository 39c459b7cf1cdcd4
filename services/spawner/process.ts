// Servers as local processes, shared by the `simple` and `localprocess` backends: launched in their own
// process group with output to a file (so they outlive the spawner), placed in their cgroups before
// they run any code, recognised again by pid and start time, stopped by escalating signals.
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import { freePort } from '../../shared/ports.js';
import type { Logger } from '../../shared/log.js';
import { limitsInUse } from '../../shared/profiles.js';
import type { Adopted, BackendContext, BackendState, ExitStatus, PollResult, StartRequest, Started } from './backend.js';
import { cannotLimit, createServerGroup, detectCgroups, oomKills, procsFiles, removeServerGroup, type CgroupSupport, type ServerGroup } from './cgroups.js';

/** What a local backend keeps in the registry. */
export interface LocalState {
  pid: number;
  /** process start time from /proc, so a re-used pid is never mistaken for our server */
  start: string;
  port: number;
  cgroup: ServerGroup | null;
  /** the account it runs as, when not the hub's own */
  account?: string;
}

/**
 * The first program a server runs, as the hub's user: it writes its own pid into each cgroup.procs
 * (so the server and everything it ever starts are inside the limits from the first instruction —
 * writing the child's pid from outside after spawn would leave a window in which it could already
 * fork children outside the group), sets the umask, then replaces itself with the server (same pid).
 * A privilege drop, when wanted, is the first word of the command (setpriv), after the placement:
 * the account itself may not write to the hub's groups.
 */
const WRAPPER = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; umask 022; exec "$@"';

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

/** What an exit code of the wrapper or the shell means, for a person. */
function exitReason(code: number | null, signal: string | null, program: string): string | undefined {
  if (code === 125) return 'could not join its cgroup';
  if (code === 126) return `${program} is not executable`;
  if (code === 127) return `${program}: command not found`;
  if (signal === 'SIGKILL') return 'killed (SIGKILL)';
  return undefined;
}

/** `Spawner.notebook_dir` for an account whose home is `home`: '' is the home, `~` expands, relative is under it. */
export function expandHome(dir: string, home: string): string {
  if (!dir || dir === '~') return home;
  if (dir.startsWith('~/')) return join(home, dir.slice(2));
  return isAbsolute(dir) ? dir : join(home, dir);
}

export interface LocalLaunch {
  /** the server's program; a privilege drop (setpriv ...) comes first when the backend wants one */
  cmd: string[];
  /** the account's part of the environment (HOME, USER, ...), over the spawner's */
  env: Record<string, string>;
  /** undefined: the spawner's own */
  cwd: string | undefined;
  account?: string;
}

/** Limits are enforced or the hub does not start: one line when the configured ones cannot be. */
export function limitsPreflight(ctx: BackendContext): string[] {
  const used = limitsInUse(ctx.config);
  const why = cannotLimit(detectCgroups(), ctx.hubId, used);
  return why ? [`Spawner.${used.memory ? 'mem_limit' : 'cpu_limit'} is set (here or in a profile) but cannot be enforced: ${why}`] : [];
}

/** The machinery both local backends share; each adds only who the server runs as and where. */
export class LocalProcesses {
  readonly cgroups: CgroupSupport | null;

  constructor(private readonly ctx: BackendContext) {
    this.cgroups = detectCgroups();
  }

  async start(req: StartRequest, how: (listen: { ip: string; port: number }) => Promise<LocalLaunch>): Promise<Started> {
    const port = await freePort();
    const listen = { ip: '127.0.0.1', port };
    const launch = await how(listen);
    if (req.signal.aborted) throw new Error('cancelled');
    const group = createServerGroup(this.cgroups, this.ctx.hubId, req.id, req.limits);
    const logFile = join(this.ctx.config.Hub.data_dir, 'servers', `${req.id}.log`);
    mkdirSync(dirname(logFile), { recursive: true, mode: 0o700 });
    const fd = openSync(logFile, 'a', 0o600); // the hub's file; the server only gets the descriptor
    let child;
    try {
      child = spawn('/bin/sh', ['-c', WRAPPER, 'hub-server', ...(group ? procsFiles(group) : []), '--', ...launch.cmd], {
        env: { ...req.env(listen), ...launch.env }, cwd: launch.cwd, stdio: ['ignore', fd, fd], detached: true,
      });
    } finally {
      closeSync(fd);
    }
    child.unref(); // the spawner may exit (or die) while its servers keep serving
    const program = req.cmd[0];
    const exited = new Promise<ExitStatus>((resolve) => {
      child.on('error', (e) => resolve({ code: null, reason: `could not start: ${e.message}` }));
      child.on('exit', (code, signal) => {
        const oom = group && oomKills(group) > 0;
        resolve({ code, signal, reason: oom ? `killed by the kernel: out of memory (mem_limit ${req.limits.memBytes} bytes)` : exitReason(code, signal, program) });
      });
    });
    if (!child.pid) {
      const why = await exited;
      if (group) await removeServerGroup(group);
      throw new Error(why.reason ?? `could not start ${program}`);
    }
    const state: LocalState = { pid: child.pid, start: procStat(child.pid)?.start ?? '', port, cgroup: group, ...(launch.account ? { account: launch.account } : {}) };
    return { target: `http://${listen.ip}:${port}`, state: state as unknown as BackendState, pid: child.pid, exited };
  }

  async poll(s: BackendState): Promise<PollResult> {
    const state = s as unknown as LocalState;
    if (isSameProcess(state.pid, state.start)) return { running: true };
    const oom = state.cgroup && oomKills(state.cgroup) > 0;
    return { running: false, code: null, ...(oom ? { reason: 'killed by the kernel: out of memory' } : {}) };
  }

  async stop(s: BackendState, graceMs: number): Promise<void> {
    const state = s as unknown as LocalState;
    if (state.pid) await stopProcess(state.pid, state.start, graceMs, this.ctx.log);
    if (state.cgroup && !(await removeServerGroup(state.cgroup))) {
      this.ctx.log.warn({ event: 'server.cgroup.remove_failed', dirs: state.cgroup.dirs }, 'server cgroup not removed');
    }
  }

  async adopt(s: BackendState): Promise<Adopted | null> {
    const state = s as unknown as LocalState;
    return isSameProcess(state.pid, state.start) ? {} : null; // not our child any more: its end is noticed by polling
  }
}
