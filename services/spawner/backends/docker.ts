// `docker`: each server in a container, through the Docker Engine HTTP API (`DockerSpawner.host`), so the
// same code drives Docker and Podman's compatible service. The container runs `Spawner.cmd` (or the
// image's own command) with the server's environment, within `Spawner.mem_limit`/`cpu_limit` (the
// engine's Memory and NanoCpus), with `DockerSpawner.volumes` bound. Labels name the hub, the user and the
// server, so a restarted spawner finds its containers again: it adopts those the registry knows and
// removes the others (`reconcile`). The client is dockerode, loaded only when this backend is used.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import type Dockerode from 'dockerode';
import { hubInternalUrl, hubPublicUrl, usesTls, type HubConfig } from '../../../shared/config.js';
import { connectionOf, containerName, engineHost, expandTemplate, VALID_NAME } from '../../../shared/containers.js';
import { freePort } from '../../../shared/ports.js';
import { isActive, type ServerRecord } from '../../../shared/servers.js';
import type { Adopted, BackendContext, BackendState, Listen, PollResult, Preflight, SpawnerBackend, StartRequest, Started } from '../backend.js';

type Options = HubConfig['DockerSpawner'];

/** What the registry keeps of a container server (no secret: admins may read it). */
export interface DockerState {
  /** the engine, as `DockerSpawner.host` said at the start (a profile may name another) */
  host: string;
  id: string;
  name: string;
  /** `DockerSpawner.remove` of this start (a profile may say otherwise than the base section) */
  remove?: boolean;
}

export const LABELS = { hub: 'hub.id', user: 'hub.user', server: 'hub.server' } as const;

export function preflight(ctx: BackendContext): Preflight {
  const o = ctx.config.DockerSpawner;
  const problems: string[] = [];
  const warnings: string[] = [];
  const profiles = ctx.config.Spawner.profiles as { overrides?: Record<string, unknown> }[];
  if (!o.image && !profiles.length) problems.push('DockerSpawner.image is not set: name the image the servers run in (Hub.spawner_class is "docker")');
  else if (!o.image && profiles.some((p) => !p.overrides?.['DockerSpawner.image'])) problems.push('DockerSpawner.image is not set and a profile does not set it either: name the image the servers run in');
  const host = engineHost(o);
  const c = connectionOf(host);
  if (typeof c === 'string') problems.push(`DockerSpawner.host (or DOCKER_HOST): ${c}`);
  else if ('socketPath' in c && !existsSync(c.socketPath)) {
    problems.push(`DockerSpawner.host ${host}: no such socket; start the Docker or Podman service (podman system service unix://...) or point DockerSpawner.host at it`);
  }
  const containersReach = usesTls(ctx.config) ? hubPublicUrl(ctx.config) : hubInternalUrl(ctx.config); // see start()
  const loopback = /^(127\.|localhost$|::1$|\[::1\]$)/.test(new URL(containersReach).hostname);
  if (o.network_name !== 'host' && !o.hub_connect_url && loopback) {
    warnings.push(`DockerSpawner.network_name is "${o.network_name}" but the hub listens on ${containersReach}, which a container on that network cannot reach: servers will not reach the hub's API (set DockerSpawner.hub_connect_url to an address of the hub the containers can reach, or use network_name "host")`);
  }
  return { problems, warnings };
}

/** The engine's answer to a failed call, for a person: its own message, else the transport's. */
function engineError(e: unknown, host: string): string {
  const err = e as { json?: { message?: string } | string; reason?: string; message?: string; code?: string; statusCode?: number };
  const said = typeof err.json === 'object' && err.json?.message ? err.json.message : typeof err.json === 'string' && err.json ? err.json : '';
  if (said) return said.trim();
  if (err.code === 'ENOENT' || err.code === 'ECONNREFUSED' || err.code === 'EACCES') {
    return `cannot reach the Docker host at ${host} (${err.code}): is the Docker or Podman service running, and may the hub use its socket?`;
  }
  return (err.message ?? String(e)).trim();
}

const statusOf = (e: unknown) => (e as { statusCode?: number }).statusCode;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** How fresh a listing poll() may answer from: one list call per host per second, whatever the number of servers. */
const LIST_TTL_MS = 1000;
/** Every API call is bounded (a pull's stream only between messages). */
const API_TIMEOUT_MS = 60_000;

interface Listing {
  at: number;
  byId: Promise<Map<string, string>>;
}

/**
 * dockerode, loaded on first use. Its transport loads ssh2 (for ssh:// hosts, unused here) whatever the
 * host, and ssh2 starts compiling a WebAssembly module at load; actors run with --no-expose-wasm, so that
 * start fails — harmlessly, but as an unhandled rejection. It is caught here, on the same module instance.
 */
