// `hub status`: the running hub's processes with their memory, and each actor's answer to a gRPC Ping.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ACTORS, runDir } from '../shared/paths.js';
import type { VerbInput } from './main.js';
import { processStartedAt, readProcesses } from '../shared/processes.js';
import { codeVersion } from '../shared/build-info.js';
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
  // Asked over gRPC, as /hub/health does: an actor whose process lives may still not answer.
  const { createGrpcClient } = await import('../shared/grpc.js');
  const timeoutMs = Math.min(hub.config.Hub.rpc_timeout * 1000, 2000);
  const pings = await Promise.all(actorSockets(hub.dataDir).map(async ({ actor, name, path }) => {
    const client = createGrpcClient(actor, path, timeoutMs);
    const t0 = performance.now();
    try {
      const r = await client.ping({});
      return { name, r, ms: (performance.now() - t0).toFixed(1) };
    } catch (e) {
      return { name, r: null, why: (e as Error).message };
    } finally {
      client.close();
    }
  }));
  // the code each process runs: the supervisor's from its record, an actor's from its Ping (it read it when it started)
  const codeOf = new Map<number, string>([[record.supervisor, record.version ? codeVersion(record.version, record.commit ?? '') : '-']]);
  for (const p of pings) if (p.r) codeOf.set(p.r.pid, codeVersion(p.r.version, p.r.details.commit ?? ''));

  const out: string[] = [`${'node'.padEnd(14)} ${hub.config.Hub.node_name}`, ''];
  const mb = (kb: number) => `${(kb / 1024).toFixed(1)} MB`.padStart(10);
  const when = (pid: number) => processStartedAt(pid)?.toISOString() ?? '-';
  let rss = 0;
  let pss = 0;
  out.push(`${'process'.padEnd(14)} ${'pid'.padEnd(8)} ${'rss'.padStart(10)} ${'pss'.padStart(10)}  ${'started'.padEnd(24)} code`);
  for (const [id, pid] of [['supervisor', record.supervisor] as const, ...Object.entries(record.children)]) {
    const m = pid ? memoryOf(pid) : null;
    rss += m?.rssKb ?? 0;
    pss += m?.pssKb ?? 0;
    out.push(`${id.padEnd(14)} ${String(pid ?? '-').padEnd(8)} ${m ? `${mb(m.rssKb)} ${mb(m.pssKb)}  ${when(pid!).padEnd(24)} ${codeOf.get(pid!) ?? '-'}` : 'not running'}`);
  }
  out.push(`${'total'.padEnd(23)} ${mb(rss)} ${mb(pss)}`, '');

  out.push(`${'actor'.padEnd(14)} ${'instance'.padEnd(24)} ${'pid'.padEnd(8)} ${'up'.padEnd(10)} ping`);
  pushAll(out, pings.map((p) => (p.r
    ? `${p.name.padEnd(14)} ${p.r.instance.padEnd(24)} ${String(p.r.pid).padEnd(8)} ${`${Math.round(p.r.uptime_seconds)} s`.padEnd(10)} ${p.ms} ms`
    : `${p.name.padEnd(14)} ${'-'.padEnd(24)} ${'-'.padEnd(8)} ${'-'.padEnd(10)} no answer (${p.why})`)));
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
          const ping = JSON.parse(new TextDecoder().decode(m.data)) as { metadata?: Record<string, string>; version?: string };
          const md = ping.metadata ?? {};
          const version = ping.version ?? '-';
          found.push(`${actor.padEnd(14)} ${(md.instance ?? '-').padEnd(24)} ${(md.node ?? '-').padEnd(20)} ${(md.pid ?? '-').padEnd(8)} ${(md.started ?? '-').padEnd(24)} ${codeVersion(version, md.commit ?? '')}`);
        }
      } catch {
        // no responders: none runs anywhere
      }
      return found.length ? found.sort() : [`${actor.padEnd(14)} ${'-'.padEnd(24)} ${'-'.padEnd(20)} not running on any node`];
    }));
    return [`${'every node'.padEnd(14)} ${'instance'.padEnd(24)} ${'node'.padEnd(20)} ${'pid'.padEnd(8)} ${'started'.padEnd(24)} code`, ...rows.flat()];
  } finally {
    await nc.close();
  }
}
