// `hub status`: the running hub's processes with their memory, and each actor's answer to a gRPC Ping.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ACTORS, runDir } from '../shared/paths.js';
import type { VerbInput } from './main.js';
import { readProcesses } from '../shared/processes.js';
import { runningHub } from './hub.js';
import type { HubConfig } from '../shared/config.js';
import { pushAll } from '../shared/lists.js';

/** RSS counts pages shared between the Node processes once per process; PSS divides them fairly. */
function memoryOf(pid: number): { rssKb: number; pssKb: number } | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    return { rssKb: Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0), pssKb: Number(/^Pss:\s+(\d+)/m.exec(rollup)?.[1] ?? 0) };
  } catch {
    return null;
  }
}

/** The actors' gRPC sockets in the run dir: `<actor>.sock`, or `<actor>-<instance>.sock` for replicas. */
function actorSockets(dataDir: string): { actor: (typeof ACTORS)[number]; name: string; path: string }[] {
  let files: string[] = [];
  try {
    files = readdirSync(runDir(dataDir)).filter((f) => f.endsWith('.sock')).sort();
  } catch {
    return [];
  }
  return files.flatMap((f) => {
    const name = f.slice(0, -'.sock'.length);
    const actor = ACTORS.find((a) => name === a || name.startsWith(`${a}-`));
    return actor ? [{ actor, name, path: join(runDir(dataDir), f) }] : [];
  });
}

export async function status({ config }: VerbInput): Promise<number> {
  const hub = runningHub(config);
  const record = hub && readProcesses(hub.dataDir);
  if (!hub || !record) {
    process.stdout.write(`no hub is running with data dir ${config.Hub.data_dir}\n`);
    return 1;
  }
  const out: string[] = [`${'node'.padEnd(14)} ${hub.config.Hub.node_name}`, ''];
  const mb = (kb: number) => `${(kb / 1024).toFixed(1)} MB`.padStart(10);
  let rss = 0;
  let pss = 0;
  out.push(`${'process'.padEnd(14)} ${'pid'.padEnd(8)} ${'rss'.padStart(10)} ${'pss'.padStart(10)}`);
  for (const [id, pid] of [['supervisor', record.supervisor] as const, ...Object.entries(record.children)]) {
    const m = pid ? memoryOf(pid) : null;
    rss += m?.rssKb ?? 0;
    pss += m?.pssKb ?? 0;
    out.push(`${id.padEnd(14)} ${String(pid ?? '-').padEnd(8)} ${m ? `${mb(m.rssKb)} ${mb(m.pssKb)}` : 'not running'}`);
  }
  out.push(`${'total'.padEnd(23)} ${mb(rss)} ${mb(pss)}`, '');

  // Asked over gRPC, as /hub/health does: an actor whose process lives may still not answer.
  const { createGrpcClient } = await import('../shared/grpc.js');
  const timeoutMs = Math.min(hub.config.Hub.rpc_timeout * 1000, 2000);
  const answers = await Promise.all(actorSockets(hub.dataDir).map(async ({ actor, name, path }) => {
    const client = createGrpcClient(actor, path, timeoutMs);
    const t0 = performance.now();
    try {
      const r = await client.ping({});
      const ms = (performance.now() - t0).toFixed(1);
      return `${name.padEnd(14)} ${r.instance.padEnd(24)} ${String(r.pid).padEnd(8)} ${`${Math.round(r.uptime_seconds)} s`.padEnd(10)} ${ms} ms`;
    } catch (e) {
      return `${name.padEnd(14)} ${'-'.padEnd(24)} ${'-'.padEnd(8)} ${'-'.padEnd(10)} no answer (${(e as Error).message})`;
    } finally {
      client.close();
    }
  }));
  out.push(`${'actor'.padEnd(14)} ${'instance'.padEnd(24)} ${'pid'.padEnd(8)} ${'up'.padEnd(10)} ping`);
  pushAll(out, answers);
  out.push('');
  pushAll(out, await everyNode(hub.config));
  process.stdout.write(`${out.join('\n')}\n`);
  return 0;
}

/** How long the hub-wide listing waits for further answers after the last one. */
const DISCOVERY_WAIT_MS = 300;

/**
 * Every instance of every actor on every node of this hub, as the NATS services framework finds them
 * (`$SRV.PING.hub-<actor>`, metadata actor/instance/node/pid). Bounded: 2 s to connect, one short wait per actor.
 */
async function everyNode(config: HubConfig): Promise<string[]> {
  const { connect, RequestStrategy } = await import('nats');
  const { natsUrl } = await import('../shared/actor.js');
  const { natsServers } = await import('../shared/config.js');
  const { natsServiceName } = await import('../shared/subjects.js');
  const { connectOptions, operatorNatsLink } = await import('./credentials.js');
  let nc;
  try {
    // as the metrics credential: discovery is all this needs (shared/nats-auth.ts)
    nc = await connect({ servers: natsServers(natsUrl(config)), ...connectOptions(operatorNatsLink(config, 'metrics')), timeout: 2000, maxReconnectAttempts: 0 });
  } catch (e) {
    return [`every node: NATS unreachable (${(e as Error).message})`];
  }
  try {
    const rows = await Promise.all(ACTORS.map(async (actor) => {
      const found: string[] = [];
      try {
        const replies = await nc.requestMany(`$SRV.PING.${natsServiceName(actor)}`, new Uint8Array(), { strategy: RequestStrategy.JitterTimer, jitter: DISCOVERY_WAIT_MS, maxWait: 2000 });
        for await (const m of replies) {
          const md = (JSON.parse(new TextDecoder().decode(m.data)) as { metadata?: Record<string, string> }).metadata ?? {};
          found.push(`${actor.padEnd(14)} ${(md.instance ?? '-').padEnd(24)} ${(md.node ?? '-').padEnd(20)} ${md.pid ?? '-'}`);
        }
      } catch {
        // no responders: none runs anywhere
      }
      return found.length ? found.sort() : [`${actor.padEnd(14)} ${'-'.padEnd(24)} ${'-'.padEnd(20)} not running on any node`];
    }));
    return [`${'every node'.padEnd(14)} ${'instance'.padEnd(24)} ${'node'.padEnd(20)} pid`, ...rows.flat()];
  } finally {
    await nc.close();
  }
}
