// A real one-node SLURM cluster for tests and the benchmark: its own munged (own key and socket), slurmctld
// and slurmd on free ports, all files in a temp dir (the recipe in /work/shared/NOTES.md). Nothing here is a
// stand-in: if a daemon cannot start, start() throws with the reason and its log, and the test fails.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, sleep } from '../harness.js';

export interface SlurmCluster {
  conf: string;
  partition: string;
  dir: string;
  /** runs a SLURM command against this cluster (squeue, scancel, …) and returns its output */
  run(command: string, args: string[]): string;
  stop(): Promise<void>;
}

const tail = (file: string) => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').slice(-15).join('\n') : '(no log)');

function pidOf(file: string): number | null {
  try {
    return Number(readFileSync(file, 'utf8').trim()) || null;
  } catch {
    return null;
  }
}

const alive = (pid: number | null) => {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function waitFor(what: string, ok: () => boolean, ms: number, log: () => string): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (ok()) return;
    await sleep(100);
  }
  throw new Error(`SLURM test cluster: ${what} within ${ms / 1000} s\n${log()}`);
}

/** Stops a daemon by its pid file: SIGTERM, then SIGKILL after a bound. */
async function stopDaemon(pidFile: string): Promise<void> {
  const pid = pidOf(pidFile);
  if (!alive(pid)) return;
  process.kill(pid!, 'SIGTERM');
  for (let i = 0; i < 20 && alive(pid); i++) await sleep(100);
  if (alive(pid)) process.kill(pid!, 'SIGKILL');
}

/**
 * Starts the cluster. `cpus` may exceed the machine's (slurmd takes the configured values), so that many
 * one-CPU jobs run at once; each job gets DefMemPerCPU unless it asks.
 */
export async function startSlurmCluster({ cpus = 32 }: { cpus?: number } = {}): Promise<SlurmCluster> {
  if (process.getuid?.() !== 0) throw new Error('SLURM test cluster: needs root (slurmd runs jobs as their users)');
  for (const f of ['/usr/sbin/slurmctld', '/usr/sbin/slurmd', '/usr/sbin/munged', '/usr/sbin/mungekey', '/usr/bin/sbatch']) {
    if (!existsSync(f)) throw new Error(`SLURM test cluster: ${f} is missing; run \`node scripts/setup.mjs --for-tests\` (installs slurm-wlm and munge)`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'hub-slurm-'));
  chmodSync(dir, 0o755); // munged (as munge) and the jobs' users pass through it
  const munge = join(dir, 'munge');
  mkdirSync(munge, { mode: 0o755 });
  const { uid, gid } = (() => {
    const [, , u, g] = execFileSync('getent', ['passwd', 'munge'], { encoding: 'utf8' }).trim().split(':');
    return { uid: Number(u), gid: Number(g) };
  })();
  execFileSync('mungekey', ['--create', '--keyfile', join(munge, 'munge.key')]);
  for (const f of [munge, join(munge, 'munge.key')]) chownSync(f, uid, gid);
  const socket = join(munge, 'munge.socket');
  const mungePid = join(munge, 'munged.pid');
  const host = hostname();
  const [ctldPort, slurmdPort] = [await freePort(), await freePort()];
  const partition = 'hubtest';
  const conf = join(dir, 'slurm.conf');
  for (const d of ['state', 'spool']) mkdirSync(join(dir, d));
  writeFileSync(conf, [
    `ClusterName=hub${ctldPort}`, `SlurmctldHost=${host}`, `SlurmctldPort=${ctldPort}`, `SlurmdPort=${slurmdPort}`,
    'AuthType=auth/munge', `AuthInfo=socket=${socket}`, 'CredType=cred/munge',
    'SlurmUser=root', 'SlurmdUser=root', 'ProctrackType=proctrack/linuxproc', 'TaskPlugin=task/none',
    'SelectType=select/cons_tres', 'SelectTypeParameters=CR_Core_Memory', 'SlurmdParameters=config_overrides',
    `StateSaveLocation=${dir}/state`, `SlurmdSpoolDir=${dir}/spool`,
    `SlurmctldPidFile=${dir}/slurmctld.pid`, `SlurmdPidFile=${dir}/slurmd.pid`,
    `SlurmctldLogFile=${dir}/slurmctld.log`, `SlurmdLogFile=${dir}/slurmd.log`,
    'ReturnToService=2', 'MpiDefault=none', 'JobAcctGatherType=jobacct_gather/none',
    'AccountingStorageType=accounting_storage/none', 'JobCompType=jobcomp/none', 'SchedulerType=sched/backfill',
    'KillWait=2', 'MinJobAge=300', 'InactiveLimit=0', 'DefMemPerCPU=200',
    // SLURM holds batch jobs back up to 3 s by default to batch their scheduling; people waiting for a server
    // should not wait for that (measured here: ~3 s → ~1 s from sbatch to the job running)
    'SchedulerParameters=batch_sched_delay=0',
    `NodeName=${host} CPUs=${cpus} RealMemory=20000 State=UNKNOWN`,
    `PartitionName=${partition} Nodes=${host} Default=YES MaxTime=INFINITE State=UP`, '',
  ].join('\n'));
  const env = { ...process.env, SLURM_CONF: conf };
  const cluster: SlurmCluster = {
    conf, partition, dir,
    run: (command, args) => execFileSync(command, args, { env, encoding: 'utf8', timeout: 30_000 }),
    async stop() {
      spawnSync('scancel', ['--full', `--partition=${partition}`], { env, stdio: 'ignore', timeout: 10_000 });
      await stopDaemon(join(dir, 'slurmd.pid'));
      await stopDaemon(join(dir, 'slurmctld.pid'));
      await stopDaemon(mungePid);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    const m = spawnSync('su', ['-s', '/bin/sh', 'munge', '-c',
      `munged --socket=${socket} --key-file=${munge}/munge.key --pid-file=${mungePid} --log-file=${munge}/munged.log --seed-file=${munge}/munged.seed`],
    { encoding: 'utf8', timeout: 20_000 });
    if (m.status !== 0) throw new Error(`SLURM test cluster: munged did not start: ${m.stderr.trim()}\n${tail(join(munge, 'munged.log'))}`);
    for (const [daemon, log] of [['slurmctld', 'slurmctld.log'], ['slurmd', 'slurmd.log']]) {
      const r = spawnSync(`/usr/sbin/${daemon}`, ['-f', conf], { env, encoding: 'utf8', timeout: 30_000 });
      if (r.status !== 0) throw new Error(`SLURM test cluster: ${daemon} did not start: ${r.stderr.trim()}\n${tail(join(dir, log))}`);
    }
    const sinfo = () => spawnSync('sinfo', ['--noheader', '--Node', '--format=%T'], { env, encoding: 'utf8', timeout: 10_000 }).stdout?.trim();
    await waitFor('the node did not become idle', () => sinfo() === 'idle', 30_000,
      () => `sinfo: ${sinfo()}\n--- slurmctld ---\n${tail(join(dir, 'slurmctld.log'))}\n--- slurmd ---\n${tail(join(dir, 'slurmd.log'))}`);
  } catch (e) {
    await cluster.stop();
    throw e;
  }
  return cluster;
}
