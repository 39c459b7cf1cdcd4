import test from 'ava';
import {
  META_SCOPES,
  SCOPE_DEFINITIONS,
  SERVER_TOKEN_SCOPES,
  accessDecision,
  accessScopeFor,
  effectiveTokenScopes,
  expandScopes,
  hasScope,
  identifyScopes,
  intersectScopes,
  listFilter,
  missingScopes,
  parseScope,
  selfScopes,
  validateScopes,
  withCustomScopes,
  type Resource,
} from '../../shared/scopes.js';
import { DEFAULT_ROLES, isValidRoleName } from '../../shared/roles.js';
import { groupModelFields, serviceModelFields, userModelFields } from '../../services/gateway/api/model-fields.js';

const roleScopes = (name: string): string[] => DEFAULT_ROLES.find((r) => r.name === name)!.scopes;
const sorted = (s: Iterable<string>): string[] => [...s].sort();
const user = (name: string, groups: string[] = []): Resource => ({ kind: 'user', name, groups });
const server = (owner: string, name = '', groups: string[] = []): Resource => ({ kind: 'server', user: owner, name, groups });
const ALICE = { kind: 'user', name: 'alice' } as const;
const membership: Record<string, string[]> = { x: ['g'], w: ['g'], y: ['h'], z: [] };
const groupsOfUser = (u: string): string[] => membership[u] ?? [];

// ---- vocabulary and roles

test('scopes: admin role expands to every built-in non-meta scope, unfiltered', (t) => {
  const admin = expandScopes(roleScopes('admin'));
  const builtins = Object.keys(SCOPE_DEFINITIONS).filter((s) => !META_SCOPES.has(s) && !SERVER_TOKEN_SCOPES.has(s));
  t.is(builtins.length, 45);
  t.deepEqual(sorted(admin), sorted(builtins));
  t.true([...admin].every((s) => !s.includes('!')));
});

test('scopes: default roles are user, admin, server and token with the reference scopes', (t) => {
  t.deepEqual(
    DEFAULT_ROLES.map((r) => r.name),
    ['user', 'admin', 'server', 'token'],
  );
  t.deepEqual(roleScopes('user'), ['self']);
  t.deepEqual(roleScopes('token'), ['inherit']);
  t.deepEqual(sorted(roleScopes('server')), ['access:servers!server', 'users:activity!user']);
  t.is(roleScopes('admin').length, 16);
  t.true(DEFAULT_ROLES.every((r) => validateScopes(r.scopes).ok));
});

test('scopes: every subscope named in the vocabulary is itself defined', (t) => {
  for (const [name, def] of Object.entries(SCOPE_DEFINITIONS)) {
    for (const sub of def.subscopes ?? []) t.true(sub in SCOPE_DEFINITIONS, `${name} -> ${sub}`);
    t.true(def.description.length > 0);
  }
});

test('scopes: role names follow the established pattern', (t) => {
  t.true(isValidRoleName('user'));
  t.true(isValidRoleName('data-team_v1.2'));
  t.false(isValidRoleName('ab'));
  t.false(isValidRoleName('Admin'));
  t.false(isValidRoleName('1abc'));
  t.false(isValidRoleName('abc-'));
});

// ---- expansion

test('scopes: self for a user is the 15 user-filtered scopes', (t) => {
  const expected = [
    'read:users',
    'read:users:name',
    'read:users:groups',
    'read:users:activity',
    'users:activity',
    'users:shares',
    'read:users:shares',
    'read:shares',
    'servers',
    'read:servers',
    'start:servers',
    'delete:servers',
    'tokens',
    'read:tokens',
    'access:servers',
  ].map((s) => `${s}!user=alice`);
  t.deepEqual(sorted(expandScopes(['self'], ALICE)), sorted(expected));
  t.deepEqual(sorted(selfScopes('alice')), sorted(expected));
  for (const excluded of ['list:users', 'admin:auth_state', 'read:roles:users', 'delete:users', 'admin:server_state']) {
    t.false(hasScope(expandScopes(['self'], ALICE), excluded, user('alice')), excluded);
  }
});

