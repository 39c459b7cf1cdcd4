// Sharing servers (issue 14): a share opens the owner's server to someone else through the hub's OAuth and
// revoking it closes the door at the server's next token check; share codes accepted in the browser by a new
// user and expiring on time; group shares that end with the membership; what the API refuses; the audit trail.
import test from 'ava';
import { connect, StringCodec, type NatsConnection } from 'nats';
import { NATS_ADMIN, startHub, waitFor, type HubUnderTest } from '../harness.js';
import { apiClient, randomToken, type ApiCall } from '../api/client.js';
import { Browser, hiddenField, paramsOf, pathOf } from '../oauth/browser.js';

let hub: HubUnderTest;
let api: ApiCall;
let nc: NatsConnection;
const audit: { subject: string; body: any }[] = [];
const ADMIN = randomToken();
const PW = 'shared secret';
const token: Record<string, string> = {};
/** the code accepted in the first test; it expires in the last one */
let code = { code: '', acceptUrl: '', expiresAt: 0 };

test.before(async () => {
  hub = await startHub({
    config: {
      Hub: {
        authenticator_class: 'dummy',
        allow_named_servers: true,
        api_tokens: { [ADMIN]: 'boss' },
        // as the established hub documents it: users may share their own servers, with people and groups they can name
        load_roles: [{ name: 'user', scopes: ['self', 'shares!user', 'read:users:name', 'read:groups:name'] }],
      },
      DummyAuthenticator: { password: PW },
      Authenticator: { admin_users: ['boss'] },
      // the server asks the hub about its visitor's token on every request
      Spawner: { environment: { HUB_ACTIVITY_INTERVAL: '3600', HUB_CACHE_MAX_AGE: '0' } },
    },
  });
  api = apiClient(hub.url);
  nc = await connect({ servers: hub.natsUrl, ...NATS_ADMIN });
  const sc = StringCodec();
  for (const subject of ['hub.audit.share.>', 'hub.audit.share_code.>']) {
    nc.subscribe(subject, { callback: (_e, m) => audit.push({ subject: m.subject, body: JSON.parse(sc.decode(m.data)) }) });
  }
  for (const name of ['alice', 'bob', 'erin', 'frank', 'olga']) {
    const r = await api('POST', `/users/${name}`, { token: ADMIN });
    if (r.status !== 201) throw new Error(`user ${name}: ${r.status}`);
    token[name] = (await api('POST', `/users/${name}/tokens`, { token: ADMIN, body: {} })).body.token;
  }
  const started = await api('POST', '/users/alice/server', { token: ADMIN });
  if (started.status !== 201) throw new Error(`alice's server: ${started.status}`);
});
test.after.always(async () => {
  await nc?.close();
  await hub?.stop();
});

async function loggedIn(user: string): Promise<Browser> {
  const b = new Browser(hub.url);
  const r = await b.login(user, PW);
  if (r.status !== 302) throw new Error(`login ${user}: ${r.status}`);
  return b;
}

const scopesOf = async (user: string, tk = token[user]): Promise<string[]> => (await api('GET', '/user', { token: tk })).body.scopes;

