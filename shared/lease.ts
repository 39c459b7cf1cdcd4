// Work that must happen once per hub while the actor doing it runs on every node (token expiry sweeps, route
// reconciliation, lost-node clean-up): one holder of a lease does it. A lease is a key of the JetStream KV
// bucket hub_leases, whose entries live LEASE_TTL_MS (the bucket's max age): the holder rewrites its key every
// third of that (compare-and-set on the revision it wrote, so it never overwrites a successor); the others try
// to create the key every RETRY_MS, which succeeds only once it is gone — deleted by a holder that stopped, or
// expired because the holder died or lost the bus. A holder counts itself holding only until its last successful
// renewal plus two thirds of the TTL, so two never both believe they hold it (given clocks that run at one rate).
import type { KV, NatsConnection } from 'nats';
import type { Logger } from './log.js';
import { encodeJson, jetStreamReplicas, retryJetStream } from './nats.js';
import { LEASE_BUCKET } from './subjects.js';

export const LEASE_TTL_MS = 6_000;
const RENEW_MS = LEASE_TTL_MS / 3;
/** How long a holder trusts its last renewal: a third of the TTL short of the key's expiry. */
const TRUST_MS = (LEASE_TTL_MS * 2) / 3;
const RETRY_MS = 1_000;

/** A lease's key: `<actor>.<work>` (each actor may write only its own keys: shared/nats-auth.ts). */
export const leaseKey = (actor: string, work: string): string => `${actor}.${work}`;

export function openLeaseBucket(nc: NatsConnection, log?: Logger): Promise<KV> {
  return retryJetStream(`bucket ${LEASE_BUCKET}`, () => nc.jetstream().views.kv(LEASE_BUCKET, { history: 1, ttl: LEASE_TTL_MS, replicas: jetStreamReplicas(nc) }), 30_000, log);
}

export interface LeaseOptions {
  /** who holds it, in the key's value and the logs (the actor's instance id) */
  holder: string;
  log: Logger;
  /** called when this holder takes the lease and when it loses it (not on stop) */
  onChange?: (held: boolean) => void;
}

export class Lease {
  private revision = 0;
  private trustedUntil = 0;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private step: Promise<void> = Promise.resolve();

  private constructor(private readonly kv: KV, readonly key: string, private readonly o: LeaseOptions) {}

  /** Starts contending for `key` at once; `held` says whether this process holds it now. */
  static async start(nc: NatsConnection, key: string, o: LeaseOptions): Promise<Lease> {
    const lease = new Lease(await openLeaseBucket(nc, o.log), key, o);
    await lease.tick();
    return lease;
  }

  /** True while this process holds the lease (checked before each piece of once-only work). */
  get held(): boolean {
    return this.revision > 0 && Date.now() < this.trustedUntil;
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => { this.step = this.tick(); }, this.revision ? RENEW_MS : RETRY_MS);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    const was = this.held;
    const value = encodeJson({ holder: this.o.holder, at: new Date().toISOString() });
    const asked = Date.now();
    try {
      this.revision = this.revision ? await this.kv.update(this.key, value, this.revision) : await this.kv.create(this.key, value);
      this.trustedUntil = asked + TRUST_MS;
    } catch (e) {
      // someone else holds it (create refused, or our revision is no longer the last), or the bus is away
      if (this.revision) this.o.log.warn({ event: 'lease.renew_failed', key: this.key, err: (e as Error).message }, 'could not renew a lease');
      this.revision = 0;
    }
    const now = this.held;
    if (now !== was) {
      this.o.log.info({ event: now ? 'lease.acquired' : 'lease.lost', key: this.key, holder: this.o.holder }, now ? 'took a lease' : 'lost a lease');
      this.o.onChange?.(now);
    }
    this.schedule();
  }

  /** Stops contending; a held lease is deleted so another takes over at its next try, not after the TTL. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.step;
    if (this.revision) {
      const revision = this.revision;
      this.revision = 0;
      await this.kv.delete(this.key, { previousSeq: revision }).catch(() => undefined);
    }
  }
}
