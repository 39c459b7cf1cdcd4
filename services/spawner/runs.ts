// This node's own runs of servers, kept in its data dir (0600) beside the shared registry: while a node is gone,
// another may mark its servers stopped and start them again elsewhere, overwriting their records; when the node
// comes back, the runs the registry no longer names as its own are stopped here instead of being left running.
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isActive, serverKey, type ServerRecord } from '../../shared/servers.js';

export interface Run { user: string; name: string; started: string; spawner_class: string; spawner_state: Record<string, unknown> }

export class RunJournal {
  private readonly runs = new Map<string, Run>();
  private readonly path: string;

  constructor(dataDir: string) {
    this.path = join(dataDir, 'spawner-runs.json');
    if (existsSync(this.path)) {
      try {
        for (const r of JSON.parse(readFileSync(this.path, 'utf8')) as Run[]) this.runs.set(serverKey(r.user, r.name), r);
      } catch {
        // unreadable (cut short by a crash): nothing to stop from it; rewritten at the next save
      }
    }
  }

  /** A save of one of this node's records: an active run with its backend state is kept, anything else forgotten. */
  note(r: ServerRecord): void {
    const key = serverKey(r.user, r.name);
    const run = this.runs.get(key);
    if (isActive(r) && Object.keys(r.spawner_state ?? {}).length) {
      if (run && run.started === r.started && JSON.stringify(run.spawner_state) === JSON.stringify(r.spawner_state)) return;
      this.runs.set(key, { user: r.user, name: r.name, started: r.started, spawner_class: r.spawner_class, spawner_state: r.spawner_state });
    } else if (run) this.runs.delete(key);
    else return;
    this.persist();
  }

  /** Runs the registry no longer holds as this node's (its record gone, another node's, or a later start). */
  orphans(current: (user: string, name: string) => ServerRecord | undefined, ours: (r: ServerRecord) => boolean): Run[] {
    return [...this.runs.values()].filter((run) => {
      const r = current(run.user, run.name);
      return !r || !ours(r) || r.started !== run.started;
    });
  }

  forget(run: Run): void {
    if (this.runs.delete(serverKey(run.user, run.name))) this.persist();
  }

  private persist(): void {
    const tmp = `${this.path}.tmp`;
    writeFileSync(tmp, JSON.stringify([...this.runs.values()]), { mode: 0o600 });
    renameSync(tmp, this.path);
  }
}
