// The answering side of `npm run bench transport`, a process of its own: echoes on a unix socket (raw bytes), on a
// grpc-js server (a unary echo, a long-lived bidirectional stream echo, and the hub's own auth Ping served by
// shared/grpc.ts serveGrpc) and on NATS (a request/reply responder). argv: <socket dir> <NATS url>. Prints "ready".
import { rmSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { connect } from 'nats';
import { serveGrpc } from '../../shared/grpc.js';
import { createLogger } from '../../shared/log.js';
import { ECHO_SERVICE, HUB_PING_SOCKET, RAW_SOCKET, GRPC_SOCKET } from './transport-names.js';

const [dir, natsUrl] = process.argv.slice(2);

const raw = join(dir, RAW_SOCKET);
rmSync(raw, { force: true });
await new Promise<void>((resolve) => net.createServer((s) => s.on('data', (d) => s.write(d))).listen(raw, resolve));

const server = new grpc.Server();
server.addService(ECHO_SERVICE, {
  echo: (call: grpc.ServerUnaryCall<Buffer, Buffer>, done: grpc.sendUnaryData<Buffer>) => done(null, call.request),
  chat: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => call.on('data', (d: Buffer) => call.write(d)),
});
await new Promise<void>((resolve, reject) => server.bindAsync(`unix://${join(dir, GRPC_SOCKET)}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));

// the hub's own contract and wrapper: every other rpc of the auth service is never called here
const quiet = createLogger('bench-transport', 'silent');
const table = new Proxy({}, { get: () => async () => ({}) });
await serveGrpc('auth', join(dir, HUB_PING_SOCKET), table as never, quiet);

const nc = await connect({ servers: natsUrl });
nc.subscribe('bench.echo', { callback: (_e, m) => m.respond(m.data) });
await nc.flush();
console.log('ready');
