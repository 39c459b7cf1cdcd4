// The Kubernetes objects of one server, from the `KubeSpawner` config section (after the start's overrides and
// profile), with KubeSpawner's option names and meanings: the pod, its Secret (the server's secret environment,
// referenced from the pod, so `kubectl get pod -o yaml` shows no token), the PVC (`storage_pvc_ensure`) and the
// per-user namespace (`enable_user_namespaces`). Pure: no API call, no file read; the backend (kubernetes.ts)
// creates what this returns. Names follow KubeSpawner 7's "safe" slug scheme, so a hub taking over from
// KubeSpawner finds its users' PVCs again (`legacyPvcName` gives the older "escape" scheme's name).
// Only types come from @kubernetes/client-node: the config checks run in every actor and must not load it.
import { createHash } from 'node:crypto';
import type {
  V1Container, V1EnvVar, V1Namespace, V1PersistentVolumeClaim, V1Pod, V1PodSpec, V1ResourceRequirements, V1Secret,
} from '@kubernetes/client-node';
import type { Limits } from '../backend.js';
import { parseByteSize } from '../../../shared/bytes.js';
import { mergedWith } from '../../../shared/json.js';

export interface KubeObjectsInput {
  /** the hub's user name, as is (slugs are made here) */
  username: string;
  /** '' for the default server */
  servername: string;
  /** the spawner's id of this server (StartRequest.id) */
  id: string;
  /** this hub's id, the same on all its nodes (BackendContext.hubWideId): a label, so the hub lists only its own pods */
  hubId: string;
  /** what the hub asks to run (`Spawner.cmd` + `Spawner.args`); `KubeSpawner.cmd` replaces it when set; [] = the image's own */
  cmd: string[];
  /** the server's environment from the hub (tokens included; the hub's own PATH/HOME left out by the caller): what is not plainly public goes into the Secret */
  env: Record<string, string>;
  /** where the server listens inside its pod */
  port: number;
  /** `Spawner.mem_limit`/`cpu_limit` of this start; `KubeSpawner.mem_limit`/`cpu_limit` win when set */
  limits: Limits;
  /** `Spawner.notebook_dir`: the container's working directory when absolute and `KubeSpawner.working_dir` is unset */
  notebookDir: string;
  /** the `KubeSpawner` section of this start */
  options: Record<string, unknown>;
  /**
   * The claim this server used before (kept in its state, or the legacy name `legacyPvcName` gives when only that
   * one exists): used instead of `pvc_name_template`'s, as KubeSpawner keeps a PVC once found.
   */
  pvcName?: string;
}

export interface KubeObjects {
  namespace: string;
  /** the per-user namespace to make when missing (`enable_user_namespaces`), else null */
  namespaceObject: V1Namespace | null;
  pod: V1Pod;
  /** the PVC to make when missing (`storage_pvc_ensure`), else null */
  pvc: V1PersistentVolumeClaim | null;
  /** the server's secret environment, named as the pod, referenced from it with secretKeyRef */
  secret: V1Secret;
}

/** The label this hub sets besides KubeSpawner's: which hub's server it is (a hub lists only its own pods). */
export const HUB_LABELS = { hubId: 'hub.jupyter.org/hub-id' } as const;

// ---- KubeSpawner 7's slugs (its "safe" scheme, and the older "escape" one for names made before 7) ----

const HASH_LENGTH = 8;
const OBJECT_NAME = /^[a-z][a-z0-9-]{0,62}$/;
const LABEL_VALUE = /^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$/;

/** A DNS label that is also a valid label value: starts with a letter, ends with a letter or digit. */
export const isValidObjectName = (s: string): boolean => OBJECT_NAME.test(s) && /[a-z0-9]$/.test(s);
export const isValidLabelValue = (s: string): boolean => LABEL_VALUE.test(s);

const sha256hex = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');

/** The lowercase letters, digits and single hyphens of `name`, starting with a letter, at most `max` long, never empty. */
function extractSafeName(name: string, max: number): string {
  let safe = name.toLowerCase().replace(/[^a-z0-9]+/g, '-');
  safe = safe.replace(/^-+/, '').slice(0, max).replace(/-+$/, '');
  if (safe && !/^[a-z]/.test(safe)) safe = `x-${safe.slice(0, max - 2)}`;
  return safe || 'x';
}

function stripAndHash(name: string, max: number): string {
  const nameLength = max - (HASH_LENGTH + 3);
  if (nameLength < 1) throw new Error(`cannot make safe names shorter than ${HASH_LENGTH + 4}`);
  return `${extractSafeName(name, nameLength)}---${sha256hex(Buffer.from(name, 'utf8')).slice(0, HASH_LENGTH)}`;
}

/**
 * KubeSpawner's `safe_slug`: `name` itself when valid (and without "--", which the templates use as a joint),
 * else its safe letters and a hash of the whole, so two names never give one slug.
 */
export function safeSlug(name: string, isValid: (s: string) => boolean = isValidObjectName, maxLength?: number): string {
  if (!name.includes('--') && isValid(name) && (maxLength === undefined || name.length <= maxLength)) return name;
  return stripAndHash(name, maxLength ?? 32);
}

/** KubeSpawner's `multi_slug`: `{a}--{b}---{hash}`, the hash over all names joined by a byte UTF-8 never has. */
export function multiSlug(names: string[], maxLength = 48): string {
  const parts: Buffer[] = [];
  names.forEach((n, i) => {
    if (i) parts.push(Buffer.from([0xff]));
    parts.push(Buffer.from(n, 'utf8'));
  });
  const hash = sha256hex(Buffer.concat(parts)).slice(0, HASH_LENGTH);
  const perName = Math.floor((maxLength - (HASH_LENGTH + 1)) / names.length) - 2;
  if (perName < 2) throw new Error(`not enough characters for ${names.length} names: ${maxLength}`);
  return `${names.map((n) => extractSafeName(n, perName)).join('--')}---${hash}`;
}

/** KubeSpawner's legacy `escape_slug` (before 7): every byte outside [a-z0-9] as "-" and its hex, then lowercased. */
export function escapeSlug(name: string): string {
  let out = '';
  for (const ch of name) {
    if (/^[a-z0-9]$/.test(ch)) out += ch;
    else for (const byte of Buffer.from(ch, 'utf8')) out += `-${byte.toString(16).toUpperCase()}`;
  }
  return out.toLowerCase();
}

// ---- templates: Python's str.format over KubeSpawner's fields ----

type Fields = Record<string, string>;

