// Where the hub's files are, whether it runs from TypeScript sources (tsx) or compiled dist/.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

function findRepoRoot(start: string): string {
  let dir = start;
  for (let i = 0; i < 8; i++) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'proto'))) return dir;
    dir = dirname(dir);
  }
  throw new Error(`hub: cannot find the repository root above ${start}`);
}

export const REPO_ROOT = findRepoRoot(dirname(fileURLToPath(import.meta.url)));
export const PROTO_DIR = join(REPO_ROOT, 'proto');

/** True when this code runs from .ts sources through tsx rather than from dist/. */
export const RUNNING_FROM_SOURCE = import.meta.url.endsWith('.ts');

/** The entry file of an actor, in the same form (source or compiled) as the running code. */
export function actorEntry(actor: string): string {
  return RUNNING_FROM_SOURCE
    ? join(REPO_ROOT, 'services', actor, 'main.ts')
    : join(REPO_ROOT, 'dist', 'services', actor, 'main.js');
}

/** Runtime files (sockets, pid files, the resolved config) live in the data dir, so two hubs never collide. */
export function runDir(dataDir: string): string {
  return join(dataDir, 'run');
}

/** The configuration the supervisor resolved for its children (0600; `hub` verbs read a running hub's). */
export function resolvedConfigPath(dataDir: string): string {
  return join(runDir(dataDir), 'config.json');
}

/** An actor's own SQLite file: opened by that actor, or by the command line while no hub runs. */
export function storePath(dataDir: string, actor: 'auth' | 'tokens' | 'oauth'): string {
  return join(dataDir, `${actor}.sqlite`);
}

/** `instance` tells apart replicas of one actor on the same data dir (gateways: their port). */
export function grpcSocketPath(dataDir: string, actor: string, instance = ''): string {
  return join(runDir(dataDir), `${actor}${instance ? `-${instance}` : ''}.sock`);
}

export const ACTORS = ['tokens', 'auth', 'oauth', 'spawner', 'proxy-router', 'gateway'] as const;
export type ActorName = (typeof ACTORS)[number];

/**
 * What `hub import jupyterhub` brought over that is configuration here, not a store: the established hub's roles
 * and services (`{"Hub": {"load_roles": [...], "services": [...]}}`), merged under the operator's own config at
 * every load (shared/config.ts), and its named servers (`servers.json`), which the spawner writes into its registry
 * at its next start. Both are replaced whole by each import (renamed into place).
 */
export function importedConfigPath(dataDir: string): string {
  return join(dataDir, 'imported', 'jupyterhub-config.json');
}

export function importedServersPath(dataDir: string): string {
  return join(dataDir, 'imported', 'jupyterhub-servers.json');
}