test('scopes: self grants nothing to a service or without an owner', (t) => {
  t.is(expandScopes(['self'], { kind: 'service', name: 'svc' }).size, 0);
  t.is(expandScopes(['self']).size, 0);
});

test('scopes: filters are carried onto every implied subscope', (t) => {
  const expanded = expandScopes(['admin:users!group=g']);
  t.deepEqual(
    sorted(expanded),
    sorted(
      [
        'admin:users',
        'admin:auth_state',
        'users',
        'read:users',
        'list:users',
        'users:activity',
        'read:users:name',
        'read:users:groups',
        'read:users:activity',
        'read:roles:users',
        'delete:users',
      ].map((s) => `${s}!group=g`),
    ),
  );
  t.deepEqual(sorted(expandScopes(['tokens!user=bob'])), ['read:tokens!user=bob', 'tokens!user=bob']);
});

test('scopes: a server filter is not carried onto implied read:users scopes', (t) => {
  t.deepEqual(sorted(expandScopes(['read:servers!server=bob/gpu'])), ['read:servers!server=bob/gpu']);
  t.deepEqual(sorted(expandScopes(['read:servers!user=bob'])), ['read:servers!user=bob', 'read:users:name!user=bob']);
  t.deepEqual(sorted(expandScopes(['read:users:name!server=bob/'])), ['read:users:name!server=bob/']);
});

test('scopes: bare filters resolve to the owner or issuing client, or are dropped', (t) => {
  const issuer = { kind: 'server', user: 'alice', name: 'gpu' } as const;
  t.deepEqual(
    sorted(expandScopes(roleScopes('server'), ALICE, { issuer })),
    ['access:servers!server=alice/gpu', 'read:users:activity!user=alice', 'users:activity!user=alice'],
  );
  t.deepEqual(sorted(expandScopes(roleScopes('server'), ALICE)), ['read:users:activity!user=alice', 'users:activity!user=alice']);
  t.deepEqual(sorted(expandScopes(['read:services!service'], { kind: 'service', name: 'svc' })), [
    'read:services!service=svc',
    'read:services:name!service=svc',
  ]);
  t.deepEqual(sorted(expandScopes(['access:services!service'], ALICE, { issuer: { kind: 'service', name: 'nb' } })), [
    'access:services!service=nb',
  ]);
  t.is(expandScopes(['read:users!user'], { kind: 'service', name: 'svc' }).size, 0);
});

test('scopes: inherit stays a marker and unknown scopes grant nothing', (t) => {
  t.deepEqual(sorted(expandScopes(['inherit'])), ['inherit']);
  t.is(expandScopes(['bogus', 'all', '(no_scope)', 'read:users!bogus=x']).size, 0);
});

test('scopes: custom scopes validate, expand with their subscopes and carry filters', (t) => {
  const made = withCustomScopes({
    'custom:jupyter_server:read:*': { description: 'read files' },
    'custom:jupyter_server:write:*': { description: 'write files', subscopes: ['custom:jupyter_server:read:*'] },
  });
  if (!made.ok) return t.fail(made.error);
  const vocabulary = made.vocabulary;
  t.true(validateScopes(['custom:jupyter_server:write:*!user=alice'], vocabulary).ok);
  t.false(validateScopes(['custom:jupyter_server:write:*']).ok); // unknown to the built-in vocabulary
  t.false(validateScopes(['custom:undefined'], vocabulary).ok);
  t.deepEqual(sorted(expandScopes(['custom:jupyter_server:write:*!user=alice'], undefined, { vocabulary })), [
    'custom:jupyter_server:read:*!user=alice',
    'custom:jupyter_server:write:*!user=alice',
  ]);
  t.true(expandScopes(['read:users'], undefined, { vocabulary }).has('read:users:name'));
});

