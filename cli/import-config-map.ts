// How `hub import-config` turns what an established hub's jupyterhub_config.py set (as cli/import-config.py loaded
// it) into this hub's config. COMPATIBILITY.md decides: a ✗ row is not carried (its third column is the reason), a
// ✓ row is copied under the same name, a ≈ row is renamed to the option its third column starts with. TRANSFORMS
// below holds only the ≈ rows whose values change form on the way, and what the established hub did by default
// that this hub must be told. Python callables are never carried: each is listed with its line, to port by hand.
import { SCHEMA, ConfigError, startOption, validateConfig, type OptionSpec } from '../shared/config.js';
import { compatibility, type Compatibility, type OptionRow } from './compatibility.js';

export const TAG = '__hub_import__';

interface Where { file: string; line: number }
interface PyCallable { [TAG]: 'callable'; name: string; defined: Where | null }
interface PyClass { [TAG]: 'class'; name: string; mro: string[]; placeholder: boolean; members?: { name: string; line: number }[]; defined?: Where }

/** What cli/import-config.py wrote: every option the file set, as JSON with tagged Python values. */
export interface Loaded {
  file: string;
  jupyterhub: string;
  sections: Record<string, Record<string, unknown>>;
  lines: Record<string, number[]>;
}

export interface ImportReport {
  source: string;
  /** options carried over, with the options of this hub they became */
  mapped: { option: string; line?: number; to: string[]; note?: string }[];
  /** what the established hub does by default and this hub must be told */
  defaults: { to: string; value: unknown; why: string }[];
  /** options not carried, each with why (COMPATIBILITY.md's words where it has them) */
  unmapped: { option: string; line?: number; why: string }[];
  /** what differs without the file saying anything, for the operator to decide */
  notes: string[];
  /** Python the file gave the established hub to run: to port by hand */
  callables: { option: string; name: string; line?: number; defined?: Where; why: string }[];
}

export type HubConfigInput = Record<string, Record<string, unknown>>;

/** The file names a class this hub has no backend for: nothing is written. */
export class UnknownClassError extends Error {
  override name = 'UnknownClassError';
}

// ---- classes -------------------------------------------------------------------------------------------------

type Kind = 'spawner' | 'authenticator';

/** JupyterHub's entry-point names (and its companions') → the class they load. */
const ENTRY_POINTS: Record<Kind, Record<string, string>> = {
  authenticator: {
    default: 'jupyterhub.auth.PAMAuthenticator', pam: 'jupyterhub.auth.PAMAuthenticator', dummy: 'jupyterhub.auth.DummyAuthenticator',
    'shared-password': 'jupyterhub.authenticators.shared.SharedPasswordAuthenticator', null: 'jupyterhub.auth.NullAuthenticator',
    ldapauthenticator: 'ldapauthenticator.LDAPAuthenticator',
    ...Object.fromEntries(Object.entries({
      auth0: 'Auth0OAuthenticator', azuread: 'AzureAdOAuthenticator', bitbucket: 'BitbucketOAuthenticator', cilogon: 'CILogonOAuthenticator',
      generic: 'GenericOAuthenticator', github: 'GitHubOAuthenticator', gitlab: 'GitLabOAuthenticator', globus: 'GlobusOAuthenticator',
      google: 'GoogleOAuthenticator', mediawiki: 'MWOAuthenticator', okpy: 'OkpyOAuthenticator', openshift: 'OpenShiftOAuthenticator',
    }).flatMap(([p, cls]) => [[p, `oauthenticator.${p}.${cls}`], [`${p}-oauth`, `oauthenticator.${p}.${cls}`]])),
  },
  spawner: {
    default: 'jupyterhub.spawner.LocalProcessSpawner', localprocess: 'jupyterhub.spawner.LocalProcessSpawner',
    simple: 'jupyterhub.spawner.SimpleLocalProcessSpawner', docker: 'dockerspawner.DockerSpawner',
    'docker-swarm': 'dockerspawner.SwarmSpawner', 'docker-system-user': 'dockerspawner.SystemUserSpawner', kubespawner: 'kubespawner.KubeSpawner',
  },
};

/** The class each of this hub's backends stands in for (a subclass maps to its nearest one). */
const BACKEND_OF: Record<Kind, Record<string, string>> = {
  authenticator: { PAMAuthenticator: 'pam', DummyAuthenticator: 'dummy', SharedPasswordAuthenticator: 'shared-password', LDAPAuthenticator: 'ldap', OAuthenticator: 'oauth' },
  spawner: { SimpleLocalProcessSpawner: 'simple', LocalProcessSpawner: 'localprocess', DockerSpawner: 'docker', SlurmSpawner: 'slurm', KubeSpawner: 'kubernetes' },
};

