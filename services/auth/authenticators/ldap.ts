// The `ldap` backend: a name and a password checked by binding to an LDAP directory as the person, with the
// options (LDAPAuthenticator.*) as the established hub's ldapauthenticator names them. Each login is one
// connection of its own (ldapts, all asynchronous), bounded by the call's deadline, always closed.
//
// Binding: each bind_dn_template in turn, or (lookup_dn) a search for the one entry whose user_attribute is the
// name, as lookup_dn_search_user or anonymously, then a bind as that entry. Every value that enters a DN is
// escaped per RFC 4514, every value that enters a filter per RFC 4515; names failing valid_username_regex and
// empty passwords (an "unauthenticated bind" succeeds on many servers) never reach the directory at all.
//
// Then, on the same connection bound as the person: the entry's attributes (mail, auth_state_attributes),
// membership of each allowed_groups/admin_groups DN (a base-scope search of the group with
// group_search_filter), and with manage_groups and group_search_base every group under it that matches.
//
// Verdicts: a refused bind, no such person and an ambiguous lookup are all `invalid credentials` to the
// person (no enumeration; the log says which); a directory that does not answer, refuses TLS or refuses the
// search account is `unavailable` (an outage, not a refusal). No password reaches a log line or a reason.
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { createSecureContext, type ConnectionOptions, type SecureContext } from 'node:tls';
import { Client, FilterParser, ResultCodeError, type Entry } from 'ldapts';
import { cap } from '../../../shared/log.js';
import type { Authenticator, AuthenticatorDeps, AuthenticatorFactory, CallContext, Identity, Verdict } from './contract.js';

// ---- escaping --------------------------------------------------------------------------------------------

/** RFC 4514 §2.4: one attribute value as it may stand in a DN string. */
export function escapeDnValue(value: string): string {
  let out = '';
  for (let i = 0; i < value.length; i++) {
    const c = value[i];
    if (c === '\0') out += '\\00';
    else if ('"+,;<>\\='.includes(c)) out += `\\${c}`;
    else if ((c === ' ' || c === '#') && i === 0) out += `\\${c}`;
    else if (c === ' ' && i === value.length - 1) out += '\\ ';
    else out += c;
  }
  return out;
}

