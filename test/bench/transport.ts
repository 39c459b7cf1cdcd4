// `npm run bench transport`: what one call between two of the hub's processes costs on this machine, by transport,
// in the same run: a raw unix-socket echo (the floor), a NATS request/reply through nats-server (how calls cross
// nodes), a grpc-js unary call, the same echo as messages on one long-lived grpc-js bidirectional stream, and the
// hub's own unary call (shared/grpc.ts: a typed client to serveGrpc, with its deadline, request context and
// metrics; auth's Ping). Each is timed back to back and after 5 ms of idleness (as a login or a page comes: the
// processes have gone to sleep), with the CPU both sides spent per call; BENCH_TRANSPORT_CALLS sets the calls per
// row and round (default 2,000; a quarter of that with the pauses), median of 3 alternating rounds.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { connect, type NatsConnection } from 'nats';
import { createGrpcClient } from '../../shared/grpc.js';
import { freePort, REPO, sleep } from '../harness.js';
import { cpuMs } from './tools.js';
import { ECHO_SERVICE, GRPC_SOCKET, HUB_PING_SOCKET, RAW_SOCKET } from './transport-names.js';

const CALLS = Number(process.env.BENCH_TRANSPORT_CALLS ?? 2000);
const ROUNDS = 3;
const PAUSE_MS = 5;
const log = (line: string): void => console.log(`transport: ${line}`);

interface Row { label: string; call: () => Promise<unknown>; serverPids: number[] }
interface Run { p50: number; p90: number; clientUs: number; serverUs: number }

const percentile = (xs: number[], p: number) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];

async function measure(row: Row, calls: number, pauseMs: number): Promise<Run> {
  for (let i = 0; i < 100; i++) await row.call();
  const times: number[] = [];
  const server0 = cpuMs(row.serverPids);
  const client0 = process.cpuUsage();
  for (let i = 0; i < calls; i++) {
    const t = performance.now();
    await row.call();
    times.push(performance.now() - t);
    if (pauseMs) await sleep(pauseMs);
  }
  const client = process.cpuUsage(client0);
  times.sort((a, b) => a - b);
  return {
    p50: percentile(times, 50), p90: percentile(times, 90),
    // with pauses the client's CPU also holds the timer's wake-up: the same for every row
    clientUs: (client.user + client.system) / calls, serverUs: ((cpuMs(row.serverPids) - server0) * 1000) / calls,
  };
}

/** A raw unix-socket client: one byte out, the echo back. */
async function rawClient(path: string): Promise<() => Promise<unknown>> {
  const socket = net.connect(path);
  await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const one = Buffer.from('x');
  return () => new Promise((resolve) => { socket.once('data', resolve); socket.write(one); });
}

/** Calls as messages on one bidirectional stream, answered in order. */
function streamClient(client: grpc.Client & Record<string, Function>): () => Promise<unknown> {
  const stream = client.chat() as grpc.ClientDuplexStream<Buffer, Buffer>;
  const waiting: { resolve(b: Buffer): void; reject(e: Error): void }[] = [];
  stream.on('data', (b: Buffer) => waiting.shift()?.resolve(b));
  // the peer killed at the end cuts the stream: only a call still waiting hears of it
  stream.on('error', (e: Error) => { for (const w of waiting.splice(0)) w.reject(e); });
  const hello = Buffer.from('hello');
  return () => new Promise((resolve, reject) => { waiting.push({ resolve, reject }); stream.write(hello); });
}