test.serial('shares: a share code is accepted in the browser by a new user', async (t) => {
  const created = await api('POST', '/share-codes/alice/', { token: token.alice, body: { expires_in: 60 } });
  t.is(created.status, 200);
  t.regex(created.body.code, /^[A-Za-z0-9_-]{43}$/);
  t.is(created.body.accept_url, `/hub/accept-share?code=${created.body.code}`);
  t.is(created.body.full_accept_url, null, 'no Hub.public_url configured');
  t.regex(created.body.id, /^sc_\d+$/);
  t.deepEqual(created.body.scopes, ['access:servers!server=alice/']);
  t.like(created.body.server, { user: { name: 'alice' }, name: '', url: '/user/alice/', ready: true, full_url: null });
  t.is(created.body.exchange_count, 0);
  const lifetime = Date.parse(created.body.expires_at) - Date.now();
  t.true(lifetime > 50_000 && lifetime <= 60_000, `expires in ${lifetime} ms`);
  code = { code: created.body.code, acceptUrl: created.body.accept_url, expiresAt: Date.parse(created.body.expires_at) };
  // the code itself is shown once: lists carry its id only
  const listed = await api('GET', '/share-codes/alice', { token: token.alice });
  t.is(listed.body.items.length, 1);
  t.false(JSON.stringify(listed.body).includes(code.code));

  // not logged in: to the login page, and back here after it
  const dave = new Browser(hub.url);
  const first = await dave.get(code.acceptUrl);
  t.is(first.status, 302);
  t.is(pathOf(first.location), '/hub/login');
  t.is(paramsOf(first.location).get('next'), code.acceptUrl);
  const login = await dave.login('dave', PW, code.acceptUrl); // dave exists from this login on
  t.is(login.location, code.acceptUrl);
  const confirm = await dave.get(code.acceptUrl);
  t.is(confirm.status, 200);
  t.regex(confirm.body, /<b>alice<\/b> shares the server of alice with you/);
  t.is(confirm.headers.get('x-frame-options'), 'DENY');
  token.dave = (await api('POST', '/users/dave/tokens', { token: ADMIN, body: {} })).body.token;
  t.false((await scopesOf('dave')).includes('access:servers!server=alice/'), 'nothing is granted before the POST');
  // the form's XSRF value is needed
  const forged = await dave.post('/hub/accept-share', { code: code.code });
  t.is(forged.status, 403);
  const accepted = await dave.post('/hub/accept-share', { _xsrf: hiddenField(confirm.body, '_xsrf'), code: hiddenField(confirm.body, 'code') });
  t.is(accepted.status, 302);
  t.is(accepted.location, '/user/alice/');
  t.true((await scopesOf('dave')).includes('access:servers!server=alice/'));
  const mine = await api('GET', '/users/dave/shared', { token: token.dave });
  t.is(mine.status, 200);
  t.is(mine.body._pagination.total, 1);
  t.like(mine.body.items[0], { kind: 'user', user: { name: 'dave' }, group: null, scopes: ['access:servers!server=alice/'], server: { user: { name: 'alice' }, name: '' } });
  // he reaches alice's server (his consent for her server's client asked once)
  const hops = await dave.follow('/user/alice/');
  t.deepEqual(hops.map((h) => h.status), [302, 200]);
  const granted = await dave.post(hops[0].location!, { _xsrf: hiddenField(hops[1].body, '_xsrf'), scopes: [] });
  t.is((await dave.get(granted.location!)).status, 302);
  t.regex((await dave.get('/user/alice/')).body, /Hello, dave/);
  t.is((await api('GET', '/share-codes/alice/', { token: token.alice })).body.items[0].exchange_count, 1);

  // refusals as readable pages
  const unknown = await dave.get('/hub/accept-share?code=no-such-code-at-all');
  t.is(unknown.status, 404);
  t.regex(unknown.body, /unknown or has expired/);
  t.is((await dave.get('/hub/accept-share')).status, 400);
  const alice = await loggedIn('alice');
  const own = await alice.get(code.acceptUrl);
  t.is(own.status, 403);
  t.regex(own.body, /your own server/);
});