/** Where a config section's options come from when the class does not define them (traitlets' inheritance). */
const PARENTS: Record<string, string[]> = {
  JupyterHub: ['Application'],
  LocalAuthenticator: ['Authenticator'], PAMAuthenticator: ['LocalAuthenticator', 'Authenticator'],
  OAuthenticator: ['Authenticator'], LDAPAuthenticator: ['Authenticator'],
  LocalProcessSpawner: ['Spawner'], SimpleLocalProcessSpawner: ['LocalProcessSpawner', 'Spawner'],
  SwarmSpawner: ['DockerSpawner', 'Spawner'], SystemUserSpawner: ['DockerSpawner', 'Spawner'],
  // batchspawner's options are read as SlurmSpawner's: this hub's only batch backend
  BatchSpawnerBase: ['SlurmSpawner', 'Spawner'], SlurmSpawner: ['BatchSpawnerBase', 'Spawner'],
  ConfigurableHTTPProxy: ['Proxy'],
};

const simpleName = (dotted: string) => dotted.slice(dotted.lastIndexOf('.') + 1);

function parentsOf(section: string, extra: Map<string, string[]>): string[] {
  const known = extra.get(section) ?? PARENTS[section];
  if (known) return known;
  if (/OAuthenticator$/.test(section)) return ['OAuthenticator', 'Authenticator']; // GitHubOAuthenticator, LocalGenericOAuthenticator, ...
  if (/Authenticator$/.test(section)) return ['Authenticator'];
  if (/Spawner$/.test(section)) return ['Spawner'];
  return [];
}

/** A section and every class it inherits options from, nearest first (a class written in the file on a companion's placeholder reaches Spawner through it). */
function lineageOf(section: string, extra: Map<string, string[]>): string[] {
  const out = [section];
  for (let i = 0; i < out.length && i < 50; i++) for (const p of parentsOf(out[i], extra)) if (!out.includes(p)) out.push(p);
  return out;
}

interface Chosen {
  backend: string;
  /** the chosen class's own name and every class it inherits options from */
  lineage: string[];
  /** how the file named it */
  named: string;
  pyClass?: PyClass;
}

function isTagged<K extends string>(v: unknown, kind: K): v is { [TAG]: K } & Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && (v as Record<string, unknown>)[TAG] === kind;
}

/** Which of this hub's backends stands in for the class a file chose; an unknown class is an UnknownClassError. */
function chooseBackend(kind: Kind, value: unknown, where: string, compat: Compatibility, extra: Map<string, string[]>): Chosen {
  const names = Object.keys(BACKEND_OF[kind]);
  const offered = `this hub's ${kind}s stand in for ${names.join(', ')} (or a subclass of one written in the config file)`;
  let dotted: string;
  let mro: string[];
  let pyClass: PyClass | undefined;
  if (typeof value === 'string') {
    dotted = ENTRY_POINTS[kind][value] ?? value;
    if (!dotted.includes('.')) throw new UnknownClassError(`${where}: ${JSON.stringify(value)} is neither a class nor a ${kind} name JupyterHub knows; ${offered}`);
    mro = [dotted];
  } else if (isTagged(value, 'class')) {
    pyClass = value as unknown as PyClass;
    dotted = pyClass.name;
    mro = pyClass.mro;
  } else {
    throw new UnknownClassError(`${where}: expected a class or its name, got ${JSON.stringify(value)?.slice(0, 80)}`);
  }
  const own = simpleName(dotted);
  const named = typeof value === 'string' ? value : own;
  for (const cls of mro.map(simpleName)) {
    const backend = BACKEND_OF[kind][cls];
    if (backend) return { backend, lineage: [...new Set([...mro.map(simpleName), ...lineageOf(cls, extra)])], named, pyClass };
    const refused = compat.classes.find((row) => row.mark === '✗' && new RegExp(`\\b${cls}\\b`).test(row.classes));
    if (refused) throw new UnknownClassError(`${where}: ${dotted} is not supported here: ${refused.note} (COMPATIBILITY.md)`);
    // a class known only by name: its place in the hierarchy says which backend it is (GitHubOAuthenticator)
    if (cls === own && (dotted.startsWith('oauthenticator.') || dotted.startsWith('dockerspawner.') || dotted.startsWith('jupyterhub.'))) {
      const parent = parentsOf(cls, extra).find((p) => BACKEND_OF[kind][p]);
      if (parent) return { backend: BACKEND_OF[kind][parent], lineage: lineageOf(cls, extra), named, pyClass };
    }
  }
  throw new UnknownClassError(`${where}: ${dotted} is not a class this hub knows; ${offered}`);
}

// ---- values --------------------------------------------------------------------------------------------------

/** The callables anywhere in a value, taken out (with where they were); what is left is plain data. */
function takeCallables(value: unknown, path: string, found: { path: string; callable: PyCallable }[]): unknown {
  if (isTagged(value, 'callable')) {
    found.push({ path, callable: value as unknown as PyCallable });
    return undefined;
  }
  if (Array.isArray(value)) return value.map((v, i) => takeCallables(v, `${path}[${i}]`, found)).filter((v) => v !== undefined);
  if (typeof value === 'object' && value !== null && !(TAG in value)) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const kept = takeCallables(v, `${path}[${JSON.stringify(k)}]`, found);
      if (kept !== undefined) out[k] = kept;
    }
    return out;
  }
  return value;
}

