// Footprint: start-up time to a healthy hub and the memory of every hub process when idle.
// Boots the real hub (compiled, as `npm start` runs it) several times; prints medians.
import { readFileSync } from 'node:fs';
import { startHub, sleep } from '../harness.js';

function memory(pid: number): { rss: number; pss: number } {
  const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  const pss = Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))?.[1] ?? 0);
  return { rss: rss / 1024, pss: pss / 1024 };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

export async function footprint(runs = 5): Promise<void> {
  const startups: number[] = [];
  const totals: { rss: number; pss: number }[] = [];
  let perProcess: Record<string, { rss: number; pss: number }> = {};
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const hub = await startHub({ healthTimeoutMs: 30_000 });
    startups.push(performance.now() - t0);
    await sleep(3000); // idle
    const pids: Record<string, number> = { supervisor: hub.proc.pid!, ...(hub.children() as Record<string, number>) };
    perProcess = Object.fromEntries(Object.entries(pids).map(([id, pid]) => [id, memory(pid)]));
    const all = Object.values(perProcess);
    totals.push({ rss: all.reduce((s, m) => s + m.rss, 0), pss: all.reduce((s, m) => s + m.pss, 0) });
    await hub.stop();
  }
  console.log(`footprint: ${runs} boots`);
  console.log(`  start-up to healthy (spawn to first 200 from /hub/health): median ${median(startups).toFixed(0)} ms, all ${startups.map((s) => s.toFixed(0)).join(', ')}`);
  console.log(`  idle memory, all hub processes: median RSS ${median(totals.map((t) => t.rss)).toFixed(1)} MB, PSS ${median(totals.map((t) => t.pss)).toFixed(1)} MB`);
  console.log('  last boot, per process (RSS / PSS MB):');
  for (const [id, m] of Object.entries(perProcess)) console.log(`    ${id.padEnd(13)} ${m.rss.toFixed(1).padStart(6)} / ${m.pss.toFixed(1)}`);
}
