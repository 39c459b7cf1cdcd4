// The "pam" authenticator: Unix accounts, checked by the system's PAM stack (PAMAuthenticator.service), as the
// established hub's PAMAuthenticator does. Every PAM call runs in a small pool of worker threads (./pam-worker.ts):
// pam_authenticate blocks for seconds after a wrong password and the auth actor's event loop must keep answering.
// Workers start on demand and stop when idle (each costs ~13 MB). The person's Unix groups, primary and
// supplementary, feed allowed_groups, admin_groups and manage_groups.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { HubConfig } from '../../../shared/config.js';
import { cap, type Logger } from '../../../shared/log.js';
import type { Authenticator, AuthenticatorDeps, AuthenticatorFactory, Identity, Verdict } from './contract.js';
import type { PamAnswer, PamJob } from './pam-worker.js';

const LIBPAM = 'libpam.so.0';
/** Longer input never reaches PAM: no account has such a name, and it bounds the work a stranger can ask for. */
const MAX_NAME_LENGTH = 256;
const MAX_PASSWORD_LENGTH = 4096;

export interface PamPoolLimits {
  /** worker threads at most, each running one login at a time */
  workers: number;
  /** logins waiting for a worker at most; beyond that a login is answered "unavailable" at once */
  queued: number;
  /** an idle worker stops after this long */
  idleMs: number;
}

export const PAM_POOL_LIMITS: PamPoolLimits = { workers: 4, queued: 32, idleMs: 30_000 };

type Section = HubConfig['PAMAuthenticator'];
type PoolResult = PamAnswer | 'late' | 'full' | 'closed';

interface Waiting {
  job: PamJob;
  /** false when the login was already answered (deadline passed, pool closed) */
  settle(result: PoolResult): boolean;
}

interface PoolWorker {
  thread: Worker;
  running?: Waiting;
  idleTimer?: NodeJS.Timeout;
}

/** From source (tsx) the worker is a .ts file, and Node 20 does not carry tsx's loader hooks into workers. */
function startWorkerThread(): Worker {
  if (!import.meta.url.endsWith('.ts')) return new Worker(new URL('./pam-worker.js', import.meta.url));
  const tsx = import.meta.resolve('tsx/esm/api');
  const entry = new URL('./pam-worker.ts', import.meta.url).href;
  return new Worker(`import(${JSON.stringify(tsx)}).then((api) => api.register()).then(() => import(${JSON.stringify(entry)}))`, { eval: true });
}

/** Worker threads for PAM: started on demand up to `workers`, a bounded queue, every wait bounded by a deadline. */
export class PamPool {
  private readonly workers = new Set<PoolWorker>();
  private readonly queue: Waiting[] = [];
  private nextId = 1;
  private closed = false;

  constructor(private readonly log: Logger, private readonly limits: PamPoolLimits = PAM_POOL_LIMITS) {}

  /** One login. 'late': the deadline passed first (a worker's later answer is dropped); 'full': too many wait. */
  run(job: Omit<PamJob, 'id'>, deadline: number): Promise<PoolResult> {
    if (this.closed) return Promise.resolve('closed');
    if (this.queue.length >= this.limits.queued) return Promise.resolve('full');
    const wait = deadline - Date.now();
    if (wait <= 0) return Promise.resolve('late');
    return new Promise((resolve) => {
      let answered = false;
      const waiting: Waiting = {
        job: { ...job, id: this.nextId++ },
        settle: (result) => {
          if (answered) return false;
          answered = true;
          clearTimeout(timer);
          resolve(result);
          return true;
        },
      };
      const timer = setTimeout(() => {
        const queued = this.queue.indexOf(waiting);
        if (queued >= 0) this.queue.splice(queued, 1);
        waiting.settle('late');
      }, wait);
      this.queue.push(waiting);
      this.dispatch();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const waiting of this.queue.splice(0)) waiting.settle('closed');
    const stopping = [...this.workers].map((w) => this.retire(w));
    await Promise.all(stopping);
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      const worker = [...this.workers].find((w) => !w.running) ?? this.spawn();
      if (!worker) return;
      clearTimeout(worker.idleTimer);
      worker.running = this.queue.shift()!;
      worker.thread.postMessage(worker.running.job);
    }
  }

  private spawn(): PoolWorker | undefined {
    if (this.closed || this.workers.size >= this.limits.workers) return undefined;
    const worker: PoolWorker = { thread: startWorkerThread() };
    worker.thread.unref(); // a pending login's deadline timer keeps the process up, an idle worker must not
    worker.thread.on('message', (answer: PamAnswer) => this.answered(worker, answer));
    worker.thread.on('error', (err) => this.log.error({ err }, 'PAM worker failed'));
    worker.thread.on('exit', (code) => {
      if (!this.workers.delete(worker)) return; // retired on purpose
      this.log.warn({ code }, 'PAM worker exited');
      worker.running?.settle({ id: worker.running.job.id, ok: false, reason: 'PAM error: the PAM worker stopped', unavailable: true });
      this.dispatch();
    });
    this.workers.add(worker);
    return worker;
  }

