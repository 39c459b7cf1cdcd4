// Ports handed to servers started at once: never the same one twice (a second server would fail to bind and its
// route would reach the first one's server: another person's). The kernel offers a just-released port again
// only now and then, so the rule is tested with a picker that always does.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { freePort, portAllocator } from '../../shared/ports.js';
import { lockedTestPorts } from '../ports.js';

test('ports: a port handed out is not handed out again while the window lasts, whatever the kernel offers', async (t) => {
  const offers = [4000, 4000, 4000, 4001, 4000, 4001, 4002];
  const next = portAllocator(async () => offers.shift()!, 60_000);
  t.deepEqual([await next(), await next(), await next()], [4000, 4001, 4002]);
  const stuck = portAllocator(async () => 5000, 60_000, 5);
  t.is(await stuck(), 5000);
  await t.throwsAsync(stuck(), { message: /no free port in 5 attempts/ });
  const short = portAllocator(async () => 6000, 1);
  t.is(await short(), 6000);
  await new Promise((r) => setTimeout(r, 5));
  t.is(await short(), 6000, 'after the window a port may be handed out again');
});

test('ports: 200 ports asked for at once are all different', async (t) => {
  const ports = await Promise.all(Array.from({ length: 200 }, () => freePort()));
  t.is(new Set(ports).size, ports.length);
});

test('test ports: test processes asking at once never get the same port, and none a kernel-picked one', async (t) => {
  const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
  // three processes, like ava's workers, each asking for 150 ports at once and holding them until all have theirs
  const script = `import { testPort } from ${JSON.stringify(join(import.meta.dirname, '..', 'ports.ts'))};
    const ports = await Promise.all(Array.from({ length: 150 }, () => testPort()));
    process.stdout.write(JSON.stringify(ports) + '\\n');
    process.stdin.resume().on('end', () => process.exit(0));`;
  const children = Array.from({ length: 3 }, () => spawn(process.execPath, ['--import=tsx', '--input-type=module', '-e', script], { stdio: ['pipe', 'pipe', 'inherit'] }));
  const exited = children.map((c) => new Promise((resolve) => c.on('exit', resolve)));
  let all: number[] = [];
  try {
    const answers = await Promise.all(children.map((c) => new Promise<number[]>((resolve, reject) => {
      let out = '';
      c.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        if (out.endsWith('\n')) resolve(JSON.parse(out));
      });
      c.on('exit', (code) => reject(new Error(`a child exited (${code}) before answering`)));
    })));
    all = answers.flat();
    t.is(all.length, 450);
    t.is(new Set(all).size, all.length, 'no port handed to two processes');
    t.true(all.every((p) => p < low || p > high), `none in the kernel's range ${low}-${high}`);
    t.true(all.every((p) => lockedTestPorts().includes(p)), 'each held (a lock file) while its process lives');
  } finally {
    for (const c of children) c.stdin!.end();
    await Promise.all(exited);
  }
  t.false(lockedTestPorts().some((p) => all.includes(p)), 'their lock files went with the processes');
});