/** The fields of KubeSpawner's templates for one server, in one slug scheme. */
function templateFields(username: string, servername: string, hubNamespace: string, scheme: 'safe' | 'escape'): Fields {
  const max = 48;
  const safeUsername = safeSlug(username, isValidObjectName, max);
  const safeServername = servername ? safeSlug(servername, isValidObjectName, max) : '';
  const safeUserServer = safeUsername.length + safeServername.length + 2 > max
    ? multiSlug([username, servername], max)
    : servername ? `${safeUsername}--${safeServername}` : safeUsername;
  const escapedUsername = escapeSlug(username);
  const escapedServername = escapeSlug(servername);
  const escapedUserServer = `${escapedUsername}--${escapedServername}`;
  const safe = scheme === 'safe';
  return {
    unescaped_username: username,
    unescaped_servername: servername,
    hubnamespace: hubNamespace === 'default' ? 'user' : hubNamespace,
    username: safe ? safeUsername : escapedUsername,
    servername: safe ? safeServername : escapedServername,
    user_server: safe ? safeUserServer : servername ? escapedUserServer : escapedUsername,
    safe_username: safeUsername,
    safe_servername: safeServername,
    safe_user_server: safeUserServer,
    escaped_username: escapedUsername,
    escaped_servername: escapedServername,
    escaped_user_server: escapedUserServer,
  };
}

/** Fields known to KubeSpawner that this hub has no value for. */
const UNAVAILABLE_FIELDS = new Set(['userid']);

/**
 * `template` as Python's `str.format(**fields)` gives it (`{{`/`}}` are braces), then trailing "-" stripped
 * unless the template itself ends with one (a default server leaves `{username}--{servername}` ending in "--").
 */
export function expandTemplate(template: string, fields: Fields, option: string): string {
  let out = '';
  for (let i = 0; i < template.length; i++) {
    const c = template[i];
    if (c === '{' && template[i + 1] === '{') { out += '{'; i++; continue; }
    if (c === '}' && template[i + 1] === '}') { out += '}'; i++; continue; }
    if (c === '}') throw new Error(`${option}: a single "}" in ${JSON.stringify(template)} (write "}}" for a brace)`);
    if (c !== '{') { out += c; continue; }
    const end = template.indexOf('}', i);
    if (end < 0) throw new Error(`${option}: a "{" without its "}" in ${JSON.stringify(template)} (write "{{" for a brace)`);
    const field = template.slice(i + 1, end);
    if (!Object.hasOwn(fields, field)) {
      const why = UNAVAILABLE_FIELDS.has(field) ? 'has no value in this hub' : /^[A-Za-z_][A-Za-z0-9_]*$/.test(field) ? 'is not a template field' : 'is not a plain field (conversions and formats are not supported)';
      throw new Error(`${option}: {${field}} in ${JSON.stringify(template)} ${why} (fields: ${Object.keys(fields).map((f) => `{${f}}`).join(' ')})`);
    }
    out += fields[field];
    i = end;
  }
  return template.endsWith('-') ? out : out.replace(/-+$/, '');
}

/** KubeSpawner's `_expand_all`: strings in lists and object values (never keys) expanded; other values as they are. */
function expandAll(value: unknown, fields: Fields, option: string): unknown {
  if (typeof value === 'string') return expandTemplate(value, fields, option);
  if (Array.isArray(value)) return value.map((v) => expandAll(v, fields, option));
  if (isObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, expandAll(v, fields, option)]));
  return value;
}

// ---- options: read and checked one by one, so the config check lists every problem ----

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);
const show = (v: unknown) => {
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
};

/** A Kubernetes quantity (e.g. "1", "500m", "2Gi", "1e3"). */
const QUANTITY = /^\+?(\d+(\.\d*)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+)?$/;
/** A resource or label key: an optional DNS-subdomain prefix and "/", then a name of 1 to 63 characters. */
const QUALIFIED_NAME = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** The values of a list, or of an object sorted by key (KubeSpawner 7 takes both for lists of objects). */
function listOrSortedDict(option: string, v: unknown): unknown[] {
  if (v === null || v === undefined) return [];
  if (Array.isArray(v)) return v;
  if (isObject(v)) return Object.keys(v).sort().map((k) => v[k]);
  throw new Error(`${option}: expected a list (or an object whose values, sorted by key, make the list), got ${show(v)}`);
}

/** A list of Kubernetes objects (volumes, containers, tolerations...): each an object; snake_case top-level keys read as camelCase. */
function objectList(option: string, v: unknown): Record<string, unknown>[] {
  return listOrSortedDict(option, v).map((item, i) => {
    if (!isObject(item)) throw new Error(`${option}[${i}]: expected an object (a Kubernetes ${option.split('.').pop()} entry), got ${show(item)}`);
    return camelTop(item);
  });
}

/** KubeSpawner takes the Python client's snake_case names for a model's own fields: the same fields in camelCase. */
function camelTop(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k.includes('_') ? k.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()) : k, v]));
}

const opt = (o: Record<string, unknown>, key: string) => o[key];
const name = (key: string) => `KubeSpawner.${key}`;

function str(o: Record<string, unknown>, key: string, dflt: string): string {
  const v = opt(o, key);
  if (v === undefined || v === null) return dflt;
  if (typeof v !== 'string') throw new Error(`${name(key)}: expected a string, got ${show(v)}`);
  return v;
}

function optionalStr(o: Record<string, unknown>, key: string): string | null {
  const v = opt(o, key);
  if (v === undefined || v === null || v === '') return null;
  if (typeof v !== 'string') throw new Error(`${name(key)}: expected a string, got ${show(v)}`);
  return v;
}

function bool(o: Record<string, unknown>, key: string, dflt: boolean | null): boolean | null {
  const v = opt(o, key);
  if (v === undefined || v === null) return dflt;
  if (typeof v !== 'boolean') throw new Error(`${name(key)}: expected true or false, got ${show(v)}`);
  return v;
}

function obj(o: Record<string, unknown>, key: string): Record<string, unknown> {
  const v = opt(o, key);
  if (v === undefined || v === null) return {};
  if (!isObject(v)) throw new Error(`${name(key)}: expected an object, got ${show(v)}`);
  return v;
}

function stringMap(o: Record<string, unknown>, key: string): Record<string, string> {
  const v = obj(o, key);
  for (const [k, x] of Object.entries(v)) if (typeof x !== 'string') throw new Error(`${name(key)}[${JSON.stringify(k)}]: expected a string, got ${show(x)}`);
  return v as Record<string, string>;
}

function intOrNull(o: Record<string, unknown>, key: string): number | null {
  const v = opt(o, key);
  if (v === undefined || v === null) return null;
  if (!Number.isSafeInteger(v) || (v as number) < 0) throw new Error(`${name(key)}: expected a whole number >= 0 (or null), got ${show(v)}`);
  return v as number;
}