async function loadDockerode(): Promise<typeof Dockerode> {
  try {
    const require = createRequire(import.meta.url);
    const crypto = require(require.resolve('ssh2/lib/protocol/crypto.js', { paths: [require.resolve('docker-modem')] })) as { init?: Promise<void> };
    crypto.init?.catch(() => undefined);
  } catch {
    // another layout of ssh2: at worst the rejection is logged once
  }
  return (await import('dockerode')).default;
}

export function createDockerBackend(ctx: BackendContext): SpawnerBackend {
  const log = ctx.log;
  let loaded: Promise<typeof Dockerode> | null = null;
  const clients = new Map<string, Promise<Dockerode>>();
  const listings = new Map<string, Listing>();

  /** One client per engine; dockerode (~14 MB) loads on first use, so hubs that never use containers never pay for it. */
  function client(host: string): Promise<Dockerode> {
    let c = clients.get(host);
    if (!c) {
      c = (async () => {
        const Docker = (await (loaded ??= loadDockerode())) as typeof Dockerode;
        const conn = connectionOf(host);
        if (typeof conn === 'string') throw new Error(`DockerSpawner.host ${conn}`);
        // TLS as the docker CLI does it: ca.pem, cert.pem, key.pem in $DOCKER_CERT_PATH
        const certs = 'protocol' in conn && conn.protocol === 'https' && process.env.DOCKER_CERT_PATH
          ? Object.fromEntries((['ca', 'cert', 'key'] as const).map((k) => [k, readFileSync(join(process.env.DOCKER_CERT_PATH!, `${k}.pem`))]))
          : {};
        // explicit host/socketPath: dockerode would otherwise let $DOCKER_HOST win over the option
        return new Docker({ host: undefined, socketPath: undefined, ...conn, ...certs, timeout: API_TIMEOUT_MS } as Dockerode.DockerOptions);
      })();
      clients.set(host, c);
      c.catch(() => clients.delete(host));
    }
    return c;
  }

  /** This hub's containers on an engine: id → state ('running', 'exited', ...), shared by every poll within LIST_TTL_MS. */
  function listing(host: string): Promise<Map<string, string>> {
    const cached = listings.get(host);
    if (cached && Date.now() - cached.at < LIST_TTL_MS) return cached.byId;
    const byId = client(host).then((d) => d.listContainers({ all: true, filters: { label: [`${LABELS.hub}=${ctx.hubId}`] } }))
      .then((list) => new Map(list.map((c) => [c.Id, c.State])));
    byId.catch(() => listings.delete(host));
    listings.set(host, { at: Date.now(), byId });
    return byId;
  }

  async function ensureImage(d: Dockerode, o: Options, image: string, req: StartRequest): Promise<void> {
    const present = async () => {
      try {
        await d.getImage(image).inspect();
        return true;
      } catch (e) {
        if (statusOf(e) === 404) return false;
        throw new Error(`could not look up the image '${image}': ${engineError(e, engineHost(o))}`);
      }
    };
    if (o.pull_policy !== 'always' && (await present())) return;
    if (o.pull_policy === 'never') {
      throw new Error(`the image '${image}' is not on the Docker host and DockerSpawner.pull_policy is "never": build or load it there first`);
    }
    await req.progress(`Pulling image ${image}`);
    const started = Date.now();
    try {
      const stream = await d.pull(image) as NodeJS.ReadableStream & { destroy?: () => void };
      await new Promise<void>((resolve, reject) => {
        const give = (e: Error) => {
          stream.destroy?.();
          reject(e);
        };
        const timer = setTimeout(() => give(new Error(`not done after ${o.pull_timeout} s (DockerSpawner.pull_timeout)`)), o.pull_timeout * 1000);
        const onAbort = () => give(new Error('cancelled'));
        req.signal.addEventListener('abort', onAbort, { once: true });
        d.modem.followProgress(stream, (err: Error | null, events: { error?: string; errorDetail?: { message?: string } }[]) => {
          clearTimeout(timer);
          req.signal.removeEventListener('abort', onAbort);
          const failed = events?.find((ev) => ev.error || ev.errorDetail);
          if (err) reject(err);
          else if (failed) reject(new Error(failed.errorDetail?.message ?? failed.error));
          else resolve();
        });
      });
    } catch (e) {
      throw new Error(`could not pull the image '${image}': ${engineError(e, engineHost(o))}`);
    }
    if (!(await present())) throw new Error(`the image '${image}' is still not on the Docker host after pulling it`);
    log.info({ event: 'docker.image.pulled', image, ms: Date.now() - started }, 'image pulled');
  }

  /** Stops (SIGTERM, SIGKILL `graceMs` later, as the engine's stop does) and, when asked, removes; absent is fine. */
  async function end(d: Dockerode, id: string, graceMs: number, remove: boolean): Promise<void> {
    const c = d.getContainer(id);
    try {
      await c.stop({ t: Math.max(1, Math.ceil(graceMs / 1000)) });
    } catch (e) {
      const s = statusOf(e);
      if (s === 404) return;
      if (s !== 304) throw new Error(`could not stop container ${id.slice(0, 12)}: ${engineError(e, '')}`); // 304: already stopped
    }
    if (!remove) return;
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        await c.remove({ force: true, v: true }); // anonymous volumes go with it; named ones (homes) stay
        return;
      } catch (e) {
        const s = statusOf(e);
        if (s === 404) return;
        if (s !== 409 || attempt === 4) throw new Error(`could not remove container ${id.slice(0, 12)}: ${engineError(e, '')}`);
        await sleep(200 * 2 ** attempt); // 409: a removal already under way
      }
    }
  }

  /** The address the hub reaches the container at, on the network it was put on. */
  function addressOf(info: Dockerode.ContainerInspectInfo, network: string): string {
    const nets = info.NetworkSettings?.Networks ?? {};
    return nets[network]?.IPAddress || (info.NetworkSettings as { IPAddress?: string } | undefined)?.IPAddress || Object.values(nets).find((n) => n.IPAddress)?.IPAddress || '';
  }

  async function start(req: StartRequest): Promise<Started> {
    const o = req.options as unknown as Options;
    const host = engineHost(o);
    const image = o.image;
    if (!image) throw new Error('DockerSpawner.image is not set: the hub has no image to run the server in');
    const d = await client(host);
    const user = req.server.user;
    const server = req.server.name;
    const name = containerName(o.name_template, user, server);
    if (!VALID_NAME.test(name)) throw new Error(`DockerSpawner.name_template gives '${name}', which is not a container name`);

    await ensureImage(d, o, image, req);

    // a container under this name: ours from an earlier run (left by remove=false or a crash) is replaced
    try {
      const old = await d.getContainer(name).inspect();
      const labels = old.Config?.Labels ?? {};
      if (labels[LABELS.hub] !== ctx.hubId || labels[LABELS.user] !== user || labels[LABELS.server] !== server) {
        throw new Error(`a container named '${name}' already exists on the Docker host and is not this server's: remove it, or change DockerSpawner.name_template`);
      }
      await end(d, old.Id, 1000, true);
    } catch (e) {
      if (statusOf(e) !== 404) throw e instanceof Error && !statusOf(e) ? e : new Error(engineError(e, host));
    }

    const hostNet = o.network_name === 'host';
    const listen: Listen = hostNet ? { ip: '127.0.0.1', port: await freePort() } : { ip: '0.0.0.0', port: o.port };
    const internal = hubInternalUrl(ctx.config);
    // the hub's own PATH and HOME mean nothing in an image (and would hide the image's): only configured ones go in
    const inherited = (k: string, v: string) => (k === 'PATH' || k === 'HOME') && v === process.env[k];
    // off the host's network a container is another machine: the operator's address, else with HTTPS at the front
    // door the hub's public https one (its plain Hub.hub_port listens on loopback only)
    const connectUrl = o.hub_connect_url || (!hostNet && usesTls(ctx.config) ? hubPublicUrl(ctx.config) : '');
    const env = Object.entries(req.env(listen)).filter(([k, v]) => !inherited(k, v)).map(([k, v]) =>
      `${k}=${connectUrl && v.startsWith(internal) ? connectUrl.replace(/\/$/, '') + v.slice(internal.length) : v}`);
    const binds = Object.entries(o.volumes).map(([source, target]) => {
      const [path, mode] = target.split(':');
      return `${expandTemplate(source, user, server)}:${expandTemplate(path, user, server)}${mode ? `:${mode}` : ''}`;
    });
    const extraHost = o.extra_host_config as Record<string, unknown>;
    const extra = o.extra_create_kwargs as Record<string, unknown>;
    const body: Dockerode.ContainerCreateOptions = {
      Image: image,
      ...(o.cmd_from_image ? {} : { Cmd: req.cmd }),
      ...(req.notebookDir.startsWith('/') ? { WorkingDir: req.notebookDir } : {}),
      ...extra,
      name,
      Env: [...((extra.Env as string[] | undefined) ?? []), ...env],
      Labels: { ...((extra.Labels as Record<string, string> | undefined) ?? {}), [LABELS.hub]: ctx.hubId, [LABELS.user]: user, [LABELS.server]: server },
      HostConfig: {
        NetworkMode: o.network_name,
        ...(req.limits.memBytes !== null ? { Memory: req.limits.memBytes } : {}),
        ...(req.limits.cpu !== null ? { NanoCpus: Math.round(req.limits.cpu * 1e9) } : {}),
        ...((extra.HostConfig as Record<string, unknown> | undefined) ?? {}),
        ...extraHost,
        Binds: [...binds, ...((extraHost.Binds as string[] | undefined) ?? [])],
      },
    };

    await req.progress(`Creating container ${name}`);
    let id = '';
    try {
      id = (await d.createContainer(body)).id;
      if (req.signal.aborted) throw new Error('cancelled');
      await d.getContainer(id).start();
      const info = await d.getContainer(id).inspect();
      if (!info.State?.Running) {
        throw new Error(`the container exited at once${info.State?.ExitCode !== undefined ? ` with code ${info.State.ExitCode}` : ''}${info.State?.Error ? ` (${info.State.Error})` : ''}`);
      }
      const ip = hostNet ? '127.0.0.1' : addressOf(info, o.network_name);
      if (!ip) throw new Error(`the container has no address on the network '${o.network_name}'`);
      const state: DockerState = { host, id, name, remove: o.remove };
      log.info({ event: 'docker.container.started', container: name, id: id.slice(0, 12), ip }, 'container started');
      return { target: `http://${ip.includes(':') ? `[${ip}]` : ip}:${listen.port}`, state: state as unknown as BackendState };
    } catch (e) {
      if (id) await end(d, id, 1000, true).catch((err: Error) => log.warn({ event: 'docker.container.cleanup_failed', id, err: err.message }, 'failed start left a container'));
      const why = e instanceof Error && !statusOf(e) ? e.message : engineError(e, host);
      throw new Error(id ? why : `could not create the container: ${why}`);
    }
  }

  async function poll(s: BackendState): Promise<PollResult> {
    const state = s as unknown as DockerState;
    try {
      const seen = (await listing(state.host)).get(state.id);
      if (seen === 'running') return { running: true };
      // not running in the listing (or created after it): the container itself says
      const info = await (await client(state.host)).getContainer(state.id).inspect();
      if (info.State?.Running) return { running: true };
      return {
        running: false, code: info.State?.ExitCode ?? null,
        ...(info.State?.OOMKilled ? { reason: 'killed by the kernel: out of memory (Spawner.mem_limit)' } : {}),
      };
    } catch (e) {
      if (statusOf(e) === 404) return { running: false, code: null, reason: 'its container is gone' };
      // the engine cannot say right now: assume it runs (the next poll asks again) rather than stop a live server
      log.warn({ event: 'docker.poll.failed', id: state.id?.slice(0, 12), err: engineError(e, state.host) }, 'could not ask the Docker host about a container');
      return { running: true };
    }
  }

  return {
    name: 'docker',
    start,
    poll,
    async stop(s, { graceMs }) {
      const state = s as unknown as DockerState;
      if (!state.id) return;
      await end(await client(state.host), state.id, graceMs, state.remove ?? ctx.config.DockerSpawner.remove);
      listings.delete(state.host);
    },
    async adopt(s): Promise<Adopted | null> {
      const state = s as unknown as DockerState;
      if (!state.id) return null;
      const info = await (await client(state.host)).getContainer(state.id).inspect().catch((e) => {
        if (statusOf(e) === 404) return null;
        throw e;
      });
      return info?.State?.Running && info.Config?.Labels?.[LABELS.hub] === ctx.hubId ? {} : null;
    },
    async reconcile(records: readonly Readonly<ServerRecord>[]) {
      // containers labelled with this hub that no active server of the registry names (a crash between
      // create and save, a record removed while the spawner was down): stopped, and removed unless kept
      const hosts = new Set([engineHost(ctx.config.DockerSpawner), ...records.filter((r) => r.spawner_class === 'docker').map((r) => (r.spawner_state as unknown as DockerState).host).filter(Boolean)]);
      for (const host of hosts) {
        const d = await client(host);
        const ours = await d.listContainers({ all: true, filters: { label: [`${LABELS.hub}=${ctx.hubId}`] } });
        for (const c of ours) {
          const r = records.find((x) => x.user === c.Labels[LABELS.user] && x.name === c.Labels[LABELS.server] && isActive(x) && x.spawner_class === 'docker');
          const id = r ? (r.spawner_state as unknown as Partial<DockerState>).id : undefined;
          if (r && (!id || id === c.Id)) continue; // known (or being started right now: its record has no container yet)
          if (c.State !== 'running' && !ctx.config.DockerSpawner.remove) continue; // kept on purpose (remove: false)
          log.warn({ event: 'docker.container.reaped', container: c.Names?.[0], id: c.Id.slice(0, 12), user: c.Labels[LABELS.user] }, 'container of this hub that no server names: removing it');
          await end(d, c.Id, 1000, ctx.config.DockerSpawner.remove);
        }
      }
    },
  };
}
