// One supervised child process: started, watched, restarted with exponential backoff and jitter,
// marked failed past a restart-intensity limit, and stopped with SIGTERM then SIGKILL within a budget.
import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import type { Logger } from './log.js';

/**
 * The IPC message that asks the supervisor to stop the hub (an actor relays it from NATS); the supervisor
 * passes it on to every actor before stopping them, so the spawner knows whether to stop servers
 * (`servers`, undefined = Hub.cleanup_servers).
 */
export const SHUTDOWN_MESSAGE = 'hub.shutdown';
export interface ShutdownRequest { type: typeof SHUTDOWN_MESSAGE; servers?: boolean; by: string }

export const isShutdownRequest = (m: unknown): m is ShutdownRequest =>
  typeof m === 'object' && m !== null && (m as { type?: unknown }).type === SHUTDOWN_MESSAGE;

/**
 * IPC from a gateway whose own start is done and which now waits for this node's other actors before it listens:
 * the supervisor starts the actors off the API's path then (they boot after the API's path, not beside it).
 */
export const GATEWAY_BOOTED_MESSAGE = 'hub.gateway.booted';
export const isGatewayBooted = (m: unknown): boolean =>
  typeof m === 'object' && m !== null && (m as { type?: unknown }).type === GATEWAY_BOOTED_MESSAGE;

/**
 * IPC from a gateway whose front door could not listen (`reason` says where). Before the hub first answered, the
 * supervisor stops the hub with it: the port was free at its check, so another process took it since, and a hub
 * whose gateways can never listen would only restart them while that process answers the hub's visitors.
 */
export const FRONT_DOOR_FAILED_MESSAGE = 'hub.gateway.cannot_listen';
export interface FrontDoorFailed { type: typeof FRONT_DOOR_FAILED_MESSAGE; reason: string }
export const isFrontDoorFailed = (m: unknown): m is FrontDoorFailed =>
  typeof m === 'object' && m !== null && (m as { type?: unknown }).type === FRONT_DOOR_FAILED_MESSAGE;

/** IPC from an actor once it serves (its gRPC and NATS services registered): a replacement waits for it. */
export const ACTOR_READY_MESSAGE = 'hub.actor.ready';
export const isActorReady = (m: unknown): boolean =>
  typeof m === 'object' && m !== null && (m as { type?: unknown }).type === ACTOR_READY_MESSAGE;

/**
 * `hub restart` of an actor that must not run twice at once: its successor starts with STANDBY_ENV set, boots as far
 * as it can without touching anything its predecessor owns (code loaded, NATS connected), says STANDBY_MESSAGE and
 * waits; once the predecessor is gone the supervisor sends GO_MESSAGE and it takes over. The gap is its setup alone.
 */
export const STANDBY_ENV = 'HUB_ACTOR_STANDBY';
export const STANDBY_MESSAGE = 'hub.actor.standby';
export const GO_MESSAGE = 'hub.actor.go';
const ofType = (m: unknown, type: string): boolean => typeof m === 'object' && m !== null && (m as { type?: unknown }).type === type;
export const isStandby = (m: unknown): boolean => ofType(m, STANDBY_MESSAGE);
export const isGo = (m: unknown): boolean => ofType(m, GO_MESSAGE);

/**
 * `hub restart` of an actor whose instances may overlap (shared/rolling-restart.ts): its successor starts with
 * PREDECESSOR_ENV set to the pid of the process it replaces, serves beside it, and is told PREDECESSOR_GONE_MESSAGE
 * once that one has exited: what only one instance of a node may do (the spawner adopting its node's servers) waits
 * for that.
 */
export const PREDECESSOR_ENV = 'HUB_ACTOR_PREDECESSOR';
export const PREDECESSOR_GONE_MESSAGE = 'hub.actor.predecessor_gone';
export const isPredecessorGone = (m: unknown): boolean => ofType(m, PREDECESSOR_GONE_MESSAGE);