/** Cores: a number (KubeSpawner's Float), as a Kubernetes quantity; null when unset or 0. */
function cores(o: Record<string, unknown>, key: string): string | null {
  const v = opt(o, key);
  if (v === undefined || v === null || v === 0) return null;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new Error(`${name(key)}: expected a number of cores (e.g. 0.5 or 2), got ${show(v)}`);
  return cpuQuantity(v);
}

const cpuQuantity = (n: number) => (Number.isInteger(n) ? String(n) : `${Math.round(n * 1000)}m`);

/** Bytes as the established hub reads them ("512M", "1G": powers of 1024; or a number); null when unset or "". */
function bytes(o: Record<string, unknown>, key: string): number | null {
  const v = opt(o, key);
  if (v === undefined || v === null || v === '' || v === 0) return null;
  const n = typeof v === 'string' || typeof v === 'number' ? parseByteSize(v) : null;
  if (n === null) throw new Error(`${name(key)}: expected a size in bytes (a number, or a string such as "512M" or "2G"), got ${show(v)}`);
  return n || null;
}

function resourceMap(o: Record<string, unknown>, key: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(obj(o, key))) {
    if (!QUALIFIED_NAME.test(k)) throw new Error(`${name(key)}: ${JSON.stringify(k)} is not a resource name (e.g. "nvidia.com/gpu")`);
    const q = typeof v === 'number' && Number.isFinite(v) && v >= 0 ? String(v) : v;
    if (typeof q !== 'string' || !QUANTITY.test(q)) throw new Error(`${name(key)}[${JSON.stringify(k)}]: expected a quantity (e.g. "1", "500m", "2Gi"), got ${show(v)}`);
    out[k] = q;
  }
  return out;
}

/** Labels as Kubernetes takes them (qualified keys, values of at most 63 safe characters), checked here to name the option. */
function labelMap(option: string, m: Record<string, string>): Record<string, string> {
  for (const [k, v] of Object.entries(m)) {
    if (!QUALIFIED_NAME.test(k)) throw new Error(`${option}: ${JSON.stringify(k)} is not a label key (an optional "prefix/" and a name of letters, digits, "-", "_", ".")`);
    if (!LABEL_VALUE.test(v)) throw new Error(`${option}[${JSON.stringify(k)}]: ${JSON.stringify(v)} is not a label value (at most 63 letters, digits, "-", "_", ".", starting and ending with a letter or digit)`);
  }
  return m;
}

function annotationMap(option: string, m: Record<string, string>): Record<string, string> {
  for (const k of Object.keys(m)) if (!QUALIFIED_NAME.test(k)) throw new Error(`${option}: ${JSON.stringify(k)} is not an annotation key (an optional "prefix/" and a name of letters, digits, "-", "_", ".")`);
  return m;
}

/** A name Kubernetes takes for an object, made from a template: checked here, so the error names the template. */
function objectName(option: string, value: string, kind: 'dns-label' | 'dns-subdomain'): string {
  const ok = kind === 'dns-label' ? /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(value) : value.length <= 253 && DNS_SUBDOMAIN.test(value);
  if (!ok) throw new Error(`${option} gives ${JSON.stringify(value)}, which is not a Kubernetes ${kind === 'dns-label' ? 'namespace name (a DNS label: lowercase letters, digits and "-", at most 63)' : 'object name (lowercase letters, digits, "-" and ".", at most 253)'}`);
  return value;
}

/** A security context as Kubernetes names its fields (KubeSpawner refuses snake_case here: the Python client is behind). */
function securityContext(o: Record<string, unknown>, key: string): Record<string, unknown> {
  const sc = obj(o, key);
  const snake = Object.keys(sc).find((k) => k.includes('_'));
  if (snake) throw new Error(`${name(key)}: keys are Kubernetes' camelCase names, got ${JSON.stringify(snake)}`);
  return sc;
}

/** init_containers, extra_containers: containers with a name and an image each (templates expanded). */
function containers(o: Record<string, unknown>, key: string, fields: Fields): V1Container[] {
  const list = objectList(name(key), expandAll(listOrSortedDict(name(key), opt(o, key)), fields, name(key)));
  list.forEach((c, i) => {
    if (typeof c.name !== 'string' || !/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(c.name)) throw new Error(`${name(key)}[${i}].name: required, a DNS label (lowercase letters, digits, "-"), got ${show(c.name)}`);
    if (c.name === 'notebook') throw new Error(`${name(key)}[${i}].name: "notebook" is the server's own container`);
    if (typeof c.image !== 'string' || !c.image) throw new Error(`${name(key)}[${i}].image: required`);
  });
  return list as unknown as V1Container[];
}

/** image_pull_secrets: names, or {"name": ...} objects (KubeSpawner takes both; a lone string is one name). */
function imagePullSecrets(o: Record<string, unknown>): { name: string }[] {
  const v = opt(o, 'image_pull_secrets');
  if (v === undefined || v === null) return [];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list)) throw new Error(`${name('image_pull_secrets')}: expected a list of secret names, got ${show(v)}`);
  return list.map((s, i) => {
    const n = typeof s === 'string' ? s : isObject(s) && typeof s.name === 'string' ? s.name : null;
    if (!n || !DNS_SUBDOMAIN.test(n)) throw new Error(`${name('image_pull_secrets')}[${i}]: expected a Secret's name (or {"name": ...}), got ${show(s)}`);
    return { name: n };
  });
}

/** The pod's affinity from KubeSpawner's six lists (each a list, or an object sorted by key); null when all are empty. */
function affinityOf(o: Record<string, unknown>): V1PodSpec['affinity'] | null {
  const list = (key: string) => objectList(name(key), opt(o, key));
  const weighted = (key: string) => {
    const terms = list(key);
    terms.forEach((term, i) => {
      if (!Number.isInteger(term.weight) || (term.weight as number) < 1 || (term.weight as number) > 100) {
        throw new Error(`${name(key)}[${i}].weight: required, a whole number from 1 to 100 (a preferred term is {"weight": ..., ${key.startsWith('node') ? '"preference"' : '"podAffinityTerm"'}: {...}})`);
      }
    });
    return terms;
  };
  const podTerms = (key: string) => {
    const terms = list(key);
    terms.forEach((term, i) => {
      if (typeof term.topologyKey !== 'string' || !term.topologyKey) throw new Error(`${name(key)}[${i}].topologyKey: required (e.g. "kubernetes.io/hostname")`);
    });
    return terms;
  };
  const nodeRequired = list('node_affinity_required');
  const nodePreferred = weighted('node_affinity_preferred');
  const podRequired = podTerms('pod_affinity_required');
  const podPreferred = weighted('pod_affinity_preferred');
  const antiRequired = podTerms('pod_anti_affinity_required');
  const antiPreferred = weighted('pod_anti_affinity_preferred');
  const either = (required: unknown[], preferred: unknown[], requiredAs: (r: unknown[]) => unknown) => (required.length || preferred.length ? {
    ...(preferred.length ? { preferredDuringSchedulingIgnoredDuringExecution: preferred } : {}),
    ...(required.length ? { requiredDuringSchedulingIgnoredDuringExecution: requiredAs(required) } : {}),
  } : null);
  const node = either(nodeRequired, nodePreferred, (r) => ({ nodeSelectorTerms: r }));
  const pod = either(podRequired, podPreferred, (r) => r);
  const anti = either(antiRequired, antiPreferred, (r) => r);
  if (!node && !pod && !anti) return null;
  return { ...(node ? { nodeAffinity: node } : {}), ...(pod ? { podAffinity: pod } : {}), ...(anti ? { podAntiAffinity: anti } : {}) } as V1PodSpec['affinity'];
}

