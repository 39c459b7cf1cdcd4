// `hub import jupyterhub --db URL [--dry-run]`: brings the established hub's database over (cli/jupyterhub-db.ts
// reads it). Users, groups, memberships and auth state go to the auth store; API tokens (as the hashes it stored:
// the same prefix + salted SHA-512 format this hub keeps, so every token string keeps working), shares and share
// codes to the tokens store; the OAuth clients of services (their secret hashes, the same format) to the oauth store; its roles and services, which are configuration here as there, to
// <data_dir>/imported/jupyterhub-config.json (merged under the operator's config, shared/config.ts); its named
// servers to a file the spawner turns into stopped records at its next start. All of it or nothing
// (shared/import-journal.ts). The hub must be stopped: the actors alone write their stores while it runs.
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError, validateConfig, type HubConfig } from '../shared/config.js';
import { fernetDecrypt, parseFernetKeys } from '../shared/fernet.js';
import { clearStaging, commitImport, finishPendingImport, importDir, stagingDir } from '../shared/import-journal.js';
import { invalidNameReason } from '../shared/names.js';
import { importedConfigPath, importedServersPath, storePath } from '../shared/paths.js';
import { DEFAULT_ROLES } from '../shared/roles.js';
import { CRYPT_KEY_ENV, CRYPT_KEY_ALIAS_ENV, parseCryptKeys } from '../shared/secrets.js';
import { Store, usesPostgres } from '../shared/store.js';
import { CliError, runningHub } from './hub.js';
import { readJupyterhubDb, redactUrl, type JhService, type JupyterhubData } from './jupyterhub-db.js';
import type { ImportedServiceClient } from '../services/oauth/store.js';
import type { VerbInput } from './main.js';
import { UsageError } from './args.js';

type Counts = Record<string, { added: number; updated: number }>;

/** A config entry as this hub would take it, or why not (the same checks as a config file's). */
function configProblem(key: 'load_roles' | 'services', entry: Record<string, unknown>): string | null {
  try {
    validateConfig({ Hub: { [key]: [entry] } });
    return null;
  } catch (e) {
    if (e instanceof ConfigError) return e.problems.join('; ');
    throw e;
  }
}

const DEFAULT_ROLE_NAMES = new Set(DEFAULT_ROLES.map((r) => r.name));

/** The established hub's roles and services as this hub's `Hub.load_roles` and `Hub.services`. */
function configOf(data: JupyterhubData, notes: string[]) {
  const roles: Record<string, unknown>[] = [];
  for (const r of data.roles) {
    if (DEFAULT_ROLE_NAMES.has(r.name)) continue; // this hub's own (admin by the admin flag, user for everyone)
    const role = { name: r.name, description: r.description, scopes: r.scopes, users: r.users, groups: r.groups, services: r.services };
    const why = configProblem('load_roles', role);
    if (why) notes.push(`role ${r.name} not brought over: ${why}`);
    else roles.push(role);
  }
  const services: Record<string, unknown>[] = [];
  const clients = new Map(data.oauthClients.map((c) => [c.service, c]));
  for (const s of data.services) {
    const svc = serviceEntry(s, clients.get(s.name)?.redirect_uri);
    const why = configProblem('services', svc);
    if (why) {
      notes.push(`service ${s.name} not brought over: ${why}`);
      continue;
    }
    services.push(svc);
  }
  return { roles, services };
}

const SECRET_HASH = /^sha512:\d+:[0-9a-f]+:[0-9a-f]+$/;

/**
 * The OAuth clients of the services brought over, with the secret hash the established hub stored (the hash of the
 * service's api_token, in this hub's own format): the service signs people in with the same client id and secret.
 */
