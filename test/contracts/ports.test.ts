// Ports handed to servers started at once: never the same one twice (a second server would fail to bind and its
// route would reach the first one's server: another person's). The kernel offers a just-released port again
// only now and then, so the rule is tested with a picker that always does.
import test from 'ava';
import { freePort, portAllocator } from '../../shared/ports.js';

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