// ---- the objects ----

/** The hub's variables whose values are no secret (HUB_<name>, and its JUPYTERHUB_ alias); the rest goes in the Secret. */
const PUBLIC_ENV_SUFFIXES = new Set([
  'API_URL', 'BASE_URL', 'CLIENT_ID', 'USER', 'SERVER_NAME', 'SERVICE_PREFIX', 'SERVICE_URL', 'OAUTH_CALLBACK_URL',
  'OAUTH_ACCESS_SCOPES', 'OAUTH_SCOPES', 'OAUTH_CLIENT_ALLOWED_SCOPES', 'ACTIVITY_URL', 'PUBLIC_URL', 'PUBLIC_HUB_URL',
  'HOST', 'COOKIE_HOST_PREFIX_ENABLED', 'COOKIE_OPTIONS', 'ROOT_DIR', 'DEFAULT_URL', 'DEBUG', 'DISABLE_USER_CONFIG',
]);
const PUBLIC_ENV = new Set(['LANG', 'MEM_LIMIT', 'CPU_LIMIT', 'MEM_GUARANTEE', 'CPU_GUARANTEE', 'JUPYTER_IMAGE', 'JUPYTER_IMAGE_SPEC']);

/**
 * Whether a variable of the hub's environment is plainly public: the hub's own non-secret ones (under HUB_, and the
 * JUPYTERHUB_/JPY_ names the established hub's servers read). Anything else (tokens, what a login passes from its
 * auth state, an unknown name) is taken as secret.
 */
export function isPublicEnv(key: string): boolean {
  if (PUBLIC_ENV.has(key)) return true;
  const m = /^(?:HUB|JUPYTERHUB|JPY)_(.+)$/.exec(key);
  return Boolean(m && PUBLIC_ENV_SUFFIXES.has(m[1]));
}

/** A Secret's key for an environment variable (keys allow only [-._a-zA-Z0-9]). */
const secretKeyOf = (env: string) => (/^[-._a-zA-Z0-9]{1,253}$/.test(env) ? env : `env-${sha256hex(env).slice(0, 16)}`);

interface EnvEntry { key: string; env: V1EnvVar }

/** KubeSpawner's order of the environment: variables that others refer to with $(NAME) first, else by key. */
function orderedEnv(entries: EnvEntry[]): V1EnvVar[] {
  const depsOf = (e: V1EnvVar) => new Set([...(e.value ?? '').matchAll(/\$\(([^)]+)\)/g)].map((m) => m[1]).filter((d) => d !== e.name));
  const pending = new Map(entries.map((e) => [e.env.name, { ...e, deps: depsOf(e.env) }]));
  const sorted: V1EnvVar[] = [];
  const byKey = (a: EnvEntry, b: EnvEntry) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
  for (;;) {
    const done = new Set(sorted.map((e) => e.name));
    const ready = [...pending.values()].filter((e) => [...e.deps].every((d) => done.has(d)));
    if (!ready.length) {
      for (const e of [...pending.values()].sort(byKey)) sorted.push(e.env);
      return sorted;
    }
    for (const e of ready) pending.delete(e.env.name);
    for (const e of ready.sort(byKey)) sorted.push(e.env);
  }
}

interface ServerNames {
  fields: Fields;
  userNamespaces: boolean;
  namespace: string;
  podName: string;
  pvcName: string;
}

/** The server's names, in KubeSpawner's order: each template may use the names made before it. */
function serverNames(input: KubeObjectsInput): ServerNames {
  const o = input.options;
  const baseNamespace = str(o, 'namespace', '') || 'default';
  objectName(name('namespace'), baseNamespace, 'dns-label');
  const scheme = str(o, 'slug_scheme', 'safe');
  if (scheme !== 'safe' && scheme !== 'escape') throw new Error(`${name('slug_scheme')}: expected "safe" or "escape", got ${show(scheme)}`);
  const fields: Fields = {
    ...templateFields(input.username, input.servername, baseNamespace, scheme),
    pod_name: 'pod_name_unavailable!', pvc_name: 'pvc_name_unavailable!', namespace: baseNamespace,
  };
  const userNamespaces = bool(o, 'enable_user_namespaces', false)!;
  const namespace = userNamespaces
    ? objectName(name('user_namespace_template'), expandTemplate(str(o, 'user_namespace_template', '{hubnamespace}-{username}'), fields, name('user_namespace_template')), 'dns-label')
    : baseNamespace;
  fields.namespace = namespace;
  const podName = objectName(name('pod_name_template'), expandTemplate(str(o, 'pod_name_template', 'jupyter-{user_server}'), fields, name('pod_name_template')), 'dns-subdomain');
  fields.pod_name = podName;
  const pvcName = input.pvcName
    ? objectName('the claim of an earlier start', input.pvcName, 'dns-subdomain')
    : objectName(name('pvc_name_template'), expandTemplate(str(o, 'pvc_name_template', 'claim-{user_server}'), fields, name('pvc_name_template')), 'dns-subdomain');
  fields.pvc_name = pvcName;
  return { fields, userNamespaces, namespace, podName, pvcName };
}

