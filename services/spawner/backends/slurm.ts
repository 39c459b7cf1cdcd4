// `slurm`: each server is a SLURM batch job. sbatch gets the job script (SlurmSpawner.batch_script rendered)
// on its standard input and the server's environment as its own (exported with the job, so the server's
// token is never written into a script or a file others could read); the job runs slurm-job.js, which picks
// a port on whichever node the job landed and reports host and port to the hub with the server's token.
// The job id is the state; one squeue every SlurmSpawner.poll_interval looks at every job; scancel stops;
// why a job ended comes from scontrol (or sacct, once scontrol has forgotten the job).
// When the hub runs as root, jobs run as the user's system account (sbatch --uid/--gid), as localprocess
// runs servers; otherwise as the hub's own account.
import { spawn } from 'node:child_process';
import { lookup } from 'node:dns/promises';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { internalHubUrl, publicHubUrl, usesTls, type HubConfig } from '../../../shared/config.js';
import type { Logger } from '../../../shared/log.js';
import { REPO_ROOT, RUNNING_FROM_SOURCE } from '../../../shared/paths.js';
import { locationTarget } from '../../../shared/servers.js';
import type { Adopted, BackendContext, BackendState, ExitStatus, PollResult, Preflight, ReportedLocation, SpawnerBackend, StartRequest, Started } from '../backend.js';
import { expandHome } from '../process.js';
import { invalidAccountName, lookupAccount } from './localprocess.js';

type Options = HubConfig['SlurmSpawner'];

interface SlurmState {
  job_id: string;
  /** the account the job runs as, when not the hub's own */
  account?: string;
}

/** What squeue says about a job. */
export interface JobInfo {
  id: string;
  state: string;
  node: string;
  reason: string;
}

/** States in which a job may still start or run: anything else has ended (COMPLETING: ending, processes may linger). */
const ACTIVE = new Set(['PENDING', 'CONFIGURING', 'RUNNING', 'SUSPENDED', 'RESIZING', 'REQUEUED', 'REQUEUE_HOLD', 'REQUEUE_FED', 'SIGNALING', 'STAGE_OUT', 'STOPPED', 'RESV_DEL_HOLD', 'COMPLETING']);
const isRunning = (j: JobInfo | undefined) => j !== undefined && ACTIVE.has(j.state) && j.state !== 'COMPLETING';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const COMMAND_TIMEOUT_MS = 30_000;

interface Ran { code: number | null; stdout: string; stderr: string }

/** Runs one SLURM command (bounded), its stdin given; never throws for a non-zero exit (callers read the code). */
function runCommand(argv: readonly string[], o: { input?: string; env: Record<string, string> }): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { env: o.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), COMMAND_TIMEOUT_MS);
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`could not run ${argv[0]}: ${e.message}`));
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.on('error', () => undefined); // a command that exits without reading its input
    child.stdin.end(o.input ?? '');
  });
}

const firstLine = (text: string) => text.trim().split('\n').filter(Boolean).slice(-1)[0]?.slice(0, 300) ?? '';

/** `'…'` for /bin/sh. */
export const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * The batch script: each `{placeholder}` replaced; a line whose placeholder has an empty value is left out
 * (so `#SBATCH --partition={partition}` disappears when no partition is set).
 */
export function renderBatchScript(template: string, values: Record<string, string>): string {
  return template.split('\n').flatMap((line) => {
    let empty = false;
    const out = line.replace(/\{([a-z_]+)\}/g, (whole, name: string) => {
      if (!(name in values)) return whole;
      if (values[name] === '') empty = true;
      return values[name];
    });
    return empty ? [] : [out];
  }).join('\n');
}

/** The key=value words of `scontrol show job -o` (values without spaces, which is all we read). */
function parseScontrol(line: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const word of line.trim().split(/\s+/)) {
    const eq = word.indexOf('=');
    if (eq > 0) out[word.slice(0, eq)] = word.slice(eq + 1);
  }
  return out;
}