  private answered(worker: PoolWorker, answer: PamAnswer): void {
    if (!this.workers.has(worker)) return; // retired while PAM was still busy
    const running = worker.running;
    worker.running = undefined;
    if (running?.job.id === answer.id && !running.settle(answer)) this.log.info({ ok: answer.ok }, 'a late PAM answer dropped');
    worker.idleTimer = setTimeout(() => void this.retire(worker), this.limits.idleMs).unref();
    this.dispatch();
  }

  private async retire(worker: PoolWorker): Promise<void> {
    this.workers.delete(worker);
    clearTimeout(worker.idleTimer);
    worker.running?.settle('closed');
    await worker.thread.terminate();
  }
}

/** The backend's view of a person from their Unix groups: allowed_groups and admin_groups only ever add. */
export function pamIdentity(name: string, groups: string[], section: Pick<Section, 'allowed_groups' | 'admin_groups'>): Identity {
  const inOneOf = (wanted: readonly string[]) => wanted.some((g) => groups.includes(g));
  // not in allowed_groups is "no opinion", not a refusal: allowed_users may still name the person
  return { name, groups, allowed: inOneOf(section.allowed_groups) || undefined, admin: inOneOf(section.admin_groups) || undefined };
}

/** Whether `s` reaches PAM unchanged: no NUL, and every character encodable (latin1 would turn "Łx" into "Ax"). */
function passesIntact(s: string, encoding: BufferEncoding): boolean {
  return !s.includes('\0') && Buffer.from(s, encoding).toString(encoding) === s;
}

export function pamAuthenticator({ config, log }: AuthenticatorDeps, limits: PamPoolLimits = PAM_POOL_LIMITS): Authenticator {
  const section = config.PAMAuthenticator;
  const encoding = section.encoding as 'utf8' | 'latin1';
  const pool = new PamPool(log.child({ component: 'pam' }), limits);
  const refused = (reason: string): Verdict => ({ ok: false, reason });
  const unavailable = (reason: string): Verdict => ({ ok: false, reason, unavailable: true });

  return {
    offer: { form: true },
    admitsAllByDefault: false,
    hasAllowRule: section.allowed_groups.length > 0,

    async authenticate({ username, password }, ctx) {
      const name = username.trim();
      if (!name || !password || name.length > MAX_NAME_LENGTH || password.length > MAX_PASSWORD_LENGTH
        || !passesIntact(name, encoding) || !passesIntact(password, encoding)) return refused('invalid credentials');
      const started = Date.now();
      const result = await pool.run({
        service: section.service, username: name, password, encoding,
        checkAccount: section.check_account, openSessions: section.open_sessions,
      }, ctx.deadline);
      const fields = { user: cap(name, 64), service: section.service, ms: Date.now() - started };
      if (result === 'late' || result === 'full' || result === 'closed') {
        const reason = { late: 'PAM did not answer in time', full: 'PAM busy: too many logins waiting', closed: 'PAM authenticator closed' }[result];
        ctx.log.warn(fields, reason);
        return unavailable(reason);
      }
      if (!result.ok) {
        ctx.log[result.unavailable ? 'warn' : 'debug']({ ...fields, reason: result.reason }, 'PAM refused a login');
        return result.unavailable ? unavailable(result.reason) : refused(result.reason);
      }
      if (result.sessionProblem) ctx.log.warn({ ...fields, problem: result.sessionProblem }, 'PAM session failed; the login stands');
      return { ok: true, identity: pamIdentity(name, result.groups, section) };
    },

    configProblems() {
      const problems: string[] = [];
      if (!existsSync(`/etc/pam.d/${section.service}`)) {
        problems.push(`PAMAuthenticator.service: /etc/pam.d/${section.service} does not exist (PAM would use its "other" service, which refuses everyone on most systems)`);
      }
      try {
        const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
        koffi.load(LIBPAM).unload();
      } catch (err) {
        problems.push(`PAMAuthenticator: ${LIBPAM} cannot be loaded (${(err as Error).message}): install libpam0g`);
      }
      const uid = process.geteuid?.();
      if (uid !== 0) {
        problems.push(`PAMAuthenticator: the auth actor runs as uid ${uid}, not root: pam_unix checks other accounts' passwords only as root (it reads /etc/shadow)`);
      }
      return problems;
    },

    close: () => pool.close(),
  };
}

export const createPamAuthenticator: AuthenticatorFactory = (deps) => pamAuthenticator(deps);
