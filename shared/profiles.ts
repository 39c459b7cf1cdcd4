// Spawner profiles (`Spawner.profiles`): named choices a person picks at spawn with `user_options.profile`,
// each overriding options of `Spawner` and of the backend's own section. The spawn page lists them from
// here; the spawner applies them from here.
import type { HubConfig } from './config.js';
import { parseByteSize } from './config.js';
import { errors } from './errors.js';

export interface Profile {
  name: string;
  display_name: string;
  description?: string;
  default?: boolean;
  /** `"Section.option": value`, validated by the config schema */
  overrides?: Record<string, unknown>;
}

export const profilesOf = (config: HubConfig): Profile[] => config.Spawner.profiles as Profile[];

/**
 * The profile a start uses: `user_options.profile` when given, else the one marked default, else the
 * first; null when the hub offers none. An unknown name is the client's mistake: 400 naming the choices.
 */
export function chooseProfile(config: HubConfig, userOptions: Record<string, unknown>): Profile | null {
  const all = profilesOf(config);
  const wanted = userOptions.profile;
  if (wanted === undefined || wanted === null || wanted === '') return all.find((p) => p.default) ?? all[0] ?? null;
  if (typeof wanted !== 'string') throw errors.badRequest('user_options.profile must be a string');
  if (!all.length) throw errors.badRequest(`Unknown profile '${wanted.slice(0, 64)}': this hub offers no profiles`);
  const found = all.find((p) => p.name === wanted);
  if (!found) throw errors.badRequest(`Unknown profile '${wanted.slice(0, 64)}'; choose one of: ${all.map((p) => p.name).join(', ')}`);
  return found;
}

/** One config section with the profile's overrides applied (`Spawner.environment` is merged, not replaced). */
export function withOverrides<S extends keyof HubConfig>(config: HubConfig, section: S, profile: Profile | null): HubConfig[S] {
  const base = config[section] as Record<string, unknown>;
  const out: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(profile?.overrides ?? {})) {
    const [s, option] = key.split('.');
    if (s !== section) continue;
    out[option] = section === 'Spawner' && option === 'environment' ? { ...(base.environment as object), ...(value as object) } : value;
  }
  return out as HubConfig[S];
}

/** The limits of an effective `Spawner` section: bytes and cores, null when unset. */
export function limitsOf(spawner: HubConfig['Spawner']): { memBytes: number | null; cpu: number | null } {
  const mem = spawner.mem_limit === '' ? null : parseByteSize(spawner.mem_limit);
  return { memBytes: mem || null, cpu: spawner.cpu_limit > 0 ? spawner.cpu_limit : null };
}

/** Whether any start could carry a memory or a CPU limit (the base options or any profile). */
export function limitsInUse(config: HubConfig): { memory: boolean; cpu: boolean } {
  const all = [null, ...profilesOf(config)].map((p) => limitsOf(withOverrides(config, 'Spawner', p)));
  return { memory: all.some((l) => l.memBytes !== null), cpu: all.some((l) => l.cpu !== null) };
}
