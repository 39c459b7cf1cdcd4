// The spawner contract: what a backend (one way of running single-user servers) does for the spawner
// actor. The actor owns everything backend-independent — the registry, tokens and OAuth clients, the
// environment, readiness over HTTP, progress, events — and asks a backend only to run, watch and end a
// program. A new backend (containers, a batch system) is one more file under backends/ and one line in
// backends/index.ts; it never needs to touch handlers.ts.
import type { HubConfig } from '../../shared/config.js';
import type { Logger } from '../../shared/log.js';
import type { ServerRecord } from '../../shared/servers.js';

/**
 * What a backend needs to find its server again, as JSON. It is saved in the server's registry record
 * (KV `hub_servers`, field `spawner_state`), so any spawner instance, including one started after a crash,
 * can poll, stop or adopt the server. Never put a secret in it: admins with `admin:server_state` read it.
 */
export type BackendState = Record<string, unknown>;

/** Where the program must listen (the backend decides; the environment tells the program). */
export interface Listen {
  ip: string;
  port: number;
}

/** Enforced by the backend (never advisory); null = no limit. */
export interface Limits {
  /** bytes */
  memBytes: number | null;
  /** cores, fractional */
  cpu: number | null;
}

export interface StartRequest {
  /** the server being started (user, name, url): read only */
  server: Readonly<ServerRecord>;
  /** a short, filesystem- and cgroup-safe id unique to this server on this hub */
  id: string;
  /** the program and its arguments */
  cmd: string[];
  /** the server's environment, given where it listens (HUB_SERVICE_URL depends on it) */
  env(listen: Listen): Record<string, string>;
  limits: Limits;
  /** `Spawner.notebook_dir` as configured ('' = the account's home); `~` is the account's home */
  notebookDir: string;
  /** the backend's own config section (e.g. `LocalProcessSpawner`), after the chosen profile's overrides */
  options: Record<string, unknown>;
  /** a line for the person waiting (the progress stream) */
  progress(message: string): Promise<void>;
  /** set when the start is cancelled (a stop during the start): give up and clean up */
  signal: AbortSignal;
  /**
   * Settles when the server itself reports where it listens (POST /hub/api/users/<u>/servers/<s>/location
   * with its own token): for backends that cannot know the address in advance (a batch job lands on any
   * node). Never settles for servers that do not report; the spawner bounds the wait.
   */
  reported(): Promise<ReportedLocation>;
}

/** What a server reported about itself: a host name or address, and a port. */
export interface ReportedLocation {
  host: string;
  port: number;
}

export interface ExitStatus {
  /** exit code when known, else null (killed by a signal, or not our child) */
  code: number | null;
  signal?: string | null;
  /** why, when the backend knows better than the code (e.g. "out of memory (limit 512 MiB)") */
  reason?: string;
}

export type PollResult = { running: true } | ({ running: false } & ExitStatus);

export interface Started {
  /**
   * where the gateway forwards to, e.g. `http://127.0.0.1:40123`; or, when that is known only later (the
   * server reports it, see `StartRequest.reported`), a promise of it, which rejects when the server ends
   * first. `state` is saved before the spawner waits for it, so a stop or a restarted spawner can find it.
   */
  target: string | Promise<string>;
  state: BackendState;
  /** a local process id, shown in the server list (0 or absent for others) */
  pid?: number;
  /** settles when the server ends, when this process can know it at once (else the spawner polls) */
  exited?: Promise<ExitStatus>;
}

export interface Adopted {
  /** as in Started: prompt notice of the end, when the backend can give it */
  exited?: Promise<ExitStatus>;
  /**
   * For a server adopted before its target was known (a pod not yet running): its target as the start would have
   * had it. Without it, such a server's target is what it reports (`StartRequest.reported`).
   */
  target?: Promise<string>;
}

export interface SpawnerBackend {
  /** the `Hub.spawner_class` value */
  readonly name: string;
  /**
   * Starts the program and returns as soon as it runs (readiness is the spawner's job). A failure
   * rejects with an Error whose message a person can act on; it leaves nothing behind.
   */
  start(req: StartRequest): Promise<Started>;
  /** Whether the server still runs. Cheap: the spawner calls it for every server now and then. */
  poll(state: BackendState): Promise<PollResult>;
  /**
   * Ends the server, gracefully then by force (`graceMs` per step), and frees what it held (groups,
   * accounts' leftovers, containers). Resolves only when nothing of it runs. Idempotent: on a server
   * that has already exited it only frees.
   */
  stop(state: BackendState, o: { graceMs: number }): Promise<void>;
  /** After a spawner restart: null when the server is gone, else how to keep watching it. */
  adopt(state: BackendState): Promise<Adopted | null>;
  /**
   * Optional, at spawner start after adoption: free what this hub's backend holds that no active server
   * of the registry names (e.g. a container left by a crash between its creation and the record's save).
   * A record still without state is a start under way: keep what is its.
   */
  reconcile?(records: readonly Readonly<ServerRecord>[]): Promise<void>;
  /**
   * For servers that report where they listen: why `where` cannot be where this server runs (e.g. not the node
   * its job landed on), or null. Without it any host the server's own token names is taken.
   */
  checkLocation?(state: BackendState, where: ReportedLocation): Promise<string | null>;
}

/** What every backend gets at creation. */
export interface BackendContext {
  config: HubConfig;
  log: Logger;
  /** distinguishes this hub's resources (cgroups, containers) from another hub's on the same machine */
  hubId: string;
  /**
   * the same on every node of this hub (Registry.hubWideId): distinguishes its resources in a system several
   * nodes share (a Kubernetes cluster) from another hub's; `hubId` where no registry is open (the supervisor's checks)
   */
  hubWideId: string;
}

/** What the supervisor checks before the hub starts: problems stop it with one line each; warnings are logged once. */
export interface Preflight {
  problems: string[];
  warnings: string[];
}
