// Calls between actors travel as messages on one gRPC stream per client (shared/grpc.ts `CallLine`,
// `serveCallStream`): each reply reaches its own call, errors keep what they said, deadlines hold, a callee being
// replaced hands over without a failed call, a callee of a version without the stream is called unary, and a
// callee killed mid-call fails only the calls it had taken. Real grpc-js servers on unix sockets; the killed callee
// is a process of its own.
import test from 'ava';
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { createGrpcClient, serveGrpc, stopGrpc } from '../../shared/grpc.js';
import { errors } from '../../shared/errors.js';
import { createLogger } from '../../shared/log.js';
import { PROTO_DIR } from '../../shared/paths.js';
import { sleep, waitFor } from '../harness.js';

const quiet = createLogger('call-stream-test', 'silent');
const dir = mkdtempSync(join(tmpdir(), 'hub-call-stream-'));
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

/** An auth service whose GetUser answers `<tag>:<name>` after `delayMs`, and refuses the name "missing". */
function authHandlers(tag: string, delayMs = 0) {
  const handlers: Record<string, (r: any) => unknown> = {
    GetUser: async (r: { name: string }) => {
      if (delayMs) await sleep(delayMs);
      if (r.name === 'missing') throw errors.notFound(`no user ${r.name}`);
      return { name: `${tag}:${r.name}`, admin: r.name.startsWith('admin'), groups: [tag] };
    },
  };
  return new Proxy(handlers, { get: (t, k: string) => t[k] ?? (async () => ({})) }) as never;
}

test('calls at once on one client each get their own reply; an error keeps its status, code and message', async (t) => {
  const socket = join(dir, 'many.sock');
  const server = await serveGrpc('auth', socket, authHandlers('a', 5), quiet);
  const auth = createGrpcClient('auth', socket, 5000);
  try {
    const names = Array.from({ length: 300 }, (_, i) => (i % 3 ? `user${i}` : `admin${i}`));
    const users = await Promise.all(names.map((name) => auth.getUser({ name })));
    t.deepEqual(users.map((u) => u.name), names.map((n) => `a:${n}`));
    t.deepEqual(users.map((u) => u.admin), names.map((n) => n.startsWith('admin')));
    const err = await t.throwsAsync(auth.getUser({ name: 'missing' }));
    t.like(err, { status: 404, code: 'HUB_ERR_NOT_FOUND', message: 'no user missing' });
  } finally {
    auth.close();
    await stopGrpc(server, 1000);
  }
});

test('a call past its deadline fails as a timeout (504) and the stream goes on serving the next ones', async (t) => {
  const socket = join(dir, 'slow.sock');
  const server = await serveGrpc('auth', socket, authHandlers('s', 2500), quiet);
  const auth = createGrpcClient('auth', socket, 5000);
  try {
    const started = Date.now();
    const err = await t.throwsAsync(auth.getUser({ name: 'late' }, { deadline: Date.now() + 100 }));
    t.is((err as any).status, 504);
    t.true(Date.now() - started < 2000, 'the caller is answered at its deadline, not when the handler ends');
    t.is((await auth.getUser({ name: 'next' })).name, 's:next');
  } finally {
    auth.close();
    await stopGrpc(server, 1000);
  }
});

test('a callee replaced under load: calls it took are answered by it, later ones by its successor, none fails', async (t) => {
  const socket = join(dir, 'replaced.sock');
  const first = await serveGrpc('auth', socket, authHandlers('old', 20), quiet);
  const auth = createGrpcClient('auth', socket, 5000);
  const answers: string[] = [];
  let failures = 0;
  let running = true;
  const caller = async (i: number) => {
    for (let n = 0; running; n++) {
      try {
        answers.push((await auth.getUser({ name: `c${i}-${n}` })).name.split(':')[0]);
      } catch {
        failures++;
      }
    }
  };
  const callers = Array.from({ length: 8 }, (_, i) => caller(i));
  try {
    await waitFor('answers from the first callee', async () => answers.includes('old') || undefined, 10_000);
    // as `hub restart` does: the successor binds and takes the socket path, then the old one stops
    const second = await serveGrpc('auth', socket, authHandlers('new', 20), quiet);
    const stopped = Date.now();
    await stopGrpc(first, 15_000);
    // calls cut off at the budget would count as failures too; a stop that waits only for its calls is quick
    t.true(Date.now() - stopped < 10_000, 'the old callee stopped once its calls were answered, not at its budget');
    const since = answers.length;
    await waitFor('answers from its successor', async () => answers.slice(since).includes('new') || undefined, 10_000);
    running = false;
    await Promise.all(callers);
    await stopGrpc(second, 1000);
  } finally {
    running = false;
    auth.close();
  }
  t.is(failures, 0);
  const from = (tag: string) => answers.filter((a) => a === tag).length;
  t.true(from('old') > 0 && from('new') > 0, `both callees answered: old ${from('old')}, new ${from('new')}, last ${answers[answers.length - 1]}`);
  t.is(answers[answers.length - 1], 'new');
});

test('a callee without the call stream (a version before it) is called unary', async (t) => {
  const socket = join(dir, 'unary.sock');
  const def = protoLoader.loadSync('auth.proto', { includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true });
  const Auth = (grpc.loadPackageDefinition(def) as any).hub.auth.v1.Auth as grpc.ServiceClientConstructor;
  const server = new grpc.Server();
  server.addService(Auth.service, {
    GetUser: (call: grpc.ServerUnaryCall<{ name: string }, unknown>, done: grpc.sendUnaryData<unknown>) => done(null, { name: `unary:${call.request.name}` }),
  });
  await new Promise<void>((resolve, reject) => server.bindAsync(`unix://${socket}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
  const auth = createGrpcClient('auth', socket, 5000);
  try {
    t.is((await auth.getUser({ name: 'x' })).name, 'unary:x');
    t.is((await auth.getUser({ name: 'y' })).name, 'unary:y');
  } finally {
    auth.close();
    server.forceShutdown();
  }
});

test('a callee killed mid-call fails the call it took (503); once a new one listens, calls reach it', async (t) => {
  const socket = join(dir, 'killed.sock');
  const peer = () => {
    const child = fork(join(import.meta.dirname, 'call-stream-peer.ts'), [socket], { execArgv: ['--import=tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    return new Promise<typeof child>((resolve, reject) => {
      child.once('message', () => resolve(child));
      child.once('exit', (code) => reject(new Error(`the callee exited (${code})`)));
    });
  };
  let callee = await peer();
  const auth = createGrpcClient('auth', socket, 10_000);
  try {
    t.is((await auth.getUser({ name: 'first' })).name, 'peer:first');
    const underWay = auth.getUser({ name: 'slow' }); // the peer holds "slow" for 5 s
    await sleep(300);
    callee.kill('SIGKILL');
    const err = await t.throwsAsync(underWay);
    t.is((err as any).status, 503);
    callee = await peer();
    t.is((await auth.getUser({ name: 'again' }, { waitForCalleeMs: 5000 })).name, 'peer:again');
  } finally {
    auth.close();
    callee.kill('SIGKILL');
  }
});
