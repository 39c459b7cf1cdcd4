// A free TCP port on 127.0.0.1, found by binding port 0 (the kernel picks) and letting it go.
import { createServer } from 'node:net';

function kernelPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/**
 * Between our close and the new owner's bind, the kernel may offer the same port to the next caller: two
 * servers started at once would then share one, and the second's route would reach the first's server
 * (another person's). So a port this process handed out is not handed out again within `windowMs`.
 */
export function portAllocator(pick: () => Promise<number>, windowMs = 120_000, maxAttempts = 50): () => Promise<number> {
  const handedOut = new Map<number, number>();
  return async () => {
    const now = Date.now();
    for (const [port, at] of handedOut) if (now - at > windowMs) handedOut.delete(port);
    for (let attempt = 0; attempt < maxAttempts; attempt++) {
      const port = await pick();
      if (handedOut.has(port)) continue;
      handedOut.set(port, now);
      return port;
    }
    throw new Error(`no free port in ${maxAttempts} attempts that this process had not just handed out`);
  };
}

export const freePort = portAllocator(kernelPort);

/**
 * Waits (bounded) until `port` on `host` can be bound by a socket without SO_REUSEPORT, then releases it.
 * The gateway listens with SO_REUSEPORT (uWS sets it, and several gateways share the port), so a second hub
 * configured on the same port would otherwise listen beside the first and silently take half its requests;
 * a plain bind refuses while anyone listens there. Retried briefly: a previous run's gateway just killed may
 * still hold it. Resolves with the error code when the port stays taken, null when it is free.
 */
export async function portInUse(host: string, port: number, waitMs = 2000): Promise<string | null> {
  const deadline = Date.now() + waitMs;
  for (let attempt = 0; attempt < 100; attempt++) {
    const code = await new Promise<string | null>((resolve) => {
      const probe = createServer();
      probe.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'EADDRINUSE'));
      probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve(null)));
    });
    if (code !== 'EADDRINUSE' || Date.now() >= deadline) return code;
    await new Promise((r) => setTimeout(r, 100));
  }
  return 'EADDRINUSE';
}
