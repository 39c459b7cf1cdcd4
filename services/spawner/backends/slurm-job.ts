// Runs inside a SLURM job, on whichever node the job landed (the batch script's `exec {cmd}` starts it):
// picks a free port there, starts the server on it, reports host and port to the hub with the server's own
// token (POST /hub/api/users/<u>/server[s/<s>]/location), then stays the job's main process, passing
// signals on (scancel and the time limit send SIGTERM here) and exiting as the server does.
//
//   node slurm-job.js -- <server command...>
//
// The environment is the server's (HUB_*, aliases), given with the job: HUB_SERVICE_URL names the address to
// listen on with port 0, which this program replaces, in every variable that holds it, by the port it chose.
// HUB_SLURM_REPORT_HOST, when set (e.g. by the batch script), is the host reported instead of the node's name.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { hostname } from 'node:os';

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
  delete env.HUB_SLURM_REPORT_HOST;

  const child = spawn(args[0], args.slice(1), { env, stdio: 'inherit' });
  for (const s of ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR1', 'SIGUSR2', 'SIGCONT'] as const) {
    process.on(s, () => child.kill(s));
  }
  child.on('error', (e) => {
    say(`could not start ${args[0]}: ${e.message}`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => process.exit(code ?? (signal ? 128 + (({ SIGTERM: 15, SIGINT: 2, SIGKILL: 9 } as Record<string, number>)[signal] ?? 1) : 1)));

  const name = env.HUB_SERVER_NAME ?? '';
  const path = name ? `/users/${encodeURIComponent(env.HUB_USER)}/servers/${encodeURIComponent(name)}/location`
    : `/users/${encodeURIComponent(env.HUB_USER)}/server/location`;
  try {
    await report(`${env.HUB_API_URL}${path}`, env.HUB_API_TOKEN, host, port);
    say(`reported ${host}:${port} to the hub`);
  } catch (e) {
    say((e as Error).message);
    child.kill('SIGTERM');
    setTimeout(() => process.exit(1), 5000).unref();
  }
}

await main();
