// The spawner backends by `Hub.spawner_class`. A new backend is one file beside these and one entry here
// (and its name in shared/config.ts's choices, its options in a `<Name>Spawner` config section).
import { createHash } from 'node:crypto';
import type { HubConfig } from '../../../shared/config.js';
import type { Logger } from '../../../shared/log.js';
import type { BackendContext, Preflight, SpawnerBackend } from '../backend.js';
import * as docker from './docker.js';
import * as kubernetes from './kubernetes.js';
import * as localprocess from './localprocess.js';
import * as simple from './simple.js';
import * as slurm from './slurm.js';

interface BackendModule {
  /** the config section holding the backend's own options (profiles may override them) */
  section: keyof HubConfig | null;
  /** checked by the supervisor before the hub starts */
  preflight(ctx: BackendContext): Preflight;
  create(ctx: BackendContext): SpawnerBackend;
}

export const BACKENDS: Record<HubConfig['Hub']['spawner_class'], BackendModule> = {
  simple: { section: null, preflight: simple.preflight, create: simple.createSimpleBackend },
  localprocess: { section: 'LocalProcessSpawner', preflight: localprocess.preflight, create: localprocess.createLocalProcessBackend },
  docker: { section: 'DockerSpawner', preflight: docker.preflight, create: docker.createDockerBackend },
  slurm: { section: 'SlurmSpawner', preflight: slurm.preflight, create: slurm.createSlurmBackend },
  kubernetes: { section: 'KubeSpawner', preflight: kubernetes.preflight, create: kubernetes.createKubernetesBackend },
};

/** Tells this hub's resources (cgroups, accounts' processes) from another hub's on the same machine. */
export function hubId(config: HubConfig): string {
  return createHash('sha256').update(config.Hub.data_dir).digest('hex').slice(0, 10);
}

export function backendContext(config: HubConfig, log: Logger, hubWideId = hubId(config)): BackendContext {
  return { config, log, hubId: hubId(config), hubWideId };
}

/** The supervisor's check of the configured backend before anything starts. */
export function preflightSpawner(config: HubConfig, log: Logger): Preflight {
  return (BACKENDS[config.Hub.spawner_class] ?? BACKENDS.simple).preflight(backendContext(config, log));
}