export async function transport(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'hub-bench-transport-'));
  const children: ChildProcess[] = [];
  let nc: NatsConnection | undefined;
  let grpcClient: grpc.Client | undefined;
  let hubClient: { close(): void } | undefined;
  try {
    const natsPort = await freePort();
    const nats = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(natsPort)], { stdio: 'ignore' });
    children.push(nats);
    const natsUrl = `127.0.0.1:${natsPort}`;
    nc = await connectWithin(natsUrl, 10_000);
    const peer = spawn(process.execPath, ['--import=tsx', join(REPO, 'test', 'bench', 'transport-peer.ts'), dir, natsUrl], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(peer);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the transport peer did not start in 30 s')), 30_000);
      peer.stdout!.on('data', (d: Buffer) => { if (d.toString().includes('ready')) { clearTimeout(timer); resolve(); } });
      peer.once('exit', (code) => { clearTimeout(timer); reject(new Error(`the transport peer exited (${code})`)); });
    });
    const Echo = grpc.makeGenericClientConstructor(ECHO_SERVICE, 'Echo');
    const echo = (grpcClient = new Echo(`unix://${join(dir, GRPC_SOCKET)}`, grpc.credentials.createInsecure())) as grpc.Client & Record<string, Function>;
    const hello = Buffer.from('hello');
    const hub = createGrpcClient('auth', join(dir, HUB_PING_SOCKET), 5000);
    hubClient = hub;
    const natsConn = nc;
    const rows: Row[] = [
      { label: 'unix socket echo (the floor)', call: await rawClient(join(dir, RAW_SOCKET)), serverPids: [peer.pid!] },
      { label: 'NATS request/reply', call: () => natsConn.request('bench.echo', hello, { timeout: 5000 }), serverPids: [peer.pid!, nats.pid!] },
      { label: 'grpc-js unary call', call: () => new Promise((resolve, reject) => echo.echo(hello, (e: Error | null, r: Buffer) => (e ? reject(e) : resolve(r)))), serverPids: [peer.pid!] },
      { label: 'grpc-js stream message', call: streamClient(echo), serverPids: [peer.pid!] },
      { label: "the hub's call (Ping)", call: () => hub.ping({}), serverPids: [peer.pid!] },
    ];
    const results = new Map<string, Run[]>();
    for (let round = 1; round <= ROUNDS; round++) {
      for (const row of round % 2 ? rows : [...rows].reverse()) {
        for (const [mode, calls, pause] of [['back to back', CALLS, 0], [`after ${PAUSE_MS} ms idle`, Math.round(CALLS / 4), PAUSE_MS]] as const) {
          const r = await measure(row, calls, pause);
          const key = `${row.label}|${mode}`;
          results.set(key, [...(results.get(key) ?? []), r]);
          log(`round ${round} ${row.label.padEnd(30)} ${mode.padEnd(17)} p50 ${r.p50.toFixed(3)} ms  p90 ${r.p90.toFixed(3)} ms  CPU client ${r.clientUs.toFixed(0)} µs, server ${r.serverUs.toFixed(0)} µs`);
        }
      }
    }
    console.log(`\ntransport summary (${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC; one call at a time between two processes on this machine; median of ${ROUNDS} rounds)`);
    for (const [key, runs] of results) {
      const [label, mode] = key.split('|');
      const mid = (f: (r: Run) => number) => [...runs].map(f).sort((a, b) => a - b)[runs.length >> 1];
      console.log(`  ${label.padEnd(30)} ${mode.padEnd(17)} p50 ${mid((r) => r.p50).toFixed(3)} ms  p90 ${mid((r) => r.p90).toFixed(3)} ms  CPU client ${mid((r) => r.clientUs).toFixed(0).padStart(5)} µs, server ${mid((r) => r.serverUs).toFixed(0).padStart(5)} µs a call`);
    }
  } finally {
    hubClient?.close();
    grpcClient?.close();
    await nc?.close().catch(() => undefined);
    for (const c of children) c.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

/** nats-server takes a moment to listen: connect attempts every 100 ms, bounded. */
async function connectWithin(servers: string, ms: number): Promise<NatsConnection> {
  const until = Date.now() + ms;
  for (;;) {
    try {
      return await connect({ servers, timeout: 1000 });
    } catch (e) {
      if (Date.now() >= until) throw new Error(`nats-server on ${servers} did not answer in ${ms} ms: ${(e as Error).message}`);
      await sleep(100);
    }
  }
}