/** Why a job ended, for a person (progress, audit, logs). */
export function describeJobEnd(id: string, state: string, o: { exitCode?: string; reason?: string; timeLimit?: string } = {}): string {
  const base = state.split(' ')[0]; // sacct: "CANCELLED by 0"
  const reason = o.reason && o.reason !== 'None' && o.reason !== '(null)' ? ` (${o.reason})` : '';
  switch (base) {
    case 'TIMEOUT': return `SLURM job ${id} reached its time limit${o.timeLimit ? ` of ${o.timeLimit}` : ''}`;
    case 'CANCELLED': return `SLURM job ${id} was cancelled${state.includes(' by ') ? ` ${state.slice(state.indexOf(' by ') + 1)}` : ''}`;
    case 'COMPLETED': return `SLURM job ${id} completed${o.exitCode ? ` (exit code ${o.exitCode})` : ''}`;
    case 'FAILED': return `SLURM job ${id} failed${o.exitCode ? ` (exit code ${o.exitCode})` : ''}${reason}`;
    case 'OUT_OF_MEMORY': return `SLURM job ${id} ran out of memory`;
    case 'NODE_FAIL': return `SLURM job ${id} ended: its node failed`;
    case 'PREEMPTED': return `SLURM job ${id} was preempted`;
    case 'DEADLINE': return `SLURM job ${id} reached its deadline`;
    case 'COMPLETING': return `SLURM job ${id} is ending (COMPLETING)${reason}`;
    default: return `SLURM job ${id} ended: ${state || 'state unknown'}${reason}`;
  }
}

export function preflight(ctx: BackendContext): Preflight {
  const o = ctx.config.SlurmSpawner;
  const problems: string[] = [];
  if (o.slurm_conf && !existsSync(o.slurm_conf)) problems.push(`SlurmSpawner.slurm_conf ${o.slurm_conf} does not exist`);
  const wrapper = jobWrapper();
  if (!existsSync(wrapper[wrapper.length - 1])) problems.push(`the job wrapper ${wrapper[wrapper.length - 1]} is missing: run \`npm run build\``);
  const warnings = process.getuid?.() === 0 ? [] : [`Hub.spawner_class is "slurm" and the hub does not run as root: every job runs as the hub's own account (uid ${process.getuid?.()})`];
  return { problems, warnings };
}

/** node + the wrapper program, as the job runs them (the hub's own files: a shared file system on a real cluster). */
function jobWrapper(): string[] {
  return RUNNING_FROM_SOURCE
    ? [process.execPath, '--import', 'tsx', join(REPO_ROOT, 'services', 'spawner', 'backends', 'slurm-job.ts')]
    : [process.execPath, join(REPO_ROOT, 'dist', 'services', 'spawner', 'backends', 'slurm-job.js')];
}

/** Watches every job this spawner follows with one squeue per interval, and tells each job's followers when it ends. */
class JobWatcher {
  private readonly jobs = new Map<string, { ended: Promise<ExitStatus>; end: (e: ExitStatus) => void; changed: Set<(j: JobInfo | undefined) => void>; last?: JobInfo }>();
  private timer: NodeJS.Timeout | null = null;
  private hurried = 0;

  constructor(private readonly slurm: Slurm, private readonly intervalMs: number, private readonly log: Logger) {}

  /** Settles when the job ends, with why. */
  watch(id: string): Promise<ExitStatus> {
    let w = this.jobs.get(id);
    if (!w) {
      let end!: (e: ExitStatus) => void;
      const ended = new Promise<ExitStatus>((res) => { end = res; });
      this.jobs.set(id, (w = { ended, end, changed: new Set() }));
    }
    this.schedule();
    return w.ended;
  }

  /** Calls `fn` with each change of what squeue says about the job; returns the unsubscribe. */
  onChange(id: string, fn: (j: JobInfo | undefined) => void): () => void {
    this.watch(id);
    const w = this.jobs.get(id)!;
    w.changed.add(fn);
    if (w.last) fn(w.last);
    return () => w.changed.delete(fn);
  }

  /** While a start waits for its job, look more often (then back to the interval). */
  hurry(): () => void {
    this.hurried++;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.schedule();
    let done = false;
    return () => {
      if (!done) this.hurried--;
      done = true;
    };
  }

  forget(id: string): void {
    this.jobs.delete(id);
  }

