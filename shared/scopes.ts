// Scopes and roles: the one place that decides what a requester may see and do.
// Pure (no I/O); vocabulary closures, parsed scopes and indexes of expanded sets are memoised.
//
// A scope string is `base` or `base!kind=value` (kind: user | server | group | service;
// a server value is `<user>/<server>`, the default server being `<user>/`). Bare `!user`,
// `!server`, `!service` refer to the token's owner or issuing OAuth client and are resolved
// by expandScopes. "Held" sets are expanded sets: every string is a concrete scope.
import { pushAll } from './lists.js';

export type ScopeOwner = { kind: 'user' | 'service'; name: string };

/** The OAuth client that issued a token (the hub's own client is "no issuer"). */
export type ScopeIssuer = { kind: 'server'; user: string; name: string } | { kind: 'service'; name: string };

export interface ScopeDefinition {
  description: string;
  subscopes?: string[];
}

export type FilterKind = 'user' | 'server' | 'group' | 'service';
export type BareFilter = 'user' | 'server' | 'service';

/** A validated scope; `selfFilter` marks the bare forms that expandScopes resolves. */
export interface ParsedScope {
  base: string;
  filter?: { kind: FilterKind; value: string };
  selfFilter?: BareFilter;
}

export type Resource =
  | { kind: 'user'; name: string; groups: string[] }
  | { kind: 'server'; user: string; name: string; groups: string[] }
  | { kind: 'group'; name: string }
  | { kind: 'service'; name: string };

export interface RoleSpec {
  name: string;
  description: string;
  scopes: string[];
}

// ---------------------------------------------------------------------------------------
// Vocabulary

const def = (description: string, ...subscopes: string[]): ScopeDefinition => defOf(description, subscopes);
const defOf = (description: string, subscopes: readonly string[]): ScopeDefinition =>
  Object.freeze(subscopes.length > 0 ? { description, subscopes: Object.freeze([...subscopes]) as string[] } : { description });

/** The built-in vocabulary and hierarchy (6.0): validation and expansion read it. */
export const SCOPE_DEFINITIONS: Readonly<Record<string, ScopeDefinition>> = Object.freeze({
  '(no_scope)': def('Identify the owner of the requesting entity; grants nothing.'),
  self: def("The requester's own resources (nothing for services)."),
  inherit: def('Everything the owner of the token can do.'),
  'admin-ui': def('Open the admin page (each action still needs its own scope).'),
  'admin:users': def(
    'Administer users, including their auth state.',
    'admin:auth_state',
    'users',
    'read:roles:users',
    'delete:users',
  ),
  'admin:auth_state': def("Read users' auth state."),
  users: def('Read and write user models (not servers, tokens or auth state).', 'read:users', 'list:users', 'users:activity'),
  'delete:users': def('Delete users.'),
  'list:users': def('List users, at least their names.', 'read:users:name'),
  'read:users': def(
    'Read user models, including the default server URL.',
    'read:users:name',
    'read:users:groups',
    'read:users:activity',
  ),
  'read:users:name': def('Read user names.'),
  'read:users:groups': def("Read users' group memberships."),
  'read:users:activity': def("Read users' last activity."),
  'read:roles': def('Read role assignments.', 'read:roles:users', 'read:roles:services', 'read:roles:groups'),
  'read:roles:users': def("Read users' role assignments."),
  'read:roles:services': def("Read services' role assignments."),
  'read:roles:groups': def("Read groups' role assignments."),
  'users:activity': def('Post user and server activity.', 'read:users:activity'),
  'admin:servers': def('Administer servers, including their internal state.', 'admin:server_state', 'servers'),
  'admin:server_state': def('Read and write server state.'),
  servers: def('Start and stop servers.', 'read:servers', 'start:servers', 'delete:servers'),
  'read:servers': def('Read server models (not state) and owner names.', 'read:users:name'),
  'start:servers': def('Start, create and edit servers.'),
  'delete:servers': def('Stop and delete servers.'),
  tokens: def('Read, create and delete tokens.', 'read:tokens'),
  'read:tokens': def('Read tokens.'),
  'admin:groups': def('Create and delete groups, and everything in groups.', 'groups', 'read:roles:groups', 'delete:groups'),
  groups: def('Read and write groups and their membership.', 'read:groups', 'list:groups'),
  'list:groups': def('List groups, at least their names.', 'read:groups:name'),
  'read:groups': def('Read group models.', 'read:groups:name'),
  'read:groups:name': def('Read group names.'),
  'delete:groups': def('Delete groups.'),
  'admin:services': def(
    'Create, read and delete runtime services.',
    'list:services',
    'read:services',
    'read:roles:services',
  ),
  'list:services': def('List services.', 'read:services:name'),
  'read:services': def('Read service models.', 'read:services:name'),
  'read:services:name': def('Read service names.'),
  'read:hub': def('Read detailed hub information.'),
  'access:servers': def('Use servers through the browser or the API.'),
  'access:services': def('Use services through the browser or the API.'),
  'users:shares': def("Read and revoke a user's incoming shares.", 'read:users:shares'),
  'read:users:shares': def('Read servers shared with a user.'),
  'groups:shares': def("Read and revoke a group's incoming shares.", 'read:groups:shares'),
  'read:groups:shares': def('Read servers shared with a group.'),
  'read:shares': def('Read who has shared access to servers.'),
  shares: def('Manage sharing of servers.', 'access:servers', 'read:shares', 'users:shares', 'groups:shares'),
  proxy: def('Read the routing table, resync and repoint the proxy.'),
  shutdown: def('Shut the hub down.'),
  'read:metrics': def('Read metrics.'),
  'servers:location': def("Report where a server listens (only a server's own token holds it, for that server)."),
});

