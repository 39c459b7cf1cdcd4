// What one start runs with: the options of `Spawner` and of the backend's own section, changed for the start by
// `Spawner.group_overrides` (the user's groups), `Spawner.apply_user_options` (what the start asked for) and
// the profile a person picks with `user_options.profile` (`Spawner.profiles`). The spawn page lists the profiles
// from here; the spawner applies all three from here.
import type { HubConfig } from './config.js';
import { optionValueFrom, parseByteSize, SCHEMA, startOption } from './config.js';
import { applyKubespawnerOverride, kubeOptionProblems, kubeProfileList, profileOptionOverrides, type KubeProfile } from '../services/spawner/backends/kubernetes-objects.js';
import { errors } from './errors.js';
import { mergedWith } from './json.js';

export interface Profile {
  name: string;
  display_name: string;
  description?: string;
  default?: boolean;
  /** `"Section.option": value`, validated by the config schema */
  overrides?: Record<string, unknown>;
  /** a profile of `KubeSpawner.profile_list`: its overrides merge objects (KubeSpawner's rule), its profile_options choose more */
  kube?: KubeProfile;
}

const kubeProfiles = new WeakMap<HubConfig, Profile[]>();

/**
 * The profiles a start chooses from: `Spawner.profiles`, and with the Kubernetes backend `KubeSpawner.profile_list`
 * (KubeSpawner's own form: slug, kubespawner_override, profile_options) as profiles of the same kind.
 */
export function profilesOf(config: HubConfig): Profile[] {
  const own = config.Spawner.profiles as Profile[];
  if (config.Hub.spawner_class !== 'kubernetes') return own;
  let kube = kubeProfiles.get(config);
  if (!kube) {
    kube = kubeProfileList(config.KubeSpawner.profile_list).profiles.map((p) => ({
      name: p.slug, display_name: p.display_name, description: p.description || undefined, default: p.default,
      overrides: overridesOf(p.kubespawner_override), kube: p,
    }));
    kubeProfiles.set(config, kube);
  }
  return kube.length ? [...own, ...kube] : own;
}

/**
 * A kubespawner_override as overrides of sections: an option of `KubeSpawner` goes there, else one of `Spawner` (such
 * as default_url), as KubeSpawner's attributes include its base class's; the config check refuses any other key.
 */
function overridesOf(override: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(override)) {
    if (Object.hasOwn(SCHEMA.KubeSpawner, k)) out[`KubeSpawner.${k}`] = v;
    else if (Object.hasOwn(SCHEMA.Spawner, k)) out[`Spawner.${k}`] = v;
  }
  return out;
}

/**
 * The profile a start uses: `user_options.profile` when given, else the one marked default, else the
 * first; null when the hub offers none. An unknown name is the client's mistake: 400 naming the choices.
 */
export function chooseProfile(config: HubConfig, userOptions: Record<string, unknown>): Profile | null {
  const all = profilesOf(config);
  const wanted = userOptions.profile;
  if (wanted === undefined || wanted === null || wanted === '') {
    const dflt = all.find((p) => p.default) ?? all[0] ?? null;
    choicesOf(dflt, userOptions);
    return dflt;
  }
  if (typeof wanted !== 'string') throw errors.badRequest('user_options.profile must be a string');
  if (!all.length) throw errors.badRequest(`Unknown profile '${wanted.slice(0, 64)}': this hub offers no profiles`);
  const found = all.find((p) => p.name === wanted);
  if (!found) throw errors.badRequest(`Unknown profile '${wanted.slice(0, 64)}'; choose one of: ${all.map((p) => p.name).join(', ')}`);
  choicesOf(found, userOptions);
  return found;
}

/** The overrides a KubeSpawner profile's options choose (a wrong choice is the client's mistake: 400, before anything starts). */
function choicesOf(profile: Profile | null, userOptions: Record<string, unknown>): Record<string, unknown>[] {
  if (!profile?.kube) return [];
  try {
    return profileOptionOverrides(profile.kube, userOptions).map(overridesOf);
  } catch (e) {
    throw errors.badRequest((e as Error).message);
  }
}

/**
 * One config section with the profile's overrides applied (`Spawner.environment` is merged, not replaced; a
 * KubeSpawner profile merges every object, and `userOptions` choose among its profile_options, applied after it).
 */
export function withOverrides<S extends keyof HubConfig>(config: HubConfig, section: S, profile: Profile | null, userOptions: Record<string, unknown> = {}): HubConfig[S] {
  const base = config[section] as Record<string, unknown>;
  let out: Record<string, unknown> = { ...base };
  for (const overrides of [profile?.overrides ?? {}, ...choicesOf(profile, userOptions)]) {
    const mine: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(overrides)) {
      const [s, option] = key.split('.');
      if (s === section) mine[option] = value;
    }
    if (profile?.kube) out = applyKubespawnerOverride(out, mine);
    else {
      for (const [option, value] of Object.entries(mine)) {
        out[option] = section === 'Spawner' && option === 'environment' ? { ...(base.environment as object), ...(value as object) } : value;
      }
    }
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
    // KubeSpawner's options of several shapes: what the pod would refuse is refused here, before anything starts
    const wrong = target.section === 'KubeSpawner' ? kubeOptionProblems(target.option, v.value) : [];
    if (wrong.length) throw errors.badRequest(`Invalid user option '${key.slice(0, 64)}': ${wrong[0]}`);
    out.push({ section: target.section, option: target.option, value: v.value });
  }
  return out;
}

const isPlainObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);

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
  return withOverrides({ ...config, [section]: out } as HubConfig, section, start.profile, start.userOptions);
}