/** A Python value JSON has no word for, anywhere in a value (a class, bytes, an object): its description. */
function pythonOnly(value: unknown): string | undefined {
  if (isTagged(value, 'class')) return `the class ${(value as unknown as PyClass).name}`;
  if (isTagged(value, 'bytes')) return 'bytes';
  if (isTagged(value, 'python')) return `the Python value ${String(value.repr)}`;
  if (Array.isArray(value)) return value.map(pythonOnly).find(Boolean);
  if (typeof value === 'object' && value !== null) return Object.values(value).map(pythonOnly).find(Boolean);
  return undefined;
}

const schemaSpec = (target: string): OptionSpec | undefined => {
  const [section, option] = target.split('.');
  return (SCHEMA as unknown as Record<string, Record<string, OptionSpec>>)[section]?.[option];
};

/** A value as this hub's option takes it, where traitlets took another form of it (a str for a list, 3.0 for 3). */
function coerce(target: string, value: unknown): unknown {
  const spec = schemaSpec(target);
  if (spec?.kind === 'string-list' && typeof value === 'string') return [value];
  if (spec?.kind === 'integer' && typeof value === 'number' && Number.isInteger(value)) return value;
  return value;
}

// ---- the ≈ rows whose values change form ---------------------------------------------------------------------

interface Tools {
  /** the option of this hub the established option's value (or a value made from it) goes to */
  set(target: string, value: unknown): void;
  /** items added to a list option of this hub (several established options fill it) */
  add(target: string, items: unknown[]): void;
  /** said beside the mapping */
  note(text: string): void;
  /** not carried: why */
  skip(why: string): void;
  /** another option the file set (raw), by the established hub's name */
  other(section: string, option: string): unknown;
  spawner: string;
  authenticator: string;
}

type Transform = (value: any, t: Tools) => void;

const urlOf = (v: unknown): URL | undefined => {
  try {
    return new URL(String(v));
  } catch {
    return undefined;
  }
};

/** Python's log levels (numbers or names) → pino's. */
const LOG_LEVELS: Record<string, string> = { 10: 'debug', 20: 'info', 30: 'warn', 40: 'error', 50: 'fatal', DEBUG: 'debug', INFO: 'info', WARN: 'warn', WARNING: 'warn', ERROR: 'error', CRITICAL: 'fatal' };

/** The established hub's own address for servers (its internal API, port 8081) becomes this hub's gateway there. */
function hubConnect(url: string, t: Tools, fromIp = false) {
  const host = fromIp ? url : urlOf(url)?.hostname;
  if (!host) return t.skip(`${JSON.stringify(url)} is not a URL`);
  const port = Number(t.other('JupyterHub', 'port')) || Number(/:(\d+)/.exec(String(t.other('JupyterHub', 'bind_url') ?? ''))?.[1]) || 8000;
  const base = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  if (t.spawner === 'docker') t.set('DockerSpawner.hub_connect_url', base);
  else if (t.spawner === 'slurm') t.set('SlurmSpawner.hub_api_url', `${base}/hub/api`);
  else if (t.spawner === 'kubernetes') t.set('KubeSpawner.hub_connect_url', base);
  else return t.skip(`servers of the "${t.spawner}" backend reach the hub at its own address; nothing to set`);
  t.note(`the host kept, the port made this hub's (${port}): there is no separate hub API port here`);
}

const SERVICE_KEYS = new Set(['name', 'admin', 'url', 'api_token', 'display', 'oauth_no_confirm', 'environment', 'user', 'cwd', 'info', 'oauth_client_id', 'oauth_redirect_uri', 'oauth_client_allowed_scopes', 'oauth_roles', 'command', 'timeout']);

function services(list: unknown, tokens: Record<string, string>, t: Tools) {
  const out = (Array.isArray(list) ? list : []).map((svc) => ({ ...(svc as Record<string, unknown>) }));
  for (const [token, name] of Object.entries(tokens)) {
    const svc = out.find((s) => s.name === name);
    if (svc) svc.api_token ??= token;
    else out.push({ name, api_token: token });
  }
  const dropped = new Set<string>();
  for (const svc of out) for (const key of Object.keys(svc)) if (!SERVICE_KEYS.has(key)) { dropped.add(key); delete svc[key]; }
  if (dropped.size) t.note(`left out of each service: ${[...dropped].join(', ')} (no such key here)`);
  t.set('Hub.services', out);
}