/**
 * Scopes no role, share, OAuth grant or requested token can hold: each server's own token gets them, for
 * that server alone (the spawner issues it), so they survive the owner intersection only on such a token.
 */
export const SERVER_TOKEN_SCOPES: ReadonlySet<string> = new Set(['servers:location']);

/** Scopes that stand for other scopes and never name an action themselves. */
export const META_SCOPES: ReadonlySet<string> = new Set(['(no_scope)', 'self', 'inherit']);

/** What `self` means for a user (each carried with `!user=<name>`); closed under subscopes. */
const SELF_ROOTS = ['read:users', 'users:activity', 'users:shares', 'read:shares', 'servers', 'tokens', 'access:servers'];

/** A vocabulary is the built-ins plus the operator's custom scopes; everything that parses takes one. */
export interface ScopeVocabulary {
  readonly definitions: Readonly<Record<string, ScopeDefinition>>;
}

export const BUILTIN_VOCABULARY: ScopeVocabulary = Object.freeze({ definitions: SCOPE_DEFINITIONS });

const CUSTOM_SCOPE_NAME = /^custom:[a-z0-9][a-z0-9_\-*:]+[a-z0-9_*]$/;

/** Custom scopes come from configuration, so they are checked once here rather than at every use. */
export function withCustomScopes(
  custom: Readonly<Record<string, unknown>>,
): { ok: true; vocabulary: ScopeVocabulary } | { ok: false; error: string } {
  const definitions: Record<string, ScopeDefinition> = { ...SCOPE_DEFINITIONS };
  for (const [name, spec] of Object.entries(custom)) {
    const problem = customScopeProblem(name, spec, custom);
    if (problem) return { ok: false, error: problem };
    const { description, subscopes } = spec as ScopeDefinition;
    definitions[name] = defOf(description, subscopes ?? []);
  }
  return { ok: true, vocabulary: Object.freeze({ definitions: Object.freeze(definitions) }) };
}

function customScopeProblem(name: string, spec: unknown, all: Readonly<Record<string, unknown>>): string | null {
  if (!CUSTOM_SCOPE_NAME.test(name)) return `Custom scope name ${JSON.stringify(name)} must match ${CUSTOM_SCOPE_NAME.source}`;
  if (typeof spec !== 'object' || spec === null) return `Custom scope ${name} must be an object`;
  const { description, subscopes } = spec as { description?: unknown; subscopes?: unknown };
  if (typeof description !== 'string' || description === '') return `Custom scope ${name} needs a description`;
  if (subscopes === undefined) return null;
  if (!Array.isArray(subscopes)) return `Subscopes of custom scope ${name} must be a list`;
  const bad = subscopes.find((s) => typeof s !== 'string' || !s.startsWith('custom:') || !Object.hasOwn(all, s));
  return bad === undefined ? null : `Subscope ${JSON.stringify(bad)} of ${name} is not a defined custom scope`;
}