test.serial('shares: a shared user opens the owner\'s server through OAuth and is refused right after revocation', async (t) => {
  const bob = await loggedIn('bob');
  // no share yet: the hub refuses at authorize
  const denied = await bob.follow('/user/alice/');
  t.deepEqual(denied.map((h) => h.status), [302, 403]);
  t.regex(denied[1].body, /do not have permission to access Server at \/user\/alice\//);

  const shared = await api('POST', '/shares/alice/', { token: token.alice, body: { user: 'bob' } });
  t.is(shared.status, 200);
  t.deepEqual(Object.keys(shared.body).sort(), ['created_at', 'group', 'kind', 'scopes', 'server', 'user']);
  t.like(shared.body, { kind: 'user', user: { name: 'bob' }, group: null, scopes: ['access:servers!server=alice/'] });
  t.deepEqual(shared.body.server, { user: { name: 'alice' }, name: '', url: '/user/alice/', full_url: null, ready: true });
  // at once in what the hub tells about bob
  t.true((await scopesOf('bob')).includes('access:servers!server=alice/'));

  const hops = await bob.follow('/user/alice/tree');
  t.deepEqual(hops.map((h) => h.status), [302, 200], 'a confirmation page: the server is not his own');
  t.is(paramsOf(hops[0].location).get('client_id'), 'hub-user-alice');
  const answer = await bob.post(hops[0].location!, { _xsrf: hiddenField(hops[1].body, '_xsrf'), scopes: [] });
  t.is(pathOf(answer.location), '/user/alice/oauth_callback');
  const back = await bob.get(answer.location!);
  t.is(back.location, '/user/alice/tree');
  const page = await bob.get('/user/alice/tree');
  t.is(page.status, 200);
  t.regex(page.body, /Server of alice[\s\S]*Hello, bob/);

  // revoked: the very next request is refused by the server's token check
  const revoked = await api('PATCH', '/shares/alice/', { token: token.alice, body: { user: 'bob' } });
  t.is(revoked.status, 200);
  t.deepEqual(revoked.body, {});
  t.is((await bob.get('/user/alice/tree')).status, 403);
  t.false((await scopesOf('bob')).includes('access:servers!server=alice/'));
  t.is((await api('GET', '/shares/alice/', { token: token.alice })).body.items.filter((s: any) => s.user?.name === 'bob').length, 0);
});

test.serial('shares: a group share ends when the person leaves the group, and with the group', async (t) => {
  t.is((await api('POST', '/groups/class', { token: ADMIN, body: { users: ['erin', 'frank'] } })).status, 201);
  const shared = await api('POST', '/shares/alice/', { token: token.alice, body: { group: 'class', scopes: ['access:servers', 'read:servers'] } });
  t.is(shared.status, 200);
  t.like(shared.body, { kind: 'group', user: null, group: { name: 'class' } });
  t.deepEqual(shared.body.scopes, ['access:servers!server=alice/', 'read:servers!server=alice/']);
  for (const u of ['erin', 'frank']) t.true((await scopesOf(u)).includes('access:servers!server=alice/'), u);
  // a user's list shows shares through their groups; the one-share path only a direct share
  const erins = await api('GET', '/users/erin/shared', { token: token.erin });
  t.is(erins.body.items.length, 1);
  t.is(erins.body.items[0].group.name, 'class');
  t.is((await api('GET', '/users/erin/shared/alice/', { token: token.erin })).status, 404);
  t.is((await api('GET', '/groups/class/shared', { token: ADMIN })).body._pagination.total, 1);
  // read:servers!server=alice/ lets erin see alice's server, and only it
  const seen = await api('GET', '/users/alice/server', { token: token.erin });
  t.is(seen.status, 200);
  t.is(seen.body.name, '');

  t.is((await api('DELETE', '/groups/class/users', { token: ADMIN, body: { users: ['erin'] } })).status, 200);
  await waitFor('erin to lose the group share', async () => ((await scopesOf('erin')).includes('access:servers!server=alice/') ? undefined : true), 5000);
  t.is((await api('GET', '/users/erin/shared', { token: token.erin })).body.items.length, 0);
  t.true((await scopesOf('frank')).includes('access:servers!server=alice/'), 'the other member keeps it');

  t.is((await api('DELETE', '/groups/class', { token: ADMIN })).status, 204);
  await waitFor('frank to lose the group share', async () => ((await scopesOf('frank')).includes('access:servers!server=alice/') ? undefined : true), 5000);
  t.is((await api('GET', '/shares/alice/', { token: token.alice })).body.items.filter((s: any) => s.kind === 'group').length, 0);
});

test.serial('shares: what the API refuses, and what it merges', async (t) => {
  const post = (body: unknown, path = '/shares/alice/', tk = token.alice) => api('POST', path, { token: tk, body });
  const codeOf = async (r: Promise<{ status: number; body: any }>) => {
    const x = await r;
    return `${x.status} ${x.body?.code ?? ''}`;
  };
  t.is(await codeOf(post({ user: 'bob', group: 'class' })), '400 HUB_ERR_SHARE_INVALID');
  t.is(await codeOf(post({})), '400 HUB_ERR_SHARE_INVALID');
  t.is(await codeOf(post({ user: 'bob', extra: 1 })), '400 HUB_ERR_REQUEST_INVALID');
  t.is(await codeOf(post({ user: 'bob', scopes: ['no-such-scope'] })), '400 HUB_ERR_SCOPE_INVALID');
  t.is(await codeOf(post({ user: 'bob', scopes: ['access:servers!server=bob/'] })), '400 HUB_ERR_SCOPE_INVALID');
  t.is(await codeOf(post({ user: 'bob', scopes: ['access:servers!user=alice'] })), '400 HUB_ERR_SCOPE_INVALID');
  t.is(await codeOf(post({ user: 'bob', scopes: ['inherit'] })), '400 HUB_ERR_SCOPE_INVALID');
  const notHeld = await post({ user: 'bob', scopes: ['admin:users'] });
  t.is(notHeld.status, 403);
  t.is(notHeld.body.message, 'Do not have permission to grant share with scope admin:users!server=alice/');
  t.is(await codeOf(post({ user: 'nobody' })), '400 HUB_ERR_SHARE_TARGET_NOT_FOUND');
  t.is(await codeOf(post({ group: 'nogroup' })), '400 HUB_ERR_SHARE_TARGET_NOT_FOUND');
  t.is(await codeOf(post({ user: 'alice' })), '400 HUB_ERR_SHARE_INVALID');
  t.is(await codeOf(post({ user: 'bob' }, '/shares/alice/nosuchserver')), '404 HUB_ERR_SERVER_NOT_FOUND');
  t.is(await codeOf(post({ user: 'bob' }, '/shares/bob/')), '404 HUB_ERR_NO_ACCESS', 'another owner\'s server');
  t.is(await codeOf(post({ user: 'bob' }, '/shares/alice')), '405 HUB_ERR_METHOD_NOT_ALLOWED');
  // a name she may not read: a token that cannot read names
  const narrow = (await api('POST', '/users/alice/tokens', { token: token.alice, body: { scopes: ['shares!user'] } })).body.token;
  const noName = await post({ user: 'bob' }, '/shares/alice/', narrow);
  t.is(noName.status, 403);
  t.is(noName.body.message, "Need scope 'read:users:name' to share with users by name");

  // re-granting merges; PATCH takes away what it lists, an unknown grantee is {}
  t.is((await post({ user: 'bob', scopes: ['read:servers'] })).status, 200);
  t.deepEqual((await post({ user: 'bob' })).body.scopes, ['access:servers!server=alice/', 'read:servers!server=alice/']);
  const patched = await api('PATCH', '/shares/alice/', { token: token.alice, body: { user: 'bob', scopes: ['read:servers!server=alice/'] } });
  t.deepEqual(patched.body.scopes, ['access:servers!server=alice/']);
  t.deepEqual((await api('PATCH', '/shares/alice/', { token: token.alice, body: { user: 'frank' } })).body, {});
  // leaving a share
  t.is((await api('DELETE', '/users/bob/shared/alice/', { token: token.bob })).status, 204);
  t.is((await api('DELETE', '/users/bob/shared/alice/', { token: token.bob })).status, 404);
  t.false((await scopesOf('bob')).includes('access:servers!server=alice/'));

  // pagination: always the envelope
  for (const u of ['bob', 'frank']) t.is((await post({ user: u })).status, 200);
  const all = await api('GET', '/shares/alice/', { token: token.alice });
  t.true(all.body._pagination.total >= 2);
  t.is(all.body._pagination.next, null);
  const first = await api('GET', '/shares/alice/?limit=1', { token: token.alice });
  t.deepEqual(first.body.items, all.body.items.slice(0, 1));
  t.is(first.body._pagination.total, all.body._pagination.total);
  t.like(first.body._pagination.next, { offset: 1, limit: 1 });

  // share codes
  const codeErr = (body: unknown) => codeOf(api('POST', '/share-codes/alice/', { token: token.alice, body }));
  t.is(await codeErr({ expires_in: 10 }), '400 HUB_ERR_SHARE_INVALID');
  t.is(await codeErr({ expires_in: 'soon' }), '400 HUB_ERR_SHARE_INVALID');
  t.is(await codeErr({ expires_in: 31_536_001 }), '400 HUB_ERR_SHARE_INVALID');
  t.is(await codeErr({ other: true }), '400 HUB_ERR_REQUEST_INVALID');
  t.is((await codeErr({ scopes: ['admin:users'] })).split(' ')[0], '403');
  const extra = await api('POST', '/share-codes/alice/', { token: token.alice, body: {} });
  t.true(Math.abs(Date.parse(extra.body.expires_at) - Date.now() - 86_400_000) < 60_000, 'a day by default');
  t.is((await api('DELETE', `/share-codes/alice/?code=${encodeURIComponent(extra.body.code)}`, { token: token.alice })).status, 204);
  t.is((await api('DELETE', `/share-codes/alice/?id=${extra.body.id}`, { token: token.alice })).status, 404);
  t.is((await api('DELETE', '/share-codes/alice/?id=', { token: token.alice })).status, 404);
  t.false((await api('GET', '/share-codes/alice/', { token: token.alice })).body.items.some((c: any) => c.id === extra.body.id));
});

test.serial('shares: removing the server, the grantee or the owner takes the shares along', async (t) => {
  // a named server: shared while the registry knows it, and forgotten with it
  t.true([201, 202].includes((await api('POST', '/users/alice/servers/lab', { token: token.alice })).status));
  await waitFor('alice\'s lab server', async () => ((await api('GET', '/users/alice/servers/lab', { token: token.alice })).body?.ready ? true : undefined), 30_000, 200);
  t.is((await api('POST', '/shares/alice/lab', { token: token.alice, body: { user: 'frank' } })).status, 200);
  t.true((await scopesOf('frank')).includes('access:servers!server=alice/lab'));
  t.is((await api('POST', '/share-codes/alice/lab', { token: token.alice, body: {} })).status, 200);
  // stopped, it is kept (a named server stays until removed), and so are its shares
  t.true([202, 204].includes((await api('DELETE', '/users/alice/servers/lab', { token: token.alice })).status));
  t.true((await scopesOf('frank')).includes('access:servers!server=alice/lab'), 'a stop keeps the shares');
  t.is((await api('POST', '/shares/alice/lab', { token: token.alice, body: { user: 'bob' } })).status, 200, 'a stopped named server can be shared');
  t.true([202, 204].includes((await api('DELETE', '/users/alice/servers/lab', { token: token.alice, body: { remove: true } })).status));
  t.false((await scopesOf('frank')).includes('access:servers!server=alice/lab'));
  t.false((await scopesOf('bob')).includes('access:servers!server=alice/lab'));
  t.is((await api('GET', '/shares/alice/lab', { token: token.alice })).body._pagination.total, 0);
  t.is((await api('GET', '/share-codes/alice/lab', { token: token.alice })).body._pagination.total, 0);

  // the grantee deleted
  t.is((await api('POST', '/users/gone', { token: ADMIN })).status, 201);
  t.is((await api('POST', '/shares/alice/', { token: token.alice, body: { user: 'gone' } })).status, 200);
  t.is((await api('DELETE', '/users/gone', { token: ADMIN })).status, 204);
  await waitFor('the share of a deleted user to go', async () =>
    ((await api('GET', '/shares/alice/', { token: token.alice })).body.items.some((s: any) => s.user?.name === 'gone') ? undefined : true), 5000);

  // the owner deleted: her grantees lose access
  t.is((await api('POST', '/shares/olga/', { token: token.olga, body: { user: 'bob' } })).status, 200);
  t.true((await scopesOf('bob')).includes('access:servers!server=olga/'));
  t.is((await api('DELETE', '/users/olga', { token: ADMIN })).status, 204);
  await waitFor('bob to lose olga\'s share', async () => ((await scopesOf('bob')).includes('access:servers!server=olga/') ? undefined : true), 5000);
  t.is((await api('GET', '/users/bob/shared', { token: token.bob })).body.items.filter((s: any) => s.server.user.name === 'olga').length, 0);
});

test.serial('shares: every grant, change, revoke and code use is audited with who asked', async (t) => {
  await waitFor('audit events', async () => (audit.length >= 10 ? true : undefined), 5000);
  const verbs = (subject: string) => audit.filter((a) => a.subject === subject);
  // audit schema v1: fields beyond who/what/outcome/actor are under `details`
  const grantee = (a: { body: any }) => a.body.details?.grantee;
  const grant = verbs('hub.audit.share.grant').find((a) => grantee(a) === 'user:bob' && a.body.what === 'alice/');
  t.like(grant?.body, { who: 'user:alice', outcome: 'ok', actor: 'tokens', details: { scopes: ['access:servers!server=alice/'] } });
  t.truthy(verbs('hub.audit.share.change').find((a) => a.body.who === 'user:alice'));
  t.truthy(verbs('hub.audit.share.revoke').find((a) => a.body.who === 'user:alice' && grantee(a) === 'user:bob'));
  t.truthy(verbs('hub.audit.share.revoke').find((a) => a.body.who === 'user:bob'), 'leaving a share');
  t.like(verbs('hub.audit.share_code.create')[0]?.body, { who: 'user:alice', what: 'alice/' });
  const used = verbs('hub.audit.share_code.use')[0];
  t.like(used?.body, { who: 'user:dave', what: 'alice/' });
  t.is(used && grantee(used), 'user:dave');
  t.false(JSON.stringify(audit).includes(code.code), 'a code is never in the audit trail');
});

test.serial('shares: when the code expires, the access it gave ends and the code is refused', async (t) => {
  t.timeout(100_000);
  const dave = await loggedIn('dave');
  t.true((await scopesOf('dave')).includes('access:servers!server=alice/'));
  // no request in between: the tokens actor ends the share on time by itself
  await new Promise((r) => setTimeout(r, Math.max(0, code.expiresAt - Date.now() + 200)));
  await waitFor('dave to lose the share', async () => ((await scopesOf('dave')).includes('access:servers!server=alice/') ? undefined : true), 3000);
  const refused = await dave.get(code.acceptUrl);
  t.is(refused.status, 404);
  t.regex(refused.body, /unknown or has expired/);
  t.is((await api('GET', '/share-codes/alice/', { token: token.alice })).body._pagination.total, 0);
  t.is((await api('GET', '/users/dave/shared', { token: token.dave })).body._pagination.total, 0);
  t.true(audit.some((a) => a.subject === 'hub.audit.share.expire' && a.body.details?.grantee === 'user:dave'));
});