/**
 * IPC to an actor about to be stopped because a fresh process replaces it (`hub restart`): leave running what the
 * successor keeps (the spawner: servers), and (a gateway) drain: open WebSockets, event streams and requests in
 * flight are kept up to `drain_ms` after the listen socket closed.
 */
export const REPLACED_MESSAGE = 'hub.replaced';
/** `overlap`: the successor already serves (and holds the actor's socket path); the actor then stops by itself */
export interface ReplacedNotice { type: typeof REPLACED_MESSAGE; drain_ms: number; overlap: boolean }
export const isReplacedNotice = (m: unknown): m is ReplacedNotice =>
  typeof m === 'object' && m !== null && (m as { type?: unknown }).type === REPLACED_MESSAGE;

export interface ChildSpec {
  id: string;
  command: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  /** Node children get an IPC channel, so they notice when the supervisor dies and stop themselves. */
  ipc: boolean;
  cwd?: string;
  /** run as this user (the supervisor must be root) */
  uid?: number;
  gid?: number;
}

export interface RestartPolicy {
  backoffInitialMs: number;
  backoffMaxMs: number;
  stableUptimeMs: number;
  intensity: number;
  periodMs: number;
  shutdownMs: number;
}

export class SupervisedChild {
  private proc: ChildProcess | null = null;
  private startedAt = 0;
  private attempt = 0;
  private restartTimes: number[] = [];
  private restartTimer: NodeJS.Timeout | null = null;
  private stopping = false;
  /** between a sequential replacement's stop of the old process and the start of the fresh one */
  private replacing = false;
  /** the end of the process the last overlapping replacement took over from (it may still drain) */
  private predecessorGone: Promise<void> = Promise.resolve();
  /** replaced processes still finishing their work (stopped with the child) */
  private readonly draining = new Set<ChildProcess>();
  failed = false;
  private readonly messageListeners: ((message: unknown) => void)[] = [];
  /** times this child was started again after dying */
  restarts = 0;

  constructor(
    readonly spec: ChildSpec,
    private readonly policy: RestartPolicy,
    private readonly log: Logger,
    private readonly onChange: () => void,
  ) {}

  /** Hears the messages the child sends over its IPC channel (Node children only); may be added after start. */
  onMessage(listener: (message: unknown) => void): void {
    this.messageListeners.push(listener);
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  start(): void {
    // restarted after a crash while a replaced process still finishes its work: it is that one's successor too
    const draining = [...this.draining].find((p) => p.exitCode === null && p.signalCode === null);
    this.proc = this.spawnProcess(draining ? { [PREDECESSOR_ENV]: String(draining.pid) } : {});
    this.startedAt = Date.now();
    this.onChange();
  }

  private spawnProcess(extraEnv: NodeJS.ProcessEnv = {}): ChildProcess {
    const stdio: StdioOptions = this.spec.ipc ? ['ignore', 'inherit', 'inherit', 'ipc'] : ['ignore', 'inherit', 'inherit'];
    // Own process group: a Ctrl-C on the terminal reaches only the supervisor, which then stops children in order.
    const { cwd, uid, gid } = this.spec;
    const env = { ...this.spec.env, ...extraEnv };
    const proc = spawn(this.spec.command, this.spec.args, { env, stdio, detached: true, cwd, uid, gid });
    proc.on('error', (err) => this.log.error({ event: 'child.spawn_error', child: this.spec.id, err: err.message }, 'could not start child'));
    proc.on('exit', (code, signal) => this.exited(proc, code, signal));
    if (this.spec.ipc) proc.on('message', (m) => { for (const listener of this.messageListeners) listener(m); });
    this.log.info({ event: 'child.started', child: this.spec.id, pid: proc.pid }, `started ${this.spec.id}`);
    return proc;
  }

  /** Resolves true once `proc` says it serves (ACTOR_READY_MESSAGE), false when it exits first or `timeoutMs` passes. */
  private whenReady(proc: ChildProcess, timeoutMs: number, said = isActorReady): Promise<boolean> {
    return new Promise((resolve) => {
      const done = (ok: boolean) => {
        clearTimeout(timer);
        proc.off('message', onMessage);
        proc.off('exit', onExit);
        resolve(ok);
      };
      const onMessage = (m: unknown) => { if (said(m)) done(true); };
      const onExit = () => done(false);
      const timer = setTimeout(() => done(false), timeoutMs);
      proc.on('message', onMessage);
      proc.once('exit', onExit);
    });
  }

  /** Asks `proc` to stop (SIGTERM, SIGKILL after `budgetMs`); resolves once it is gone. */
  private async terminate(proc: ChildProcess, budgetMs: number): Promise<void> {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const gone = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => {
      this.log.warn({ event: 'child.kill', child: this.spec.id, pid: proc.pid }, `${this.spec.id} did not stop in time: SIGKILL`);
      proc.kill('SIGKILL');
    }, budgetMs);
    await gone;
    clearTimeout(timer);
  }

