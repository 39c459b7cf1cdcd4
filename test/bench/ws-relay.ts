// `npm run bench ws-relay`: the gateway's WebSocket relay alone (ws-gateway.ts: uWS + the proxy module, no
// hub around it) against nginx and the echo backend directly, in the same run: WebSocket echo round trips/s
// of WS_CONNECTIONS clients and the CPU the relay spent per round trip, for a 64-byte text message, a 16 KiB
// binary one (16-bit length) and a 256 KiB one (64-bit length). First, the relay's own JS work per frame
// without sockets (proxy/ws-frames.ts: masking a client's message towards the target, reading a target's
// frame as 64 KiB reads deliver it). BENCH_BASELINE=<commit> adds that commit's relay and framing (a worktree
// of it, run from source) so before and after are measured side by side.
import type { ChildProcess } from 'node:child_process';
import { spawnSync } from 'node:child_process';
import { existsSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { REPO, sleep } from '../harness.js';
import { attempt, echoes, medianOf, problems, ROUNDS, SECONDS, startBackend, startChild, startNginx, WARMUP_SECONDS, WS_CONNECTIONS } from './proxy.js';
import { cpuMs, onPath, withChildren } from './tools.js';

const log = (line: string): void => console.log(`ws-relay: ${line}`);
const BASELINE = process.env.BENCH_BASELINE;
const PAYLOADS = [
  { label: '64 B text', data: 'x'.repeat(64) },
  { label: '16 KiB binary', data: Buffer.alloc(16 * 1024, 7) },
  { label: '256 KiB binary', data: Buffer.alloc(256 * 1024, 7) },
];

/** A source worktree of `rev` (no build: the relay runs under tsx), sharing this checkout's node_modules. */
function worktreeOf(rev: string): string {
  const commit = spawnSync('git', ['-C', REPO, 'rev-parse', '--verify', `${rev}^{commit}`], { encoding: 'utf8' }).stdout.trim();
  if (!commit) throw new Error(`BENCH_BASELINE=${rev}: not a commit of this repository`);
  const dir = join(tmpdir(), `hub-ws-relay-${commit.slice(0, 12)}`);
  if (!existsSync(dir)) {
    const r = spawnSync('git', ['-C', REPO, 'worktree', 'add', '--detach', dir, commit], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`git worktree add failed: ${r.stderr}`);
  }
  if (!existsSync(join(dir, 'node_modules'))) symlinkSync(join(REPO, 'node_modules'), join(dir, 'node_modules'));
  return dir;
}

type Frames = typeof import('../../services/gateway/proxy/ws-frames.js');

/** CPU µs per frame of the framing code alone: encoding (masking) `payload`, and reading it as a target's frame. */
function framingCost(frames: Frames, payload: Buffer): { encodeUs: number; readUs: number } {
  const count = Math.max(200, Math.round(100_000_000 / (payload.length + 1000)));
  let sink = 0;
  const cpu = () => { const u = process.cpuUsage(); return u.user + u.system; };
  let t0 = cpu();
  for (let i = 0; i < count; i++) sink += frames.encodeFrame(frames.OP.binary, payload).length;
  const encodeUs = (cpu() - t0) / count;
  // the target's frame (unmasked), delivered in reads of at most 64 KiB through one reused buffer, as a socket's reads are
  const head = payload.length < 126 ? Buffer.from([0x82, payload.length]) : payload.length < 65536 ? Buffer.from([0x82, 126, payload.length >> 8, payload.length & 255]) : Buffer.from([0x82, 127, 0, 0, 0, 0, 0, 0, 0, 0]);
  if (payload.length >= 65536) head.writeUInt32BE(payload.length, 6);
  const frame = Buffer.concat([head, payload]);
  const scratch = Buffer.alloc(Math.min(frame.length, 65536));
  const reader = new frames.FrameReader(64 * 1024 * 1024, { message: (d) => { sink += d.length; }, fragment: (d) => { sink += d.length; }, ping: () => undefined, pong: () => undefined, close: () => undefined, error: (_c, why) => { throw new Error(why); } });
  t0 = cpu();
  for (let i = 0; i < count; i++) {
    for (let at = 0; at < frame.length; at += scratch.length) {
      const n = frame.copy(scratch, 0, at, at + scratch.length);
      reader.push(scratch.subarray(0, n));
    }
  }
  const readUs = (cpu() - t0) / count;
  if (!sink) throw new Error('nothing framed');
  return { encodeUs, readUs };
}

interface Row { label: string; url: string; pids?: () => number[] }
interface Result { perSecond: number; cpuUs?: number }

async function measure(row: Row, data: string | Buffer): Promise<Result> {
  const url = `${row.url}/services/bench/ws`;
  await echoes(url, WARMUP_SECONDS, {}, data);
  const cpu0 = row.pids ? cpuMs(row.pids()) : 0;
  const trips = await echoes(url, SECONDS, {}, data);
  if (!trips) throw new Error('no round trip');
  return { perSecond: trips / SECONDS, cpuUs: row.pids ? ((cpuMs(row.pids()) - cpu0) * 1000) / trips : undefined };
}

export async function wsRelay(): Promise<void> {
  if (!onPath('nginx')) throw new Error('nginx is missing: install it with `apt-get install -y nginx`');
  const before = BASELINE ? worktreeOf(BASELINE) : undefined;
  const framing: string[] = [];
  const modules: [string, Frames][] = [['now', await import('../../services/gateway/proxy/ws-frames.js')]];
  if (before) modules.push([`at ${BASELINE}`, await import(pathToFileURL(join(before, 'services/gateway/proxy/ws-frames.ts')).href)]);
  for (const payload of PAYLOADS) {
    const data = Buffer.from(payload.data);
    const costs = modules.map(([label, frames]) => {
      framingCost(frames, data); // warm-up: the JIT
      return [label, framingCost(frames, data)] as const;
    });
    for (const [label, c] of costs) framing.push(`  ${payload.label.padEnd(15)} framing ${label.padEnd(14)} encode ${c.encodeUs.toFixed(2).padStart(8)} µs/frame, read ${c.readUs.toFixed(2).padStart(8)} µs/frame`);
  }
  for (const line of framing) log(line.trim());
  const backend = await startBackend();
  const children: ChildProcess[] = [];
  let nginx: Awaited<ReturnType<typeof startNginx>> | undefined;
  try {
    const relay = async (label: string, dir: string): Promise<Row> => {
      const { proc, firstLine } = await startChild(label, process.execPath, ['--import=tsx', join(REPO, 'test', 'bench', 'ws-gateway.ts'), dir, String(backend.port)]);
      children.push(proc);
      return { label, url: `ws://127.0.0.1:${firstLine}`, pids: () => withChildren(proc.pid) };
    };
    nginx = await startNginx(backend.port);
    const rows: Row[] = [
      { label: 'backend directly', url: `ws://127.0.0.1:${backend.port}` },
      await relay('our relay', REPO),
      ...(before ? [await relay(`our relay at ${BASELINE}`, before)] : []),
      { label: 'nginx', url: nginx.url.replace('http', 'ws'), pids: () => withChildren(nginx!.proc.pid) },
    ];
    log(`${WS_CONNECTIONS} connections, each sending a message and waiting for its echo; ${SECONDS} s per run, median of ${ROUNDS} alternating rounds`);
    const summary: string[] = [];
    for (const payload of PAYLOADS) {
      const runs = new Map<Row, Result[]>();
      for (let round = 1; round <= ROUNDS; round++) {
        for (const row of rows) {
          const r = await attempt(`${payload.label} ${row.label}`, () => measure(row, payload.data));
          if (!r) continue;
          runs.set(row, [...(runs.get(row) ?? []), r]);
          log(`${payload.label.padEnd(15)} ${row.label.padEnd(28)} ${r.perSecond.toFixed(0).padStart(7)} round trips/s${r.cpuUs === undefined ? '' : `  CPU ${r.cpuUs.toFixed(1).padStart(6)} µs/round trip`}`);
        }
      }
      const median = (row: Row) => medianOf(runs.get(row) ?? [], (r) => r.perSecond);
      const cpuMedian = (row: Row) => medianOf(runs.get(row) ?? [], (r) => r.cpuUs ?? 0)?.cpuUs;
      for (const row of rows) {
        const m = median(row);
        summary.push(`  ${payload.label.padEnd(15)} ${row.label.padEnd(28)} ${m ? m.perSecond.toFixed(0).padStart(7) : '    n/a'} round trips/s` +
          `${row.pids ? `  CPU ${cpuMedian(row)?.toFixed(1).padStart(6) ?? 'n/a'} µs/round trip (median)` : ''}`);
      }
      const [ours, ng] = [median(rows[1]), median(rows[rows.length - 1])];
      const [oursCpu, ngCpu] = [cpuMedian(rows[1]), cpuMedian(rows[rows.length - 1])];
      summary.push(`  ${payload.label.padEnd(15)} ours/nginx ${ours && ng ? (ours.perSecond / ng.perSecond).toFixed(2) : 'n/a'}x round trips/s, CPU ${oursCpu && ngCpu ? (oursCpu / ngCpu).toFixed(2) : 'n/a'}x` +
        `${BASELINE ? `; CPU now/then ${oursCpu && cpuMedian(rows[2]) ? (oursCpu / cpuMedian(rows[2])!).toFixed(2) : 'n/a'}x` : ''}`);
    }
    console.log(`\nws-relay summary (${new Date().toISOString().slice(0, 10)})`);
    for (const line of [...framing, ...summary]) console.log(line);
  } finally {
    for (const c of children) c.kill('SIGKILL');
    backend.proc.kill('SIGKILL');
    if (nginx) {
      nginx.proc.kill('SIGQUIT');
      await sleep(300);
      for (const pid of withChildren(nginx.proc.pid)) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
      rmSync(nginx.dir, { recursive: true, force: true });
    }
  }
  if (problems.length) {
    console.log(`  PROBLEMS (${problems.length}):`);
    for (const p of problems) console.log(`    ${p}`);
    process.exitCode = 1;
  }
}
