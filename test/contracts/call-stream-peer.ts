// A callee of its own process for call-stream.test.ts: the auth service on argv[2], GetUser answering `peer:<name>`
// (the name "slow" after 5 s). Tells its parent when it listens.
import { serveGrpc } from '../../shared/grpc.js';
import { createLogger } from '../../shared/log.js';

const handlers: Record<string, (r: any) => unknown> = {
  GetUser: async (r: { name: string }) => {
    if (r.name === 'slow') await new Promise((resolve) => setTimeout(resolve, 5000));
    return { name: `peer:${r.name}` };
  },
};
await serveGrpc('auth', process.argv[2], new Proxy(handlers, { get: (t, k: string) => t[k] ?? (async () => ({})) }) as never, createLogger('call-stream-peer', 'silent'));
process.send!('listening');