export function kubeObjects(input: KubeObjectsInput): KubeObjects {
  const o = input.options;
  const { username, servername } = input;
  const { fields, userNamespaces, namespace, podName, pvcName } = serverNames(input);

  // KubeSpawner's labels (the username label as a safe label value), ours (which hub), then the operator's
  const commonLabels = (extra: Record<string, string>): Record<string, string> => ({
    'hub.jupyter.org/username': safeSlug(username, isValidLabelValue),
    ...extra,
    'app.kubernetes.io/name': 'jupyterhub', 'app.kubernetes.io/managed-by': 'kubespawner', app: 'jupyterhub', heritage: 'jupyterhub',
    [HUB_LABELS.hubId]: input.hubId,
  });
  const commonAnnotations = (extra: Record<string, string>): Record<string, string> => ({
    'hub.jupyter.org/username': username,
    ...(servername ? { 'hub.jupyter.org/servername': servername } : {}),
    ...extra,
  });
  const expandedMap = (key: string) => expandAll(stringMap(o, key), fields, name(key)) as Record<string, string>;
  const podLabels: Record<string, string> = {
    ...commonLabels(labelMap(name('extra_labels'), expandedMap('extra_labels'))),
    'app.kubernetes.io/component': 'singleuser-server', component: 'singleuser-server',
    'hub.jupyter.org/servername': safeSlug(servername, isValidLabelValue),
  };
  const annotations = commonAnnotations(annotationMap(name('extra_annotations'), expandedMap('extra_annotations')));

  // the image, and what runs in it
  const image = str(o, 'image', '');
  if (!image) throw new Error(`${name('image')} is not set: name the image servers run in`);
  const cmdOption = opt(o, 'cmd');
  let args: string[];
  if (cmdOption === undefined || cmdOption === null) args = input.cmd;
  else if (typeof cmdOption === 'string') args = cmdOption ? [cmdOption] : [];
  else if (Array.isArray(cmdOption) && cmdOption.every((c) => typeof c === 'string')) args = cmdOption;
  else throw new Error(`${name('cmd')}: expected a command (a string, or a list of strings; null = Spawner.cmd), got ${show(cmdOption)}`);

  // the environment: the hub's (secret values through the Secret), then KubeSpawner.environment (expanded), which wins
  const secretData: Record<string, string> = {};
  const env = new Map<string, EnvEntry>();
  const put = (key: string, e: V1EnvVar) => env.set(e.name, { key, env: e });
  for (const [k, v] of Object.entries(input.env)) {
    if (isPublicEnv(k)) put(k, { name: k, value: v });
    else {
      const sk = secretKeyOf(k);
      secretData[sk] = v;
      put(k, { name: k, valueFrom: { secretKeyRef: { name: podName, key: sk } } });
    }
  }
  const memLimit = bytes(o, 'mem_limit') ?? input.limits.memBytes;
  const memGuarantee = bytes(o, 'mem_guarantee');
  const cpuLimit = cores(o, 'cpu_limit') ?? (input.limits.cpu ? cpuQuantity(input.limits.cpu) : null);
  const cpuGuarantee = cores(o, 'cpu_guarantee');
  // as the established hub tells the server its limits: bytes and cores
  if (memLimit !== null) put('MEM_LIMIT', { name: 'MEM_LIMIT', value: String(memLimit) });
  if (memGuarantee !== null) put('MEM_GUARANTEE', { name: 'MEM_GUARANTEE', value: String(memGuarantee) });
  const coresOf = (q: string) => String(q.endsWith('m') ? Number(q.slice(0, -1)) / 1000 : Number(q));
  if (cpuLimit !== null) put('CPU_LIMIT', { name: 'CPU_LIMIT', value: coresOf(cpuLimit) });
  if (cpuGuarantee !== null) put('CPU_GUARANTEE', { name: 'CPU_GUARANTEE', value: coresOf(cpuGuarantee) });
  put('JUPYTER_IMAGE_SPEC', { name: 'JUPYTER_IMAGE_SPEC', value: image });
  put('JUPYTER_IMAGE', { name: 'JUPYTER_IMAGE', value: image });
  for (const [k, v] of Object.entries(obj(o, 'environment'))) {
    const option = `${name('environment')}[${JSON.stringify(k)}]`;
    if (typeof v === 'string') put(k, { name: k, value: expandTemplate(v, fields, option) });
    else if (isObject(v)) {
      const e = camelTop(expandAll(v, fields, option) as Record<string, unknown>);
      if (e.name !== undefined && typeof e.name !== 'string') throw new Error(`${option}.name: expected a string`);
      put(k, { ...e, name: (e.name as string | undefined) ?? k } as V1EnvVar);
    } else throw new Error(`${option}: expected a string or an EnvVar object (e.g. {"valueFrom": {...}}), got ${show(v)}`);
  }

  const resources: V1ResourceRequirements = { requests: {}, limits: {} };
  if (cpuGuarantee) resources.requests!.cpu = cpuGuarantee;
  if (memGuarantee) resources.requests!.memory = String(memGuarantee);
  Object.assign(resources.requests!, resourceMap(o, 'extra_resource_guarantees'));
  if (cpuLimit) resources.limits!.cpu = cpuLimit;
  if (memLimit) resources.limits!.memory = String(memLimit);
  Object.assign(resources.limits!, resourceMap(o, 'extra_resource_limits'));

  // security: KubeSpawner's own options first, its *_security_context (camelCase, as Kubernetes names them) over them
  const uid = intOrNull(o, 'uid');
  const gid = intOrNull(o, 'gid');
  const fsGid = intOrNull(o, 'fs_gid');
  const supplementalGids = opt(o, 'supplemental_gids') ?? [];
  if (!Array.isArray(supplementalGids) || !supplementalGids.every((g) => Number.isSafeInteger(g) && g >= 0)) {
    throw new Error(`${name('supplemental_gids')}: expected a list of group ids, got ${show(supplementalGids)}`);
  }
  const privileged = bool(o, 'privileged', false);
  const allowPrivilegeEscalation = bool(o, 'allow_privilege_escalation', false);
  if (privileged && allowPrivilegeEscalation === false) {
    throw new Error(`${name('privileged')}: a privileged container always may escalate: set KubeSpawner.allow_privilege_escalation to true (or null) as well`);
  }
  const podSecurity: Record<string, unknown> = {
    ...(fsGid !== null ? { fsGroup: fsGid } : {}),
    ...(supplementalGids.length ? { supplementalGroups: supplementalGids } : {}),
    ...securityContext(o, 'pod_security_context'),
  };
  const containerSecurity: Record<string, unknown> = {
    ...(uid !== null ? { runAsUser: uid } : {}),
    ...(gid !== null ? { runAsGroup: gid } : {}),
    ...(privileged ? { privileged: true } : {}),
    ...(allowPrivilegeEscalation !== null ? { allowPrivilegeEscalation } : {}),
    ...securityContext(o, 'container_security_context'),
  };

  const workingDir = optionalStr(o, 'working_dir');
  const pullPolicy = optionalStr(o, 'image_pull_policy');
  if (pullPolicy !== null && !['Always', 'IfNotPresent', 'Never'].includes(pullPolicy)) {
    throw new Error(`${name('image_pull_policy')}: expected "Always", "IfNotPresent" or "Never" (or null for Kubernetes' default), got ${show(pullPolicy)}`);
  }
  const lifecycle = obj(o, 'lifecycle_hooks');
  const volumes = objectList(name('volumes'), expandAll(listOrSortedDict(name('volumes'), opt(o, 'volumes')), fields, name('volumes')));
  volumes.forEach((v, i) => {
    if (typeof v.name !== 'string' || !v.name) throw new Error(`${name('volumes')}[${i}].name: required (the name volume_mounts use)`);
  });
  const volumeMounts = objectList(name('volume_mounts'), expandAll(listOrSortedDict(name('volume_mounts'), opt(o, 'volume_mounts')), fields, name('volume_mounts')));
  volumeMounts.forEach((m, i) => {
    if (typeof m.name !== 'string' || !m.name) throw new Error(`${name('volume_mounts')}[${i}].name: required (a volume of KubeSpawner.volumes)`);
    if (typeof m.mountPath !== 'string' || !m.mountPath.startsWith('/')) throw new Error(`${name('volume_mounts')}[${i}].mountPath: required, an absolute path`);
  });
  let container: V1Container = {
    name: 'notebook',
    image,
    ...(args.length ? { args } : {}),
    ...(workingDir ? { workingDir: expandTemplate(workingDir, fields, name('working_dir')) } : input.notebookDir.startsWith('/') ? { workingDir: input.notebookDir } : {}),
    ports: [{ name: 'notebook-port', containerPort: input.port }],
    env: orderedEnv([...env.values()]),
    ...(pullPolicy ? { imagePullPolicy: pullPolicy } : {}),
    ...(Object.keys(lifecycle).length ? { lifecycle: camelTop(lifecycle) } : {}),
    resources,
    ...(volumeMounts.length ? { volumeMounts: volumeMounts as unknown as V1Container['volumeMounts'] } : {}),
    ...(Object.keys(containerSecurity).length ? { securityContext: containerSecurity } : {}),
  };
  // KubeSpawner.extra_container_config: fields of the server's container, each replacing the field made above
  container = { ...container, ...camelTop(obj(o, 'extra_container_config')) } as V1Container;

  const serviceAccount = optionalStr(o, 'service_account');
  const automount = bool(o, 'automount_service_account_token', null);
  const spec: V1PodSpec = {
    restartPolicy: 'OnFailure',
    containers: [container, ...containers(o, 'extra_containers', fields)],
  };
  if (volumes.length) spec.volumes = volumes as unknown as V1PodSpec['volumes'];
  const initContainers = containers(o, 'init_containers', fields);
  if (initContainers.length) spec.initContainers = initContainers;
  const pullSecrets = imagePullSecrets(o);
  if (pullSecrets.length) spec.imagePullSecrets = pullSecrets;
  const nodeSelector = stringMap(o, 'node_selector');
  if (Object.keys(nodeSelector).length) spec.nodeSelector = nodeSelector;
  if (Object.keys(podSecurity).length) spec.securityContext = podSecurity;
  if (serviceAccount !== null) spec.serviceAccountName = expandTemplate(serviceAccount, fields, name('service_account'));
  // without a service account of its own a server gets no token for the Kubernetes API (KubeSpawner's rule)
  if (automount !== null) spec.automountServiceAccountToken = automount;
  else if (serviceAccount === null) spec.automountServiceAccountToken = false;
  const tolerations = objectList(name('tolerations'), opt(o, 'tolerations'));
  if (tolerations.length) spec.tolerations = tolerations;
  const affinity = affinityOf(o);
  if (affinity) spec.affinity = affinity;
  const priorityClass = optionalStr(o, 'priority_class_name');
  if (priorityClass) spec.priorityClassName = priorityClass;
  const scheduler = optionalStr(o, 'scheduler_name');
  if (scheduler) spec.schedulerName = scheduler;
  // KubeSpawner.extra_pod_config: fields of the pod's spec (templates expanded), each replacing the field made above
  Object.assign(spec, camelTop(expandAll(obj(o, 'extra_pod_config'), fields, name('extra_pod_config')) as Record<string, unknown>));

  const pod: V1Pod = {
    apiVersion: 'v1', kind: 'Pod',
    metadata: { name: podName, namespace, labels: podLabels, annotations },
    spec,
  };
  const secret: V1Secret = {
    apiVersion: 'v1', kind: 'Secret', type: 'Opaque',
    metadata: { name: podName, namespace, labels: { ...podLabels }, annotations: { ...annotations } },
    stringData: secretData,
  };

  const namespaceObject: V1Namespace | null = userNamespaces
    ? {
      apiVersion: 'v1', kind: 'Namespace',
      metadata: {
        name: namespace,
        labels: { ...commonLabels({}), ...labelMap(name('user_namespace_labels'), expandedMap('user_namespace_labels')) },
        annotations: annotationMap(name('user_namespace_annotations'), expandedMap('user_namespace_annotations')),
      },
    }
    : null;

  // KubeSpawner.storage_pvc_ensure: the claim a start makes when missing (its volume and mount are the operator's)
  let pvc: V1PersistentVolumeClaim | null = null;
  if (bool(o, 'storage_pvc_ensure', false)) {
    const capacity = optionalStr(o, 'storage_capacity');
    if (!capacity) throw new Error(`${name('storage_capacity')} is not set: KubeSpawner.storage_pvc_ensure makes a claim of that size (e.g. "10Gi")`);
    if (!QUANTITY.test(capacity)) throw new Error(`${name('storage_capacity')}: expected a quantity (e.g. "10Gi"), got ${show(capacity)}`);
    const storageClass = opt(o, 'storage_class');
    if (storageClass !== undefined && storageClass !== null && typeof storageClass !== 'string') throw new Error(`${name('storage_class')}: expected a string (or null for the cluster's default class), got ${show(storageClass)}`);
    const accessModes = opt(o, 'storage_access_modes') ?? ['ReadWriteOnce'];
    const MODES = ['ReadWriteOnce', 'ReadOnlyMany', 'ReadWriteMany', 'ReadWriteOncePod'];
    if (!Array.isArray(accessModes) || !accessModes.length || !accessModes.every((m) => MODES.includes(m as string))) {
      throw new Error(`${name('storage_access_modes')}: expected a list of ${MODES.join(', ')}, got ${show(accessModes)}`);
    }
    const selector = expandAll(obj(o, 'storage_selector'), fields, name('storage_selector')) as Record<string, unknown>;
    const pvcAnnotations = commonAnnotations(annotationMap(name('storage_extra_annotations'), expandedMap('storage_extra_annotations')));
    if (typeof storageClass === 'string') pvcAnnotations['volume.beta.kubernetes.io/storage-class'] = storageClass;
    pvc = {
      apiVersion: 'v1', kind: 'PersistentVolumeClaim',
      metadata: {
        name: pvcName, namespace,
        labels: { ...commonLabels(labelMap(name('storage_extra_labels'), expandedMap('storage_extra_labels'))), 'app.kubernetes.io/component': 'singleuser-server', component: 'singleuser-storage' },
        annotations: pvcAnnotations,
      },
      spec: {
        accessModes: accessModes as string[],
        resources: { requests: { storage: capacity } },
        ...(typeof storageClass === 'string' ? { storageClassName: storageClass } : {}),
        ...(Object.keys(selector).length ? { selector: camelTop(selector) } : {}),
      },
    };
  }

  return { namespace, namespaceObject, pod, pvc, secret };
}

