// The test harness itself: a test process that dies with hubs still running takes them along, so a crashed test
// file never leaves a hub (its NATS, its actors) running through the rest of the suite.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import test from 'ava';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isAlive, waitFor } from '../harness.js';

test('harness: a test process that crashes with a hub running leaves none of its processes behind', async (t) => {
  const script = `import { startHub } from ${JSON.stringify(join(import.meta.dirname, '..', 'harness.ts'))};
    const hub = await startHub();
    process.stdout.write(JSON.stringify([hub.proc.pid, ...Object.values(hub.children())]) + '\\n');
    setTimeout(() => { throw new Error('a test file crashing'); }, 10);`;
  const child = spawn(process.execPath, ['--import=tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => { out += c.toString(); });
  child.stderr.on('data', (c: Buffer) => { err += c.toString(); });
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  t.not(code, 0, 'the test process crashed');
  t.regex(err, /a test file crashing/);
  const pids = JSON.parse(out.trim()) as (number | null)[];
  const started = pids.filter((p): p is number => typeof p === 'number');
  t.true(started.length >= 7, `the supervisor, NATS and the actors: ${out}`);
  // SIGKILL is sent before the test process exits; the kernel reaps them at once (their parent is gone)
  await waitFor('every process of the hub to be gone', async () => (started.some(isAlive) ? undefined : true), 5000);
});

test('harness: a test process ended by SIGTERM (how ava ends a timed-out worker) leaves no process and no port lock behind', async (t) => {
  const script = `import { startHub } from ${JSON.stringify(join(import.meta.dirname, '..', 'harness.ts'))};
    const hub = await startHub();
    process.stdout.write(JSON.stringify({ pids: [hub.proc.pid, ...Object.values(hub.children())], ports: [hub.port, hub.natsPort] }) + '\\n');
    setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--import=tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => { out += c.toString(); });
  child.stderr.on('data', (c: Buffer) => { err += c.toString(); });
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) => child.on('exit', (code, signal) => resolve(signal ?? code)));
  await waitFor('the test process to report its hub', async () => (out.includes('\n') ? true : undefined), 60_000);
  const { pids, ports } = JSON.parse(out.trim()) as { pids: (number | null)[]; ports: number[] };
  const started = pids.filter((p): p is number => typeof p === 'number');
  t.true(started.length >= 7, `the supervisor, NATS and the actors: ${out}`);
  const locks = ports.map((p) => join(tmpdir(), 'hub-test-ports', String(p)));
  t.true(locks.every(existsSync), `the hub's ports are locked while it runs: ${locks.join(', ')}`);
  child.kill('SIGTERM');
  t.is(await exited, 143, `ended by the signal, through its exit handlers: ${err.slice(-500)}`);
  await waitFor('every process of the hub to be gone', async () => (started.some(isAlive) ? undefined : true), 5000);
  t.deepEqual(locks.filter(existsSync), [], 'the port locks are gone');
});
