// An idle hub stays quiet: its actors off the request path wake a few times a second (NATS pings, leases,
// heartbeats), not 20 times each for the event-loop lag probe, which only the gateway runs every 50 ms; every
// actor still reports its loop's lag.
import test from 'ava';
import { readFileSync } from 'node:fs';
import { randomToken } from '../api/client.js';
import { sleep, waitFor } from '../harness.js';
import { startOperatedHub } from './hub.js';
import { samples } from './prometheus.js';

/** Times the process's main thread went to sleep waiting (its wake-ups), from /proc. */
const wakeUps = (pid: number): number => Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);

const QUIET_ACTORS = ['tokens', 'auth', 'oauth', 'spawner', 'proxy-router'];
/** Measured 2026-11-28: 4-9 a second with the 1 s probe, 23-29 with a 50 ms one. */
const MOST_WAKE_UPS_PER_SECOND = 15;

test('an idle hub: the actors off the request path wake fewer than 15 times a second; all report their event-loop lag', async (t) => {
  const admin = randomToken();
  const { hub } = await startOperatedHub(admin, 'open-sesame');
  try {
    const pids = hub.children();
    // past the start: the first collection, leases taken, the users made by the set-up announced
    await sleep(8000);
    const seconds = 5;
    const before = Object.fromEntries(QUIET_ACTORS.map((a) => [a, wakeUps(pids[a]!)]));
    await sleep(seconds * 1000);
    const rates = Object.fromEntries(QUIET_ACTORS.map((a) => [a, (wakeUps(pids[a]!) - before[a]) / seconds]));
    t.log(`wake-ups a second: ${JSON.stringify(rates)}`);
    for (const [actor, rate] of Object.entries(rates)) t.true(rate < MOST_WAKE_UPS_PER_SECOND, `${actor} woke ${rate} times a second while idle`);

    const lagOf = (text: string) => new Map(samples(text).filter((s) => s.name === 'hub_nodejs_eventloop_lag_seconds').map((s) => [s.labels.actor, s.value]));
    const lags = await waitFor('a scrape with every actor\'s event-loop lag', async () => {
      const r = await fetch(`${hub.url}/hub/metrics`, { headers: { authorization: `token ${admin}` } });
      const lag = lagOf(await r.text());
      return ['gateway', ...QUIET_ACTORS].every((actor) => lag.has(actor)) ? lag : undefined;
    }, 10_000, 500);
    for (const actor of ['gateway', ...QUIET_ACTORS]) {
      const seconds = lags.get(actor)!;
      t.true(Number.isFinite(seconds) && seconds >= 0 && seconds < 10, `${actor}: ${seconds}`);
    }
  } finally {
    await hub.stop();
  }
});
