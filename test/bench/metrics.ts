// Metrics benchmark: what scraping /hub/metrics 1,000 times a minute costs the API path. One hub, one
// user; wrk measures `GET /hub/api/users/<name>` with and without a scraper asking /hub/metrics every
// 60 ms (a fixed rate), the two alternating in the same run (three rounds each) so the machine's drift hits both alike.
// BENCH_SECONDS sets each wrk run's duration (default 10).
import { startHub } from '../harness.js';
import { aptInstall, onPath } from './tools.js';
import { failures, wrk, type WrkResult } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const ROUNDS = 3;
const SCRAPE_EVERY_MS = 60; // 1,000 a minute
const ADMIN = 'metrics-bench-admin-token-0123456789';
const log = (line: string): void => console.log(`metrics: ${line}`);

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Starts a scrape every SCRAPE_EVERY_MS until stopped, whether or not the previous one has answered (a fixed rate). */
function startScraper(url: string) {
  const latencies: number[] = [];
  let bytes = 0;
  let errors = 0;
  const pending = new Set<Promise<void>>();
  const timer = setInterval(() => {
    const t0 = performance.now();
    const p = fetch(url, { headers: { authorization: `token ${ADMIN}` }, signal: AbortSignal.timeout(5000) })
      .then(async (r) => {
        const text = await r.text();
        if (r.status !== 200) errors++;
        bytes = text.length;
      })
      .catch(() => { errors++; })
      .finally(() => {
        latencies.push(performance.now() - t0);
        pending.delete(p);
      });
    pending.add(p);
  }, SCRAPE_EVERY_MS);
  return {
    async stop() {
      clearInterval(timer);
      await Promise.all(pending);
      const sorted = [...latencies].sort((a, b) => a - b);
      return { scrapes: latencies.length, p50: median(latencies), p99: sorted[Math.floor(sorted.length * 0.99)] ?? 0, bytes, errors };
    },
  };
}

export async function metrics(): Promise<void> {
  if (!onPath('wrk')) aptInstall('wrk', log);
  if (!onPath('wrk')) throw new Error('wrk is missing: install it with `apt-get install -y wrk`');
  const hub = await startHub({ config: { Hub: { api_tokens: { [ADMIN]: 'bench-admin' } }, Authenticator: { admin_users: ['bench-admin'] } } });
  try {
    const target = `${hub.url}/hub/api/users/bench-admin`;
    const headers = { Authorization: `token ${ADMIN}` };
    await wrk(target, { seconds: 2, headers }); // warm-up: JIT, caches
    const without: WrkResult[] = [];
    const withScraper: WrkResult[] = [];
    const scrapes: Awaited<ReturnType<ReturnType<typeof startScraper>['stop']>>[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const a = await wrk(target, { seconds: SECONDS, headers });
      without.push(a);
      const scraper = startScraper(`${hub.url}/hub/metrics`);
      const b = await wrk(target, { seconds: SECONDS, headers });
      scrapes.push(await scraper.stop());
      withScraper.push(b);
      log(`round ${round + 1}: ${Math.round(a.reqPerSec)} req/s without, ${Math.round(b.reqPerSec)} with the scraper (${scrapes[round].scrapes} scrapes, p50 ${scrapes[round].p50.toFixed(1)} ms)`);
      if (failures(a) || failures(b)) throw new Error(`failed requests: ${failures(a)} without, ${failures(b)} with the scraper`);
    }
    const rpsWithout = median(without.map((r) => r.reqPerSec));
    const rpsWith = median(withScraper.map((r) => r.reqPerSec));
    const perMinute = median(scrapes.map((s) => (s.scrapes / SECONDS) * 60));
    log(`GET /hub/api/users/<name>: ${Math.round(rpsWithout)} req/s (p99 ${median(without.map((r) => r.p99)).toFixed(2)} ms) without a scraper; ` +
      `${Math.round(rpsWith)} req/s (p99 ${median(withScraper.map((r) => r.p99)).toFixed(2)} ms) while scraping ${Math.round(perMinute)} times a minute ` +
      `(${((rpsWith / rpsWithout - 1) * 100).toFixed(1)}%; spread without: ${Math.round(Math.min(...without.map((r) => r.reqPerSec)))}–${Math.round(Math.max(...without.map((r) => r.reqPerSec)))})`);
    log(`scrape: p50 ${median(scrapes.map((s) => s.p50)).toFixed(1)} ms, p99 ${median(scrapes.map((s) => s.p99)).toFixed(1)} ms, ` +
      `${Math.round(scrapes[scrapes.length - 1].bytes / 1024)} KiB, ${scrapes.reduce((n, s) => n + s.errors, 0)} errors`);
  } finally {
    await hub.stop();
  }
}
