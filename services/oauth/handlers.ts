// The oauth actor's operations: OAuth clients (single-user servers registered by the spawner, services
// from the config) and authorization codes: issued once a user has agreed, redeemed once by their client
// for an access token that the tokens actor mints. A code presented twice revokes what it yielded (RFC 6749 §4.1.2).
import { createHash, randomBytes } from 'node:crypto';
import type { AuditPublisher } from '../../shared/audit.js';
import { currentRequest } from '../../shared/context.js';
import type { HubConfig } from '../../shared/config.js';
import { serviceCallbackUrl, subdomainsOf, type Subdomains } from '../../shared/subdomains.js';
import { errors, HubError } from '../../shared/errors.js';
import type { CallContext, TokensClient } from '../../shared/contracts/index.js';
import type { Logger } from '../../shared/log.js';
import type { ServiceConfig } from '../../shared/roles.js';
import { GENERATED_ROUNDS, hashSecret, SUPPLIED_ROUNDS, verifySecret } from '../../shared/secrets.js';
import { isoNow } from '../../shared/time.js';
import { isOidcScope } from '../../shared/oidc.js';
import type { Oidc } from './oidc.js';
import type { ClientKind, ClientRow, CodeRow, OAuthStore } from './store.js';

/** Authorization codes are good for this long (upstream: 300 s). */
export const CODE_LIFETIME_MS = 300_000;
/** Redeemed codes are remembered this long past their expiry, so a replay still revokes what they yielded. */
export const USED_CODE_MEMORY_MS = 3_600_000;

export interface OAuthDeps {
  config: HubConfig;
  store: OAuthStore;
  tokens: TokensClient;
  audit: AuditPublisher;
  log: Logger;
  oidc: Oidc;
}

/**
 * A client as it should be stored; `secret` is hashed on the way in ("" = a public client). Tools
 * (Hub.oauth_clients) have several redirect URIs and post-logout URIs; the others have one redirect URI.
 */
export interface ClientSpec {
  client_id: string; kind: ClientKind; description: string; redirect_uri: string; allowed_scopes: string[];
  no_confirm: boolean; user: string; server_name: string; service: string; secret: string; rounds: number;
  redirect_uris?: string[]; post_logout_redirect_uris?: string[]; require_nonce?: boolean;
}

/** Hub.oauth_clients as client specs: a tool's access scope is access:services!service=<client_id>. */
export function toolClientSpecs(clients: readonly Record<string, unknown>[]): ClientSpec[] {
  return clients.map((c) => {
    const id = String(c.client_id);
    const uris = (c.redirect_uris as string[] | undefined) ?? [];
    return {
      client_id: id, kind: 'tool', description: typeof c.description === 'string' && c.description ? c.description : id, redirect_uri: uris[0] ?? '',
      redirect_uris: uris, post_logout_redirect_uris: (c.post_logout_redirect_uris as string[] | undefined) ?? [],
      allowed_scopes: [...new Set([...((c.allowed_scopes as string[] | undefined) ?? []), `access:services!service=${id}`])],
      no_confirm: c.oauth_no_confirm === true, require_nonce: c.require_nonce === true, user: '', server_name: '', service: id,
      secret: typeof c.client_secret === 'string' ? c.client_secret : '', rounds: SUPPLIED_ROUNDS,
    };
  });
}

const digest = (code: string) => createHash('sha256').update(code).digest('base64url');

/** 32 URL-safe characters from 192 random bits. */
const newCode = () => randomBytes(24).toString('base64url');

export function accessScopeOf(c: { kind: string; user_name: string; server_name: string; service: string }): string {
  return c.kind === 'server' ? `access:servers!server=${c.user_name}/${c.server_name}` : `access:services!service=${c.service}`;
}

function clientMessage(row: ClientRow) {
  return {
    client_id: row.client_id, kind: row.kind, description: row.description, redirect_uri: row.redirect_uri,
    allowed_scopes: JSON.parse(row.allowed_scopes) as string[], no_confirm: row.no_confirm === 1, user: row.user_name,
    server_name: row.server_name, service: row.service, access_scope: accessScopeOf(row),
    redirect_uris: JSON.parse(row.redirect_uris) as string[], post_logout_redirect_uris: JSON.parse(row.post_logout_redirect_uris) as string[],
    public: row.public === 1, require_nonce: row.require_nonce === 1,
  };
}

