// Memory and CPU limits through the kernel's cgroup controllers: one group per server, made before the
// server starts, the server placed in it before it runs any code of its own, removed when it ends.
// cgroup v2 is used where its unified hierarchy offers the memory and cpu controllers; otherwise the
// v1 `memory` and `cpu` hierarchies. Groups nest under the spawner's own group of each controller, so
// servers stay inside whatever the hub itself is confined to (a systemd slice, a container).
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Limits } from './backend.js';

export type CgroupSupport =
  | { version: 1; memory: string | null; cpu: string | null }
  | { version: 2; base: string };

/** A server's groups: the directories (removed at its end) and the `cgroup.procs` files it joins. */
export interface ServerGroup {
  version: 1 | 2;
  dirs: string[];
}

const CPU_PERIOD_US = 100_000;

interface Mount { root: string; point: string; type: string; options: string[] }

function mounts(): Mount[] {
  return readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter(Boolean).map((line) => {
    const [left, right] = line.split(' - ');
    const f = left.split(' ');
    const r = right.split(' ');
    return { root: f[3], point: f[4], type: r[0], options: (r[2] ?? '').split(',') };
  });
}

/** This process's group in one hierarchy (`0::/x` for v2, `4:memory:/x` for v1), relative to the mount. */
function ownPath(selfCgroup: string[], controller: string | null, mountRoot: string): string {
  const line = selfCgroup.find((l) => {
    const [, ctrls] = l.split(':');
    return controller === null ? l.startsWith('0::') : ctrls.split(',').includes(controller);
  });
  const path = line ? line.slice(line.indexOf(':', line.indexOf(':') + 1) + 1) : '/';
  return mountRoot !== '/' && path.startsWith(mountRoot) ? path.slice(mountRoot.length) || '/' : path;
}

/** Where this hub's groups would go, or null when the machine offers no usable memory/cpu controller. */
export function detectCgroups(): CgroupSupport | null {
  let all: Mount[];
  let self: string[];
  try {
    all = mounts();
    self = readFileSync('/proc/self/cgroup', 'utf8').split('\n').filter(Boolean);
  } catch {
    return null;
  }
  const v2 = all.find((m) => m.type === 'cgroup2');
  if (v2) {
    const controllers = readText(join(v2.point, 'cgroup.controllers')).split(/\s+/);
    if (controllers.includes('memory') && controllers.includes('cpu')) {
      // v2 forbids processes in a group whose children get controllers: our groups go beside the
      // spawner's own, under its parent (the hub's slice or container), not below it.
      const own = ownPath(self, null, v2.root);
      const parent = own === '/' ? '/' : own.slice(0, own.lastIndexOf('/')) || '/';
      return { version: 2, base: join(v2.point, parent) };
    }
  }
  const v1 = (controller: string) => {
    const m = all.find((x) => x.type === 'cgroup' && x.options.includes(controller));
    return m ? join(m.point, ownPath(self, controller, m.root)) : null;
  };
  const memory = v1('memory');
  const cpu = v1('cpu');
  return memory || cpu ? { version: 1, memory, cpu } : null;
}

function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return '';
  }
}

/** A one-line reason why limits cannot be enforced here (needed, the controller), or null when they can. */
export function cannotLimit(support: CgroupSupport | null, hubId: string, limits: { memory: boolean; cpu: boolean }): string | null {
  if (!limits.memory && !limits.cpu) return null;
  if (!support) return 'this machine offers no cgroup memory/cpu controller';
  const dirs = support.version === 2 ? [support.base]
    : [...(limits.memory ? [support.memory] : []), ...(limits.cpu ? [support.cpu] : [])];
  for (const [i, dir] of dirs.entries()) {
    if (!dir) return `the cgroup v1 ${limits.memory && i === 0 ? 'memory' : 'cpu'} controller is not mounted`;
    const probe = join(dir, `hub-${hubId}`);
    try {
      mkdirSync(probe, { recursive: true });
      if (support.version === 2) enableControllers(support.base, join(probe, 'x'));
      rmdirQuiet(probe); // stays while this hub's servers use it
    } catch (e) {
      return `cannot create cgroups under ${dir} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); limits need the hub to run as root`;
    }
  }
  return null;
}

/** v2: each level from base down to `dir`'s parent hands memory and cpu to its children. */
function enableControllers(base: string, dir: string): void {
  const levels = [base];
  for (const part of dir.slice(base.length).split('/').filter(Boolean).slice(0, -1)) levels.push(join(levels.at(-1)!, part));
  for (const level of levels) {
    const wanted = ['memory', 'cpu'].filter((c) => !readText(join(level, 'cgroup.subtree_control')).split(/\s+/).includes(c));
    if (wanted.length) writeFileSync(join(level, 'cgroup.subtree_control'), wanted.map((c) => `+${c}`).join(' '));
  }
}

