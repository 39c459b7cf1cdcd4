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
    const stdio: StdioOptions = this.spec.ipc ? ['ignore', 'inherit', 'inherit', 'ipc'] : ['ignore', 'inherit', 'inherit'];
    // Own process group: a Ctrl-C on the terminal reaches only the supervisor, which then stops children in order.
    const { env, cwd, uid, gid } = this.spec;
    const proc = spawn(this.spec.command, this.spec.args, { env, stdio, detached: true, cwd, uid, gid });
    this.proc = proc;
    this.startedAt = Date.now();
    proc.on('error', (err) => this.log.error({ event: 'child.spawn_error', child: this.spec.id, err: err.message }, 'could not start child'));
    proc.on('exit', (code, signal) => this.exited(proc, code, signal));
    if (this.spec.ipc) proc.on('message', (m) => { for (const listener of this.messageListeners) listener(m); });
    this.log.info({ event: 'child.started', child: this.spec.id, pid: proc.pid }, `started ${this.spec.id}`);
    this.onChange();
  }

  private exited(proc: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
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
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const gone = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => {
      this.log.warn({ event: 'child.kill', child: this.spec.id, pid: proc.pid }, `${this.spec.id} did not stop in time: SIGKILL`);
      proc.kill('SIGKILL');
    }, this.policy.shutdownMs);
    await gone;
    clearTimeout(timer);
  }
}
