// The SLURM job wrapper (slurm-job.js) run directly, without a cluster: it reports the port to the hub only once
// the server it started (or a process below it) listens there, and never a port another process holds. The hub's
// API is stood in for by a small HTTP receiver of the report (the edge the wrapper talks to); the server and the
// port holder are real processes and real sockets.
import test from 'ava';
import { spawn } from 'node:child_process';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createTcpServer, type Server as TcpServer } from 'node:net';
import { join } from 'node:path';
import { REPO, waitFor } from '../harness.js';
import { FIXTURE } from './helpers.js';

const WRAPPER = join(REPO, 'dist', 'services', 'spawner', 'backends', 'slurm-job.js');

interface Report { host: string; port: number; at: number; answered: string }

/** The hub's side: records location reports (probing the reported port at that moment) and, on /take, listens on a port itself. */
async function receiver() {
  const reports: Report[] = [];
  const held: TcpServer[] = [];
  const server: Server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      const url = new URL(req.url!, 'http://x');
      if (url.pathname === '/take') {
        // a process that is not the server takes the server's port first
        const target = new URL(url.searchParams.get('url')!);
        const holder = createTcpServer((s) => s.end('HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nimpostor\n'));
        held.push(holder);
        holder.listen(Number(target.port), target.hostname, () => res.end('taken'));
        return;
      }
      const { host, port } = JSON.parse(Buffer.concat(chunks).toString());
      // what the hub's readiness check would reach at this moment
      const answered = await fetch(`http://127.0.0.1:${port}/user/x/`).then((r) => r.text(), (e: Error) => `unreachable: ${e.message}`);
      reports.push({ host, port, at: Date.now(), answered });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`, reports,
    close: () => { for (const h of held) h.close(); server.closeAllConnections(); server.close(); },
  };
}

/** Runs the wrapper in its own process group (the whole job: killed together at the end). */
function runWrapper(apiUrl: string, cmd: string[], env: Record<string, string> = {}) {
  const p = spawn(process.execPath, [WRAPPER, '--', ...cmd], {
    detached: true, stdio: ['ignore', 'ignore', 'pipe'],
    env: {
      PATH: process.env.PATH!, HUB_SERVICE_URL: 'http://127.0.0.1:0/user/x/', HUB_SERVICE_PREFIX: '/user/x/', HUB_API_URL: `${apiUrl}/hub/api`,
      HUB_API_TOKEN: 'server-token', HUB_USER: 'x', HUB_SLURM_REPORT_HOST: '127.0.0.1', HUB_SLURM_LISTEN_TIMEOUT: '20', ...env,
    },
  });
  let stderr = '';
  p.stderr!.on('data', (d) => { stderr += d; });
  const exited = new Promise<number | null>((r) => p.on('exit', (code) => r(code)));
  return {
    exited, stderr: () => stderr,
    kill: () => { try { process.kill(-p.pid!, 'SIGKILL'); } catch { /* gone */ } },
  };
}

test('slurm-job: the port is reported only once the server (here a process below a shell) listens on it', async (t) => {
  const hub = await receiver();
  // the shell waits for the server, so the server is a grandchild of the wrapper; it listens after 1.5 s
  const job = runWrapper(hub.url, ['/bin/sh', '-c', `"$0" "$1"; exit $?`, process.execPath, FIXTURE], { FIXTURE_DELAY_MS: '1500' });
  const t0 = Date.now();
  try {
    const r = await waitFor('the report', async () => hub.reports[0], 15_000);
    t.true(r.at - t0 >= 1400, `reported after the server listened (${r.at - t0} ms)`);
    t.is(r.host, '127.0.0.1');
    t.is(r.answered, 'fixture for x\n', 'the reported port is the server\'s');
    await waitFor('the wrapper to say so', async () => (job.stderr().includes(`reported 127.0.0.1:${r.port} to the hub`) ? true : undefined), 5000);
  } finally {
    job.kill();
    hub.close();
  }
});

test('slurm-job: a port another process holds is never reported; the job ends with why', async (t) => {
  const hub = await receiver();
  // the "server" asks the test process (not one of its own) to take its port, then never listens itself
  const script = `fetch(${JSON.stringify(`${hub.url}/take?url=`)} + encodeURIComponent(process.env.HUB_SERVICE_URL)).then(() => setInterval(() => {}, 1000))`;
  const job = runWrapper(hub.url, [process.execPath, '-e', script]);
  try {
    const code = await Promise.race([job.exited, new Promise<string>((r) => setTimeout(() => r('still running'), 15_000))]);
    t.is(code, 1, job.stderr());
    t.regex(job.stderr(), /port \d+ is held by a process that is not the server: not reporting it to the hub/);
    t.deepEqual(hub.reports, [], 'no report');
  } finally {
    job.kill();
    hub.close();
  }
});

test('slurm-job: a server that exits before it listens, or never listens in time, is not reported; the job says why', async (t) => {
  const hub = await receiver();
  const quitter = runWrapper(hub.url, [process.execPath, '-e', 'process.exit(3)']);
  const silent = runWrapper(hub.url, [process.execPath, FIXTURE], { FIXTURE_MODE: 'never', HUB_SLURM_LISTEN_TIMEOUT: '1' });
  try {
    t.is(await quitter.exited, 3, 'the job ends as the server did');
    t.regex(quitter.stderr(), /the server exited with code 3 before it listened on port \d+: nothing reported to the hub/);
    t.is(await silent.exited, 1, silent.stderr());
    t.regex(silent.stderr(), /the server did not listen on port \d+ within 1 s/);
    t.deepEqual(hub.reports, []);
  } finally {
    quitter.kill();
    silent.kill();
    hub.close();
  }
});
