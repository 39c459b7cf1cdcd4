// Runs inside a SLURM job, on whichever node the job landed (the batch script's `exec {cmd}` starts it):
// picks a free port there, starts the server on it, waits until that server (or a process it started)
// listens on the port, reports host and port to the hub with the server's own token
// (POST /hub/api/users/<u>/server[s/<s>]/location), then stays the job's main process, passing signals on
// (scancel and the time limit send SIGTERM here) and exiting as the server does.
//
//   node slurm-job.js -- <server command...>
//
// The environment is the server's (HUB_*, aliases), given with the job: HUB_SERVICE_URL names the address to
// listen on with port 0, which this program replaces, in every variable that holds it, by the port it chose.
// HUB_SLURM_REPORT_HOST, when set (e.g. by the batch script), is the host reported instead of the node's name.
// HUB_SLURM_LISTEN_TIMEOUT (seconds, default 600) bounds the wait for the server to listen.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import { hostname } from 'node:os';
import { processTree } from '../../../shared/processes.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const say = (line: string) => process.stderr.write(`hub slurm-job: ${line}\n`);

function freePortOn(ip: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, ip, () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** The socket inodes the processes hold open (/proc/<pid>/fd links `socket:[inode]`); processes we may not look into are skipped. */
function socketInodes(pids: number[]): Set<string> {
  const out = new Set<string>();
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m) out.add(m[1]);
      } catch {
        // closed meanwhile
      }
    }
  }
  return out;
}

/**
 * Who listens on `port` as `child` sees the network (Linux /proc): the inodes of the listening TCP sockets on that
 * port (/proc/<child>/net/tcp and tcp6, state 0A) against the sockets held by the child and its descendants.
 * `ours`: it listens and nobody else does; `other`: a process outside the server's tree listens there too (it
 * would receive the hub's requests: a port taken between our pick and the server's start, or shared with
 * SO_REUSEPORT); `none`: nobody yet. Throws when /proc cannot tell (the child is gone).
 */
function listenerOf(child: number, port: number): 'ours' | 'other' | 'none' {
  const listening = new Set<string>();
  for (const file of ['tcp', 'tcp6']) {
    let table: string;
    try {
      table = readFileSync(`/proc/${child}/net/${file}`, 'utf8');
    } catch (e) {
      if (file === 'tcp6' && (e as NodeJS.ErrnoException).code === 'ENOENT') continue; // no IPv6 on this node
      throw e;
    }
    for (const line of table.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 9 && f[3] === '0A' && parseInt(f[1].split(':')[1], 16) === port) listening.add(f[9]);
    }
  }
  if (!listening.size) return 'none';
  const ours = socketInodes(processTree(child));
  return [...listening].every((inode) => ours.has(inode)) ? 'ours' : 'other';
}

/**
 * Waits (bounded) until the server itself listens on `port`, so the hub is never sent to a port another process
 * took first: looks at /proc 50 ms apart at first, then every 500 ms. Resolves once the port is the server's;
 * rejects with why when another process holds it or time is up (the server's exit ends the program itself).
 */
async function serverListens(child: number, port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 50; ; delay = Math.min(delay * 1.5, 500)) {
    // a server that has just exited reads as nobody listening: its exit ends this program meanwhile
    const who = (() => {
      try {
        return listenerOf(child, port);
      } catch {
        return 'none' as const;
      }
    })();
    if (who === 'ours') return;
    if (who === 'other') throw new Error(`port ${port} is held by a process that is not the server: not reporting it to the hub`);
    if (Date.now() + delay > deadline) throw new Error(`the server did not listen on port ${port} within ${Math.round(timeoutMs / 1000)} s`);
    await sleep(delay);
  }
}

/** The report, retried while the hub is unreachable or restarting (bounded); a refusal is final. */
async function report(url: string, token: string, host: string, port: number): Promise<void> {
  let last = '';
  for (let attempt = 0, delay = 250; attempt < 12; attempt++, delay = Math.min(delay * 2, 5000)) {
    try {
      const r = await fetch(url, {
        method: 'POST', headers: { authorization: `token ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ host, port }), signal: AbortSignal.timeout(10_000),
      });
      if (r.ok) return;
      last = `${r.status} ${(await r.text()).slice(0, 300)}`;
      if (r.status < 500 && r.status !== 429) throw new Error(`the hub refused the report: ${last}`);
    } catch (e) {
      if ((e as Error).message.startsWith('the hub refused')) throw e;
      last = (e as Error).message;
    }
    await sleep(delay);
  }
  throw new Error(`could not reach the hub at ${url}: ${last}`);
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args[0] === '--') args.shift();
  const env = { ...process.env } as Record<string, string>;
  if (!args.length || !env.HUB_SERVICE_URL || !env.HUB_API_URL || !env.HUB_API_TOKEN || !env.HUB_USER) {
    say('usage: slurm-job.js -- <command...>, with HUB_SERVICE_URL, HUB_API_URL, HUB_API_TOKEN, HUB_USER in the environment');
    process.exit(2);
  }
  const placeholder = env.HUB_SERVICE_URL;
  const listen = new URL(placeholder);
  const port = await freePortOn(listen.hostname);
  listen.port = String(port);
  for (const [k, v] of Object.entries(env)) if (v === placeholder) env[k] = listen.href;
  const host = env.HUB_SLURM_REPORT_HOST || hostname();
  const listenTimeoutMs = (Number(env.HUB_SLURM_LISTEN_TIMEOUT) || 600) * 1000;
  delete env.HUB_SLURM_REPORT_HOST;
  delete env.HUB_SLURM_LISTEN_TIMEOUT;

  const child = spawn(args[0], args.slice(1), { env, stdio: 'inherit' });
  for (const s of ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR1', 'SIGUSR2', 'SIGCONT'] as const) {
    process.on(s, () => child.kill(s));
  }
  // starting until the server listens; then the job ends as the server does, unless we gave up on it
  let phase: 'starting' | 'listening' | 'gave up' = 'starting';
  child.on('error', (e) => {
    say(`could not start ${args[0]}: ${e.message}`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => {
    if (phase === 'gave up') process.exit(1);
    if (phase === 'starting') say(`the server exited ${signal ? `on ${signal}` : `with code ${code}`} before it listened on port ${port}: nothing reported to the hub`);
    process.exit(code ?? (signal ? 128 + (({ SIGTERM: 15, SIGINT: 2, SIGKILL: 9 } as Record<string, number>)[signal] ?? 1) : 1));
  });
  if (child.pid === undefined) return; // could not start: the error above ends the job

  const name = env.HUB_SERVER_NAME ?? '';
  const path = name ? `/users/${encodeURIComponent(env.HUB_USER)}/servers/${encodeURIComponent(name)}/location`
    : `/users/${encodeURIComponent(env.HUB_USER)}/server/location`;
  try {
    if (existsSync('/proc/self/net/tcp')) {
      await serverListens(child.pid, port, listenTimeoutMs);
    } else {
      say('no /proc here: reporting the port without checking that the server is what listens on it');
    }
    phase = 'listening';
    await report(`${env.HUB_API_URL}${path}`, env.HUB_API_TOKEN, host, port);
    say(`reported ${host}:${port} to the hub`);
  } catch (e) {
    phase = 'gave up';
    say((e as Error).message);
    child.kill('SIGTERM');
    setTimeout(() => process.exit(1), 5000).unref();
  }
}

await main();
