// Tools the benchmarks need from Debian (wrk, the established hub, configurable-http-proxy).
import { spawnSync, type SpawnSyncOptions } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export const onPath = (bin: string): boolean => (process.env.PATH ?? '').split(':').some((d) => d && existsSync(join(d, bin)));

/** Installs a Debian package when running as root with apt-get; bounded in time. */
export function aptInstall(pkg: string, log: (line: string) => void): void {
  if (process.getuid?.() !== 0 || !onPath('apt-get')) return;
  log(`installing ${pkg} (apt-get)`);
  const opts: SpawnSyncOptions = { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000, env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } };
  if (spawnSync('apt-get', ['install', '-y', pkg], opts).status === 0) return;
  spawnSync('apt-get', ['update'], { ...opts, timeout: 120_000 });
  spawnSync('apt-get', ['install', '-y', pkg], opts);
}