function serviceClientsOf(data: JupyterhubData, services: Record<string, unknown>[], notes: string[]): ImportedServiceClient[] {
  const imported = new Set(services.map((s) => s.name as string));
  const out: ImportedServiceClient[] = [];
  for (const c of data.oauthClients) {
    if (!c.service || !imported.has(c.service)) continue;
    if (!SECRET_HASH.test(c.secret)) {
      notes.push(`service ${c.service}: its OAuth client ${c.identifier} has no secret the established hub could check (no api_token): give the service its api_token in your config`);
      continue;
    }
    out.push({
      client_id: c.identifier, service: c.service, secret_hash: c.secret, description: `Hub service ${c.service}`, redirect_uri: c.redirect_uri,
      allowed_scopes: [...new Set([...c.allowed_scopes, `access:services!service=${c.service}`])],
    });
  }
  return out;
}

function serviceEntry(s: JhService, redirectUri: string | undefined): Record<string, unknown> {
  const svc: Record<string, unknown> = { name: s.name };
  if (s.admin) svc.admin = true;
  if (s.url) svc.url = s.url;
  if (s.display !== null) svc.display = s.display;
  if (s.oauth_no_confirm !== null) svc.oauth_no_confirm = s.oauth_no_confirm;
  if (s.info && Object.keys(s.info).length) svc.info = s.info;
  if (s.oauth_client_allowed_scopes?.length) svc.oauth_client_allowed_scopes = s.oauth_client_allowed_scopes;
  // without a url, only its OAuth options make a service an OAuth client here (as there): both are written then
  if (s.oauth_client_id && (s.oauth_client_id !== `service-${s.name}` || (!s.url && redirectUri))) svc.oauth_client_id = s.oauth_client_id;
  if (redirectUri && (!s.url || redirectUri !== `/services/${s.name}/oauth_callback`)) svc.oauth_redirect_uri = redirectUri;
  return svc;
}

