// Names and addresses for the container backend (`Hub.spawner_class: "docker"`), shared by the config's
// checks (shared/config.ts) and the backend (services/spawner/backends/docker.ts).
import { createHash } from 'node:crypto';

/** `DockerSpawner.host` as used: the option, else $DOCKER_HOST, else Docker's usual socket. */
export function engineHost(options: { host: string }): string {
  return options.host || process.env.DOCKER_HOST || 'unix:///var/run/docker.sock';
}

/** dockerode's connection options for a host URL, or why it is not one. */
export function connectionOf(host: string): { socketPath: string } | { host: string; port: number; protocol: 'http' | 'https' } | string {
  if (host.startsWith('unix://')) {
    const path = host.slice('unix://'.length);
    return path.startsWith('/') ? { socketPath: path } : `${host}: expected unix:///absolute/path/to/docker.sock`;
  }
  let u: URL;
  try {
    u = new URL(host);
  } catch {
    return `${JSON.stringify(host)}: expected unix:///path/to/docker.sock or tcp://host:port`;
  }
  if (!['tcp:', 'http:', 'https:'].includes(u.protocol) || !u.hostname) return `${JSON.stringify(host)}: expected unix:///path/to/docker.sock, tcp://host:port or https://host:port`;
  const tls = u.protocol === 'https:';
  return { host: u.hostname.replace(/^\[|\]$/g, ''), port: Number(u.port) || (tls ? 2376 : 2375), protocol: tls ? 'https' : 'http' };
}

/**
 * A user or server name as a piece of a container, volume or directory name: lowercase letters and
 * digits stay, '.' stays except in front, everything else becomes `_` + its UTF-8 bytes in hex (`-` too,
 * so the template's `--` separates user from server unambiguously) — one-to-one, so two names never
 * share a container or a volume, and never give `/`, `..` or a leading dot or dash.
 * Long results end in a hash to stay within the engine's and the filesystem's limits.
 */
export function safeName(s: string): string {
  let out = '';
  for (const ch of s) {
    if (/[a-z0-9]/.test(ch) || (out && ch === '.')) out += ch;
    else out += [...Buffer.from(ch, 'utf8')].map((b) => `_${b.toString(16).padStart(2, '0')}`).join('');
  }
  return out.length <= 63 ? out : `${out.slice(0, 52)}_${createHash('sha256').update(s).digest('hex').slice(0, 10)}`;
}

/** `{username}` and `{servername}` replaced by their safe forms. */
export function expandTemplate(template: string, user: string, server: string): string {
  return template.replaceAll('{username}', safeName(user)).replaceAll('{servername}', safeName(server));
}

export const VALID_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

/** The container's name; the default template's trailing `--` is dropped for a user's default server. */
export function containerName(template: string, user: string, server: string): string {
  const name = expandTemplate(template, user, server);
  return server ? name : name.replace(/-+$/, '');
}

/** Config-time checks of the section (shared/config.ts calls these through the schema). */
export function checkVolumes(volumes: Record<string, string>): string[] {
  return Object.entries(volumes).flatMap(([source, target]) => {
    const problems: string[] = [];
    const [path, mode, ...rest] = target.split(':');
    if (!path.startsWith('/') || rest.length || (mode !== undefined && mode !== 'ro' && mode !== 'rw')) {
      problems.push(`DockerSpawner.volumes[${JSON.stringify(source)}]: expected an absolute path in the container, optionally followed by ":ro" or ":rw", got ${JSON.stringify(target)}`);
    }
    if (!source.startsWith('/') && !VALID_NAME.test(expandTemplate(source, 'u', 's'))) {
      problems.push(`DockerSpawner.volumes: ${JSON.stringify(source)} is neither an absolute host path nor a volume name (letters, digits, "_", "." and "-", with {username} and {servername})`);
    }
    return problems;
  });
}

export function checkNameTemplate(template: string): string[] {
  const sample = containerName(template, 'u', 's');
  return VALID_NAME.test(sample) && template.includes('{username}') && template.includes('{servername}')
    ? []
    : [`DockerSpawner.name_template: ${JSON.stringify(template)} must contain {username} and {servername} and otherwise only letters, digits, "_", "." and "-", starting with a letter or digit`];
}

export function checkHost(host: string): string[] {
  if (!host) return [];
  const c = connectionOf(host);
  return typeof c === 'string' ? [`DockerSpawner.host: ${c}`] : [];
}

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);

/** The parts of extra_create_kwargs / extra_host_config the hub merges with its own must have the engine's shapes. */
export function checkExtraCreate(extra: Record<string, unknown>): string[] {
  const problems: string[] = [];
  if ('name' in extra) problems.push('DockerSpawner.extra_create_kwargs.name: container names come from DockerSpawner.name_template');
  if ('Env' in extra && !(Array.isArray(extra.Env) && extra.Env.every((e) => typeof e === 'string' && e.includes('=')))) problems.push('DockerSpawner.extra_create_kwargs.Env: expected a list of "NAME=value" strings');
  if ('Labels' in extra && !(isObject(extra.Labels) && Object.values(extra.Labels).every((v) => typeof v === 'string'))) problems.push('DockerSpawner.extra_create_kwargs.Labels: expected an object of strings');
  if ('HostConfig' in extra && !isObject(extra.HostConfig)) problems.push('DockerSpawner.extra_create_kwargs.HostConfig: expected an object');
  return problems;
}

export function checkExtraHostConfig(extra: Record<string, unknown>): string[] {
  return 'Binds' in extra && !(Array.isArray(extra.Binds) && extra.Binds.every((b) => typeof b === 'string' && b.includes(':')))
    ? ['DockerSpawner.extra_host_config.Binds: expected a list of "source:/path[:ro]" strings'] : [];
}