/** Makes the server's group(s) and writes the limits; null when no limit is set. */
export function createServerGroup(support: CgroupSupport | null, hubId: string, id: string, limits: Limits): ServerGroup | null {
  if (limits.memBytes === null && limits.cpu === null) return null;
  if (!support) throw new Error('limits are set but this machine offers no cgroup controller');
  const quota = limits.cpu === null ? null : Math.max(1000, Math.round(limits.cpu * CPU_PERIOD_US));
  const made: string[] = [];
  try {
    if (support.version === 2) {
      const dir = join(support.base, `hub-${hubId}`, id);
      mkdirp(dir);
      made.push(dir);
      enableControllers(support.base, dir);
      if (limits.memBytes !== null) {
        writeFileSync(join(dir, 'memory.max'), String(limits.memBytes));
        if (existsSync(join(dir, 'memory.swap.max'))) writeFileSync(join(dir, 'memory.swap.max'), '0');
      }
      if (quota !== null) writeFileSync(join(dir, 'cpu.max'), `${quota} ${CPU_PERIOD_US}`);
      return { version: 2, dirs: made };
    }
    if (limits.memBytes !== null) {
      if (!support.memory) throw new Error('the cgroup memory controller is not mounted');
      const dir = join(support.memory, `hub-${hubId}`, id);
      mkdirp(dir);
      made.push(dir);
      writeFileSync(join(dir, 'memory.limit_in_bytes'), String(limits.memBytes));
      // with swap accounting, memory + swap is capped too, so the limit cannot be dodged by swapping
      if (existsSync(join(dir, 'memory.memsw.limit_in_bytes'))) writeFileSync(join(dir, 'memory.memsw.limit_in_bytes'), String(limits.memBytes));
    }
    if (quota !== null) {
      if (!support.cpu) throw new Error('the cgroup cpu controller is not mounted');
      const dir = join(support.cpu, `hub-${hubId}`, id);
      mkdirp(dir);
      made.push(dir);
      writeFileSync(join(dir, 'cpu.cfs_period_us'), String(CPU_PERIOD_US));
      writeFileSync(join(dir, 'cpu.cfs_quota_us'), String(quota));
    }
    return { version: 1, dirs: made };
  } catch (e) {
    for (const dir of made) rmdirQuiet(dir);
    throw new Error(`could not set up the server's limits: ${(e as Error).message}`);
  }
}

/** The `cgroup.procs` files a process writes its own pid into to join the group. */
export const procsFiles = (g: ServerGroup): string[] => g.dirs.map((d) => join(d, 'cgroup.procs'));

/** Every process still in the group (a server's children that left its process group included). */
export function groupPids(g: ServerGroup): number[] {
  const pids = new Set<number>();
  for (const dir of g.dirs) for (const p of readText(join(dir, 'cgroup.procs')).split('\n')) if (p) pids.add(Number(p));
  return [...pids];
}

/** How often the kernel killed a process of the group for memory (0 when unknown). */
export function oomKills(g: ServerGroup): number {
  for (const dir of g.dirs) {
    const text = readText(join(dir, g.version === 2 ? 'memory.events' : 'memory.oom_control'));
    const m = /^oom_kill (\d+)$/m.exec(text);
    if (m && Number(m[1]) > 0) return Number(m[1]);
  }
  return 0;
}

/** mkdir -p that survives the parent being removed at the same moment by the last server's cleanup. */
function mkdirp(dir: string): void {
  for (let attempt = 0; ; attempt++) {
    try {
      mkdirSync(dir, { recursive: true });
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || attempt >= 3) throw e;
    }
  }
}

function rmdirQuiet(dir: string): boolean {
  try {
    rmdirSync(dir);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Kills whatever is left in the group, then removes it (the kernel refuses while a process is still
 * exiting: retried, bounded). The hub's parent group goes too when this was its last server.
 */
export async function removeServerGroup(g: ServerGroup): Promise<boolean> {
  for (let attempt = 0; attempt < 40; attempt++) {
    for (const pid of groupPids(g)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    if (g.dirs.every(rmdirQuiet)) {
      for (const dir of g.dirs) rmdirQuiet(join(dir, '..')); // fails (busy) while other servers use it
      return true;
    }
    await sleep(25);
  }
  return false;
}