/**
 * The OAuth client a configured service should have (reference §6.1), or null when it is none: a service with a
 * `url` or an OAuth option is a client `service-<name>` (or its `oauth_client_id`), its `api_token` the secret
 * ('' here when the config gives none).
 */
function serviceClientSpec(svc: ServiceConfig, sub: Subdomains | null): ClientSpec | null {
  const redirect = typeof svc.oauth_redirect_uri === 'string' ? svc.oauth_redirect_uri : '';
  if (!svc.url && !redirect && typeof svc.oauth_client_id !== 'string') return null;
  const allowed = Array.isArray(svc.oauth_client_allowed_scopes) ? (svc.oauth_client_allowed_scopes as string[]) : [];
  return {
    client_id: typeof svc.oauth_client_id === 'string' ? svc.oauth_client_id : `service-${svc.name}`, kind: 'service',
    // the same one the supervisor gives the service as HUB_OAUTH_CALLBACK_URL (at its own host with subdomains)
    description: `Hub service ${svc.name}`, redirect_uri: serviceCallbackUrl(sub, svc),
    allowed_scopes: [...new Set([...allowed, `access:services!service=${svc.name}`])], no_confirm: svc.oauth_no_confirm === true,
    user: '', server_name: '', service: svc.name, secret: typeof svc.api_token === 'string' ? svc.api_token : '', rounds: SUPPLIED_ROUNDS,
  };
}

const warnWithoutToken = (log: Logger | undefined, service: string) =>
  log?.warn({ event: 'oauth.service_without_token', service }, 'service has a url but no api_token: it cannot be an OAuth client');

/** The clients of the services that have an `api_token`; one without cannot authenticate at the token endpoint and is left out, loudly. */
export function serviceClientSpecs(services: ServiceConfig[], log?: Logger, sub: Subdomains | null = null): ClientSpec[] {
  const specs: ClientSpec[] = [];
  for (const svc of services) {
    const spec = serviceClientSpec(svc, sub);
    if (spec && !spec.secret) warnWithoutToken(log, svc.name);
    else if (spec) specs.push(spec);
  }
  return specs;
}

/** RFC 7636: S256 compares base64url(SHA-256(verifier)); plain compares the strings. */
export function pkceMatches(challenge: string, method: string, verifier: string): boolean {
  const derived = method === 'S256' ? createHash('sha256').update(verifier).digest('base64url') : verifier;
  const a = Buffer.from(derived);
  const b = Buffer.from(challenge);
  return a.length === b.length && a.equals(b);
}

