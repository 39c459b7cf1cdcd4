// Whether a started server answers HTTP yet: the same check whichever backend runs it.
import { request } from 'node:http';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One GET; any HTTP answer means the server is up (it may well answer 302 or 403 to us). */
function probe(url: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request(url, { method: 'GET', timeout: timeoutMs }, (res) => {
      res.resume();
      resolve(true);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
    req.end();
  });
}

export interface WaitOptions {
  timeoutMs: number;
  requestTimeoutMs: number;
  /** null while the server runs; once it has ended, why (the wait then fails with it) */
  ended: () => Promise<string | null> | string | null;
  signal: AbortSignal;
}

/** Polls `url` with backoff until it answers; fails when the server ends, the time is up, or on abort. */
export async function waitForHttp(url: string, o: WaitOptions): Promise<void> {
  const deadline = Date.now() + o.timeoutMs;
  for (let delay = 20; ; delay = Math.min(delay * 1.5, 1000)) {
    if (o.signal.aborted) throw new Error('cancelled');
    const ended = await o.ended();
    if (ended !== null) throw new Error(ended);
    if (await probe(url, Math.min(o.requestTimeoutMs, Math.max(100, deadline - Date.now())))) return;
    if (Date.now() + delay > deadline) throw new Error(`the server did not answer within ${Math.round(o.timeoutMs / 1000)} s`);
    await sleep(delay);
  }
}
