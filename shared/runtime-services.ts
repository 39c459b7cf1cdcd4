// Services added and removed at run time (`POST|DELETE /hub/api/services/<name>`, the established hub 5.0's,
// scope `admin:services`). They live in the JetStream KV bucket `hub_services`, written only by the tokens actor
// (which owns their tokens), so they outlive a restart; every reader (gateways, proxy-router, tokens; the oauth
// actor once at start) keeps a copy through shared/kv-mirror.ts. A record never holds the service's token.
// `serviceDirectory` is the one view of every service: the configured ones (fixed) and the runtime ones (live).
import { BUCKETS } from './subjects.js';
import type { Logger } from './log.js';
import { decodeJson, type NatsConnection } from './nats.js';
import { mirrorKv, type KvMirror } from './kv-mirror.js';
import type { HubConfig } from './config.js';
import { configuredServices, type ServiceConfig } from './roles.js';

export const SERVICES_BUCKET = BUCKETS.services;

/** The keys a `POST /hub/api/services/<name>` body may carry (the established hub's list). */
export const POSTABLE_SERVICE_KEYS = [
  'name', 'admin', 'url', 'oauth_client_allowed_scopes', 'api_token', 'info', 'display', 'oauth_no_confirm',
  'command', 'cwd', 'environment', 'user', 'oauth_client_id', 'oauth_redirect_uri',
] as const;

/** What is kept of a runtime service: no token, nothing only a hub-managed service uses (those cannot be added at run time). */
export const KEPT_SERVICE_KEYS = ['name', 'admin', 'url', 'oauth_client_allowed_scopes', 'info', 'display', 'oauth_no_confirm', 'oauth_client_id', 'oauth_redirect_uri'] as const;

export interface RuntimeService extends ServiceConfig {
  /** who added it and when, for the audit trail and `hub` operators */
  added_by: string;
  added_at: string;
}

/** KV keys allow only [-/_=.a-zA-Z0-9]: the name is encoded. */
export const serviceKey = (name: string) => `s.${Buffer.from(name).toString('base64url')}`;

export function decodeService(key: string, value: Uint8Array): RuntimeService | null {
  if (!key.startsWith('s.')) return null;
  const svc = decodeJson<RuntimeService>(value);
  return svc && typeof svc.name === 'string' && serviceKey(svc.name) === key ? svc : null;
}

export function mirrorRuntimeServices(nc: NatsConnection, log: Logger, loadTimeoutMs: number): Promise<KvMirror<RuntimeService>> {
  return mirrorKv<RuntimeService>(nc, { bucket: SERVICES_BUCKET, decode: decodeService, loadTimeoutMs, log });
}

/** Whether a service with these options is an OAuth client of the hub (a `url`, a redirect URI or a client id; services/oauth). */
export const isOAuthService = (svc: ServiceConfig) =>
  Boolean(svc.url || typeof svc.oauth_client_id === 'string' || typeof svc.oauth_redirect_uri === 'string');

export const serviceClientId = (svc: ServiceConfig) => (typeof svc.oauth_client_id === 'string' ? svc.oauth_client_id : `service-${svc.name}`);

export interface ServiceDirectory {
  /** every service by name, configured ones first; kept current as runtime services come and go */
  readonly all: Map<string, ServiceConfig>;
  fromConfig(name: string): boolean;
  /** called after each change of the runtime services (a name added or removed, or a fresh copy) */
  onChange(fn: (name: string | null) => void): void;
  /** resolves true once this copy has applied a bucket revision (false after `timeoutMs`) */
  waitForRevision(revision: number, timeoutMs: number): Promise<boolean>;
  /** a fresh copy of the runtime ones (after a NATS reconnect) */
  reload(): Promise<void>;
  /** the configured services of a reloaded configuration (`hub reload`); the names added, removed or changed */
  useConfig(config: HubConfig): string[];
  stop(): void;
}

/**
 * The configured services and, live, the runtime ones. A configured service's name always means the configured
 * one: a runtime service of the same name (the operator configured it later) is left out, loudly.
 */
export function serviceDirectory(config: HubConfig, runtime: KvMirror<RuntimeService> | null, log: Logger): ServiceDirectory {
  let configured = new Map(configuredServices(config).map((s) => [s.name, s]));
  const all = new Map<string, ServiceConfig>(configured);
  const listeners: ((name: string | null) => void)[] = [];
  const admit = (svc: RuntimeService) => {
    if (!configured.has(svc.name)) all.set(svc.name, svc);
    else log.warn({ event: 'services.runtime_shadowed', service: svc.name }, 'a service added at run time has the name of a configured one: the configured one is used');
  };
  const rebuild = () => {
    for (const name of [...all.keys()]) if (!configured.has(name)) all.delete(name);
    for (const svc of runtime?.values() ?? []) admit(svc);
  };
  rebuild();
  const unlisten = runtime?.listen((change) => {
    if (change.kind === 'reset') rebuild();
    else if (change.kind === 'put') admit(change.value);
    else if (change.previous && !configured.has(change.previous.name)) all.delete(change.previous.name);
    const name = change.kind === 'put' ? change.value.name : change.kind === 'delete' ? change.previous?.name ?? null : null;
    for (const fn of listeners) fn(name);
  });
  return {
    all,
    fromConfig: (name) => configured.has(name),
    onChange: (fn) => void listeners.push(fn),
    waitForRevision: async (revision, timeoutMs) => (runtime ? runtime.waitForRevision(revision, timeoutMs) : true),
    reload: async () => runtime?.reload(),
    useConfig: (next) => {
      const previous = configured;
      configured = new Map(configuredServices(next).map((s) => [s.name, s]));
      const changed = [...new Set([...previous.keys(), ...configured.keys()])]
        .filter((name) => JSON.stringify(previous.get(name)) !== JSON.stringify(configured.get(name)));
      for (const name of previous.keys()) all.delete(name);
      for (const [name, svc] of configured) all.set(name, svc);
      rebuild();
      for (const fn of listeners) fn(null);
      return changed;
    },
    stop: () => {
      unlisten?.();
      runtime?.stop();
    },
  };
}
