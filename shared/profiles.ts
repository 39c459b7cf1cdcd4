// What one start runs with: the options of `Spawner` and of the backend's own section, changed for the start by
// `Spawner.group_overrides` (the user's groups), `Spawner.apply_user_options` (what the start asked for) and
// the profile a person picks with `user_options.profile` (`Spawner.profiles`). The spawn page lists the profiles
// from here; the spawner applies all three from here.
import type { HubConfig } from './config.js';
import { optionValueFrom, parseByteSize, startOption } from './config.js';
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

/**
 * Whether any start could carry a memory or a CPU limit: the base options, any profile, any group override, or
 * a user option an operator lets set one.
 */
export function limitsInUse(config: HubConfig): { memory: boolean; cpu: boolean } {
  const all = [null, ...profilesOf(config)].map((p) => limitsOf(withOverrides(config, 'Spawner', p)));
  for (const name of Object.keys(groupOverridesOf(config))) {
    all.push(limitsOf(sectionFor(config, 'Spawner', { profile: null, groups: groupOverridesOf(config)[name].groups, userOptions: {} })));
  }
  const settable = new Set(Object.values(config.Spawner.apply_user_options).map((name) => {
    const target = startOption(name);
    return typeof target === 'string' ? '' : `${target.section}.${target.option}`;
  }));
  return {
    memory: all.some((l) => l.memBytes !== null) || settable.has('Spawner.mem_limit'),
    cpu: all.some((l) => l.cpu !== null) || settable.has('Spawner.cpu_limit'),
  };
}

// ---- group overrides and user options (the established hub 5's Spawner.group_overrides, apply_user_options) ----

export interface GroupOverride {
  groups: string[];
  /** option (bare, or "Section.option") → value, validated by the config schema */
  spawner_override: Record<string, unknown>;
}

/** What a start is: who asks (their groups), what it asked for, and the profile that chose. */
export interface StartChoice {
  profile: Profile | null;
  groups: readonly string[];
  userOptions: Record<string, unknown>;
}

const groupOverridesOf = (config: HubConfig) => config.Spawner.group_overrides as Record<string, GroupOverride>;

/** Strings in the order of their code points, as the established hub's sorted() orders names (not localeCompare). */
function byCodePoint(a: string, b: string): number {
  const x = Array.from(a, (c) => c.codePointAt(0)!);
  const y = Array.from(b, (c) => c.codePointAt(0)!);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

/** The names of the group overrides a member of `groups` gets, in the order they apply (names sorted). */
export function groupOverridesFor(config: HubConfig, groups: readonly string[]): string[] {
  const mine = new Set(groups);
  const all = groupOverridesOf(config);
  return Object.keys(all).sort(byCodePoint).filter((name) => all[name].groups.some((g) => mine.has(g)));
}

interface Setting { section: string; option: string; value: unknown }

/**
 * The options a start's user_options set through `Spawner.apply_user_options`: only the keys the operator listed
 * (others are ignored, as they always were), each value of its option's type (a string is read as a number or a
 * boolean when the option is one). A wrong value is the client's mistake: 400 naming the key, before anything starts.
 */
export function userOptionSettings(config: HubConfig, userOptions: Record<string, unknown>): Setting[] {
  const out: Setting[] = [];
  for (const [key, name] of Object.entries(config.Spawner.apply_user_options)) {
    if (!Object.hasOwn(userOptions, key)) continue;
    const target = startOption(name);
    if (typeof target === 'string') continue; // refused at config load
    const v = optionValueFrom(target.spec, userOptions[key]);
    if ('problem' in v) throw errors.badRequest(`Invalid user option '${key.slice(0, 64)}': ${v.problem}`);
    out.push({ section: target.section, option: target.option, value: v.value });
  }
  return out;
}

const isPlainObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);

/** `target` updated by `update` at every depth, as the established hub merges dict overrides: null removes a key. */
function mergedWith(target: Record<string, unknown>, update: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...target };
  for (const [k, v] of Object.entries(update)) {
    if (v === null) delete out[k];
    // defineProperty: a key named "__proto__" stays a key
    else Object.defineProperty(out, k, { value: isPlainObject(v) ? mergedWith(isPlainObject(out[k]) ? out[k] : {}, v) : v, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/**
 * One config section as a start runs with it, in the established hub's order: the configured options; then each
 * group override the user's groups select, names sorted (an object, such as `environment`, merged; any other
 * value replaced); then what `apply_user_options` takes from the start's user_options (replaced); then the
 * profile (applied last, as KubeSpawner applies its profile inside start(): a profile's value wins).
 */
export function sectionFor<S extends keyof HubConfig>(config: HubConfig, section: S, start: StartChoice): HubConfig[S] {
  const out: Record<string, unknown> = { ...(config[section] as Record<string, unknown>) };
  const all = groupOverridesOf(config);
  for (const name of groupOverridesFor(config, start.groups)) {
    for (const [key, value] of Object.entries(all[name].spawner_override)) {
      const target = startOption(key);
      if (typeof target === 'string' || target.section !== section) continue;
      const had = out[target.option];
      out[target.option] = isPlainObject(value) && isPlainObject(had) ? mergedWith(had, value) : value;
    }
  }
  for (const s of userOptionSettings(config, start.userOptions)) if (s.section === section) out[s.option] = s.value;
  return withOverrides({ ...config, [section]: out } as HubConfig, section, start.profile);
}