/** Auth state opened with JUPYTERHUB_CRYPT_KEY and sealed under this hub's key; without either, none, said why. */
async function authStatesOf(data: JupyterhubData, env: NodeJS.ProcessEnv, notes: string[]): Promise<{ name: string; encrypted: string }[]> {
  const held = data.users.filter((u) => u.encrypted_auth_state);
  if (!held.length) return [];
  const source = env[CRYPT_KEY_ALIAS_ENV] ? parseFernetKeys(env[CRYPT_KEY_ALIAS_ENV]!) : null;
  if (!source || 'problem' in source) {
    notes.push(`auth state of ${held.length} user${held.length === 1 ? '' : 's'} not brought over: ${source ? `${CRYPT_KEY_ALIAS_ENV}: ${source.problem}` : `${CRYPT_KEY_ALIAS_ENV} is not set (the established hub's key opens it)`}`);
    return [];
  }
  const target = parseCryptKeys({ [CRYPT_KEY_ENV]: env[CRYPT_KEY_ENV] ?? (/^[0-9a-fA-F]{64}(;[0-9a-fA-F]{64})*$/.test(env[CRYPT_KEY_ALIAS_ENV]!.trim()) ? env[CRYPT_KEY_ALIAS_ENV] : '') });
  if ('problem' in target) {
    notes.push(`auth state of ${held.length} user${held.length === 1 ? '' : 's'} not brought over: ${target.problem}`);
    return [];
  }
  const { AuthStateCrypt } = await import('../services/auth/auth-state.js');
  const crypt = new AuthStateCrypt(target.keys);
  const out: { name: string; encrypted: string }[] = [];
  let unreadable = 0;
  for (const u of held) {
    const plain = fernetDecrypt(u.encrypted_auth_state!, source.keys);
    let state: unknown = null;
    try {
      state = plain ? JSON.parse(plain.toString('utf8')) : null;
    } catch { /* counted below */ }
    if (state && typeof state === 'object' && !Array.isArray(state)) out.push({ name: u.name, encrypted: crypt.encrypt(state as Record<string, unknown>) });
    else unreadable++;
  }
  if (unreadable) notes.push(`auth state of ${unreadable} user${unreadable === 1 ? '' : 's'} not brought over: ${CRYPT_KEY_ALIAS_ENV} does not open it`);
  return out;
}

/** Rows only of users whose names this hub takes (the same rule as its API's). */
function validUsers(data: JupyterhubData, notes: string[]): Set<string> {
  const ok = new Set<string>();
  for (const u of data.users) {
    const why = invalidNameReason(u.name);
    if (why) notes.push(`user ${JSON.stringify(u.name.slice(0, 60))} not brought over: ${why}`);
    else ok.add(u.name);
  }
  return ok;
}

export async function importFrom(config: HubConfig, db: string, { dryRun, env = process.env }: { dryRun: boolean; env?: NodeJS.ProcessEnv }) {
  const dataDir = config.Hub.data_dir;
  // the import is all-or-nothing by copying SQLite stores and renaming them in: a shared database has no such copy
  if (usesPostgres(config.Hub.db_url)) {
    throw new CliError('hub import jupyterhub writes the SQLite stores of Hub.data_dir and is refused with Hub.db_url on PostgreSQL: import into a hub without Hub.db_url (SQLite) first; moving SQLite stores into PostgreSQL is not done yet');
  }
  const hub = runningHub(config);
  if (hub) throw new CliError(`a hub is running on ${dataDir} (supervisor pid ${hub.pid}): stop it first, then import (its actors alone write their stores while it runs)`);
  finishPendingImport(dataDir);
  const data = await readJupyterhubDb(db);
  const notes = [...data.skipped];
  const users = validUsers(data, notes);
  const hasUser = (name: string) => users.has(name);
  const { roles, services } = configOf(data, notes);
  const serviceNames = new Set([...services.map((s) => s.name as string), ...(config.Hub.services as { name: string }[]).map((s) => s.name)]);
  const authStates = (await authStatesOf(data, env, notes)).filter((a) => hasUser(a.name));
  const serviceClients = serviceClientsOf(data, services, notes);

  const tokens = data.tokens.filter((t) => (t.owner_kind === 'user' ? hasUser(t.owner_name) : serviceNames.has(t.owner_name)));
  if (tokens.length < data.tokens.length) notes.push(`${data.tokens.length - tokens.length} API token(s) not brought over: their owner was not`);
  const servers = data.servers.filter((s) => hasUser(s.user));
  const shares = data.shares.filter((s) => hasUser(s.owner) && (s.grantee_kind === 'group' || hasUser(s.grantee)));
  const codes = data.shareCodes.filter((c) => hasUser(c.owner));

  const staging = clearStaging(dataDir);
  const counts: Counts = {};
  try {
    const copyOf = async (actor: 'auth' | 'tokens' | 'oauth') => {
      const to = join(staging, `${actor}.sqlite`);
      if (existsSync(storePath(dataDir, actor))) await Store.copy(storePath(dataDir, actor), to);
      return to;
    };
    const authCopy = await copyOf('auth');
    const { AuthStore } = await import('../services/auth/store.js');
    Object.assign(counts, await AuthStore.importJupyterhub(authCopy, {
      users: data.users.filter((u) => hasUser(u.name)).map((u) => ({ name: u.name, admin: u.admin, created: u.created, last_activity: u.last_activity, user_info: u.user_info })),
      groups: data.groups.filter((g) => {
        const why = invalidNameReason(g.name);
        if (why) notes.push(`group ${JSON.stringify(g.name.slice(0, 60))} not brought over: ${why}`);
        return !why;
      }).map((g) => ({ name: g.name, properties: JSON.stringify(g.properties), members: g.members.filter(hasUser) })),
      authStates,
    }));
    const tokensCopy = await copyOf('tokens');
    const { TokenStore } = await import('../services/tokens/store.js');
    const tokenStore = await TokenStore.open(tokensCopy);
    try {
      Object.assign(counts, await tokenStore.importJupyterhub({
        tokens: tokens.map((t) => ({
          id: t.id, prefix: t.prefix, hashed: t.hashed, owner_kind: t.owner_kind, owner_name: t.owner_name, scopes: JSON.stringify(t.scopes),
          note: t.note, created: t.created, last_activity: t.last_activity, expires_at: t.expires_at, session_id: t.session_id,
          oauth_client: t.client_id === 'jupyterhub' ? 'hub' : t.client_id,
        })),
        shares: shares.map((s) => ({ ...s, scopes: JSON.stringify(s.scopes) })),
        codes: codes.map((c) => ({ ...c, scopes: JSON.stringify(c.scopes) })),
      }));
    } finally {
      await tokenStore.close();
    }
    const oauthCopy = await copyOf('oauth');
    const { OAuthStore } = await import('../services/oauth/store.js');
    const oauthStore = await OAuthStore.open(oauthCopy);
    try {
      const { added, updated, refused } = await oauthStore.importServiceClients(serviceClients);
      counts.oauth_clients = { added, updated };
      for (const id of refused) notes.push(`OAuth client ${id} not brought over: a client of that id here is not its service's`);
    } finally {
      await oauthStore.close();
    }
    const configCopy = join(staging, 'jupyterhub-config.json');
    writeFileSync(configCopy, `${JSON.stringify({ Hub: { load_roles: roles, services } }, null, 2)}\n`, { mode: 0o600 });
    const serversCopy = join(staging, 'jupyterhub-servers.json');
    writeFileSync(serversCopy, JSON.stringify(servers), { mode: 0o600 });
    counts.roles = { added: roles.length, updated: 0 };
    counts.services = { added: services.length, updated: 0 };
    counts.named_servers = { added: servers.length, updated: 0 };
    counts.auth_states = { added: authStates.length, updated: 0 };
    if (!dryRun) {
      commitImport(dataDir, [
        [authCopy, storePath(dataDir, 'auth')], [tokensCopy, storePath(dataDir, 'tokens')], [oauthCopy, storePath(dataDir, 'oauth')],
        [configCopy, importedConfigPath(dataDir)], [serversCopy, importedServersPath(dataDir)],
      ]);
    }
  } finally {
    rmSync(stagingDir(dataDir), { recursive: true, force: true }); // a dry run's copies, or what a failure left
  }
  return { data, counts, notes };
}

const LABELS: Record<string, string> = {
  users: 'users', groups: 'groups', tokens: 'API tokens', shares: 'shares', share_codes: 'share codes', roles: 'roles',
  services: 'services', oauth_clients: 'OAuth clients of services', named_servers: 'named servers (stopped)', auth_states: 'auth states',
};

export async function importVerb({ config, positional, flags }: VerbInput): Promise<number> {
  if (positional[0] !== 'jupyterhub') throw new UsageError(`import: the only source is "jupyterhub" (usage: hub import jupyterhub --db URL [--dry-run])`);
  if (typeof flags.db !== 'string' || !flags.db) throw new UsageError('import: --db names the established hub\'s database (a SQLite file or a postgresql:// URL)');
  const dryRun = flags['dry-run'] === true;
  const started = Date.now();
  const { data, counts, notes } = await importFrom(config, flags.db, { dryRun });
  const out = process.stdout;
  out.write(`${dryRun ? 'would import' : 'imported'} from ${redactUrl(flags.db)} (the established hub ${data.release}, schema ${data.revision}) into ${config.Hub.data_dir}:\n`);
  for (const [key, c] of Object.entries(counts)) {
    out.write(`  ${LABELS[key] ?? key}: ${c.added + c.updated}${c.updated ? ` (${c.added} new, ${c.updated} already here, ${dryRun ? 'to update' : 'updated'})` : ''}\n`);
  }
  for (const note of notes) out.write(`note: ${note}\n`);
  if (!dryRun) {
    out.write(`done in ${((Date.now() - started) / 1000).toFixed(1)} s: start this hub (the named servers join its registry at its start). Roles and services are in ${importDir(config.Hub.data_dir)}/jupyterhub-config.json, under your own config.\n`);
  }
  return 0;
}