  private schedule(): void {
    if (this.timer || this.jobs.size === 0) return;
    const ms = this.hurried > 0 ? Math.min(this.intervalMs, 500) : this.intervalMs;
    this.timer = setTimeout(() => void this.tick(), ms);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    const ids = [...this.jobs.keys()];
    try {
      const found = await this.slurm.query(ids);
      for (const id of ids) {
        const w = this.jobs.get(id);
        if (!w) continue;
        const j = found.get(id);
        if (JSON.stringify(j) !== JSON.stringify(w.last)) {
          w.last = j;
          for (const fn of w.changed) fn(j);
        }
        if (!isRunning(j)) {
          this.jobs.delete(id);
          w.end({ code: null, reason: await this.slurm.whyEnded(id, j) });
        }
      }
    } catch (e) {
      this.log.warn({ event: 'slurm.poll_failed', err: (e as Error).message }, 'could not look at the SLURM jobs');
    } finally {
      this.timer = null;
      this.schedule();
    }
  }
}

/** The SLURM commands, as configured. */
class Slurm {
  constructor(private readonly o: Options) {}

  /** PATH and SLURM_CONF only: nothing of the hub's own environment reaches the commands. */
  env(extra: Record<string, string> = {}): Record<string, string> {
    return {
      PATH: process.env.PATH ?? '/usr/bin:/bin', ...extra,
      ...(this.o.slurm_conf ? { SLURM_CONF: this.o.slurm_conf } : process.env.SLURM_CONF ? { SLURM_CONF: process.env.SLURM_CONF } : {}),
    };
  }

  async submit(script: string, args: string[], env: Record<string, string>): Promise<string> {
    const r = await runCommand([...this.o.sbatch, '--parsable', ...args], { input: script, env: this.env(env) });
    const id = r.stdout.trim().split(';')[0];
    if (r.code !== 0 || !/^\d+(_\d+)?$/.test(id)) throw new Error(`sbatch refused the job: ${firstLine(r.stderr) || firstLine(r.stdout) || `exit code ${r.code}`}`);
    return id;
  }

  /** One squeue for all of `ids`; jobs SLURM has forgotten are absent. */
  async query(ids: string[]): Promise<Map<string, JobInfo>> {
    const out = new Map<string, JobInfo>();
    if (!ids.length) return out;
    const r = await runCommand([...this.o.squeue, '--noheader', '--states=all', `--jobs=${ids.join(',')}`, '--format=%i|%T|%N|%r'], { env: this.env() });
    if (r.code !== 0) {
      if (/Invalid job id/i.test(r.stderr)) return out; // one id, unknown: forgotten
      throw new Error(`squeue failed: ${firstLine(r.stderr) || `exit code ${r.code}`}`);
    }
    for (const line of r.stdout.split('\n')) {
      const [id, state, node, reason] = line.trim().split('|');
      if (id && state) out.set(id, { id, state, node: node ?? '', reason: reason ?? '' });
    }
    return out;
  }

  /** Why a job ended: scontrol while the controller remembers it, else sacct, else what squeue last said. */
  async whyEnded(id: string, last?: JobInfo): Promise<string> {
    // a job seen COMPLETING (its processes being ended) shows how it ended moments later: look again, briefly
    for (let attempt = 0; attempt < 10; attempt++) {
      const f = await this.show('job', id).catch(() => null);
      if (!f?.JobState) break;
      if (f.JobState === 'COMPLETING' && attempt < 9) {
        await sleep(200);
        continue;
      }
      return describeJobEnd(id, f.JobState ?? '', { exitCode: f.ExitCode, reason: f.Reason, timeLimit: f.TimeLimit });
    }
    const sa = await runCommand([...this.o.sacct, '--noheader', '--parsable2', '--allocations', `--jobs=${id}`, '--format=State,ExitCode,Reason'], { env: this.env() }).catch(() => null);
    const row = sa && sa.code === 0 ? sa.stdout.trim().split('\n')[0] : '';
    if (row) {
      const [state, exitCode, reason] = row.split('|');
      return describeJobEnd(id, state, { exitCode, reason });
    }
    return last ? describeJobEnd(id, last.state, { reason: last.reason }) : `SLURM job ${id} is no longer known to SLURM`;
  }

  /** `scontrol show <what> --oneliner <id>` as key=value, or null when SLURM does not know it. */
  async show(what: 'job' | 'node', id: string): Promise<Record<string, string> | null> {
    const r = await runCommand([...this.o.scontrol, 'show', what, '--oneliner', id], { env: this.env() });
    return r.code === 0 && r.stdout.includes('=') ? parseScontrol(r.stdout) : null;
  }

