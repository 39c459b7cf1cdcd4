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
