// `hub restart [ACTOR]` (issue 24): every actor and every gateway of this node replaced, one at a time, by a fresh
// process running the code now in dist/; NATS and the supervisor stay. Every replacement overlaps: the fresh process
// starts beside the old one and becomes ready first — a gateway listening on the shared port (SO_REUSEPORT), any
// other actor with its gRPC socket bound under a name of its own and renamed over the actor's path (shared/grpc.ts),
// and in the NATS queue groups — so new calls reach it while the old one stops taking work, finishes its calls in
// flight (its gRPC connections told to go away, their clients reconnecting to the successor) and exits. Two
// instances of an actor on one node are what a multi-node hub runs anyway (issue 23): caches follow NATS events,
// once-only work is under leases (shared/lease.ts) that pass to the successor when the old one lets go. What only
// one process of a node may do waits until its predecessor is gone (ActorContext.predecessor): the spawner adopts
// its node's servers then, while the old one finishes the starts and stops it had begun. The command asks over
// SIGUSR2 with a request file (a signal carries nothing); the result is in run/restart.json.
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import type { Logger } from './log.js';
import { ACTORS } from './paths.js';
import type { SupervisedChild } from './supervision.js';

export interface RestartRequest { id: string; actor: string | null; by: string }

export interface RestartResult {
  id: string;
  at: string;
  by: string;
  ok: boolean;
  actor: string | null;
  /** each process replaced, in order: its old and new pid and how long its replacement took */
  replaced: { id: string; old_pid: number; pid: number; ms: number }[];
  /** replaced processes still finishing their work when the last replacement was done (they end by Supervisor.drain_timeout) */
  draining: number[];
  problems: string[];
  ms: number;
  /** a whole restart: the options of the file it applied, and those only a stop and start of the hub applies */
  config?: { applied: string[]; needs_full_restart: string[]; why?: Record<string, string> };
}

export const restartRequestFile = (runDir: string) => `${runDir}/restart-request.json`;
export const restartResultFile = (runDir: string) => `${runDir}/restart.json`;

export function writeJsonAtomically(file: string, value: unknown, mode = 0o600): void {
  writeFileSync(`${file}.tmp`, JSON.stringify(value), { mode });
  renameSync(`${file}.tmp`, file);
}

/** The request the command line left before its signal (taken: read and removed), or null. */
export function takeRestartRequest(runDir: string): RestartRequest | null {
  const file = restartRequestFile(runDir);
  try {
    const r = JSON.parse(readFileSync(file, 'utf8')) as Partial<RestartRequest>;
    rmSync(file, { force: true });
    return typeof r.id === 'string' ? { id: r.id.slice(0, 100), actor: typeof r.actor === 'string' ? r.actor : null, by: String(r.by ?? 'SIGUSR2').slice(0, 200) } : null;
  } catch {
    return null;
  }
}

/** The actor a child runs (`gateway-2` is a gateway), or null for NATS and hub-managed services. */
const actorOf = (child: SupervisedChild): string | null =>
  (child.spec.ipc ? ACTORS.find((a) => child.spec.id === a || child.spec.id.startsWith(`${a}-`)) ?? null : null);

/**
 * With net.ipv4.tcp_migrate_req (Linux 5.14+), connections waiting in the accept queue of a listen socket that closes
 * move to another socket of its SO_REUSEPORT group instead of being reset: a replaced gateway loses none. Set when
 * the supervisor may (root); else said once.
 */
function ensureListenerHandover(log: Logger): void {
  const knob = '/proc/sys/net/ipv4/tcp_migrate_req';
  try {
    if (readFileSync(knob, 'utf8').trim() === '1') return;
    writeFileSync(knob, '1');
    log.info({ event: 'supervisor.tcp_migrate_req' }, 'net.ipv4.tcp_migrate_req set to 1: connections queued at a replaced gateway move to its successor');
  } catch (e) {
    log.warn({ event: 'supervisor.tcp_migrate_req_unset', err: (e as Error).message },
      'cannot set net.ipv4.tcp_migrate_req=1: a connection queued at a gateway the moment it closes its listen socket may be reset (set it with sysctl)');
  }
}

export interface RollingOptions { readyMs: number; drainMs: number; log: Logger }

/** Replaces the actors of `children` (all, or those of one actor) one at a time, in start order. */
export async function rollingRestart(children: SupervisedChild[], request: RestartRequest, { readyMs, drainMs, log }: RollingOptions): Promise<RestartResult> {
  const t0 = Date.now();
  const result: RestartResult = { id: request.id, at: new Date().toISOString(), by: request.by, ok: true, actor: request.actor, replaced: [], draining: [], problems: [], ms: 0 };
  const chosen = children.filter((c) => actorOf(c) && (!request.actor || actorOf(c) === request.actor));
  if (!chosen.length) {
    return { ...result, ok: false, problems: [request.actor ? `no actor ${JSON.stringify(request.actor)} runs on this node (${[...new Set(children.map(actorOf).filter(Boolean))].join(', ')})` : 'no actor runs on this node'] };
  }
  if (chosen.some((c) => actorOf(c) === 'gateway')) ensureListenerHandover(log);
  log.info({ event: 'supervisor.restart_begin', by: request.by, actors: chosen.map((c) => c.spec.id) }, `rolling restart of ${chosen.map((c) => c.spec.id).join(', ')}`);
  const pending: (() => number[])[] = [];
  for (const child of chosen) {
    const t = Date.now();
    // a gateway's predecessor may keep WebSockets for drain_timeout: its next replacement need not wait for that; a
    // fresh gateway itself waits up to Supervisor.startup_timeout (readyMs) for the actors before it listens, so it
    // has that twice to be ready
    const gateway = actorOf(child) === 'gateway';
    const done = await child.replace('overlap', gateway ? 2 * readyMs : readyMs, drainMs, !gateway);
    if (!done) {
      result.problems.push(`${child.spec.id}: its fresh process did not come up within ${(actorOf(child) === 'gateway' ? 2 * readyMs : readyMs) / 1000} s (see the log); the restart stopped there`);
      result.ok = false;
      break;
    }
    result.replaced.push({ id: child.spec.id, old_pid: done.oldPid, pid: done.pid, ms: Date.now() - t });
    let gone = false;
    void done.gone.then(() => { gone = true; });
    pending.push(() => (gone ? [] : [done.oldPid]));
    log.info({ event: 'supervisor.replaced', child: child.spec.id, old_pid: done.oldPid, pid: done.pid, ms: Date.now() - t }, `${child.spec.id} replaced`);
  }
  result.ms = Date.now() - t0;
  await new Promise((r) => setImmediate(r));
  result.draining = pending.flatMap((p) => p());
  log[result.ok ? 'info' : 'error']({ event: 'supervisor.restart_end', ok: result.ok, ms: result.ms, problems: result.problems }, result.ok ? 'rolling restart done' : 'rolling restart stopped');
  return result;
}