  /** scancel; a job that has already ended is fine. */
  async cancel(id: string): Promise<void> {
    const r = await runCommand([...this.o.scancel, id], { env: this.env() });
    if (r.code !== 0 && !/Invalid job id|already completing or completed/i.test(r.stderr)) {
      throw new Error(`scancel ${id} failed: ${firstLine(r.stderr) || `exit code ${r.code}`}`);
    }
  }
}

export function createSlurmBackend(ctx: BackendContext): SpawnerBackend {
  const options = ctx.config.SlurmSpawner;
  const slurm = new Slurm(options);
  const watcher = new JobWatcher(slurm, options.poll_interval * 1000, ctx.log);
  const internalApi = internalHubUrl(ctx.config, '/hub/api'); // under Hub.base_url, as HUB_API_URL is
  // where jobs on the compute nodes call the API: the operator's, else with HTTPS at the front door its public https
  // address (the hub's plain Hub.hub_port listens on loopback only, and API tokens must not cross a network in clear)
  const nodesApi = options.hub_api_url || (usesTls(ctx.config) ? publicHubUrl(ctx.config, '/hub/api') : '');
  const asRoot = process.getuid?.() === 0;

  /** Who the job runs as: with root, the user's own account (which must exist on the cluster); else the hub's. */
  async function runAs(user: string): Promise<{ args: string[]; env: Record<string, string>; home: string; account?: string }> {
    if (!asRoot) return { args: [], env: {}, home: process.env.HOME || homedir() };
    const why = invalidAccountName(user);
    if (why) throw new Error(`'${user}' cannot be a system account name (${why})`);
    const a = await lookupAccount(user);
    if (!a) throw new Error(`no system account '${user}': SLURM jobs run as their user's account, which must exist on the cluster`);
    const minUid = ctx.config.LocalProcessSpawner.min_uid;
    if (a.uid < minUid) throw new Error(`the system account '${user}' has uid ${a.uid}, below LocalProcessSpawner.min_uid ${minUid}: servers never run as root or as system accounts`);
    return {
      args: [`--uid=${a.uid}`, `--gid=${a.gid}`],
      env: { HOME: a.home, USER: a.name, LOGNAME: a.name, SHELL: a.shell },
      home: a.home, account: a.name,
    };
  }

  /** The job's environment: the server's, listening on port 0 (the wrapper picks one), the API where nodes reach it. */
  function jobEnv(req: StartRequest, o: Options, account: Record<string, string>): Record<string, string> {
    const env = { ...req.env({ ip: o.server_ip, port: 0 }), ...account };
    const api = o.hub_api_url || nodesApi;
    if (api) {
      for (const [k, v] of Object.entries(env)) if (v.startsWith(internalApi)) env[k] = api + v.slice(internalApi.length);
    }
    return env;
  }

  /** Progress while the job waits and starts; resolves with where the server listens, rejects if the job ends first. */
  async function located(req: StartRequest, id: string, ended: Promise<ExitStatus>): Promise<string> {
    const said = new Set<string>();
    const progressOnce = (message: string) => {
      if (!said.has(message)) void req.progress(message).catch(() => undefined);
      said.add(message);
    };
    const unhurry = watcher.hurry();
    const unwatch = watcher.onChange(id, (j) => {
      if (j?.state === 'PENDING') progressOnce(`SLURM job ${id} is queued${j.reason && j.reason !== 'None' ? ` (${j.reason})` : ''}`);
      else if (j?.state === 'RUNNING') progressOnce(`SLURM job ${id} is running on ${j.node}`);
    });
    let onAbort = () => undefined as void;
    try {
      const where = await Promise.race([
        req.reported(),
        ended.then((e) => { throw new Error(e.reason ?? `SLURM job ${id} ended`); }),
        new Promise<never>((_, reject) => {
          onAbort = () => reject(new Error('cancelled'));
          if (req.signal.aborted) onAbort();
          req.signal.addEventListener('abort', onAbort, { once: true });
        }),
      ]);
      if (![...said].some((m) => m.includes(' is running on '))) {
        // the report can come before the next look at the queue: say where the job runs all the same
        const j = (await slurm.query([id]).catch(() => new Map<string, JobInfo>())).get(id);
        if (j?.node) progressOnce(`SLURM job ${id} is running on ${j.node}`);
      }
      progressOnce(`The server listens on ${where.host}:${where.port}`);
      return locationTarget(where.host, where.port);
    } finally {
      unhurry();
      unwatch();
      req.signal.removeEventListener('abort', onAbort);
    }
  }

  return {
    name: 'slurm',

    async start(req: StartRequest): Promise<Started> {
      const o = req.options as unknown as Options;
      const who = await runAs(req.server.user);
      const memory = o.req_memory || (req.limits.memBytes !== null ? `${Math.ceil(req.limits.memBytes / 1048576)}M` : '');
      const nprocs = o.req_nprocs || (req.limits.cpu !== null ? Math.ceil(req.limits.cpu) : 1);
      const script = renderBatchScript(o.batch_script, {
        job_name: `hub-${req.id}`, username: req.server.user, servername: req.server.name, homedir: who.home,
        workdir: expandHome(req.notebookDir, who.home), partition: o.partition, memory, nprocs: String(nprocs),
        runtime: o.req_runtime, options: o.req_options.map((opt) => `#SBATCH ${opt}`).join('\n'),
        cmd: [...jobWrapper(), '--', ...req.cmd].map(shellQuote).join(' '),
      });
      if (req.signal.aborted) throw new Error('cancelled');
      const id = await slurm.submit(script, who.args, jobEnv(req, o, who.env));
      ctx.log.info({ event: 'slurm.submitted', server: req.id, job: id, account: who.account }, 'SLURM job submitted');
      await req.progress(`Submitted SLURM job ${id}`);
      const state: SlurmState = { job_id: id, ...(who.account ? { account: who.account } : {}) };
      const exited = watcher.watch(id);
      return { target: located(req, id, exited), state: state as unknown as BackendState, exited };
    },

    async poll(s: BackendState): Promise<PollResult> {
      const { job_id: id } = s as unknown as SlurmState;
      const j = (await slurm.query([id])).get(id);
      return isRunning(j) ? { running: true } : { running: false, code: null, reason: await slurm.whyEnded(id, j) };
    },

    async stop(s: BackendState, o: { graceMs: number }): Promise<void> {
      const { job_id: id } = s as unknown as SlurmState;
      if (!id) return;
      await slurm.cancel(id); // SLURM sends SIGTERM, then SIGKILL after the cluster's KillWait
      const deadline = Date.now() + 30_000 + 2 * o.graceMs;
      for (let delay = 100; ; delay = Math.min(delay * 1.5, 1000)) {
        const j = (await slurm.query([id])).get(id);
        if (!j || !ACTIVE.has(j.state)) break;
        if (Date.now() > deadline) throw new Error(`SLURM job ${id} is still ${j.state} ${Math.round((30_000 + 2 * o.graceMs) / 1000)} s after scancel`);
        await sleep(delay);
      }
      watcher.forget(id);
    },

    /** The reported host must be the node the job's batch step runs on: its name, NodeHostName, NodeAddr, or one of their addresses. */
    async checkLocation(s: BackendState, where: ReportedLocation): Promise<string | null> {
      const { job_id: id } = s as unknown as SlurmState;
      const job = await slurm.show('job', id);
      if (!job || job.JobState !== 'RUNNING' || !job.BatchHost) return `SLURM job ${id} is not running`;
      const node = await slurm.show('node', job.BatchHost);
      const names = new Set([job.BatchHost, node?.NodeHostName, node?.NodeAddr].filter((n): n is string => Boolean(n)));
      if (names.has(where.host)) return null;
      const addresses = async (host: string) => (await lookup(host, { all: true }).catch(() => [])).map((a) => a.address);
      const nodeAddresses = new Set((await Promise.all([...names].map(addresses))).flat());
      if ((await addresses(where.host)).some((a) => nodeAddresses.has(a))) return null;
      return `${where.host} is not ${job.BatchHost}, the node SLURM runs job ${id} on`;
    },

    async adopt(s: BackendState): Promise<Adopted | null> {
      const { job_id: id } = s as unknown as SlurmState;
      if (!id) return null;
      const j = (await slurm.query([id])).get(id);
      return isRunning(j) ? { exited: watcher.watch(id) } : null;
    },
  };
}
