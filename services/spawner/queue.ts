// Spawn bursts wait instead of failing: at most `limit` starts run at once (Hub.concurrent_spawn_limit);
// later ones wait first-come in a bounded queue (Hub.spawn_queue_limit) and are told their place as it moves.

interface Waiter {
  key: string;
  resolve: () => void;
  reject: (e: Error) => void;
}

export class SpawnQueue {
  private running = 0;
  private readonly waiting: Waiter[] = [];

  /**
   * @param limit starts at once (0 = no limit)
   * @param max starts that may wait (0 = none: beyond the limit a start is refused)
   * @param moved told a waiter's new place (starts waiting ahead of it); called for the first few places on every
   *   move and further back only every 50 places, so a long queue costs few registry writes per turn
   */
  constructor(private limit: number, private max: number, private readonly moved: (key: string, ahead: number) => void) {}

  /** New limits (`hub reload`): a higher one lets waiting starts run at once; a lower one holds the next ones back. */
  setLimits(limit: number, max: number): void {
    this.limit = limit;
    this.max = max;
    let started = 0;
    while (this.waiting.length && (this.limit === 0 || this.running < this.limit)) {
      this.running++;
      this.waiting.shift()!.resolve();
      started++;
    }
    if (started) this.tell(0);
  }

  get waitingCount(): number {
    return this.waiting.length;
  }

  /** What a new start would meet: its turn at once, a wait, or a full queue. */
  admit(): 'now' | 'wait' | 'full' {
    if (this.limit === 0 || (this.running < this.limit && !this.waiting.length)) return 'now';
    return this.waiting.length < this.max ? 'wait' : 'full';
  }

  /** Resolves when the start may run (then `release()` once it has ended); rejects if aborted while waiting. */
  turn(key: string, signal: AbortSignal): Promise<void> {
    if (this.admit() === 'now') {
      this.running++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { key, resolve, reject };
      this.waiting.push(waiter);
      this.moved(key, this.waiting.length - 1);
      signal.addEventListener('abort', () => {
        const i = this.waiting.indexOf(waiter);
        if (i < 0) return; // already running
        this.waiting.splice(i, 1);
        reject(new Error('cancelled'));
        this.tell(i);
      }, { once: true });
    });
  }

  release(): void {
    this.running--;
    if (!this.waiting.length || (this.limit > 0 && this.running >= this.limit)) return;
    this.running++;
    this.waiting.shift()!.resolve();
    this.tell(0);
  }

  /** Places from `from` on have moved up by one. */
  private tell(from: number): void {
    for (let i = from; i < this.waiting.length; i++) {
      if (i < 10 || i % 50 === 0) this.moved(this.waiting[i].key, i);
    }
  }
}