test('scopes: bad custom scope definitions are refused', (t) => {
  t.false(withCustomScopes({ 'custom:Bad': { description: 'x' } }).ok);
  t.false(withCustomScopes({ 'read:things': { description: 'x' } }).ok);
  t.false(withCustomScopes({ 'custom:ok': {} }).ok);
  t.false(withCustomScopes({ 'custom:ok': { description: 'x', subscopes: ['read:users'] } }).ok);
  t.false(withCustomScopes({ 'custom:ok': { description: 'x', subscopes: ['custom:missing'] } }).ok);
  t.true(withCustomScopes({}).ok);
});

// ---- parsing and validation

test('scopes: parseScope splits base and filter', (t) => {
  t.deepEqual(parseScope('read:users'), { base: 'read:users' });
  t.deepEqual(parseScope('read:users!user=alice'), { base: 'read:users', filter: { kind: 'user', value: 'alice' } });
  t.deepEqual(parseScope('access:servers!server=alice/'), {
    base: 'access:servers',
    filter: { kind: 'server', value: 'alice/' },
  });
  t.deepEqual(parseScope('read:groups!group=g'), { base: 'read:groups', filter: { kind: 'group', value: 'g' } });
  t.deepEqual(parseScope('read:services!service=s'), { base: 'read:services', filter: { kind: 'service', value: 's' } });
  t.deepEqual(parseScope('users:activity!user'), { base: 'users:activity', selfFilter: 'user' });
  t.is(parseScope('nope'), null);
});

test('scopes: validateScopes rejects unknown scopes and malformed filters', (t) => {
  t.deepEqual(validateScopes(['read:users', 'read:users!user=x', 'self', 'inherit', 'access:servers!server']), { ok: true });
  const cases = [
    'read:users!bogus=x',
    'read:users!user=',
    'read:users!group',
    'read:users!',
    'read:servers!server=alice',
    'self!user=alice',
    'inherit!user=alice',
    'read:userz',
    '',
  ];
  for (const bad of cases) {
    const result = validateScopes(['read:users', bad, 'also:bad']);
    t.like(result, { ok: false, bad }, bad);
  }
  const unknown = validateScopes(['read:userz']);
  t.true(!unknown.ok && unknown.reason.includes('not recognized'));
  const malformed = validateScopes(['read:users!bogus=x']);
  t.true(!malformed.ok && malformed.reason.includes('filter'));
});

test("scopes: 'all' is refused with a hint to use inherit", (t) => {
  const result = validateScopes(['all']);
  t.false(result.ok);
  t.true(!result.ok && result.reason.includes('inherit'));
});

// ---- intersection

test('scopes: unfiltered intersected with filtered gives the filtered form', (t) => {
  const a = new Set(['read:users']);
  const b = new Set(['read:users!user=x']);
  t.deepEqual(sorted(intersectScopes(a, b)), ['read:users!user=x']);
  t.deepEqual(sorted(intersectScopes(b, a)), ['read:users!user=x']);
  t.deepEqual(sorted(intersectScopes(a, new Set(['read:users']))), ['read:users']);
});

test('scopes: a server filter lies within the same user filter, not the other way round', (t) => {
  const byServer = new Set(['read:servers!server=x/y']);
  const byUser = new Set(['read:servers!user=x']);
  t.deepEqual(sorted(intersectScopes(byServer, byUser)), ['read:servers!server=x/y']);
  t.deepEqual(sorted(intersectScopes(byUser, byServer)), ['read:servers!server=x/y']);
  t.is(intersectScopes(byServer, new Set(['read:servers!user=other'])).size, 0);
});

