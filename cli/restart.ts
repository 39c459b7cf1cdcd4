// `hub restart [ACTOR] [--build]`: the running hub's actors and gateways replaced one at a time by fresh processes
// running the code now in dist/ (shared/rolling-restart.ts); `--build` compiles first (an upgrade: new code, then
// restart). Asked with a request file and SIGUSR2 to the supervisor; its answer is <data_dir>/run/restart.json.
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ACTORS, REPO_ROOT, runDir } from '../shared/paths.js';
import { restartRequestFile, restartResultFile, writeJsonAtomically, type RestartResult } from '../shared/rolling-restart.js';
import { pushAll } from '../shared/lists.js';
import { UsageError } from './args.js';
import { answersSignal, readProcesses } from '../shared/processes.js';
import { cliIdentity, CliError, runningHub } from './hub.js';
import type { VerbInput } from './main.js';

function readResult(file: string, id: string): RestartResult | null {
  try {
    const r = JSON.parse(readFileSync(file, 'utf8')) as RestartResult;
    return r.id === id ? r : null;
  } catch {
    return null;
  }
}

export async function restart({ config, positional, flags }: VerbInput): Promise<number> {
  const [actor = null] = positional;
  if (actor !== null && !(ACTORS as readonly string[]).includes(actor)) throw new UsageError(`restart: no actor ${JSON.stringify(actor.slice(0, 40))} (one of ${ACTORS.join(', ')})`);
  const hub = runningHub(config);
  if (!hub) throw new CliError(`no hub is running with data dir ${config.Hub.data_dir}`);
  const record = readProcesses(hub.dataDir);
  // an older supervisor would die of the signal: never send it one it does not answer
  if (!record || !answersSignal(record, 'SIGUSR2')) throw new CliError(`the running hub (supervisor pid ${hub.pid}) predates \`hub restart\`: stop and start it once (nothing was changed)`);
  if (flags.build) {
    const built = spawnSync('npm', ['run', 'build'], { cwd: REPO_ROOT, stdio: ['ignore', 'inherit', 'inherit'] });
    if (built.status !== 0) throw new CliError('the build failed: nothing was restarted');
  }
  const s = hub.config.Supervisor;
  const count = actor === 'gateway' ? s.gateways : actor ? 1 : s.actors.length - 1 + s.gateways;
  // each replacement: a start (startup_timeout) and a stop (shutdown_timeout); gateways drain in the background
  const waitMs = count * (s.startup_timeout + s.shutdown_timeout) * 1000 + 10_000;
  const run = runDir(hub.dataDir);
  const id = randomUUID();
  writeJsonAtomically(restartRequestFile(run), { id, actor, by: cliIdentity() });
  process.kill(hub.pid, 'SIGUSR2');
  for (let pause = 50, until = Date.now() + waitMs; ; pause = Math.min(pause * 2, 500)) {
    const r = readResult(restartResultFile(run), id);
    if (r) {
      const lines = r.replaced.map((p) => `${p.id.padEnd(14)} pid ${p.old_pid} -> ${p.pid}  ${(p.ms / 1000).toFixed(1)} s`);
      lines.push(r.ok ? `restarted ${r.replaced.length} processes in ${(r.ms / 1000).toFixed(1)} s` : 'restart stopped:');
      if (r.config?.applied.length) lines.push(`configuration applied: ${r.config.applied.join(', ')}`);
      if (r.config?.needs_full_restart.length) {
        lines.push(`needs the hub stopped and started: ${r.config.needs_full_restart.map((o) => (r.config?.why?.[o] ? `${o} (${r.config.why[o]})` : o)).join(', ')}`);
      }
      pushAll(lines, r.problems.map((p) => `  ${p}`));
      if (r.draining.length) lines.push(`replaced processes still finishing their work (a gateway its connections, the spawner its starts and stops; at most Supervisor.drain_timeout): pid ${r.draining.join(', ')}`);
      (r.ok ? process.stdout : process.stderr).write(`${lines.join('\n')}\n`);
      return r.ok ? 0 : 1;
    }
    if (Date.now() > until) throw new CliError(`the hub (supervisor pid ${hub.pid}) did not finish within ${Math.round(waitMs / 1000)} s; see its log and run/restart.json`);
    await new Promise((r) => setTimeout(r, pause));
  }
}