  /** Resolves once `proc` has exited, or after `ms` (false then). */
  private exitedWithin(proc: ChildProcess, ms: number): Promise<boolean> {
    if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => { proc.off('exit', onExit); resolve(false); }, ms);
      const onExit = () => { clearTimeout(timer); resolve(true); };
      proc.once('exit', onExit);
    });
  }

  /**
   * `hub restart`: this child's process replaced by a fresh one of the same spec (the code now in dist/).
   * `overlap`: the fresh one starts beside the old one (told the old one's pid), and once it serves (it holds the
   * actor's socket path, or shares the gateway's port) the old one is told it is replaced: it stops taking work,
   * finishes what it has (a gateway: its WebSockets and streams) within `drainMs` and exits by itself (SIGTERM, then
   * SIGKILL, only past that budget); then the fresh one is told its predecessor is gone. A replacement waits for the
   * previous one's predecessor to be gone, so never more than two processes of a child run.
   * `sequential` (an actor that must never run twice, or a supervisor started before actors could overlap): the fresh
   * one boots to standby, the old one is told, stops (its in-flight calls finish), then the fresh one goes on: callers
   * wait for it (calls that did not reach it are sent again, within their deadline).
   * Resolves with the new pid (and `gone`: the old one's end, after its drain), or null when the fresh process did not
   * come up within `readyMs` (then the child is left to its restart policy, as after a crash).
   */
  async replace(mode: 'overlap' | 'sequential', readyMs: number, drainMs: number, waitForPredecessor = true): Promise<{ oldPid: number; pid: number; gone: Promise<void> } | null> {
    if (waitForPredecessor) await this.predecessorGone;
    const old = this.proc;
    if (!old || this.stopping) return null;
    const oldPid = old.pid!;
    const notice = { type: REPLACED_MESSAGE, drain_ms: drainMs, overlap: mode === 'overlap' } satisfies ReplacedNotice;
    if (mode === 'overlap') {
      const fresh = this.spawnProcess({ [PREDECESSOR_ENV]: String(oldPid) });
      if (!(await this.whenReady(fresh, readyMs))) {
        this.log.error({ event: 'child.replace_failed', child: this.spec.id, pid: fresh.pid }, `${this.spec.id}: its replacement did not come up; the running one stays`);
        await this.terminate(fresh, this.policy.shutdownMs);
        return null;
      }
      this.proc = fresh;
      this.startedAt = Date.now();
      this.onChange();
      // the old one stops by itself on the notice (a signal might overtake it and skip the drain); the budget is a bound
      const told = old.connected && (() => { try { return old.send(notice); } catch { return false; } })();
      const gone = (told ? this.exitedWithin(old, drainMs + this.policy.shutdownMs) : Promise.resolve(false))
        .then((exited) => (exited ? undefined : this.terminate(old, this.policy.shutdownMs)))
        // told to whichever process is the successor now (the fresh one, or its restart after a crash)
        .then(() => { const now = this.proc; if (now && now !== old && now.connected) now.send({ type: PREDECESSOR_GONE_MESSAGE }); });
      this.draining.add(old);
      void gone.then(() => this.draining.delete(old));
      this.predecessorGone = gone;
      // the old one drains in the background: the next replacement need not wait for it
      return { oldPid, pid: fresh.pid!, gone };
    }
    const fresh = this.spawnProcess({ [STANDBY_ENV]: '1' });
    if (!(await this.whenReady(fresh, readyMs, isStandby))) {
      this.log.error({ event: 'child.replace_failed', child: this.spec.id, pid: fresh.pid }, `${this.spec.id}: its replacement did not boot; the running one stays`);
      await this.terminate(fresh, this.policy.shutdownMs);
      return null;
    }
    if (old.connected) old.send(notice);
    this.replacing = true;
    await this.terminate(old, this.policy.shutdownMs);
    this.replacing = false;
    if (this.stopping) {
      await this.terminate(fresh, this.policy.shutdownMs);
      return null;
    }
    this.proc = fresh;
    this.startedAt = Date.now();
    this.onChange();
    const ready = this.whenReady(fresh, readyMs);
    fresh.send({ type: GO_MESSAGE });
    return (await ready) ? { oldPid, pid: fresh.pid!, gone: Promise.resolve() } : null;
  }

  private exited(proc: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (proc !== this.proc || this.replacing) {
      // a process replaced by `hub restart` (or one that never became its replacement): no restart
      this.log.info({ event: 'child.exit', child: this.spec.id, pid: proc.pid, code, signal, replaced: true }, `${this.spec.id} (replaced) exited`);
      if (proc === this.proc) this.proc = null;
      this.onChange();
      return;
    }
    const uptimeMs = Date.now() - this.startedAt;
    const level = this.stopping ? 'info' : 'warn';
    this.log[level]({ event: 'child.exit', child: this.spec.id, pid: proc.pid, code, signal, uptimeMs, deliberate: this.stopping }, `${this.spec.id} exited`);
    if (this.proc === proc) this.proc = null;
    this.onChange();
    if (!this.stopping) this.scheduleRestart(uptimeMs);
  }

  private scheduleRestart(uptimeMs: number): void {
    const now = Date.now();
    if (uptimeMs >= this.policy.stableUptimeMs) this.attempt = 0;
    this.restartTimes = [...this.restartTimes.filter((t) => now - t < this.policy.periodMs), now];
    if (this.restartTimes.length > this.policy.intensity) {
      this.failed = true;
      this.log.error({ event: 'child.failed', child: this.spec.id, restarts: this.restartTimes.length, periodMs: this.policy.periodMs },
        `${this.spec.id} keeps dying: marked failed, not restarting`);
      this.onChange();
      return;
    }
    const base = Math.min(this.policy.backoffMaxMs, this.policy.backoffInitialMs * 2 ** this.attempt);
    const delayMs = Math.round(base * (0.5 + Math.random())); // jitter: restarts of many children do not align
    this.attempt++;
    this.log.info({ event: 'child.restart_scheduled', child: this.spec.id, delayMs, attempt: this.attempt }, `restarting ${this.spec.id}`);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      if (this.stopping) return;
      this.restarts++;
      this.start();
    }, delayMs);
  }

  /** A message over the IPC channel; false when there is no live channel. */
  send(message: unknown): boolean {
    const proc = this.proc;
    if (!proc?.connected) return false;
    try {
      return proc.send(message as object);
    } catch {
      return false;
    }
  }

  /** Deliberate stop: never restarted. Resolves once the process is gone. */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    const proc = this.proc;
    await Promise.all([...this.draining, ...(proc ? [proc] : [])].map((p) => this.terminate(p, this.policy.shutdownMs)));
  }
}
