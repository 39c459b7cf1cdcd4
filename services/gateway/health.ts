// /hub/health: the hub is healthy only while every actor answers its gRPC Ping within the deadline.
import type { Client } from '../../shared/contracts/index.js';
import { createGrpcClient } from '../../shared/grpc.js';
import { ACTORS, grpcSocketPath } from '../../shared/paths.js';

export interface HealthReport {
  healthy: boolean;
  actors: Record<string, { instance: string; uptime_seconds: number; details?: Record<string, string> } | null>;
  missing: string[];
}

/**
 * `gatewayInstance`: this gateway's own socket name; it checks its own gRPC service like the others.
 * `clientOf` reaches the other actors wherever they run (their socket on this node, else NATS).
 */
export function createHealthChecker(dataDir: string, timeoutMs: number, gatewayInstance: string, clientOf: (actor: (typeof ACTORS)[number]) => Pick<Client<'auth'>, 'ping' | 'close'>) {
  const clients = new Map<string, Pick<Client<'auth'>, 'ping' | 'close'>>(
    ACTORS.map((a) => [a, a === 'gateway' ? createGrpcClient(a, grpcSocketPath(dataDir, a, gatewayInstance), timeoutMs) : clientOf(a)]));
  return {
    async check(): Promise<HealthReport> {
      const results = await Promise.all([...clients].map(async ([actor, client]) => {
        try {
          const r = await client.ping({});
          return [actor, { instance: r.instance, uptime_seconds: r.uptime_seconds, details: r.details }] as const;
        } catch {
          return [actor, null] as const;
        }
      }));
      const missing = results.filter(([, r]) => r === null).map(([a]) => a);
      return { healthy: missing.length === 0, actors: Object.fromEntries(results), missing };
    },
    /**
     * Resolves once every actor of `actors` answers its Ping, or when `budgetMs` has passed (then with those still
     * silent): the front door opens only when the hub can serve, and /hub/health stays the truth after that.
     */
    async awaitActors(actors: readonly string[], budgetMs: number): Promise<string[]> {
      const until = Date.now() + budgetMs;
      let silent = [...actors];
      for (let pause = 20; silent.length; pause = Math.min(pause * 2, 250)) {
        const left = until - Date.now();
        if (left <= 0) break;
        const answered = await Promise.all(silent.map((a) => clients.get(a)!.ping({}, { deadline: Date.now() + Math.min(timeoutMs, left) }).then(() => true, () => false)));
        silent = silent.filter((_, i) => !answered[i]);
        if (silent.length) await new Promise((r) => setTimeout(r, Math.min(pause, Math.max(0, until - Date.now()))));
      }
      return silent;
    },
    close(): void {
      for (const c of clients.values()) c.close();
    },
  };
}