// ---------------------------------------------------------------------------------------
// Parsing and validation

const FILTER_KINDS: readonly string[] = ['user', 'server', 'group', 'service'];
const BARE_FILTERS: readonly string[] = ['user', 'server', 'service'];

type Syntax = { base: string; kind?: string; value?: string; bare?: string };

/** Splits without consulting a vocabulary, so held sets with custom scopes index the same way. */
function splitScope(s: string): Syntax | null {
  const bang = s.indexOf('!');
  if (bang < 0) return { base: s };
  const base = s.slice(0, bang);
  const filter = s.slice(bang + 1);
  const eq = filter.indexOf('=');
  if (eq < 0) return BARE_FILTERS.includes(filter) ? { base, bare: filter } : null;
  const kind = filter.slice(0, eq);
  const value = filter.slice(eq + 1);
  if (!FILTER_KINDS.includes(kind) || value === '') return null;
  if (kind === 'server' && !value.includes('/')) return null; // `<user>/<server>`; anything else can match nothing
  return { base, kind, value };
}

const PARSE_MEMO_LIMIT = 50_000;
const parseMemo = new WeakMap<ScopeVocabulary, Map<string, ParsedScope | null>>();

/** One parse per distinct string and vocabulary: scopes are parsed on every request. */
export function parseScope(s: string, vocabulary: ScopeVocabulary = BUILTIN_VOCABULARY): ParsedScope | null {
  let memo = parseMemo.get(vocabulary);
  if (!memo) parseMemo.set(vocabulary, (memo = new Map()));
  if (memo.has(s)) return memo.get(s)!;
  if (memo.size >= PARSE_MEMO_LIMIT) memo.clear();
  const parsed = parseUncached(s, vocabulary);
  memo.set(s, parsed);
  return parsed;
}

function parseUncached(s: string, vocabulary: ScopeVocabulary): ParsedScope | null {
  const syntax = splitScope(s);
  if (!syntax || !Object.hasOwn(vocabulary.definitions, syntax.base)) return null;
  const { base, kind, value, bare } = syntax;
  if (base !== s && META_SCOPES.has(base)) return null; // metascopes take no filter
  if (bare) return Object.freeze({ base, selfFilter: bare as BareFilter });
  if (kind) return Object.freeze({ base, filter: Object.freeze({ kind: kind as FilterKind, value: value! }) });
  return Object.freeze({ base });
}

/** Roles, tokens, shares and OAuth requests are refused on their first bad scope, with a reason to show. */
export function validateScopes(
  scopes: Iterable<string>,
  vocabulary: ScopeVocabulary = BUILTIN_VOCABULARY,
): { ok: true } | { ok: false; bad: string; reason: string } {
  for (const s of scopes) {
    if (parseScope(s, vocabulary) === null) return { ok: false, bad: s, reason: invalidReason(s, vocabulary) };
    if (SERVER_TOKEN_SCOPES.has(s.split('!', 1)[0]!)) return { ok: false, bad: s, reason: `Scope '${s}' is granted only to a server's own token` };
  }
  return { ok: true };
}

function invalidReason(s: string, vocabulary: ScopeVocabulary): string {
  const base = s.split('!', 1)[0]!;
  if (base === 'all') return "Scope 'all' does not exist; use 'inherit' for everything the owner can do";
  if (!Object.hasOwn(vocabulary.definitions, base)) return `Scope '${s}' not recognized`;
  return `Invalid filter in scope '${s}'`;
}

// ---------------------------------------------------------------------------------------
// Expansion

const closureMemo = new WeakMap<ScopeVocabulary, Map<string, readonly string[]>>();

/** The subscope closure of one base, computed once per vocabulary. */
function closureOf(base: string, vocabulary: ScopeVocabulary): readonly string[] {
  let memo = closureMemo.get(vocabulary);
  if (!memo) closureMemo.set(vocabulary, (memo = new Map()));
  let names = memo.get(base);
  if (!names) memo.set(base, (names = Object.freeze(walkSubscopes(base, vocabulary.definitions))));
  return names;
}