test('scopes: group filters intersect through the membership lookup', (t) => {
  const byGroup = new Set(['read:users!group=g', 'read:servers!group=g']);
  const byUser = new Set(['read:users!user=x', 'read:users!user=y', 'read:servers!server=x/', 'read:servers!server=y/']);
  t.deepEqual(sorted(intersectScopes(byGroup, byUser, { groupsOfUser })), ['read:servers!server=x/', 'read:users!user=x']);
  t.deepEqual(sorted(intersectScopes(byUser, byGroup, { groupsOfUser })), ['read:servers!server=x/', 'read:users!user=x']);
  t.is(intersectScopes(byGroup, byUser).size, 0); // no lookup: membership unknown
});

test('scopes: a group filter survives only when both sides name the group', (t) => {
  t.deepEqual(sorted(intersectScopes(new Set(['read:groups!group=g']), new Set(['read:groups!group=g']))), ['read:groups!group=g']);
  t.deepEqual(
    sorted(intersectScopes(new Set(['read:users!group=g']), new Set(['read:users!user=x']), { groupsOfUser })),
    ['read:users!user=x'],
  );
  t.is(intersectScopes(new Set(['read:users!group=g']), new Set(['read:users!group=h']), { groupsOfUser }).size, 0);
});

test('scopes: disjoint filters and bases held by one side only give nothing', (t) => {
  t.is(intersectScopes(new Set(['read:users!user=x']), new Set(['read:users!user=y'])).size, 0);
  t.is(intersectScopes(new Set(['read:services!service=a']), new Set(['read:services!service=b'])).size, 0);
  t.is(intersectScopes(new Set(['read:users']), new Set(['read:servers'])).size, 0);
  t.deepEqual(
    sorted(intersectScopes(new Set(['proxy', 'read:hub', 'shutdown']), new Set(['proxy', 'shutdown']))),
    ['proxy', 'shutdown'],
  );
});

test('scopes: missingScopes names what the holder lacks', (t) => {
  const owner = expandScopes(['self'], ALICE);
  t.deepEqual(missingScopes(expandScopes(['read:users!user=alice']), owner), []);
  t.deepEqual(missingScopes(new Set(['read:users', 'read:tokens!user=alice']), owner), ['read:users']);
  t.deepEqual(missingScopes(new Set(['read:servers!user=x']), new Set(['read:servers!group=g']), { groupsOfUser }), []);
  t.deepEqual(missingScopes(new Set(['read:servers!user=x']), new Set(['read:servers!server=x/'])), [
    'read:servers!user=x',
  ]);
});

test('scopes: missingScopes does not count a filtered scope held beside its unfiltered form as lacking', (t) => {
  // a user with `read:users:name` from a role also has `read:users:name!user=bob` from self
  const bob = expandScopes(['self', 'read:users:name'], { kind: 'user', name: 'bob' });
  t.deepEqual(missingScopes(bob, expandScopes(['admin:users'])), ['access:servers!user=bob', 'delete:servers!user=bob', 'read:servers!user=bob',
    'read:shares!user=bob', 'read:tokens!user=bob', 'read:users:shares!user=bob', 'servers!user=bob', 'start:servers!user=bob', 'tokens!user=bob', 'users:shares!user=bob']);
  t.deepEqual(missingScopes(new Set(['read:users:name', 'read:users:name!user=bob']), new Set(['read:users:name'])), []);
  t.deepEqual(missingScopes(new Set(['read:users:name', 'read:users:name!user=bob']), new Set(['read:users:name!user=bob'])), ['read:users:name']);
});

// ---- resource checks

test('scopes: hasScope with an unfiltered scope covers every resource and resource-less endpoints', (t) => {
  const held = expandScopes(['admin:users']);
  t.true(hasScope(held, 'read:users', user('anyone')));
  t.true(hasScope(held, 'read:users'));
  t.false(hasScope(held, 'read:servers', server('anyone')));
});

