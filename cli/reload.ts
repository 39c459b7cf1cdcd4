// `hub reload [--all-nodes]`: the running hub reads and validates its configuration again and applies what it can
// live (shared/reload.ts). This node: SIGHUP to its supervisor, then its answer from <data_dir>/run/reload.json.
// Every node: one request on NATS (`hub.supervisor.reload`) that each node's actors relay to their supervisor.
import { readFileSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { runDir } from '../shared/paths.js';
import { reloadAskerFile, reloadResultFile, type ReloadResult } from '../shared/reload.js';
import { answersSignal, readProcesses } from '../shared/processes.js';
import { cliIdentity, CliError, runningHub } from './hub.js';
import type { VerbInput } from './main.js';

/** How long the command waits for the hub's answer: validation, then each actor's confirmation (Hub.rpc_timeout). */
const answerWithinMs = (rpcTimeoutSeconds: number) => 10_000 + rpcTimeoutSeconds * 1000;

function readResult(file: string): (ReloadResult & { text: string }) | null {
  try {
    const text = readFileSync(file, 'utf8');
    return { ...(JSON.parse(text) as ReloadResult), text };
  } catch {
    return null;
  }
}

/** The lines an operator reads: what changed, what needs a restart, what was refused. */
export function describeReload(r: ReloadResult, where = ''): string[] {
  const at = where ? `${where}: ` : '';
  if (!r.ok) return [`${at}configuration not reloaded (nothing changed):`, ...r.problems.map((p) => `  ${p}`)];
  const lines = [`${at}configuration reloaded: ${r.changed.length ? `applied ${r.changed.join(', ')}` : 'nothing to apply live'}`];
  // each with why it cannot change live, where the hub says
  const named = (names: string[]) => names.map((n) => (r.why?.[n] ? `${n} (${r.why[n]})` : n)).join(', ');
  if (r.needs_restart.length) lines.push(`${at}changed, needs \`hub restart\`: ${named(r.needs_restart)}`);
  if (r.needs_full_restart.length) lines.push(`${at}changed, needs the hub stopped and started: ${named(r.needs_full_restart)}`);
  if (r.unconfirmed.length) lines.push(`${at}not confirmed in time by: ${r.unconfirmed.join(', ')} (each reads the file again when it restarts)`);
  for (const p of r.problems) lines.push(`${at}problem: ${p}`);
  return lines;
}

const failed = (r: ReloadResult) => !r.ok || r.problems.length > 0 || r.unconfirmed.length > 0;

export async function reload({ config, flags }: VerbInput): Promise<number> {
  const hub = runningHub(config);
  if (!hub) throw new CliError(`no hub is running with data dir ${config.Hub.data_dir}`);
  const record = readProcesses(hub.dataDir);
  // an older supervisor would die of the signal: never send it one it does not answer
  if (!record || !answersSignal(record, 'SIGHUP')) throw new CliError(`the running hub (supervisor pid ${hub.pid}) predates \`hub reload\`: stop and start it once (nothing was changed)`);
  const waitMs = answerWithinMs(hub.config.Hub.rpc_timeout);
  if (flags['all-nodes']) return reloadEveryNode(hub.config, waitMs);

  const file = reloadResultFile(runDir(hub.dataDir));
  const before = readResult(file)?.text;
  writeFileSync(reloadAskerFile(runDir(hub.dataDir)), cliIdentity(), { mode: 0o600 });
  process.kill(hub.pid, 'SIGHUP');
  for (let pause = 20, until = Date.now() + waitMs; ; pause = Math.min(pause * 2, 200)) {
    const r = readResult(file);
    if (r && r.text !== before) {
      const lines = describeReload(r);
      (failed(r) ? process.stderr : process.stdout).write(`${lines.join('\n')}\n`);
      return failed(r) ? 1 : 0;
    }
    if (Date.now() > until) throw new CliError(`the hub (supervisor pid ${hub.pid}) did not answer within ${waitMs / 1000} s; see its log`);
    await new Promise((r) => setTimeout(r, pause));
  }
}

/** Every node's supervisor, through its actors; one answer per node (its actors all relay the same request). */
async function reloadEveryNode(config: VerbInput['config'], waitMs: number): Promise<number> {
  const { connect, RequestStrategy } = await import('nats');
  const { natsUrl } = await import('../shared/actor.js');
  const { natsServers } = await import('../shared/config.js');
  const { subjects } = await import('../shared/subjects.js');
  const { decodeJson, encodeJson } = await import('../shared/nats.js');
  const { adminNatsLink, connectOptions } = await import('./credentials.js');
  const nc = await connect({ servers: natsServers(natsUrl(config)), ...connectOptions(adminNatsLink(config)), timeout: 2000, maxReconnectAttempts: 0 })
    .catch((e: Error) => { throw new CliError(`NATS unreachable: ${e.message}`); });
  const byNode = new Map<string, ReloadResult>();
  try {
    const replies = await nc.requestMany(subjects.command('supervisor', 'reload'), encodeJson({ id: randomUUID(), by: `${cliIdentity()} (hub reload --all-nodes)` }),
      { strategy: RequestStrategy.JitterTimer, jitter: 1000, maxWait: waitMs });
    for await (const m of replies) {
      const body = decodeJson<{ node?: string; result?: ReloadResult }>(m.data);
      if (body?.node && body.result && !byNode.has(body.node)) byNode.set(body.node, body.result);
    }
  } finally {
    await nc.close();
  }
  if (!byNode.size) throw new CliError('no node answered (is the hub running, with actors started by a supervisor?)');
  let bad = false;
  for (const [node, r] of [...byNode].sort(([a], [b]) => a.localeCompare(b))) {
    bad ||= failed(r);
    (failed(r) ? process.stderr : process.stdout).write(`${describeReload(r, node).join('\n')}\n`);
  }
  return bad ? 1 : 0;
}