/**
 * The claim's name KubeSpawner before 7 made with `pvc_name_template` (its "escape" scheme): where a server that ran
 * under it keeps its files. KubeSpawner 7 uses it when the safe-scheme claim does not exist and this one does.
 */
export function legacyPvcName(input: KubeObjectsInput): string {
  const { namespace, podName } = serverNames({ ...input, pvcName: undefined });
  const o = input.options;
  const base = str(o, 'namespace', '') || 'default';
  // the scheme's own fields escaped; the names made before (namespace, pod) as this hub makes them, as KubeSpawner 7 does
  const fields: Fields = { ...templateFields(input.username, input.servername, base, 'escape'), namespace, pod_name: podName, pvc_name: 'pvc_name_unavailable!' };
  return expandTemplate(str(o, 'pvc_name_template', 'claim-{user_server}'), fields, name('pvc_name_template'));
}

// ---- KubeSpawner.profile_list: profiles with kubespawner_override and profile_options ----

export interface KubeProfileChoice {
  display_name: string;
  default: boolean;
  kubespawner_override: Record<string, unknown>;
}

export interface KubeProfileOption {
  display_name: string;
  choices: Record<string, KubeProfileChoice>;
  unlisted_choice: { enabled: boolean; display_name: string; validation_regex: string; validation_message: string; kubespawner_override: Record<string, unknown> };
}