/** RFC 4515 §3: one assertion value as it may stand in a filter string. */
export function escapeFilterValue(value: string): string {
  return value.replace(/[*()\\\0]/g, (c) => `\\${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

/**
 * escape_userdn: a DN found by the lookup, made safe for servers that choke on filter characters in it: `(`,
 * `)`, `*` and NUL become hex pairs, which RFC 4514 reads as the same characters (so the DN is unchanged).
 */
function escapeFoundDn(dn: string): string {
  return dn.replace(/[*()\0]/g, (c) => `\\${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

/** `{name}` placeholders filled in one pass (a value that holds `{uid}` is not filled again); `$` is literal. */
function fill(template: string, values: Record<string, string>): string {
  return template.replace(/\{([a-z_]+)\}/g, (whole, key: string) => (key in values ? values[key] : whole));
}

// ---- errors ----------------------------------------------------------------------------------------------

/** The directory could not be asked (or would not let the hub ask): an outage, with a short cause. */
class Unreachable extends Error {
  constructor(readonly short: string) {
    super(short);
  }
}

/** Invalid credentials (49), no such object (32), a DN that is no DN (34): the person is not who they say. */
const NOT_THIS_PERSON = new Set([49, 32, 34]);
/** Result codes that are the server's own trouble, not an answer: busy, unavailable, limits, time. */
const SERVER_TROUBLE = new Set([3, 11, 51, 52, 80]);

const TLS_CODES = /^(ERR_TLS_|ERR_SSL_|UNABLE_TO_|CERT_|DEPTH_ZERO_|SELF_SIGNED_|HOSTNAME_MISMATCH)/;

/** A short cause for the reason line: never the whole stack, never anything the person typed. */
function shortCause(e: unknown): string {
  if (e instanceof Unreachable) return e.short;
  if (e instanceof ResultCodeError) return resultName(e);
  const err = e as NodeJS.ErrnoException;
  const code = typeof err?.code === 'string' ? err.code : '';
  const message = String(err?.message ?? e);
  if (TLS_CODES.test(code) || /certificate|ssl|tls|handshake/i.test(message)) return `TLS: ${cap(message.split('\n')[0], 120)}`;
  switch (code) {
    case 'ECONNREFUSED': return 'connection refused';
    case 'ETIMEDOUT': return 'timed out';
    case 'ECONNRESET': case 'EPIPE': return 'connection reset';
    case 'ENOTFOUND': case 'EAI_AGAIN': return 'host not found';
    case 'EHOSTUNREACH': case 'ENETUNREACH': return 'no route to host';
  }
  if (/^Connection timeout/.test(message)) return 'connect timed out';
  if (/Operation timed out/.test(message)) return 'timed out';
  if (/Connection closed|Socket connection not established|Socket error/.test(message)) return 'connection closed';
  return cap(code ? `${code}: ${message.split('\n')[0]}` : message.split('\n')[0], 120);
}

const resultName = (e: ResultCodeError) => `${e.name.replace(/Error$/, '') || 'result'} (${e.code})`;

/** Anything that is not an LDAP result (sockets, TLS, our deadline) or a result that is the server's trouble. */
const isOutage = (e: unknown) => !(e instanceof ResultCodeError) || SERVER_TROUBLE.has(e.code);

// ---- the backend -----------------------------------------------------------------------------------------

type Values = string | string[];

/** An entry's attribute by its configured name, whatever the server's case; Buffers (binary values) in base64. */
function attribute(entry: Entry, name: string): Values | undefined {
  const key = Object.keys(entry).find((k) => k !== 'dn' && k.toLowerCase() === name.toLowerCase());
  if (key === undefined) return undefined;
  const raw = entry[key];
  const list = (Array.isArray(raw) ? raw : [raw]).map((v) => (Buffer.isBuffer(v) ? v.toString('base64') : String(v)));
  if (!list.length) return undefined;
  return list.length === 1 ? list[0] : list;
}

const first = (v: Values | undefined) => (Array.isArray(v) ? v[0] : v);

export const createLdapAuthenticator: AuthenticatorFactory = ({ config, log }: AuthenticatorDeps): Authenticator => {
  const L = config.LDAPAuthenticator;
  const problems: string[] = [];

  const tlsKwargs = L.tls_kwargs as { ca_certs_file?: string; validate?: 'CERT_REQUIRED' | 'CERT_NONE' };
  // the CA read and parsed once, here, into one TLS context every connection shares: no file read and no
  // certificate parsing per login
  let ca: string | undefined;
  if (tlsKwargs.ca_certs_file) {
    try {
      ca = readFileSync(tlsKwargs.ca_certs_file, 'utf8');
      if (!ca.includes('-----BEGIN CERTIFICATE-----')) problems.push(`LDAPAuthenticator.tls_kwargs.ca_certs_file: ${tlsKwargs.ca_certs_file} holds no PEM certificate`);
    } catch (e) {
      problems.push(`LDAPAuthenticator.tls_kwargs.ca_certs_file: cannot read ${tlsKwargs.ca_certs_file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
    }
  }
  let secureContext: SecureContext | undefined;
  try {
    secureContext = createSecureContext(ca ? { ca } : {});
  } catch (e) {
    problems.push(`LDAPAuthenticator.tls_kwargs.ca_certs_file: ${tlsKwargs.ca_certs_file} is not a usable CA certificate (${cap((e as Error).message, 80)})`);
  }
  const host = L.server_address.trim();
  const port = L.server_port || (L.tls_strategy === 'on_connect' ? 636 : 389);
  const urlHost = isIP(host) === 6 ? `[${host}]` : host;
  const url = `${L.tls_strategy === 'on_connect' ? 'ldaps' : 'ldap'}://${urlHost}:${port}`;
  // secure unless told otherwise: CERT_NONE is the one way to accept any certificate
  const tlsOptions: ConnectionOptions = {
    secureContext,
    rejectUnauthorized: tlsKwargs.validate !== 'CERT_NONE',
    host,
    ...(host && !isIP(host) ? { servername: host } : {}),
  };
  let usernameRe: RegExp;
  try {
    usernameRe = new RegExp(L.valid_username_regex);
  } catch {
    usernameRe = /$^/; // shared/config.ts refuses it first; refuse every name if it ever gets here
  }

  if (L.tls_strategy === 'insecure' && host) {
    log.warn({ event: 'ldap.insecure', server: host }, 'LDAPAuthenticator.tls_strategy "insecure": passwords go to the directory in the clear');
  }
  if (!host) problems.push('LDAPAuthenticator.server_address: required with Hub.authenticator_class "ldap"');
  else if (!URL.canParse(url) || new URL(url).hostname === '') problems.push(`LDAPAuthenticator.server_address: ${JSON.stringify(host)} is not a host name or address`);
  if (!L.lookup_dn && L.bind_dn_template.length === 0) {
    problems.push('LDAPAuthenticator: set bind_dn_template (e.g. ["uid={username},ou=people,dc=example,dc=org"]) or lookup_dn with user_search_base');
  }
  if (L.lookup_dn && !L.user_search_base.trim()) problems.push('LDAPAuthenticator.user_search_base: required with lookup_dn');
  if (L.lookup_dn && !L.lookup_dn_search_filter.includes('{login}')) problems.push('LDAPAuthenticator.lookup_dn_search_filter: must contain {login}');
  const filterProblem = (option: string, template: string, values: Record<string, string>) => {
    try {
      FilterParser.parseString(fill(template, values));
    } catch (e) {
      problems.push(`LDAPAuthenticator.${option}: ${JSON.stringify(template)} is not an LDAP filter (${cap((e as Error).message, 80)})`);
    }
  };
  if (L.lookup_dn) filterProblem('lookup_dn_search_filter', L.lookup_dn_search_filter, { login_attr: L.user_attribute, login: 'x' });
  if (L.allowed_groups.length || L.admin_groups.length || L.group_search_base) {
    filterProblem('group_search_filter', L.group_search_filter, { userdn: 'uid=x,dc=example', uid: 'x' });
  }
  if ((L.lookup_dn_search_user === '') !== (L.lookup_dn_search_password === '') && L.lookup_dn) {
    problems.push('LDAPAuthenticator.lookup_dn_search_user and lookup_dn_search_password: set both (a search account) or neither (anonymous search)');
  }

  /** Every attribute the person's entry is read for. */
  const entryAttributes = [...new Set(['mail', 'displayName', ...L.auth_state_attributes, ...(L.lookup_dn_user_dn_attribute ? [L.lookup_dn_user_dn_attribute] : [])])];
  const groupAttributes = L.group_attributes.length ? [...L.group_attributes] : ['cn'];
  const checkedGroups = [...new Set([...L.allowed_groups, ...L.admin_groups])];
  const allowedSet = new Set(L.allowed_groups);
  const adminSet = new Set(L.admin_groups);

  /** A group entry's hub name: the first of group_attributes it has. */
  function groupName(entry: Entry): string | undefined {
    for (const a of groupAttributes) {
      const v = first(attribute(entry, a));
      if (v) return v;
    }
    return undefined;
  }

  /**
   * One conversation with the directory, bounded by the deadline: a client of its own, the work, and the
   * connection closed whatever happens. After the deadline no further request is sent (ldapts would
   * otherwise reconnect for the next one).
   */
  async function withDirectory<T>(ctx: CallContext, work: (c: Conn) => Promise<T>): Promise<T> {
    const left = ctx.deadline - Date.now();
    if (left <= 0) throw new Unreachable('no time left before the deadline');
    // ldapts speaks TLS from the first byte whenever it is given tlsOptions: only for on_connect
    const client = new Client({ url, timeout: left, connectTimeout: left, ...(L.tls_strategy === 'on_connect' ? { tlsOptions: { ...tlsOptions } } : {}) });
    let over = false;
    const conn: Conn = {
      async run<R>(op: () => Promise<R>): Promise<R> {
        if (over) throw new Unreachable('timed out');
        return op();
      },
      client,
      log: ctx.log,
    };
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        over = true;
        reject(new Unreachable('timed out'));
      }, left);
    });
    const startTls = async () => {
      try {
        // ldapts keeps the options object (it adds the socket): a copy per connection
        await conn.run(() => client.startTLS({ ...tlsOptions }));
      } catch (e) {
        throw e instanceof Unreachable ? e : new Unreachable(`StartTLS: ${shortCause(e)}`);
      }
    };
    try {
      return await Promise.race([(async () => {
        if (L.tls_strategy === 'before_bind') await startTls();
        return work(conn);
      })(), deadline]);
    } finally {
      over = true;
      clearTimeout(timer);
      // unbind destroys the socket whatever the server does; nothing waits on it
      client.unbind().catch(() => {});
    }
  }

  /** Binds as `dn`: true when it took, false when the directory says these are not someone's credentials. */
  async function bindAs(conn: Conn, dn: string, password: string): Promise<boolean> {
    // ldapts reads a few words as SASL mechanism names instead of DNs; a template never makes one, a search
    // result might in theory: not a person
    if (/^(EXTERNAL|PLAIN|DIGEST-MD5|SCRAM-SHA-1|SCRAM-SHA-256|GSSAPI)$/i.test(dn)) return false;
    try {
      await conn.run(() => conn.client.bind(dn, password));
      return true;
    } catch (e) {
      if (e instanceof ResultCodeError && NOT_THIS_PERSON.has(e.code)) return false;
      if (isOutage(e)) throw e;
      // another answer (unwilling to perform: a disabled account, a policy): a refusal, said in the log
      conn.log.info({ event: 'ldap.bind_refused', dn: cap(dn), result: resultName(e as ResultCodeError) }, 'the directory refused a bind');
      return false;
    }
  }

  type Found = { dn: string; name: string } | { refused: string };

  /** lookup_dn: the one entry whose user_attribute is `username`. */
  async function lookup(conn: Conn, username: string): Promise<Found> {
    if (L.lookup_dn_search_user) {
      let ok: boolean;
      try {
        await conn.run(() => conn.client.bind(L.lookup_dn_search_user, L.lookup_dn_search_password));
        ok = true;
      } catch (e) {
        if (isOutage(e)) throw e;
        ok = false;
        conn.log.error({ event: 'ldap.search_user_refused', dn: cap(L.lookup_dn_search_user), result: resultName(e as ResultCodeError) }, 'the directory refused lookup_dn_search_user');
      }
      if (!ok) throw new Unreachable('the directory refused lookup_dn_search_user');
    }
    const filter = fill(L.lookup_dn_search_filter, { login_attr: L.user_attribute, login: escapeFilterValue(username) });
    let entries: Entry[];
    try {
      ({ searchEntries: entries } = await conn.run(() => conn.client.search(L.user_search_base, {
        scope: 'sub', filter, sizeLimit: 2, attributes: L.lookup_dn_user_dn_attribute ? [L.lookup_dn_user_dn_attribute] : ['1.1'],
      })));
    } catch (e) {
      if (isOutage(e)) throw e;
      // no such base, no right to search: the hub cannot tell who this is, whoever it is
      conn.log.error({ event: 'ldap.lookup_failed', base: cap(L.user_search_base), result: resultName(e as ResultCodeError) }, 'the lookup_dn search failed');
      throw new Unreachable(`lookup_dn search refused: ${resultName(e as ResultCodeError)}`);
    }
    if (entries.length === 0) return { refused: 'no such person' };
    if (entries.length > 1) {
      conn.log.warn({ event: 'ldap.lookup_ambiguous', base: cap(L.user_search_base) }, 'more than one entry matches the login: refused');
      return { refused: 'more than one entry matches' };
    }
    const [entry] = entries;
    let name = username;
    if (L.lookup_dn_user_dn_attribute && L.use_lookup_dn_username) {
      const v = first(attribute(entry, L.lookup_dn_user_dn_attribute));
      if (!v) {
        conn.log.warn({ event: 'ldap.lookup_no_name', dn: cap(entry.dn), attribute: L.lookup_dn_user_dn_attribute }, 'the found entry has no lookup_dn_user_dn_attribute: refused');
        return { refused: `entry has no ${L.lookup_dn_user_dn_attribute}` };
      }
      name = v;
    }
    return { dn: L.escape_userdn ? escapeFoundDn(entry.dn) : entry.dn, name };
  }

  /** A search the person's login does not hang on: a refusal (no access, no such entry) reads as nothing found. */
  async function searchOrNothing(conn: Conn, base: string, options: Parameters<Client['search']>[1], what: string): Promise<Entry[]> {
    try {
      return (await conn.run(() => conn.client.search(base, options))).searchEntries;
    } catch (e) {
      if (isOutage(e)) throw e;
      conn.log.warn({ event: 'ldap.search_refused', base: cap(base), what, result: resultName(e as ResultCodeError) }, 'a directory search was refused: read as nothing found');
      return [];
    }
  }

  async function authenticate({ username, password }: { username: string; password: string }, ctx: CallContext): Promise<Verdict> {
    if (typeof username !== 'string' || !username || !usernameRe.test(username)) return { ok: false, reason: 'name refused by valid_username_regex' };
    if (typeof password !== 'string' || password === '') return { ok: false, reason: 'empty password' };
    const started = Date.now();
    try {
      return await withDirectory(ctx, async (conn): Promise<Verdict> => {
        // who: a DN that binds with the password
        let userdn: string | undefined;
        let name = username;
        if (L.lookup_dn) {
          const found = await lookup(conn, username);
          if ('refused' in found) {
            ctx.log.debug({ event: 'ldap.refused', why: found.refused }, 'ldap login refused');
            return { ok: false, reason: 'invalid credentials' };
          }
          if (await bindAs(conn, found.dn, password)) ({ dn: userdn, name } = found);
        } else {
          const value = escapeDnValue(username);
          for (const template of L.bind_dn_template) {
            const dn = fill(template, { username: value });
            if (await bindAs(conn, dn, password)) {
              userdn = dn;
              break;
            }
          }
        }
        if (userdn === undefined) return { ok: false, reason: 'invalid credentials' };

        // what the directory says about them, asked as them
        const [entry] = await searchOrNothing(conn, userdn, { scope: 'base', attributes: entryAttributes }, 'the person\'s entry');
        const groupFilter = fill(L.group_search_filter, { userdn: escapeFilterValue(userdn), uid: escapeFilterValue(username) });
        const memberOf = new Map<string, Entry>();
        for (const group of checkedGroups) {
          const [g] = await searchOrNothing(conn, group, { scope: 'base', filter: groupFilter, attributes: groupAttributes }, 'a group');
          if (g) memberOf.set(group, g);
        }
        let groups: string[] | undefined;
        if (L.group_search_base && config.Authenticator.manage_groups) {
          const found = await searchOrNothing(conn, L.group_search_base, { scope: 'sub', filter: groupFilter, attributes: groupAttributes }, 'groups');
          groups = found.map(groupName).filter((n): n is string => Boolean(n));
        } else if (checkedGroups.length) {
          groups = [...memberOf.values()].map(groupName).filter((n): n is string => Boolean(n));
        }
        const identity: Identity = { name };
        if (L.allowed_groups.length && [...memberOf.keys()].some((g) => allowedSet.has(g))) identity.allowed = true;
        if (L.admin_groups.length && [...memberOf.keys()].some((g) => adminSet.has(g))) identity.admin = true;
        if (groups) identity.groups = [...new Set(groups)];
        const mail = entry && first(attribute(entry, 'mail'));
        if (mail) identity.email = mail;
        // what clients show of the person (user_info)
        const displayName = entry && first(attribute(entry, 'displayName'));
        if (displayName) identity.userInfo = { display_name: displayName };
        if (L.auth_state_attributes.length) {
          const userAttributes: Record<string, Values> = {};
          for (const a of L.auth_state_attributes) {
            const v = entry && attribute(entry, a);
            if (v !== undefined) userAttributes[a] = v;
          }
          identity.authState = { user_attributes: userAttributes };
        }
        ctx.log.debug({ event: 'ldap.login', dn: cap(userdn), groups: memberOf.size, ms: Date.now() - started }, 'ldap login');
        return { ok: true, identity };
      });
    } catch (e) {
      if (e instanceof TypeError || e instanceof RangeError || e instanceof ReferenceError || (e instanceof ResultCodeError && !isOutage(e))) {
        // not a directory trouble we know: a bug here, not an outage; still an answer, never a 500
        ctx.log.error({ event: 'ldap.error', err: cap(String((e as Error).stack ?? e), 2000) }, 'ldap login failed unexpectedly');
        return { ok: false, unavailable: true, reason: `ldap backend error: ${shortCause(e)}` };
      }
      const cause = shortCause(e);
      ctx.log.warn({ event: 'ldap.unavailable', url, cause, ms: Date.now() - started }, 'the directory could not be asked');
      return { ok: false, unavailable: true, reason: `directory unreachable: ${cause}` };
    }
  }

  return {
    offer: { form: true },
    admitsAllByDefault: false,
    hasAllowRule: L.allowed_groups.length > 0,
    authenticate,
    configProblems: () => [...problems],
  };
};

interface Conn {
  client: Client;
  log: CallContext['log'];
  /** one request, unless the deadline has passed */
  run<R>(op: () => Promise<R>): Promise<R>;
}