const TRANSFORMS: Record<string, Transform> = {
  'JupyterHub.bind_url': (v: string, t) => {
    // a unix socket ("http+unix://%2F…", or the older "unix+http://"): the same option here, its path as Hub.base_url
    const unix = /^(?:http\+unix|unix\+http):\/\/[^/?#]+(\/[^?#]*)?$/.exec(v);
    if (unix) {
      t.set('Hub.bind_url', v);
      if (unix[1] && unix[1] !== '/') t.set('Hub.base_url', unix[1]);
      return;
    }
    const url = urlOf(v);
    if (!url) return t.skip(`${JSON.stringify(v)} is not a URL`);
    const host = url.hostname.replace(/^\[|\]$/g, '');
    t.set('Hub.ip', host === '' ? '0.0.0.0' : host);
    t.set('Hub.port', Number(url.port) || (url.protocol === 'https:' ? 443 : 80));
    if (url.pathname !== '/') {
      if (schemaSpec('Hub.base_url')) t.set('Hub.base_url', url.pathname);
      else t.note(`its path ${url.pathname} is not carried: ${compatibility().options.get('JupyterHub.base_url')?.note ?? 'no base_url'}`);
    }
    if (url.protocol === 'https:') t.note('https: the gateway speaks HTTPS with Hub.ssl_cert and Hub.ssl_key (carried from JupyterHub.ssl_cert/ssl_key when the file sets them) or Hub.letsencrypt_domains; else terminate TLS in front of it');
  },
  // an integer there (0o600); an octal string here, for the gateway's unix socket (Hub.bind_url)
  'JupyterHub.hub_socket_mode': (v: number, t) => (Number.isInteger(v) && v >= 0 && v <= 0o777 ? t.set('Hub.hub_socket_mode', `0${v.toString(8).padStart(3, '0')}`) : t.skip(`${JSON.stringify(v)} is not a file mode`)),
  'JupyterHub.cookie_secret': (v, t) => {
    const hex = isTagged(v, 'bytes') ? String(v.hex) : typeof v === 'string' ? v : '';
    if (/^[0-9a-fA-F]{64}$/.test(hex)) t.set('Hub.cookie_secret', hex);
    else t.skip('not 32 bytes (64 hex characters): this hub makes its own, and everyone signs in again');
  },
  'JupyterHub.hub_connect_url': (v: string, t) => hubConnect(v, t),
  'JupyterHub.hub_connect_ip': (v: string, t) => hubConnect(v, t, true),
  'Spawner.hub_connect_url': (v: string, t) => hubConnect(v, t),
  'DockerSpawner.hub_connect_url': (v: string, t) => hubConnect(v, t),
  'KubeSpawner.hub_connect_url': (v: string, t) => hubConnect(v, t),
  'JupyterHub.services': (v, t) => services(v, (t.other('JupyterHub', 'service_tokens') ?? {}) as Record<string, string>, t),
  'JupyterHub.service_tokens': (v: Record<string, string>, t) => {
    if (t.other('JupyterHub', 'services') !== undefined) return t.note('merged into Hub.services (each service\'s api_token)');
    services([], v, t);
  },
  'JupyterHub.tornado_settings': (v: Record<string, unknown>, t) => {
    const left: string[] = [];
    for (const [key, value] of Object.entries(v ?? {})) {
      if (key === 'headers') t.set('Hub.extra_headers', value);
      else if (key === 'slow_spawn_timeout' || key === 'slow_stop_timeout') t.set(`Spawner.${key}`, value);
      else left.push(key);
    }
    if (left.length) t.note(`not carried: ${left.join(', ')} (only headers, slow_spawn_timeout and slow_stop_timeout have a place here)`);
  },
  'JupyterHub.db_url': (v: string, t) => {
    const url = String(v);
    if (/^sqlite:/.test(url)) {
      t.set('Hub.db_url', 'sqlite');
      t.note(`this hub's own SQLite files in Hub.data_dir; bring the established hub's users, groups and tokens over once with \`hub import jupyterhub --db ${url}\` (a relative path from the established hub's folder)`);
    } else if (/^postgres(?:ql)?(?:\+\w+)?:\/\//.test(url)) t.set('Hub.db_url', url.replace(/^postgres(?:ql)?(?:\+\w+)?:/, 'postgresql:'));
    else t.skip(`${url.split(':')[0]}: ${compatibility().options.get('JupyterHub.db_url')?.note.match(/Not MySQL\./)?.[0] ?? 'not a database this hub uses'} (SQLite or PostgreSQL)`);
  },
  'JupyterHub.config_file': (_v, t) => t.skip('give this file with `--config FILE` or HUB_CONFIG'),
  'JupyterHub.use_legacy_stopped_server_status_code': (v, t) => t.skip(v ? 'nothing to set: this hub always gives the legacy answer' : 'this hub always gives the legacy answer (503): clients expecting 424 must be told'),
  'Application.log_level': (v, t) => {
    const level = LOG_LEVELS[String(v).toUpperCase()];
    if (level) t.set('Hub.log_level', level);
    else t.skip(`${JSON.stringify(v)} is not a level this hub knows`);
  },
  'Application.log_format': (_v, t) => t.skip('a Python format string; Hub.log_format chooses "pretty", "json" or "auto"'),
  'Spawner.auth_state_hook': (_v, t) => t.skip('Authenticator.auth_state_environment names auth state fields for environment variables instead'),
  'LocalProcessSpawner.interrupt_timeout': (v: number, t) => t.set('Spawner.stop_signal_timeout', Math.max(v, Number(t.other('LocalProcessSpawner', 'term_timeout') ?? 0))),
  'LocalProcessSpawner.term_timeout': (v: number, t) => t.set('Spawner.stop_signal_timeout', Math.max(v, Number(t.other('LocalProcessSpawner', 'interrupt_timeout') ?? 0))),
  'OAuthenticator.auth_state_groups_key': (v, t) => {
    if (typeof v !== 'string') return t.skip('not a dotted path');
    t.set('OAuthenticator.auth_state_groups_key', v.replace(/^oauth_user\./, ''));
    if (v.startsWith('oauth_user.')) t.note('"oauth_user." dropped: the path here is into the claims and user info');
  },
  'OAuthenticator.oauth_callback_url': (v: string, t) => {
    const url = urlOf(v);
    if (!url) return t.skip(`${JSON.stringify(v)} is not a URL`);
    const baseUrl = String(t.other('JupyterHub', 'base_url') ?? '/').replace(/^\/*/, '/').replace(/\/*$/, '/');
    const fixed = `${url.origin}${baseUrl}hub/oauth_callback`;
    if (url.pathname !== `${baseUrl}hub/oauth_callback`) t.note(`register ${fixed} with the provider: the callback is fixed here`);
    if (t.other('JupyterHub', 'public_url') !== undefined) return t.note('the callback is fixed here, under Hub.public_url');
    t.set('Hub.public_url', url.origin);
    t.note('the callback is fixed here, under Hub.public_url: set to its origin');
  },
  'OAuthenticator.basic_auth': (v, t) => t.set('OAuthenticator.token_endpoint_auth_method', v ? 'client_secret_basic' : 'client_secret_post'),
  'LDAPAuthenticator.bind_dn_template': (v, t) => t.set('LDAPAuthenticator.bind_dn_template', typeof v === 'string' ? [v] : v),
  'LDAPAuthenticator.tls_kwargs': (v: Record<string, unknown>, t) => {
    const out: Record<string, unknown> = {};
    const ca = v.ca_certs_file ?? v.ca_certs_path;
    if (typeof ca === 'string') out.ca_certs_file = ca;
    if (v.validate !== undefined) out.validate = v.validate === 0 || v.validate === 'CERT_NONE' ? 'CERT_NONE' : 'CERT_REQUIRED';
    const left = Object.keys(v).filter((k) => !['ca_certs_file', 'ca_certs_path', 'validate'].includes(k));
    if (left.length) t.note(`not carried: ${left.join(', ')}`);
    t.set('LDAPAuthenticator.tls_kwargs', out);
  },
  'LDAPAuthenticator.group_attributes': (_v, t) => t.skip(compatibility().options.get('LDAPAuthenticator.group_attributes')?.note ?? 'another meaning here'),
  'DockerSpawner.volumes': (v: Record<string, unknown>, t) => t.set('DockerSpawner.volumes', { ...(t.other('DockerSpawner', 'read_only_volumes') as Record<string, string> ?? {}), ...dockerVolumes(v, t) }),
  'DockerSpawner.read_only_volumes': (v: Record<string, string>, t) => {
    if (t.other('DockerSpawner', 'volumes') !== undefined) return t.note('merged into DockerSpawner.volumes with ":ro"');
    t.set('DockerSpawner.volumes', Object.fromEntries(Object.entries(v).map(([host, path]) => [host, `${path}:ro`])));
  },
  'DockerSpawner.cmd': (v, t) => t.set('Spawner.cmd', typeof v === 'string' ? [v] : v),
  'DockerSpawner.client_kwargs': (v: Record<string, unknown>, t) => {
    if (typeof v.base_url === 'string') t.set('DockerSpawner.host', v.base_url);
    else t.skip('only base_url has a place here (DockerSpawner.host)');
  },
  'SlurmSpawner.req_nprocs': (v, t) => t.set('SlurmSpawner.req_nprocs', Number(v)),
  'SlurmSpawner.req_options': (v, t) => t.add('SlurmSpawner.req_options', typeof v === 'string' ? v.split(/\s+/).filter(Boolean) : v),
  'SlurmSpawner.batch_script': (_v, t) => t.skip(`${compatibility().options.get('SlurmSpawner.batch_script')?.note}: rewrite it by hand`),
  ...Object.fromEntries(['qos', 'gres', 'reservation', 'account', 'cluster'].map((name) => [`SlurmSpawner.req_${name}`, (v: unknown, t: Tools) => {
    if (v === '' || v === null) return t.skip('empty');
    t.add('SlurmSpawner.req_options', [`--${name}=${v}`]);
  }])),
  'KubeSpawner.profile_list': (v, t) => {
    const dropped = new Map<string, string>();
    t.set('KubeSpawner.profile_list', profileList(v, dropped));
    for (const [key, why] of dropped) t.note(`kubespawner_override ${JSON.stringify(key)} left out of every profile: ${why}`);
  },
  'KubeSpawner.events_enabled': (v, t) => {
    const always = compatibility().options.get('KubeSpawner.events_enabled')?.note ?? 'always on';
    if (v === false) t.skip(`cannot be turned off: ${always}`);
    else t.note(always);
  },
};

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Why a kubespawner_override key cannot be one here (COMPATIBILITY.md's reason where it has one), or undefined when it can. */
function overrideKeyProblem(key: string): string | undefined {
  if (Object.hasOwn(SCHEMA.KubeSpawner, key)) return undefined;
  const target = startOption(key);
  if (typeof target !== 'string' && target.section === 'Spawner') return undefined;
  const row = compatibility().options.get(`KubeSpawner.${key}`) ?? compatibility().options.get(`Spawner.${key}`);
  return row?.mark === '✗' ? row.note : typeof target === 'string' ? target : `${target.section}.${key} is no option of KubeSpawner or Spawner`;
}

/**
 * KubeSpawner's profile_list (a list, or an object of profiles) with every kubespawner_override (the profile's, its
 * profile_options' choices' and unlisted choices') keeping only keys this hub's starts can set; the others in `dropped`.
 */
function profileList(value: unknown, dropped: Map<string, string>): unknown {
  const override = (o: unknown) => {
    if (!isPlainObject(o)) return o;
    return Object.fromEntries(Object.entries(o).filter(([key]) => {
      const why = overrideKeyProblem(key);
      if (why) dropped.set(key, why);
      return !why;
    }));
  };
  const mapValues = (o: unknown, f: (x: unknown) => unknown) => (isPlainObject(o) ? Object.fromEntries(Object.entries(o).map(([k, x]) => [k, f(x)])) : o);
  const withOverride = (o: unknown) => (isPlainObject(o) && 'kubespawner_override' in o ? { ...o, kubespawner_override: override(o.kubespawner_override) } : o);
  const option = (o: unknown) => (isPlainObject(o) ? { ...o, ...('choices' in o ? { choices: mapValues(o.choices, withOverride) } : {}), ...('unlisted_choice' in o ? { unlisted_choice: withOverride(o.unlisted_choice) } : {}) } : o);
  const profile = (p: unknown) => {
    const out = withOverride(p);
    return isPlainObject(out) && 'profile_options' in out ? { ...out, profile_options: mapValues(out.profile_options, option) } : out;
  };
  return Array.isArray(value) ? value.map(profile) : mapValues(value, profile);
}

/** dockerspawner's {host: container} or {host: {bind, mode}} → strings with ":ro". */
function dockerVolumes(v: Record<string, unknown>, t: Tools): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [host, target] of Object.entries(v ?? {})) {
    if (typeof target === 'string') out[host] = target;
    else if (typeof target === 'object' && target !== null && typeof (target as any).bind === 'string') out[host] = `${(target as any).bind}${(target as any).mode === 'ro' ? ':ro' : ''}`;
    else t.note(`volume ${host} left out (not a path)`);
  }
  return out;
}

// ---- what the established hub does without being told ---------------------------------------------------------

interface Default { to: string; value: unknown; why: string; when: (c: HubConfigInput, chosen: { spawner: string; authenticator: string }) => boolean }

const unset = (c: HubConfigInput, target: string) => { const [s, o] = target.split('.'); return c[s]?.[o] === undefined; };

const DEFAULTS: Default[] = [
  { to: 'Hub.env_prefix_aliases', value: ['JUPYTERHUB_'], why: 'servers and services made for the established hub read JUPYTERHUB_* variables', when: (c) => unset(c, 'Hub.env_prefix_aliases') },
  { to: 'Spawner.cmd', value: ['jupyterhub-singleuser'], why: 'the established hub\'s servers (this hub\'s default is its own small server)', when: (c, k) => k.spawner !== 'docker' && k.spawner !== 'kubernetes' && unset(c, 'Spawner.cmd') },
  { to: 'DockerSpawner.cmd_from_image', value: true, why: 'DockerSpawner runs the image\'s own command unless told otherwise', when: (c, k) => k.spawner === 'docker' && unset(c, 'Spawner.cmd') },
  { to: 'DockerSpawner.image', value: 'quay.io/jupyterhub/singleuser:latest', why: 'DockerSpawner\'s default image (this hub has none)', when: (c, k) => k.spawner === 'docker' && unset(c, 'DockerSpawner.image') },
  { to: 'DockerSpawner.remove', value: false, why: 'DockerSpawner keeps stopped containers by default', when: (c, k) => k.spawner === 'docker' && unset(c, 'DockerSpawner.remove') },
  { to: 'KubeSpawner.cmd', value: [], why: 'KubeSpawner runs the image\'s own command unless told otherwise (cmd None)', when: (c, k) => k.spawner === 'kubernetes' && unset(c, 'Spawner.cmd') && unset(c, 'KubeSpawner.cmd') },
  { to: 'KubeSpawner.image', value: 'quay.io/jupyterhub/singleuser:latest', why: 'KubeSpawner\'s default image (this hub has none)', when: (c, k) => k.spawner === 'kubernetes' && unset(c, 'KubeSpawner.image') },
  { to: 'LDAPAuthenticator.use_lookup_dn_username', value: false, why: 'ldapauthenticator 2\'s default', when: (c, k) => k.authenticator === 'ldap' && unset(c, 'LDAPAuthenticator.use_lookup_dn_username') },
];

// ---- the mapping ---------------------------------------------------------------------------------------------

/** The options whose values change form on the way (TRANSFORMS' keys), for the test that holds them to COMPATIBILITY.md. */
export const TRANSFORMED_OPTIONS = () => Object.keys(TRANSFORMS);

/** Leading `Section.option` names of a ≈ row's note that are options of this hub: the row's targets, in order. */
function targetsOf(row: OptionRow): string[] {
  const lead = /^(?:`[A-Za-z]+\.[a-z0-9_]+`(?:[,;]? (?:and )?)?)+/.exec(row.note)?.[0] ?? '';
  return [...lead.matchAll(/`([^`]+)`/g)].map((m) => m[1]).filter((t) => schemaSpec(t));
}

/** This hub's section for an established class's options (JupyterHub's live in Hub). */
const ourSection = (cls: string) => (cls === 'JupyterHub' || cls === 'Application' ? 'Hub' : cls);

export type Plan = { how: 'transform' } | { how: 'copy' | 'rename' | 'same name'; target: string } | { how: 'not carried'; why: string };

/** What becomes of a COMPATIBILITY.md row's option: the one decision per option, read by the importer and its test. */
export function planFor(row: OptionRow): Plan {
  if (row.mark === '✗') return { how: 'not carried', why: row.note };
  if (TRANSFORMS[row.key]) return { how: 'transform' };
  const [cls, option] = row.key.split('.');
  const sameName = `${ourSection(cls)}.${option}`;
  if (row.mark === '✓') return { how: 'copy', target: sameName };
  const targets = targetsOf(row);
  // one target per option of the row, in order ("`a`, `b` | ≈ | `Hub.a`, `Hub.b`"), or the row's only one
  const target = targets.length === row.row.length ? targets[row.row.indexOf(row.key)] : targets.length === 1 && row.row.length === 1 ? targets[0] : undefined;
  if (target) return { how: 'rename', target };
  if (schemaSpec(sameName)) return { how: 'same name', target: sameName };
  return { how: 'not carried', why: `supported another way: ${row.note}` };
}

export function mapConfig(loaded: Loaded, compat: Compatibility = compatibility()): { config: HubConfigInput; report: ImportReport } {
  const report: ImportReport = { source: loaded.file, mapped: [], defaults: [], unmapped: [], notes: [], callables: [] };
  const lineOf = (key: string) => loaded.lines[key]?.at(-1);
  const raw = (section: string, option: string) => loaded.sections[section]?.[option];

  // classes written in the file: their own code is listed, and their options inherit as Python says
  const extra = new Map<string, string[]>();
  const classes: { option: string; cls: PyClass }[] = [];
  for (const [section, options] of Object.entries(loaded.sections)) {
    for (const [option, value] of Object.entries(options)) {
      if (!isTagged(value, 'class')) continue;
      const cls = value as unknown as PyClass;
      classes.push({ option: `${section}.${option}`, cls });
      if (!cls.placeholder) extra.set(simpleName(cls.name), cls.mro.slice(1).map(simpleName));
    }
  }
  const spawnerClass = raw('JupyterHub', 'spawner_class');
  const authClass = raw('JupyterHub', 'authenticator_class');
  const classLine = (kind: string) => { const l = lineOf(`JupyterHub.${kind}_class`); return `JupyterHub.${kind}_class${l ? ` (line ${l})` : ''}`; };
  const spawner = chooseBackend('spawner', spawnerClass ?? 'default', classLine('spawner'), compat, extra);
  const authenticator = chooseBackend('authenticator', authClass ?? 'default', classLine('authenticator'), compat, extra);

  const config: HubConfigInput = {};
  const sources = new Map<string, Set<string>>(); // target → the established options it came from
  const put = (from: string, target: string, value: unknown) => {
    const [s, o] = target.split('.');
    (config[s] ??= {})[o] = value;
    if (!sources.has(target)) sources.set(target, new Set());
    sources.get(target)!.add(from);
  };
  put('JupyterHub.spawner_class', 'Hub.spawner_class', spawner.backend);
  put('JupyterHub.authenticator_class', 'Hub.authenticator_class', authenticator.backend);
  for (const [kind, chosen, value] of [['spawner', spawner, spawnerClass], ['authenticator', authenticator, authClass]] as const) {
    const option = `JupyterHub.${kind}_class`;
    if (value === undefined) report.defaults.push({ to: `Hub.${kind}_class`, value: chosen.backend, why: `the established hub's default, ${kind === 'spawner' ? 'LocalProcessSpawner' : 'PAMAuthenticator'} (this hub's default is "${kind === 'spawner' ? 'simple' : 'password'}")` });
    else report.mapped.push({ option, line: lineOf(option), to: [`Hub.${kind}_class`], note: `${chosen.named} → "${chosen.backend}"` });
  }
  for (const { option, cls } of classes) {
    const why = `a method of ${simpleName(cls.name)}, a class written in the config file (${option}): this hub runs no Python`;
    for (const m of cls.members ?? []) report.callables.push({ option: `${simpleName(cls.name)}.${m.name}`, name: m.name, line: lineOf(option), defined: { file: loaded.file, line: m.line }, why });
  }

  for (const [section, options] of Object.entries(loaded.sections)) {
    for (const [option, value] of Object.entries(options)) {
      const from = section ? `${section}.${option}` : option;
      const line = lineOf(from);
      if (from === 'JupyterHub.spawner_class' || from === 'JupyterHub.authenticator_class') continue;
      if (!section) {
        report.unmapped.push({ option: from, line, why: 'not an option: `c.X = ...` sets no class\'s option' });
        continue;
      }
      const lineage = lineageOf(section, extra);
      const row = lineage.map((cls) => compat.options.get(`${cls}.${option}`)).find(Boolean);
      const forClass = lineage.at(-1) === 'Spawner' ? spawner : lineage.at(-1) === 'Authenticator' ? authenticator : undefined;
      // c.DockerSpawner.x applies only when the spawner is a DockerSpawner (as traitlets applies it)
      if (forClass && !forClass.lineage.includes(section)) {
        report.unmapped.push({ option: from, line, why: `applies to ${section}, and the file's ${lineage.at(-1)!.toLowerCase()} is ${forClass.named}` });
        continue;
      }
      // Python the established hub would have run: listed, never carried
      const found: { path: string; callable: PyCallable }[] = [];
      const data = takeCallables(value, from, found);
      for (const { path, callable } of found) {
        const why = row?.mark === '✗' ? row.note : row ? `this hub takes no Python here${row.note ? `: ${row.note}` : ''}` : 'this hub runs no Python';
        report.callables.push({ option: path, name: callable.name, line, defined: callable.defined ?? undefined, why });
      }
      if (data === undefined) continue;
      if (!row) {
        report.unmapped.push({ option: from, line, why: `not in COMPATIBILITY.md: not an option of JupyterHub ${loaded.jupyterhub} or of the companions this hub stands in for` });
        continue;
      }
      if (row.mark === '✗') {
        report.unmapped.push({ option: from, line, why: row.note });
        continue;
      }
      if (data === null) {
        report.mapped.push({ option: from, line, to: [], note: 'None: this hub\'s default applies' });
        continue;
      }
      const python = row.key === 'JupyterHub.cookie_secret' ? undefined : pythonOnly(data); // bytes are its usual form
      if (python) {
        report.unmapped.push({ option: from, line, why: `holds ${python}, which has no form outside Python` });
        continue;
      }
      const to: string[] = [];
      const notes: string[] = found.length ? [`without its Python callables (listed below)`] : [];
      let skipped: string | undefined;
      const tools: Tools = {
        set: (target, v) => { put(from, target, coerce(target, v)); to.push(target); },
        add: (target, items) => {
          const [s, o] = target.split('.');
          tools.set(target, [...((config[s]?.[o] as unknown[] | undefined) ?? []), ...items]);
        },
        note: (text) => notes.push(text),
        skip: (why) => { skipped = why; },
        other: raw,
        spawner: spawner.backend,
        authenticator: authenticator.backend,
      };
      const plan = planFor(row);
      if (plan.how === 'transform') TRANSFORMS[row.key](data, tools);
      else if (plan.how === 'not carried') skipped = plan.why;
      else if (!schemaSpec(plan.target)) skipped = `COMPATIBILITY.md names ${plan.target}, which this hub does not have`;
      else {
        tools.set(plan.target, data);
        if (plan.how === 'same name' && row.note) notes.push(row.note); // ≈ under the same name: how it differs
      }
      if (skipped !== undefined && !to.length) report.unmapped.push({ option: from, line, why: skipped });
      else report.mapped.push({ option: from, line, to, ...(notes.length || skipped ? { note: [...notes, ...(skipped ? [skipped] : [])].join('; ') } : {}) });
    }
  }

  if (!config.Hub?.ip) {
    const servers = spawner.backend === 'kubernetes' ? 'pods' : spawner.backend === 'docker' ? 'containers' : '';
    report.notes.push(`the established hub listened on every interface; this hub listens on 127.0.0.1 unless Hub.ip says otherwise ("0.0.0.0" for every interface)${servers ? `: servers in ${servers} reach it only on an address they can reach` : ''}`);
  }
  for (const d of DEFAULTS) {
    if (!d.when(config, { spawner: spawner.backend, authenticator: authenticator.backend })) continue;
    put('(established default)', d.to, d.value);
    report.defaults.push({ to: d.to, value: d.value, why: d.why });
  }

  // what this hub refuses (a name its rules do not take, a header it sets itself) is left out, and said so
  for (let round = 0; round < 200; round++) {
    let problems: string[];
    try {
      validateConfig(config);
      break;
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      problems = e.problems;
    }
    let removed = false;
    for (const problem of problems) {
      const target = /^([A-Za-z]+)\.([a-z0-9_]+)/.exec(problem)?.slice(1, 3).join('.');
      if (!target || !sources.has(target)) continue;
      const [s, o] = target.split('.');
      if (config[s]?.[o] === undefined) continue;
      delete config[s][o];
      if (!Object.keys(config[s]).length) delete config[s];
      removed = true;
      for (const from of sources.get(target)!) {
        const i = report.mapped.findIndex((m) => m.option === from);
        const entry = i >= 0 ? report.mapped[i] : undefined;
        if (entry) {
          entry.to = entry.to.filter((t) => t !== target);
          if (!entry.to.length) report.mapped.splice(i, 1);
        }
        const d = report.defaults.findIndex((x) => x.to === target);
        if (d >= 0) report.defaults.splice(d, 1);
        if (from !== '(established default)') report.unmapped.push({ option: from, line: entry?.line ?? lineOf(from), why: `not accepted here: ${problem}` });
      }
    }
    if (!removed) throw new ConfigError(problems);
  }
  return { config, report };
}
