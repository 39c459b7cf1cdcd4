// A full garbage collection once a burst of bulk work has passed (a bulk create of 10,000 users a request):
// what it left behind is given back at once instead of when V8's memory reducer gets to it, a minute later
// (after a million-user import the whole hub held 266 bytes a user 5 s after, 135 after 65 s). Needs the
// process to run with --expose-gc (the supervisor gives it to the actors that do bulk work); a no-op without.

import { performance } from 'node:perf_hooks';
import { getHeapSpaceStatistics } from 'node:v8';

/** How long after the last bulk operation the collection runs. */
const QUIET_MS = 2000;

let timer: NodeJS.Timeout | undefined;

/** Notes bulk work just done: one collection follows QUIET_MS after the last such note. */
export function collectAfterBurst(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) return;
  clearTimeout(timer);
  timer = setTimeout(gc, QUIET_MS);
  timer.unref();
}

/** How often an actor looks whether it has gone idle with garbage to give back. */
const IDLE_CHECK_MS = 2000;
/** Idle: the event loop busy for less than this share of the last check's interval. */
const IDLE_UTILIZATION = 0.02;
/** Garbage worth collecting: the heap (used or held) grown by this much since the last collection here. */
const GROWN_BYTES = 8 * 1024 * 1024;
/**
 * The second collection's delay. V8 shrinks the young generation only in a collection that finds the allocation
 * rate of its recent past (~5 s) low but not zero: a second collection at once, or 1 s later, kept the gateway's
 * 16 MB of semi-spaces; 6 s later it gave back all but 1 MB. The second one also returns the pages the first
 * one's (concurrent) sweeping freed.
 */
const SECOND_COLLECTION_MS = 6000;

/** A young generation larger than this once idle is worth two full collections to give back (it starts at 1 MB; the actors at --max-semi-space-size=2 never reach more). */
const YOUNG_GROWN_BYTES = 4 * 1024 * 1024;

const youngGenerationBytes = (): number => getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')?.space_size ?? 0;

/**
 * Full collections once the process has gone idle with a heap grown since the last one: V8 lets a busy process's
 * old generation grow far (its first limit is sized for a large heap) and, once the requests stop, allocates too
 * little to collect what they left. After 5 s of API list pages the gateway held 55 MB of heap of which 15 were
 * live, still 15 s later (the whole hub 270 MB PSS against 186 with this). Also, once per idle spell, when the
 * young generation was left grown: a burst that allocated much but kept little (a bulk create of users) leaves the
 * old generation small and the semi-spaces at their largest (the gateway's 16 MB, 15 s after 1,000 users were
 * created), and only the pair of collections gives them back. Checked every IDLE_CHECK_MS (the event loop's
 * utilisation and heapUsed, a few µs); a no-op without --expose-gc (actors rarely loaded lack it).
 */
export function collectWhenIdle(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) return;
  let last = performance.eventLoopUtilization();
  let afterGc = process.memoryUsage();
  let second: NodeJS.Timeout | undefined;
  /** no busy check since the last collection here: the young generation had its chance to shrink */
  let collectedSinceBusy = true;
  /**
   * What starting left (modules compiled, configuration read, stores opened) is collected at the first idle check:
   * below GROWN_BYTES it would otherwise stay, and from one start to the next the same actor held 28 or 40 MB.
   */
  let startCollected = false;
  const collect = (): void => {
    gc();
    afterGc = process.memoryUsage();
  };
  setInterval(() => {
    const now = performance.eventLoopUtilization();
    const busy = performance.eventLoopUtilization(now, last).utilization;
    last = now;
    if (busy >= IDLE_UTILIZATION) {
      collectedSinceBusy = false;
      return;
    }
    // grown: more in use, or more held (a heap V8 collected itself under load keeps the pages it grew to)
    const { heapUsed, heapTotal } = process.memoryUsage();
    const grown = heapUsed - afterGc.heapUsed >= GROWN_BYTES || heapTotal - afterGc.heapTotal >= GROWN_BYTES;
    if (startCollected && !grown && (collectedSinceBusy || youngGenerationBytes() <= YOUNG_GROWN_BYTES)) return;
    startCollected = true;
    collectedSinceBusy = true;
    collect();
    clearTimeout(second);
    second = setTimeout(collect, SECOND_COLLECTION_MS);
    second.unref();
  }, IDLE_CHECK_MS).unref();
}