export interface KubeProfile {
  slug: string;
  display_name: string;
  description: string;
  default: boolean;
  kubespawner_override: Record<string, unknown>;
  profile_options: Record<string, KubeProfileOption>;
}

/** A slug from a display name, as KubeSpawner makes a missing one (python-slugify: ASCII letters and digits, "-" between). */
export function slugify(text: string): string {
  return text.normalize('NFKD').replace(/[\u0300-\u036f]/g, '').replace(/['\u2019]/g, '').toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '');
}

/**
 * `KubeSpawner.profile_list` as KubeSpawner initialises it: a list (or an object whose values, sorted by key, make it),
 * a slug from the display name when none is given, the first profile the default when none is, the first choice of
 * each option the default when none is. Every problem of its shape, one line each.
 */
export function kubeProfileList(value: unknown): { profiles: KubeProfile[]; problems: string[] } {
  const problems: string[] = [];
  let list: unknown[];
  try {
    list = listOrSortedDict(name('profile_list'), value);
  } catch (e) {
    return { profiles: [], problems: [(e as Error).message] };
  }
  const profiles: KubeProfile[] = [];
  const overrideOf = (where: string, v: unknown) => {
    if (v === undefined || v === null) return {};
    if (!isObject(v)) problems.push(`${where}.kubespawner_override: expected an object of option: value`);
    return isObject(v) ? v : {};
  };
  const text = (where: string, v: unknown, required = false) => {
    if (v === undefined || v === null) {
      if (required) problems.push(`${where}: required, a string`);
      return '';
    }
    if (typeof v !== 'string') problems.push(`${where}: expected a string, got ${show(v)}`);
    return typeof v === 'string' ? v : '';
  };
  list.forEach((raw, i) => {
    const where = `${name('profile_list')}[${i}]`;
    if (!isObject(raw)) return void problems.push(`${where}: expected an object (display_name, slug, kubespawner_override, profile_options...)`);
    const display = text(`${where}.display_name`, raw.display_name, true);
    const slug = raw.slug === undefined ? slugify(display) : text(`${where}.slug`, raw.slug);
    const label = `${name('profile_list')} ${JSON.stringify(slug || display || String(i))}`;
    if (!slug) problems.push(`${label}: needs a slug (or a display_name to make one from)`);
    else if (profiles.some((p) => p.slug === slug)) problems.push(`${label}: slug ${JSON.stringify(slug)} used twice`);
    if (raw.default !== undefined && typeof raw.default !== 'boolean') problems.push(`${label}.default: expected true or false`);
    const options: Record<string, KubeProfileOption> = {};
    if (raw.profile_options !== undefined && !isObject(raw.profile_options)) problems.push(`${label}.profile_options: expected an object of option name: {display_name, choices, unlisted_choice}`);
    for (const [key, rawOption] of Object.entries(isObject(raw.profile_options) ? raw.profile_options : {})) {
      const ow = `${label}.profile_options.${key}`;
      if (key === 'profile' || key.endsWith('--unlisted-choice')) problems.push(`${ow}: the name is taken (user_options.profile, and <name>--unlisted-choice for a free-form value)`);
      if (!isObject(rawOption)) { problems.push(`${ow}: expected an object`); continue; }
      const choices: Record<string, KubeProfileChoice> = {};
      if (rawOption.choices !== undefined && !isObject(rawOption.choices)) problems.push(`${ow}.choices: expected an object of key: {display_name, default, kubespawner_override}`);
      for (const [ck, rawChoice] of Object.entries(isObject(rawOption.choices) ? rawOption.choices : {})) {
        if (!isObject(rawChoice)) { problems.push(`${ow}.choices.${ck}: expected an object`); continue; }
        choices[ck] = { display_name: text(`${ow}.choices.${ck}.display_name`, rawChoice.display_name) || ck, default: rawChoice.default === true, kubespawner_override: overrideOf(`${ow}.choices.${ck}`, rawChoice.kubespawner_override) };
      }
      const keys = Object.keys(choices);
      if (keys.length && !keys.some((k) => choices[k].default)) choices[keys[0]].default = true;
      const u = isObject(rawOption.unlisted_choice) ? rawOption.unlisted_choice : {};
      const regex = text(`${ow}.unlisted_choice.validation_regex`, u.validation_regex);
      if (regex) {
        try { new RegExp(regex, 'u'); } catch (e) { problems.push(`${ow}.unlisted_choice.validation_regex: ${(e as Error).message}`); }
      }
      const unlisted = { enabled: u.enabled === true, display_name: text(`${ow}.unlisted_choice.display_name`, u.display_name), validation_regex: regex, validation_message: text(`${ow}.unlisted_choice.validation_message`, u.validation_message), kubespawner_override: overrideOf(`${ow}.unlisted_choice`, u.kubespawner_override) };
      if (!keys.length && !unlisted.enabled) problems.push(`${ow}: needs choices, or an enabled unlisted_choice`);
      options[key] = { display_name: text(`${ow}.display_name`, rawOption.display_name) || key, choices, unlisted_choice: unlisted };
    }
    profiles.push({
      slug, display_name: display, description: text(`${label}.description`, raw.description), default: raw.default === true,
      kubespawner_override: overrideOf(label, raw.kubespawner_override), profile_options: options,
    });
  });
  if (profiles.length && !profiles.some((p) => p.default)) profiles[0].default = true;
  return { profiles, problems };
}

/** `{value}` in every string of an unlisted choice's override, as KubeSpawner's recursive_format puts the value there. */
function withValue(v: unknown, value: string): unknown {
  if (typeof v === 'string') return v.replaceAll('{value}', value);
  if (Array.isArray(v)) return v.map((x) => withValue(x, value));
  if (isObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, withValue(x, value)]));
  return v;
}