test('scopes: hasScope with a user filter covers that user and their servers only', (t) => {
  const held = expandScopes(['servers!user=alice', 'read:users!user=alice']);
  t.true(hasScope(held, 'read:users', user('alice')));
  t.false(hasScope(held, 'read:users', user('bob')));
  t.true(hasScope(held, 'delete:servers', server('alice')));
  t.true(hasScope(held, 'start:servers', server('alice', 'gpu')));
  t.false(hasScope(held, 'delete:servers', server('bob')));
  t.false(hasScope(held, 'read:users')); // filtered scope never satisfies a resource-less endpoint
});

test('scopes: hasScope with a server filter covers that server only', (t) => {
  const held = expandScopes(['access:servers!server=alice/', 'read:servers!server=bob/gpu']);
  t.true(hasScope(held, 'access:servers', server('alice')));
  t.false(hasScope(held, 'access:servers', server('alice', 'gpu')));
  t.true(hasScope(held, 'read:servers', server('bob', 'gpu')));
  t.false(hasScope(held, 'read:servers', server('bob')));
  t.false(hasScope(held, 'read:servers', user('bob')));
  t.false(hasScope(held, 'read:users:name', user('bob')));
});

test('scopes: hasScope with a group filter covers members, their servers and the group', (t) => {
  const held = expandScopes(['read:users!group=g', 'servers!group=g', 'read:groups!group=g']);
  t.true(hasScope(held, 'read:users', user('x', ['g'])));
  t.false(hasScope(held, 'read:users', user('y', ['h'])));
  t.true(hasScope(held, 'delete:servers', server('x', 'gpu', ['h', 'g'])));
  t.false(hasScope(held, 'delete:servers', server('y', '', ['h'])));
  t.true(hasScope(held, 'read:groups', { kind: 'group', name: 'g' }));
  t.false(hasScope(held, 'read:groups', { kind: 'group', name: 'h' }));
});

test('scopes: hasScope with a service filter covers that service only', (t) => {
  const held = expandScopes(['access:services!service=nb', 'read:services!service=nb']);
  t.true(hasScope(held, 'access:services', { kind: 'service', name: 'nb' }));
  t.false(hasScope(held, 'access:services', { kind: 'service', name: 'other' }));
  t.true(hasScope(held, 'read:services:name', { kind: 'service', name: 'nb' }));
  t.false(hasScope(held, 'read:services', user('nb')));
});

test('scopes: a held set that grows is re-read', (t) => {
  const held = new Set(['read:users!user=alice']);
  t.false(hasScope(held, 'read:users', user('bob')));
  held.add('read:users!user=bob');
  t.true(hasScope(held, 'read:users', user('bob')));
});

// ---- 403 versus 404

const USER_GET = ['read:users', 'read:users:name', 'read:servers', 'read:users:groups', 'read:users:activity', 'read:roles:users'];

test('scopes: accessDecision gives 404 for resources of others and missing ones', (t) => {
  const alice = expandScopes(['self'], ALICE);
  t.is(accessDecision(alice, USER_GET, user('alice')), 'allow');
  t.is(accessDecision(alice, USER_GET, user('admin')), 'not-found');
  t.is(accessDecision(alice, USER_GET, user('nosuchuser')), 'not-found');
  t.is(accessDecision(alice, 'delete:servers', server('bob')), 'not-found');
  const serverToken = expandScopes(roleScopes('server'), ALICE, { issuer: { kind: 'server', user: 'alice', name: '' } });
  t.is(accessDecision(serverToken, 'users:activity', user('bob')), 'not-found');
  t.is(accessDecision(serverToken, 'users:activity', user('alice')), 'allow');
});

test('scopes: accessDecision gives 403 when no form of the scope is held', (t) => {
  const alice = expandScopes(['self'], ALICE);
  t.is(accessDecision(alice, ['read:services', 'read:services:name', 'read:roles:services'], { kind: 'service', name: 'x' }), 'forbidden');
  t.is(accessDecision(alice, 'delete:users', user('alice')), 'forbidden');
  t.is(accessDecision(alice, 'list:users'), 'forbidden');
  t.is(accessDecision(expandScopes(['list:users!user=alice']), 'list:users'), 'forbidden');
  t.is(accessDecision(expandScopes(['shutdown']), 'shutdown'), 'allow');
  t.is(accessDecision(new Set<string>(), 'read:users', user('alice')), 'forbidden');
});

