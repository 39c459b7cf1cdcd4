// Tools the benchmarks need from Debian (wrk, the established hub, configurable-http-proxy).
import { spawnSync, type SpawnSyncOptions } from 'node:child_process';
import { cpSync, existsSync, readFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO } from '../harness.js';
import { processTree } from '../../shared/processes.js';

export const onPath = (bin: string): boolean => (process.env.PATH ?? '').split(':').some((d) => d && existsSync(join(d, bin)));

/** Installs a Debian package when running as root with apt-get; bounded in time. */
export function aptInstall(pkg: string, log: (line: string) => void): void {
  if (process.getuid?.() !== 0 || !onPath('apt-get')) return;
  log(`installing ${pkg} (apt-get)`);
  const opts: SpawnSyncOptions = { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000, env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } };
  if (spawnSync('apt-get', ['install', '-y', pkg], opts).status === 0) return;
  spawnSync('apt-get', ['update'], { ...opts, timeout: 120_000 });
  spawnSync('apt-get', ['install', '-y', pkg], opts);
}

/**
 * An earlier commit of this hub, checked out beside this one and built, for a benchmark that compares
 * before and after in the same run (`BENCH_BASELINE=<commit>`). It shares this checkout's node_modules
 * (packages have only been added since the baselines worth comparing) and is built with tsc alone: its own
 * set-up script would reinstall packages into the shared folder. Returns the checkout's directory.
 */
export function baselineCheckout(rev: string, log: (line: string) => void): string {
  const resolved = spawnSync('git', ['-C', REPO, 'rev-parse', '--verify', `${rev}^{commit}`], { encoding: 'utf8' });
  if (resolved.status !== 0) throw new Error(`BENCH_BASELINE=${rev}: not a commit of this repository`);
  const commit = resolved.stdout.trim();
  const dir = join(tmpdir(), `hub-baseline-${commit.slice(0, 12)}`);
  const run = (cmd: string, args: string[], cwd: string) => {
    const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout: 600_000 });
    if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed in ${cwd}: ${(r.stderr || r.stdout).slice(-2000)}`);
  };
  if (!existsSync(join(dir, 'dist', 'supervisor.js'))) {
    log(`baseline: checking out ${commit.slice(0, 12)} in ${dir} and building it`);
    if (!existsSync(dir)) run('git', ['-C', REPO, 'worktree', 'add', '--detach', dir, commit], REPO);
    if (!existsSync(join(dir, 'node_modules'))) symlinkSync(join(REPO, 'node_modules'), join(dir, 'node_modules'));
    // a baseline with contracts generated from proto/ needs them before tsc: this checkout's when proto/ is the
    // same, else generated from its own proto/ by this checkout's generator (its set-up script would install packages)
    if (existsSync(join(dir, 'shared', 'contracts')) && existsSync(join(dir, 'scripts', 'setup.mjs'))) {
      if (spawnSync('git', ['-C', REPO, 'diff', '--quiet', commit, '--', 'proto']).status === 0) {
        cpSync(join(REPO, 'shared', 'contracts', 'generated'), join(dir, 'shared', 'contracts', 'generated'), { recursive: true });
      } else {
        run(process.execPath, [join(REPO, 'scripts', 'contracts.mjs'), dir], REPO);
      }
    }
    run(join(REPO, 'node_modules', '.bin', 'tsc'), ['-p', '.'], dir);
  }
  return dir;
}

/** CPU time (user + system) of these processes so far, in ms. */
export function cpuMs(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]); // utime, stime
    } catch {
      // gone
    }
  }
  return ticks * 10; // USER_HZ is 100 on Linux
}

/** A process and its children (nginx's workers). */
export function withChildren(pid: number | null | undefined): number[] {
  if (!pid) return [];
  try {
    return [pid, ...readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)];
  } catch {
    return [pid];
  }
}

/**
 * Waits until a hub's processes are nearly idle (under 5% of a core over half a second), at most `timeoutMs`:
 * what a bulk change leaves behind (audit events, activity writes) must not be measured as the reads after it.
 */
export async function waitForQuiet(rootPid: number, log: (line: string) => void, timeoutMs = 30_000): Promise<void> {
  const start = performance.now();
  for (let attempt = 0; performance.now() - start < timeoutMs && attempt < 200; attempt++) {
    const pids = processTree(rootPid);
    const before = cpuMs(pids);
    await new Promise((r) => setTimeout(r, 500));
    if (cpuMs(pids) - before <= 25) return;
  }
  log(`still busy after ${(timeoutMs / 1000).toFixed(0)} s; measuring anyway`);
}