export function createOAuthHandlers({ config, store, tokens, audit, log, oidc }: OAuthDeps) {
  const tokenLifetimeS = config.Hub.oauth_token_expires_in || config.Hub.cookie_max_age_days * 86_400;

  /** `importedHash`: the secret hash `hub import jupyterhub` brought, kept as it is (the secret itself is nowhere here). */
  async function putClient(spec: ClientSpec, importedHash = ''): Promise<ClientRow> {
    const row: ClientRow = {
      client_id: spec.client_id, secret_hash: importedHash || (spec.secret ? hashSecret(spec.secret, spec.rounds) : ''), kind: spec.kind, description: spec.description,
      redirect_uri: spec.redirect_uri, allowed_scopes: JSON.stringify(spec.allowed_scopes), no_confirm: spec.no_confirm ? 1 : 0,
      user_name: spec.user, server_name: spec.server_name, service: spec.service, created: isoNow(),
      redirect_uris: JSON.stringify(spec.redirect_uris ?? [spec.redirect_uri]), post_logout_redirect_uris: JSON.stringify(spec.post_logout_redirect_uris ?? []),
      public: importedHash || spec.secret ? 0 : 1, require_nonce: spec.require_nonce ? 1 : 0, imported: importedHash ? 1 : 0,
    };
    await store.putClient(row);
    return row;
  }

  /** A client goes with every token it issued: they were good for reaching it only. */
  async function removeClient(clientId: string, by: string): Promise<void> {
    if (!(await store.deleteClient(clientId))) return;
    await tokens.revokeTokens({ ids: [], oauth_client: clientId, by, reason: 'oauth client removed' }).catch((e: HubError) =>
      log.warn({ event: 'oauth.client_tokens.revoke_failed', client_id: clientId, err: e.message }, 'tokens of a removed client not revoked'));
    void audit.publish('oauth_client', 'delete', { who: by, what: clientId, outcome: 'ok' });
  }

  async function mustClient(clientId: string): Promise<ClientRow> {
    const row = clientId ? await store.client(clientId) : undefined;
    if (!row) throw errors.notFound(`No such OAuth client: ${clientId.slice(0, 100)}`, 'HUB_ERR_OAUTH_CLIENT_NOT_FOUND');
    return row;
  }

  /** A replayed code: whatever it yielded is revoked (refresh tokens too), since one of the two presenters is not the client. */
  async function onReplay(row: CodeRow): Promise<never> {
    const ids = await store.markReused(row.code_hash);
    if (ids.length) await tokens.revokeTokens({ ids, oauth_client: '', by: 'actor:oauth', reason: 'authorization code reused' });
    if (ids.length) await oidc.revokeLinesOf(ids);
    log.warn({ event: 'oauth.code_reused', client_id: row.client_id, user: row.user_name, revoked: ids }, 'authorization code presented again: its tokens are revoked');
    void audit.publish('oauth_code', 'reuse', { who: `oauth:${row.client_id}`, what: `user:${row.user_name}`, outcome: 'denied', reason: 'code presented again: its tokens are revoked', revoked: ids });
    throw errors.oauth('invalid_grant', 'Authorization code has already been used');
  }

  /** RFC 6749 §2.3: a confidential client proves its secret; a public one has none to give (and must not send one). */
  async function authenticatedClient(r: { client_id: string; client_secret: string }): Promise<ClientRow> {
    const client = r.client_id ? await store.client(r.client_id) : undefined;
    const ok = client && (client.public ? !r.client_secret : !!r.client_secret && verifySecret(r.client_secret, client.secret_hash));
    if (!ok) throw errors.oauth('invalid_client', 'Client authentication failed');
    return client;
  }

  return {
    async registerServerClient(r: { client_id: string; user: string; server_name: string; url: string; secret: string }) {
      // url: the server's path, or its whole URL at its user's host with per-user subdomains
      if (!r.client_id || !r.user || !/^(\/|https?:\/\/[^/]+\/)/.test(r.url) || !r.secret) throw errors.badRequest('client_id, user, url and secret are required');
      const row = await putClient({
        client_id: r.client_id, kind: 'server', description: `Server at ${r.url}`, redirect_uri: `${r.url}oauth_callback`, allowed_scopes: [],
        no_confirm: false, user: r.user, server_name: r.server_name, service: '', secret: r.secret, rounds: GENERATED_ROUNDS,
      });
      void audit.publish('oauth_client', 'register', { who: currentRequest()?.who ?? 'actor:spawner', what: r.client_id, outcome: 'ok' });
      return clientMessage(row);
    },

    /** A service added at run time (the tokens actor asks, with the token it registered as the secret). */
    async registerServiceClient(r: { spec_json: string; secret: string }) {
      let svc: ServiceConfig;
      try {
        svc = JSON.parse(r.spec_json);
      } catch {
        throw errors.badRequest('spec_json must be a service\'s options as JSON');
      }
      if (typeof svc?.name !== 'string' || !r.secret) throw errors.badRequest('a service name and a secret are required');
      const [spec] = serviceClientSpecs([{ ...svc, api_token: r.secret }], log, subdomainsOf(config));
      if (!spec) throw errors.badRequest(`service ${svc.name} has no url and no OAuth option: it is not an OAuth client`);
      if (!spec.redirect_uri) throw errors.badRequest(`Service ${svc.name} has oauth configured, but is missing required oauth_redirect_uri`);
      // a tool (Hub.oauth_clients) of that name holds access:services!service=<name> already
      if ((await store.client(svc.name))?.kind === 'tool') throw errors.conflict(`OAuth client ${svc.name} (Hub.oauth_clients) has this name: the service would share its access scope`);
      const existing = await store.client(spec.client_id);
      if (existing && existing.service !== svc.name) throw errors.conflict(`OAuth client ${spec.client_id} is the client of ${existing.kind} ${existing.service || existing.user_name}`);
      const row = await putClient(spec);
      void audit.publish('oauth_client', 'register', { who: currentRequest()?.who ?? 'actor:tokens', what: spec.client_id, outcome: 'ok' });
      return clientMessage(row);
    },

    async deleteClient(r: { client_id: string; by: string }) {
      await removeClient(r.client_id, r.by || 'actor:spawner');
      return {};
    },

    async getClient(r: { client_id: string }) {
      return clientMessage(await mustClient(r.client_id));
    },

    async issueCode(r: {
      client_id: string; user: string; scopes: string[]; redirect_uri: string; session_id: string; code_challenge: string; code_challenge_method: string;
      oidc_scopes: string[]; nonce: string;
    }) {
      const client = await mustClient(r.client_id);
      if (!(JSON.parse(client.redirect_uris) as string[]).includes(r.redirect_uri)) throw errors.badRequest('redirect_uri does not match a registered one');
      if (r.code_challenge && !['S256', 'plain'].includes(r.code_challenge_method)) throw errors.oauth('invalid_request', 'code_challenge_method must be S256 or plain');
      if (client.public && (!r.code_challenge || r.code_challenge_method !== 'S256')) throw errors.oauth('invalid_request', 'a public client must use PKCE (S256)');
      const oidcScopes = (r.oidc_scopes ?? []).filter(isOidcScope);
      if ((r.nonce ?? '').length > 512) throw errors.oauth('invalid_request', 'nonce: at most 512 characters');
      const code = newCode();
      const expiresAt = Date.now() + CODE_LIFETIME_MS;
      await store.insertCode({
        code_hash: digest(code), client_id: client.client_id, user_name: r.user, scopes: JSON.stringify(r.scopes), redirect_uri: r.redirect_uri,
        session_id: r.session_id, code_challenge: r.code_challenge, code_challenge_method: r.code_challenge ? r.code_challenge_method : '', expires_at: expiresAt,
        oidc_scopes: JSON.stringify(oidcScopes), nonce: r.nonce ?? '',
      });
      void audit.publish('oauth_code', 'issue', { who: `user:${r.user}`, what: client.client_id, outcome: 'ok', scopes: [...oidcScopes, ...r.scopes] });
      return { code, expires_at_ms: expiresAt };
    },

    /** The checks of RFC 6749 §4.1.3 in order: client, code, redirect_uri, PKCE; then the one redemption. */
    async exchangeCode(r: { client_id: string; client_secret: string; code: string; redirect_uri: string; code_verifier: string }, call: CallContext) {
      const client = await authenticatedClient(r);
      const row = r.code ? await store.code(digest(r.code)) : undefined;
      if (!row || row.client_id !== client.client_id) throw errors.oauth('invalid_grant', 'Invalid authorization code');
      if (row.used_at !== null) return onReplay(row);
      if (row.expires_at <= Date.now()) throw errors.oauth('invalid_grant', 'Authorization code has expired');
      if (r.redirect_uri && r.redirect_uri !== row.redirect_uri) throw errors.oauth('invalid_request', 'redirect_uri does not match the one the code was issued for');
      if (row.code_challenge || client.public) {
        if (!r.code_verifier) throw errors.oauth('invalid_request', 'code_verifier is required');
        if (!pkceMatches(row.code_challenge, row.code_challenge_method, r.code_verifier)) throw errors.oauth('invalid_grant', 'code_verifier does not match the code_challenge');
      }
      // The caller has given up (its 504 is already sent): leave the code unclaimed and mint nothing.
      if (call.cancelled) throw errors.timeout('the token exchange');
      if (!(await store.claimCode(row.code_hash, Date.now()))) return onReplay(row);
      const scopes = JSON.parse(row.scopes) as string[];
      const minted = await tokens.issueOAuthToken({
        user: row.user_name, scopes, session_id: row.session_id, oauth_client: client.client_id, note: client.description, expires_in: tokenLifetimeS,
      }, { deadline: call.deadline });
      // a replay that arrived while the token was being minted found no token to revoke: revoke it now
      if ((await store.recordToken(row.code_hash, minted.model!.id)).reused) {
        await tokens.revokeTokens({ ids: [minted.model!.id], oauth_client: '', by: 'actor:oauth', reason: 'authorization code reused' });
        throw errors.oauth('invalid_grant', 'Authorization code has already been used');
      }
      const oidcScopes = JSON.parse(row.oidc_scopes) as string[];
      const more = await oidc.afterExchange({
        client, user: row.user_name, scopes, oidcScopes, sessionId: row.session_id, nonce: row.nonce, accessToken: minted.token, tokenId: minted.model!.id, expiresInS: tokenLifetimeS,
      }, call);
      void audit.publish('oauth_code', 'redeem', { who: `oauth:${client.client_id}`, what: `user:${row.user_name}/${minted.model!.id}`, outcome: 'ok', ...(more.id_token ? { oidc: oidcScopes } : {}) });
      return { access_token: minted.token, scope: [...oidcScopes, ...scopes].join(' '), expires_in: tokenLifetimeS, token_id: minted.model!.id, user: row.user_name, ...more };
    },

    /** grant_type=refresh_token: the client authenticated as at the code exchange, then oidc.ts. */
    async refresh(r: { client_id: string; client_secret: string; refresh_token: string; scopes: string[] }, call: CallContext) {
      const client = await authenticatedClient(r);
      return oidc.refresh(client, { refresh_token: r.refresh_token, scopes: r.scopes ?? [] }, call, tokenLifetimeS);
    },

    checkEndSession: (r: { client_id: string; id_token_hint: string; post_logout_redirect_uri: string }) => oidc.checkEndSession(r, (id) => store.client(id)),

    /** At start: Hub.oauth_clients' clients created or updated; tools no longer configured removed. */
    async syncToolClients(clients: readonly Record<string, unknown>[]): Promise<void> {
      const specs = toolClientSpecs(clients);
      for (const spec of specs) await putClient(spec);
      const wanted = new Set(specs.map((s) => s.client_id));
      for (const row of await store.clientsOfKind('tool')) {
        if (!wanted.has(row.client_id)) await removeClient(row.client_id, 'actor:oauth (Hub.oauth_clients no longer names it)');
      }
      if (specs.length) log.info({ event: 'oauth.tool_clients', clients: [...wanted] }, 'Hub.oauth_clients registered');
    },

    /**
     * At start: configured services' clients created or updated; those of services no longer configured removed,
     * except the clients of services added at run time (`runtime`: their names), kept as registered.
     */
    async syncServiceClients(services: ServiceConfig[], runtime: ReadonlySet<string> = new Set()): Promise<void> {
      const sub = subdomainsOf(config);
      const wanted = new Set<string>();
      for (const svc of services) {
        const spec = serviceClientSpec(svc, sub);
        if (!spec) continue;
        if (spec.secret) {
          await putClient(spec);
          wanted.add(spec.client_id);
          continue;
        }
        // no api_token in the config: a client brought over by the import keeps the hash the established hub stored
        const here = await store.client(spec.client_id);
        if (here?.imported === 1 && here.kind === 'service' && here.service === svc.name && here.secret_hash) {
          await putClient(spec, here.secret_hash);
          wanted.add(spec.client_id);
        } else warnWithoutToken(log, svc.name);
      }
      for (const row of await store.clientsOfKind('service')) {
        if (!wanted.has(row.client_id) && !runtime.has(row.service)) await removeClient(row.client_id, 'actor:oauth (service no longer configured)');
      }
      log.info({ event: 'oauth.service_clients', clients: [...wanted] }, 'service OAuth clients registered');
    },

    /** At start: server clients whose server has no record any more are stale (the stop was missed). */
    async pruneServerClients(liveClientIds: ReadonlySet<string>): Promise<void> {
      for (const row of await store.clientsOfKind('server')) {
        if (!liveClientIds.has(row.client_id)) await removeClient(row.client_id, 'actor:oauth (server gone)');
      }
    },

    async purgeCodes(): Promise<void> {
      await store.deleteCodesExpiredBefore(Date.now() - USED_CODE_MEMORY_MS);
    },
  };
}

export type OAuthHandlers = ReturnType<typeof createOAuthHandlers>;