test('scopes: accessDecision allows when any declared scope matches', (t) => {
  const held = expandScopes(['read:users!user=bob', 'read:users:activity!group=g']);
  t.is(accessDecision(held, ['read:users', 'read:users:activity'], user('x', ['g'])), 'allow');
  t.is(accessDecision(held, ['read:users', 'read:users:activity'], user('z')), 'not-found');
});

// ---- lists

test('scopes: listFilter returns all, the filtered names, or nothing', (t) => {
  t.is(listFilter(expandScopes(['admin:users']), 'list:users'), 'all');
  t.is(listFilter(expandScopes(['self'], ALICE), 'list:users'), null);
  t.deepEqual(listFilter(expandScopes(['list:users!user=a', 'list:users!group=g', 'list:users!user=b']), 'list:users'), {
    users: new Set(['a', 'b']),
    groups: new Set(['g']),
    servers: new Set(),
    services: new Set(),
  });
  t.deepEqual(listFilter(expandScopes(['list:services!service=s']), 'list:services'), {
    users: new Set(),
    groups: new Set(),
    servers: new Set(),
    services: new Set(['s']),
  });
});

// ---- model fields

const alice = { name: 'alice', groups: ['g'] };

test('scopes: user model shows servers only with read:servers', (t) => {
  // read:servers implies read:users:name, which adds admin and user_info
  t.deepEqual(sorted(userModelFields(expandScopes(['read:servers']), alice)), ['admin', 'kind', 'name', 'servers', 'user_info']);
  t.false(userModelFields(expandScopes(['read:users']), alice).has('servers'));
  t.true(userModelFields(expandScopes(['read:servers!group=g']), alice).has('servers'));
  t.deepEqual(sorted(userModelFields(expandScopes(['read:servers!server=alice/gpu']), alice)), ['kind', 'name', 'servers']);
  t.is(userModelFields(expandScopes(['read:servers!server=bob/gpu']), alice).size, 0);
});

test('scopes: user model shows groups only with a groups-revealing scope', (t) => {
  t.false(userModelFields(expandScopes(['read:users:name', 'read:users:activity']), alice).has('groups'));
  t.deepEqual(sorted(userModelFields(expandScopes(['read:users:groups!user=alice']), alice)), ['groups', 'kind', 'name']);
  t.true(userModelFields(expandScopes(['read:users']), alice).has('groups'));
});

test('scopes: user model field sets follow the reference table', (t) => {
  t.deepEqual(sorted(userModelFields(expandScopes(['read:users:name']), alice)), ['admin', 'kind', 'name', 'user_info']);
  t.deepEqual(sorted(userModelFields(expandScopes(['list:users']), alice)), ['admin', 'kind', 'name', 'user_info']);
  t.deepEqual(
    sorted(userModelFields(expandScopes(['list:users', 'read:users:activity', 'read:users:groups']), alice)),
    ['admin', 'groups', 'kind', 'last_activity', 'name', 'user_info'],
  );
  t.deepEqual(
    sorted(userModelFields(expandScopes(['read:users']), alice)),
    ['admin', 'created', 'groups', 'kind', 'last_activity', 'name', 'pending', 'roles', 'server', 'user_info'],
  );
  t.deepEqual(
    sorted(userModelFields(expandScopes(roleScopes('admin')), alice)),
    sorted([
      'kind',
      'name',
      'admin',
      'roles',
      'groups',
      'servers',
      'pending',
      'server',
      'last_activity',
      'created',
      'auth_state',
      'user_info',
    ]),
  );
  t.false(userModelFields(expandScopes(['self'], ALICE), alice).has('auth_state'));
  t.is(userModelFields(expandScopes(['self'], { kind: 'user', name: 'bob' }), alice).size, 0);
});