function walkSubscopes(base: string, definitions: Readonly<Record<string, ScopeDefinition>>): string[] {
  const seen = new Set<string>();
  const stack = [base];
  while (stack.length > 0) {
    const name = stack.pop()!;
    if (seen.has(name) || !Object.hasOwn(definitions, name)) continue;
    seen.add(name);
    pushAll(stack, definitions[name]!.subscopes ?? []);
  }
  return [...seen];
}

/** Carries a filter onto every implied scope; a server filter says nothing about user records. */
function filteredClosure(base: string, filter: string | undefined, vocabulary: ScopeVocabulary): string[] {
  const names = closureOf(base, vocabulary);
  if (filter === undefined) return [...names];
  const keep = filter.startsWith('server=') ? names.filter((n) => n === base || !n.startsWith('read:users')) : names;
  return keep.map((n) => `${n}!${filter}`);
}

/** The concrete scopes `self` stands for: a user's own resources. */
export function selfScopes(user: string): Set<string> {
  return new Set(SELF_ROOTS.flatMap((root) => filteredClosure(root, `user=${user}`, BUILTIN_VOCABULARY)));
}

function resolveBareFilter(bare: BareFilter, owner?: ScopeOwner, issuer?: ScopeIssuer): string | null {
  if (bare === 'user') return owner?.kind === 'user' ? `user=${owner.name}` : null;
  if (bare === 'server') return issuer?.kind === 'server' ? `server=${issuer.user}/${issuer.name}` : null;
  if (issuer?.kind === 'service') return `service=${issuer.name}`;
  return owner?.kind === 'service' ? `service=${owner.name}` : null;
}

export interface ExpandOptions {
  issuer?: ScopeIssuer;
  vocabulary?: ScopeVocabulary;
}

/**
 * Every check works on concrete scopes, so role and token scopes are expanded once:
 * subscopes with filters carried, `self` and bare filters resolved (unresolvable ones and
 * unknown scopes grant nothing). `inherit` stays as a marker for effectiveTokenScopes.
 */
export function expandScopes(scopes: Iterable<string>, owner?: ScopeOwner, options: ExpandOptions = {}): Set<string> {
  const out = new Set<string>();
  for (const s of scopes) for (const concrete of expandOne(s, owner, options)) out.add(concrete);
  return out;
}

function expandOne(s: string, owner: ScopeOwner | undefined, options: ExpandOptions): Iterable<string> {
  const vocabulary = options.vocabulary ?? BUILTIN_VOCABULARY;
  const parsed = parseScope(s, vocabulary);
  if (!parsed || parsed.base === '(no_scope)') return [];
  if (parsed.base === 'self') return owner?.kind === 'user' ? selfScopes(owner.name) : [];
  const filter = parsed.selfFilter
    ? resolveBareFilter(parsed.selfFilter, owner, options.issuer)
    : parsed.filter && `${parsed.filter.kind}=${parsed.filter.value}`;
  return filter === null ? [] : filteredClosure(parsed.base, filter, vocabulary);
}

// ---------------------------------------------------------------------------------------
// Indexed form of an expanded set: base -> everything, or the names allowed per filter kind

type Grant = 'all' | Record<FilterKind, Set<string>>;
type ScopeIndex = ReadonlyMap<string, Grant>;

const indexMemo = new WeakMap<ReadonlySet<string>, { size: number; index: ScopeIndex }>();

/** Held sets are checked many times per request; treat them as immutable once expanded. */
function indexOf(held: ReadonlySet<string>): ScopeIndex {
  const memo = indexMemo.get(held);
  if (memo && memo.size === held.size) return memo.index;
  const index = buildIndex(held);
  indexMemo.set(held, { size: held.size, index });
  return index;
}

function buildIndex(held: Iterable<string>): ScopeIndex {
  const index = new Map<string, Grant>();
  for (const s of held) {
    const syntax = splitScope(s);
    if (!syntax || syntax.bare) continue; // bare filters are unresolved, so they grant nothing
    const current = index.get(syntax.base);
    if (!syntax.kind) index.set(syntax.base, 'all');
    else if (current !== 'all') {
      const grant = current ?? emptyGrant();
      grant[syntax.kind as FilterKind].add(syntax.value!);
      index.set(syntax.base, grant);
    }
  }
  return index;
}

const emptyGrant = (): Record<FilterKind, Set<string>> => ({
  user: new Set(),
  server: new Set(),
  group: new Set(),
  service: new Set(),
});

