// Several spawner instances, one per node, share the registry (registry.ts keeps a live copy). Each writes only
// its own node's records; a request about a server another node runs goes to that node's spawner (over NATS,
// the same typed contract on the node's own subjects); a start is placed on a node (Spawner.placement or the
// profile's Spawner.node); a node gone longer than Spawner.node_lost_timeout has its servers marked stopped.
import { RequestStrategy } from 'nats';
import type { AuditPublisher } from '../../shared/audit.js';
import type { HubConfig } from '../../shared/config.js';
import type { ActorHandlers, SpawnerClient } from '../../shared/contracts/index.js';
import { errors } from '../../shared/errors.js';
import { createNatsRpcClient } from '../../shared/grpc.js';
import { parseJson } from '../../shared/json.js';
import type { Logger } from '../../shared/log.js';
import { decodeJson, type NatsConnection } from '../../shared/nats.js';
import { chooseProfile, withOverrides } from '../../shared/profiles.js';
import { isActive, nodeLostReason, serverKey, type ServerRecord } from '../../shared/servers.js';
import { natsServiceName } from '../../shared/subjects.js';
import type { SpawnerHandlers } from './handlers.js';
import type { Registry } from './registry.js';

/** How long one answer of service discovery is trusted (placement asks it on every start). */
const LIVE_NODES_TTL_MS = 2000;

export interface NodeDeps {
  config: HubConfig;
  nc: NatsConnection;
  registry: Registry;
  audit: AuditPublisher;
  log: Logger;
  rpcTimeoutMs: number;
}

const label = (r: { user: string; name: string }) => (r.name ? `${r.user}:${r.name}` : r.user);