test('scopes: group and service models are cut down by their own scopes', (t) => {
  t.deepEqual(sorted(groupModelFields(expandScopes(['list:groups']), 'g')), ['kind', 'name']);
  t.deepEqual(sorted(groupModelFields(expandScopes(['read:groups!group=g']), 'g')), ['kind', 'name', 'properties', 'users']);
  t.is(groupModelFields(expandScopes(['read:groups!group=g']), 'h').size, 0);
  t.deepEqual(sorted(serviceModelFields(expandScopes(['list:services']), 's')), ['admin', 'kind', 'name']);
  t.false(serviceModelFields(expandScopes(['read:services']), 's').has('roles'));
  t.true(serviceModelFields(expandScopes(['read:roles']), 's').has('roles'));
});

// ---- tokens

test('scopes: an inherit token has exactly its owner scopes', (t) => {
  const ownerScopes = expandScopes(['self'], ALICE);
  t.deepEqual(sorted(effectiveTokenScopes(['inherit'], { owner: ALICE, ownerScopes })), sorted(ownerScopes));
});

test('scopes: token scopes are narrowed to the owner and keep identify scopes', (t) => {
  const ownerScopes = expandScopes(['self'], ALICE);
  t.deepEqual(sorted(effectiveTokenScopes([], { owner: ALICE, ownerScopes })), sorted(identifyScopes(ALICE)));
  const token = effectiveTokenScopes(['read:users', 'admin:users', 'tokens!user'], { owner: ALICE, ownerScopes });
  t.true(hasScope(token, 'read:users', user('alice')));
  t.false(hasScope(token, 'read:users', user('bob')));
  t.false(hasScope(token, 'admin:auth_state', user('alice')));
  t.true(hasScope(token, 'tokens', user('alice')));
  t.false(hasScope(token, 'delete:servers', server('alice')));
  const service = { kind: 'service', name: 'svc' } as const;
  t.is(effectiveTokenScopes([], { owner: service, ownerScopes: new Set() }).size, 0);
});

test('scopes: a token from an OAuth client also reaches that client when the owner may', (t) => {
  const issuer = { kind: 'server', user: 'alice', name: 'gpu' } as const;
  t.is(accessScopeFor(issuer), 'access:servers!server=alice/gpu');
  t.is(accessScopeFor({ kind: 'service', name: 'nb' }), 'access:services!service=nb');
  const mine = effectiveTokenScopes([], { owner: ALICE, ownerScopes: expandScopes(['self'], ALICE), issuer });
  t.true(hasScope(mine, 'access:servers', server('alice', 'gpu')));
  t.false(hasScope(mine, 'access:servers', server('alice')));
  const bob = { kind: 'user', name: 'bob' } as const;
  const theirs = effectiveTokenScopes([], { owner: bob, ownerScopes: expandScopes(['self'], bob), issuer });
  t.false(hasScope(theirs, 'access:servers', server('alice', 'gpu')));
});

test('scopes: token scopes given by group membership survive intersection', (t) => {
  const owner = { kind: 'user', name: 'x' } as const;
  const ownerScopes = expandScopes(['self', 'read:servers!group=g'], owner);
  const token = effectiveTokenScopes(['read:servers!server=w/', 'read:servers!server=y/'], {
    owner,
    ownerScopes,
    groupsOfUser,
  });
  t.true(hasScope(token, 'read:servers', server('w', '', ['g'])));
  t.false(hasScope(token, 'read:servers', server('y', '', ['h'])));
  const withoutLookup = effectiveTokenScopes(['read:servers!server=w/'], { owner, ownerScopes });
  t.false(hasScope(withoutLookup, 'read:servers', server('w', '', ['g'])));
});