const serverKey = (user: string, name: string): string => `${user}/${name}`;
const someIn = (names: ReadonlySet<string>, candidates: readonly string[]): boolean => candidates.some((c) => names.has(c));

/** A user filter reaches that user's servers; a group filter reaches its members and their servers. */
function grantCovers(grant: Grant, resource: Resource): boolean {
  if (grant === 'all') return true;
  switch (resource.kind) {
    case 'user':
      return grant.user.has(resource.name) || someIn(grant.group, resource.groups);
    case 'server':
      return (
        grant.server.has(serverKey(resource.user, resource.name)) ||
        grant.user.has(resource.user) ||
        someIn(grant.group, resource.groups)
      );
    case 'group':
      return grant.group.has(resource.name);
    case 'service':
      return grant.service.has(resource.name);
  }
}

// ---------------------------------------------------------------------------------------
// Checks

/** The one question behind every check; without a resource only the unfiltered scope will do. */
export function hasScope(held: ReadonlySet<string>, required: string, resource?: Resource): boolean {
  const grant = indexOf(held).get(required);
  if (grant === undefined) return false;
  return grant === 'all' || (resource !== undefined && grantCovers(grant, resource));
}

/**
 * Any one of `required` suffices. Holding a required scope only for other resources gives
 * 'not-found', so a resource's existence never leaks; not holding it at all gives 'forbidden'.
 */
export function accessDecision(
  held: ReadonlySet<string>,
  required: string | readonly string[],
  resource?: Resource,
): 'allow' | 'forbidden' | 'not-found' {
  const declared = typeof required === 'string' ? [required] : required;
  if (declared.some((s) => hasScope(held, s, resource))) return 'allow';
  const index = indexOf(held);
  return resource !== undefined && declared.some((s) => index.has(s)) ? 'not-found' : 'forbidden';
}

export type ListFilter = { users: Set<string>; groups: Set<string>; servers: Set<string>; services: Set<string> };

/** List endpoints return only what a filtered list scope names (resolve group filters by membership). */
export function listFilter(held: ReadonlySet<string>, base: string): 'all' | ListFilter | null {
  const grant = indexOf(held).get(base);
  if (grant === undefined) return null;
  if (grant === 'all') return 'all';
  return {
    users: new Set(grant.user),
    groups: new Set(grant.group),
    servers: new Set(grant.server),
    services: new Set(grant.service),
  };
}

// ---------------------------------------------------------------------------------------
// Intersection

export interface IntersectContext {
  groupsOfUser?: (user: string) => string[];
}

/**
 * A token or OAuth grant never exceeds what its owner or client allows: per base, keep each
 * name one side allows that the other side also covers (group filters only when both name them).
 * Both sets must be expanded.
 */
export function intersectScopes(
  a: ReadonlySet<string>,
  b: ReadonlySet<string>,
  ctx: IntersectContext = {},
): Set<string> {
  const groupsOf = ctx.groupsOfUser ?? (() => []);
  const other = indexOf(b);
  const out = new Set<string>();
  for (const [base, grantA] of indexOf(a)) {
    const grantB = other.get(base);
    if (grantB === undefined) continue;
    for (const s of render(base, intersectGrants(grantA, grantB, groupsOf))) out.add(s);
  }
  return out;
}

function intersectGrants(x: Grant, y: Grant, groupsOf: (user: string) => string[]): Grant {
  if (x === 'all') return y;
  if (y === 'all') return x;
  const out = emptyGrant();
  for (const [from, to] of [
    [x, y],
    [y, x],
  ] as const) {
    for (const kind of FILTER_KINDS as FilterKind[]) {
      for (const value of from[kind]) {
        if (grantCovers(to, filterResource(kind, value, groupsOf))) out[kind].add(value);
      }
    }
  }
  return out;
}

/** The resource a filter value names, so intersection reuses the resource check. */
function filterResource(kind: FilterKind, value: string, groupsOf: (user: string) => string[]): Resource {
  if (kind === 'user') return { kind, name: value, groups: groupsOf(value) };
  if (kind === 'server') {
    const slash = value.indexOf('/');
    const user = value.slice(0, slash);
    return { kind, user, name: value.slice(slash + 1), groups: groupsOf(user) };
  }
  return { kind, name: value };
}

