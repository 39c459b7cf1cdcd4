// How a verb reaches the hub. A hub runs on a data dir while `run/processes.json` names a live supervisor
// (shared/processes.ts). Then every change goes through the owning actor over gRPC, so the actor's events keep
// every cache right and its audit trail names the operator; the command line never writes a running actor's
// store. An actor that does not answer within the bound is an error, not a reason to write around it.
// Without a hub, verbs open the stores through the actors' own modules (cli/offline.ts).
import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { validateConfig, type HubConfig } from '../shared/config.js';
import type { Client, ServiceActor } from '../shared/contracts/index.js';
import { invalidNameReason, normalizeUsername } from '../shared/names.js';
import { grpcSocketPath, resolvedConfigPath } from '../shared/paths.js';
import { liveHub } from '../shared/processes.js';
import { UsageError } from './args.js';

/** A failure to report in one line, exit code 1 (the arguments were fine, the request was not). */
export class CliError extends Error {
  override name = 'CliError';
}

/** Who the audit trail says acted: the operating-system account running the command. */
export function cliIdentity(): string {
  try {
    return `cli:${userInfo().username}`;
  } catch {
    return `cli:uid-${process.getuid?.() ?? 'unknown'}`; // an account without a passwd entry (containers)
  }
}

/** A user name argument, normalised and checked by the rule the API applies (shared/names.ts). */
export function userNameArg(verb: string, raw: string): string {
  const name = normalizeUsername(raw);
  const why = invalidNameReason(name);
  if (why) throw new UsageError(`${verb}: invalid user name ${JSON.stringify(name.slice(0, 60))}: ${why}`);
  return name;
}

export interface RunningHub {
  /** the supervisor's pid */
  pid: number;
  dataDir: string;
  /** the configuration the running hub resolved at its start (its NATS, its rules); the command line's until written */
  config: HubConfig;
}

export function runningHub(config: HubConfig): RunningHub | null {
  const dataDir = config.Hub.data_dir;
  const record = liveHub(dataDir);
  if (!record) return null;
  let resolved = config;
  try {
    resolved = validateConfig(JSON.parse(readFileSync(resolvedConfigPath(dataDir), 'utf8')));
  } catch {
    // the supervisor has not written it yet (it is starting)
  }
  return { pid: record.supervisor, dataDir, config: resolved };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * An actor this node does not run (a node with spawners and gateways only): asked over the hub's NATS as the
 * operator, the same typed contract the actors of this node use for it; closing the client closes the connection.
 */
async function natsActorClient<A extends ServiceActor>(hub: RunningHub, actor: A, timeoutMs: number): Promise<Client<A>> {
  const { connect } = await import('nats');
  const { natsUrl } = await import('../shared/actor.js');
  const { natsServers } = await import('../shared/config.js');
  const { createNatsRpcClient } = await import('../shared/grpc.js');
  const { adminNatsLink, connectOptions } = await import('./credentials.js');
  const nc = await connect({ servers: natsServers(natsUrl(hub.config)), ...connectOptions(adminNatsLink(hub.config)), timeout: 2000, maxReconnectAttempts: 0 })
    .catch((e: Error) => { throw new CliError(`this node runs no ${actor} actor and the hub's NATS is unreachable: ${e.message}`); });
  const client = createNatsRpcClient(actor, nc, timeoutMs);
  return Object.assign(client, { close: () => void nc.close() });
}

/**
 * A typed client of one of the running hub's actors, once it answers Ping. It may be restarting, so Ping is
 * retried with backoff for at most `Hub.rpc_timeout`; after that the verb stops, having changed nothing.
 */
export async function actorClient<A extends ServiceActor>(hub: RunningHub, actor: A): Promise<Client<A>> {
  const timeoutMs = hub.config.Hub.rpc_timeout * 1000;
  const client = (hub.config.Supervisor.actors as readonly string[]).includes(actor)
    ? (await import('../shared/grpc.js')).createGrpcClient(actor, grpcSocketPath(hub.dataDir, actor), timeoutMs)
    : await natsActorClient(hub, actor, timeoutMs);
  const pingable = client as unknown as Pick<Client<'auth'>, 'ping'>; // every actor's service has Ping
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (let delay = 50; ; delay = Math.min(delay * 2, 500)) {
    try {
      await pingable.ping({}, { deadline: Math.min(deadline, Date.now() + 1000) });
      return client;
    } catch (e) {
      last = e;
    }
    if (Date.now() + delay >= deadline) break;
    await sleep(delay);
  }
  client.close();
  throw new CliError(`a hub runs on ${hub.dataDir} (supervisor pid ${hub.pid}) but its ${actor} actor does not answer `
    + `(${(last as Error)?.message ?? 'no answer'}); nothing was changed: try again once \`hub status\` shows it answering`);
}