/**
 * The overrides a start's user_options choose within a profile, in the order KubeSpawner applies them (the options
 * in their order; for each the chosen choice, the free-form value, or the default). A choice the profile does not
 * offer, a free-form value where none is allowed or one that does not match its pattern: an Error saying which.
 */
export function profileOptionOverrides(profile: KubeProfile, userOptions: Record<string, unknown>): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const [key, option] of Object.entries(profile.profile_options)) {
    const unlisted = userOptions[`${key}--unlisted-choice`];
    const choice = userOptions[key];
    if (unlisted !== undefined && unlisted !== null && unlisted !== '') {
      if (typeof unlisted !== 'string') throw new Error(`user_options["${key}--unlisted-choice"] must be a string`);
      if (!option.unlisted_choice.enabled) throw new Error(`Profile '${profile.slug}' takes no free-form value for '${key}': choose one of ${Object.keys(option.choices).join(', ')}`);
      const re = option.unlisted_choice.validation_regex;
      // Python's re.match: anchored at the start only
      if (re && !new RegExp(re.startsWith('^') ? re : `^(?:${re})`, 'u').test(unlisted)) {
        throw new Error(`Invalid value for '${key}': ${option.unlisted_choice.validation_message || `must match ${re}`}`);
      }
      out.push(withValue(option.unlisted_choice.kubespawner_override, unlisted) as Record<string, unknown>);
    } else if (choice !== undefined && choice !== null && choice !== '') {
      if (typeof choice !== 'string' || !Object.hasOwn(option.choices, choice)) {
        throw new Error(`Invalid choice ${show(choice).slice(0, 64)} for '${key}' of profile '${profile.slug}': choose one of ${Object.keys(option.choices).join(', ') || '(none: give a free-form value)'}`);
      }
      out.push(option.choices[choice].kubespawner_override);
    } else {
      const dflt = Object.values(option.choices).find((c) => c.default);
      if (!dflt) throw new Error(`Profile '${profile.slug}' needs a value for '${key}' (user_options["${key}--unlisted-choice"])`);
      out.push(dflt.kubespawner_override);
    }
  }
  return out;
}

/** `section` with a kubespawner_override applied as KubeSpawner applies one: objects merged at every depth (null removes a key), anything else replaced. */
export function applyKubespawnerOverride(section: Record<string, unknown>, override: Record<string, unknown>): Record<string, unknown> {
  const out = { ...section };
  for (const [k, v] of Object.entries(override)) out[k] = isObject(v) && isObject(out[k]) ? mergedWith(out[k] as Record<string, unknown>, v) : v;
  return out;
}

/**
 * Every problem of a `KubeSpawner` section (as the config holds it, defaults filled), one line each naming the
 * option: what `kubeObjects` would refuse at a start. With a profile_list, each profile (and each choice of its
 * options) is checked as a start would use it; keys of kubespawner_override that are not options of the section
 * are left to the caller (they may be `Spawner` options).
 */
export function kubeSpawnerOptionProblems(section: Record<string, unknown>): string[] {
  const { profiles, problems } = kubeProfileList(section.profile_list ?? []);
  const check = (options: Record<string, unknown>, where: string) => {
    // each error names one option: that one back to its default, then again, so every problem is listed
    const tried = { ...options };
    for (let i = 0; i <= Object.keys(options).length; i++) {
      try {
        kubeObjects({ ...SAMPLE, options: tried });
        return;
      } catch (e) {
        const message = (e as Error).message;
        const line = where ? `${where}: ${message}` : message;
        if (!problems.includes(line)) problems.push(line);
        const key = /^KubeSpawner\.([a-z0-9_]+)/.exec(message)?.[1];
        if (!key || !Object.hasOwn(tried, key)) return;
        delete tried[key];
      }
    }
  };
  const own = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).filter(([k]) => Object.hasOwn(section, k)));
  if (!profiles.length) check(section, '');
  for (const p of profiles) {
    const base = applyKubespawnerOverride(section, own(p.kubespawner_override));
    const where = `${name('profile_list')} ${JSON.stringify(p.slug)}`;
    check(base, where);
    for (const [key, option] of Object.entries(p.profile_options)) {
      for (const [ck, c] of Object.entries(option.choices)) check(applyKubespawnerOverride(base, own(c.kubespawner_override)), `${where} (${key}: ${ck})`);
    }
  }
  return problems;
}

/**
 * The problems of one option's value alone (the others at their defaults), those naming it: for a value that comes
 * from outside the configuration (user_options through Spawner.apply_user_options), refused before a start.
 */
export function kubeOptionProblems(option: string, value: unknown): string[] {
  try {
    kubeObjects({ ...SAMPLE, options: { image: 'sample', [option]: value } });
    return [];
  } catch (e) {
    const message = (e as Error).message;
    return [`${name(option)}:`, `${name(option)}[`, `${name(option)} `].some((p) => message.startsWith(p)) ? [message] : [];
  }
}

/** A user with nothing to escape: templates that suit the hub's names pass (names with any character are tested apart). */
const SAMPLE: KubeObjectsInput = {
  username: 'sample-user', servername: '', id: 'sample', hubId: 'sample', cmd: [], env: {}, port: 8888,
  limits: { memBytes: null, cpu: null }, notebookDir: '', options: {},
};