function render(base: string, grant: Grant): string[] {
  if (grant === 'all') return [base];
  return (FILTER_KINDS as FilterKind[]).flatMap((kind) => [...grant[kind]].map((v) => `${base}!${kind}=${v}`));
}

/** Token creation and OAuth consent refuse what the holder lacks; this names exactly what that is. */
export function missingScopes(
  wanted: ReadonlySet<string>,
  held: ReadonlySet<string>,
  ctx: IntersectContext = {},
): string[] {
  const granted = intersectScopes(wanted, held, ctx);
  const index = indexOf(granted);
  // a filtered scope wanted beside its unfiltered form (`read:users:name!user=bob` and `read:users:name`) is covered by it
  return [...wanted].filter((s) => !granted.has(s) && !literallyCovered(index, s)).sort();
}

function literallyCovered(index: ScopeIndex, s: string): boolean {
  const syntax = splitScope(s);
  const grant = syntax && !syntax.bare ? index.get(syntax.base) : undefined;
  if (grant === undefined) return false;
  return grant === 'all' || (syntax!.kind !== undefined && grant[syntax!.kind as FilterKind].has(syntax!.value!));
}

// ---------------------------------------------------------------------------------------
// Tokens

/** Every identified requester may learn who it is, whatever its token's scopes. */
export function identifyScopes(owner: ScopeOwner): string[] {
  return owner.kind === 'user'
    ? [`read:users:name!user=${owner.name}`, `read:users:groups!user=${owner.name}`]
    : [`read:services:name!service=${owner.name}`];
}

/** `base` limited to one server (`<base>!server=<user>/<name>`): server tokens, OAuth clients and shares. */
export function scopeOnServer(base: string, user: string, name: string): string {
  return `${base}!server=${serverKey(user, name)}`;
}

/** A token from a server's or service's OAuth client is good for reaching that client. */
export function accessScopeFor(issuer: ScopeIssuer): string {
  return issuer.kind === 'server' ? scopeOnServer('access:servers', issuer.user, issuer.name) : `access:services!service=${issuer.name}`;
}

export interface TokenScopeContext extends IntersectContext {
  owner: ScopeOwner;
  /** The owner's current expanded scopes (roles incl. group roles, plus shares). */
  ownerScopes: ReadonlySet<string>;
  /** Absent for tokens issued by the hub's own client. */
  issuer?: ScopeIssuer;
  vocabulary?: ScopeVocabulary;
  /** The token is one the spawner issued to a server: its SERVER_TOKEN_SCOPES on its owner's servers count. */
  serverToken?: boolean;
}

/** Recomputed per request, so a token narrows as soon as its owner loses a permission. */
export function effectiveTokenScopes(raw: readonly string[], ctx: TokenScopeContext): Set<string> {
  if (raw.includes('inherit')) return new Set(ctx.ownerScopes);
  const extra = [...identifyScopes(ctx.owner), ...(ctx.issuer ? [accessScopeFor(ctx.issuer)] : [])];
  const requested = expandScopes([...raw, ...extra], ctx.owner, { issuer: ctx.issuer, vocabulary: ctx.vocabulary });
  const effective = intersectScopes(requested, ctx.ownerScopes, ctx);
  if (ctx.serverToken && ctx.owner.kind === 'user') {
    for (const s of raw) {
      const syntax = splitScope(s);
      if (syntax && SERVER_TOKEN_SCOPES.has(syntax.base) && syntax.kind === 'server' && syntax.value!.startsWith(`${ctx.owner.name}/`)) effective.add(s);
    }
  }
  return effective;
}

/** How `scope` is held: on everything, only on some resources (filtered), or not at all. */
export function scopeReach(held: ReadonlySet<string>, scope: string): 'all' | 'some' | 'none' {
  const grant = indexOf(held).get(scope);
  return grant === undefined ? 'none' : grant === 'all' ? 'all' : 'some';
}

/** Holding `scope` filtered to at least one server of `user` (e.g. `read:servers!server=alice/x`). */
export function hasScopeOnSomeServerOf(held: ReadonlySet<string>, scope: string, user: string): boolean {
  const grant = indexOf(held).get(scope);
  return grant !== undefined && grant !== 'all' && [...grant.server].some((key) => key.startsWith(`${user}/`));
}