export function createNodes({ config, nc, registry, audit, log, rpcTimeoutMs }: NodeDeps) {
  const self = config.Hub.node_name;
  const clients = new Map<string, SpawnerClient>();
  /** the spawner of one node, over NATS (subjects.nodeRpc) */
  const nodeClient = (node: string): SpawnerClient => {
    let c = clients.get(node);
    if (!c) clients.set(node, (c = createNatsRpcClient('spawner', nc, rpcTimeoutMs, node)));
    return c;
  };
  const owner = (r: ServerRecord | undefined) => (r?.node && r.node !== self ? r.node : null);

  // ---- which nodes run a spawner: NATS service discovery ($SRV.PING, each instance's `node` metadata) ----
  let cached: { at: number; nodes: Promise<Set<string> | null> } | undefined;
  /** The nodes whose spawner answers; null when this one's own did not either (discovery itself failed). */
  async function discover(): Promise<Set<string> | null> {
    const nodes = new Set<string>();
    try {
      const replies = await nc.requestMany(`$SRV.PING.${natsServiceName('spawner')}`, new Uint8Array(), {
        strategy: RequestStrategy.JitterTimer, jitter: 50, maxWait: Math.min(500, rpcTimeoutMs),
      });
      for await (const m of replies) {
        const node = decodeJson<{ metadata?: { node?: string } }>(m.data)?.metadata?.node;
        if (node) nodes.add(node);
      }
    } catch {
      // no responders, or no connection: nobody heard, not even this node
    }
    return nodes.has(self) ? nodes : null;
  }
  function discovered(fresh = false): Promise<Set<string> | null> {
    if (fresh || !cached || Date.now() - cached.at > LIVE_NODES_TTL_MS) cached = { at: Date.now(), nodes: discover() };
    return cached.nodes;
  }
  /** for placement: at least this node */
  const liveNodes = async (fresh = false) => (await discovered(fresh)) ?? new Set([self]);

  /**
   * Starts this instance placed (on this node or another) that may not show in its copy of the registry yet: a
   * burst of starts must not all go to one node because none of them shows yet. Counted for placement until answered.
   */
  const placed = new Map<string, string>();
  /** Ties go to each of the tied nodes in turn (by name), so a burst on an empty hub spreads too. */
  let turn = 0;

  /** Active servers per node, from the shared registry, plus this instance's starts still on their way. */
  function activeByNode(): Map<string, number> {
    const out = new Map<string, number>();
    const add = (node: string) => out.set(node, (out.get(node) ?? 0) + 1);
    const counted = new Set<string>();
    for (const r of registry.all()) {
      if (!isActive(r)) continue;
      add(r.node || self);
      counted.add(serverKey(r.user, r.name));
    }
    for (const [key, node] of placed) if (!counted.has(key)) add(node);
    return out;
  }

  /** The node a start goes to: the profile's Spawner.node, else Spawner.placement over the live spawner nodes. */
  async function place(req: { user: string; name: string; user_options_json: string }): Promise<string> {
    let wanted = '';
    try {
      const current = registry.get(req.user, req.name);
      const options = req.user_options_json ? parseJson(req.user_options_json, config.Hub.max_json_depth, 'user_options') : current?.user_options ?? {};
      if (typeof options === 'object' && options !== null && !Array.isArray(options)) {
        wanted = withOverrides(config, 'Spawner', chooseProfile(config, options as Record<string, unknown>)).node;
      }
    } catch {
      return self; // bad options: this node's start says why (400)
    }
    const live = await liveNodes();
    if (wanted) {
      if (wanted === self) return self;
      if (!live.has(wanted) && !(await liveNodes(true)).has(wanted)) throw errors.unavailable(`the spawner of node ${wanted}`);
      return wanted;
    }
    if (live.size === 1) return self;
    const counts = activeByNode();
    const count = (n: string) => counts.get(n) ?? 0;
    let candidates = [...live].sort();
    let fullest = false;
    if (config.Spawner.placement === 'pack') {
      // the busiest node below the limit; past it on every node, the emptiest (spill over)
      const limit = config.Spawner.node_limit;
      const room = limit ? candidates.filter((n) => count(n) < limit) : candidates;
      fullest = room.length > 0;
      if (room.length) candidates = room;
    }
    const best = candidates.reduce((b, n) => (fullest ? Math.max(b, count(n)) : Math.min(b, count(n))), fullest ? -Infinity : Infinity);
    const tied = candidates.filter((n) => count(n) === best);
    // ties rotate, starting from this node: a lone start stays where it was asked (the node whose gateway took
    // it), and a burst still spreads (each start it places counts at once)
    const from = Math.max(0, tied.indexOf(self));
    return tied[(from + turn++) % tied.length];
  }

  /** The rpc table of this node's spawner itself (its own NATS subjects serve this; other nodes forward to it). */
  const table = (h: SpawnerHandlers): ActorHandlers<'spawner'> => ({
    StartServer: h.startServer, StopServer: h.stopServer, StopUserServers: h.stopUserServers,
    CreateServer: h.createServer, ModifyServer: h.modifyServer,
    UserServers: h.userServers, ListServers: h.listServers, ReportLocation: h.reportLocation,
  });

  /**
   * The rpc table other actors call (the unix socket, the shared NATS subjects): a request about a server
   * another node runs goes to that node's spawner; starts are placed. Replies keep the typed contract.
   */
  function routed(h: SpawnerHandlers): ActorHandlers<'spawner'> {
    const own = table(h);
    const activeElsewhere = (req: { user: string; name: string }) => {
      const r = registry.get(req.user, req.name);
      return r && isActive(r) ? owner(r) : null;
    };
    return {
      ...own,
      async StartServer(req, call) {
        // a server already active stays where it is (a second start finds it there); a new one is placed
        const current = registry.get(req.user, req.name);
        const node = current && isActive(current) ? owner(current) ?? self : await place(req);
        const key = serverKey(req.user, req.name);
        placed.set(key, node);
        try {
          return node === self ? await own.StartServer(req, call) : await nodeClient(node).startServer(req, { deadline: call.deadline });
        } finally {
          if (placed.get(key) === node) placed.delete(key);
        }
      },
      StopServer(req, call) {
        const node = activeElsewhere(req);
        return node ? nodeClient(node).stopServer(req, { deadline: call.deadline }) : own.StopServer(req, call);
      },
      ReportLocation(req, call) {
        const node = owner(registry.get(req.user, req.name));
        return node ? nodeClient(node).reportLocation(req, { deadline: call.deadline }) : own.ReportLocation(req, call);
      },
      async StopUserServers(req, call) {
        // each node stops its own; then this one forgets the user's records
        const elsewhere = registry.all().filter((r) => r.user === req.user && isActive(r) && owner(r));
        await Promise.all(elsewhere.map((r) => nodeClient(r.node!).stopServer({ user: r.user, name: r.name, by: req.by, remove: false }, { deadline: call.deadline })));
        return own.StopUserServers(req, call);
      },
    };
  }

  // ---- lost nodes ----------------------------------------------------------------------------------------
  /** when each node with active servers was first found without a spawner */
  const missingSince = new Map<string, number>();
  async function sweepLost(): Promise<void> {
    const active = registry.all().filter((r) => isActive(r) && owner(r));
    if (!active.length) return missingSince.clear();
    // a node that cannot see itself (NATS down or its service not up yet) or whose copy is behind judges nobody
    const live = await discovered(true);
    if (!live || registry.staleMs() > 0) return missingSince.clear();
    const timeoutMs = config.Spawner.node_lost_timeout * 1000;
    const now = Date.now();
    for (const node of new Set(active.map((r) => r.node!))) {
      if (live.has(node)) {
        missingSince.delete(node);
        continue;
      }
      if (!missingSince.has(node)) missingSince.set(node, now);
      if (now - missingSince.get(node)! < timeoutMs) continue;
      const reason = `node ${node} lost`;
      for (const r of active.filter((x) => x.node === node)) {
        // every surviving spawner may get here: the write is conditional on the revision read, so one wins
        const written = await registry.saveIfUnchanged(r.user, r.name, (current) => (isActive(current) && current.node === node ? {
          ...current, state: 'stopped', target: '', progress: [],
          lost: { at: new Date(now).toISOString(), state: current.state, target: current.target },
          ended: { at: new Date(now).toISOString(), reason: nodeLostReason(node) },
        } : null)).catch((e: Error) => {
          log.warn({ event: 'server.lost.write_failed', server: label(r), node, err: e.message }, 'lost server not marked stopped (retried next sweep)');
          return null;
        });
        if (!written) continue;
        log.warn({ event: 'server.lost', server: label(r), node }, 'server marked stopped: its node is gone');
        void audit.publish('server', 'stop', { who: 'actor:spawner', what: label(r), outcome: 'ok', reason, node_lost: node });
      }
    }
    for (const node of missingSince.keys()) if (!active.some((r) => r.node === node)) missingSince.delete(node);
  }

  return { table, routed, liveNodes, place, sweepLost };
}
