// The command line's grammar and output, in-process: what every verb's arguments may be, and how an audit
// event is shown (names people typed never reach the terminal raw).
import test from 'ava';
import { commandOf, parseArgs, UsageError, type ArgSpec } from '../../cli/args.js';
import { parseSince, readableLine } from '../../cli/audit.js';

const ADD_USER: ArgSpec = { positional: [1, 1], flags: { admin: 'boolean' }, missing: 'a user name', usage: 'add-user NAME [--admin]' };
const AUDIT: ArgSpec = { positional: [0, 0], flags: { follow: 'boolean', json: 'boolean', since: 'value', type: 'value', who: 'value' } };

test('cli args: the verb, its flags, and the configuration arguments are told apart', (t) => {
  t.is(commandOf([]), 'start');
  t.is(commandOf(['--config', 'x.json']), 'start');
  t.is(commandOf(['audit', '--since', '1h']), 'audit');
  t.is(commandOf(['token', '--help']), 'help');
  const a = parseArgs('add-user', ['alice', '--admin', '--config', 'hub.json', '--Hub.rpc_timeout=2'], ADD_USER);
  t.deepEqual(a, { positional: ['alice'], flags: { admin: true }, configArgs: ['--config', 'hub.json', '--Hub.rpc_timeout=2'] });
  const b = parseArgs('audit', ['--since', '1h', '--type=server.*', '--who', 'alice', '--follow', '--config=h.json'], AUDIT);
  t.deepEqual(b.flags, { since: '1h', type: 'server.*', who: 'alice', follow: true });
  t.deepEqual(b.configArgs, ['--config=h.json']);
  t.deepEqual(parseArgs('add-user', ['--', '-dash-name'], ADD_USER).positional, ['-dash-name']);
});

test('cli args: each mistake is one line naming the verb and the problem', (t) => {
  const cases: [string, string[], ArgSpec, RegExp][] = [
    ['add-user', [], ADD_USER, /^add-user: expected a user name \(usage: hub add-user NAME \[--admin\]\)$/],
    ['add-user', ['x', 'y'], ADD_USER, /^add-user: unexpected argument "y"/],
    ['add-user', ['x', '--bogus'], ADD_USER, /^add-user: unknown option "--bogus"/],
    ['add-user', ['x', '--admin=yes'], ADD_USER, /^add-user: --admin takes no value/],
    ['add-user', ['x', '-a'], ADD_USER, /^add-user: unknown option "-a"/],
    ['audit', ['--who'], AUDIT, /^audit: --who needs a value$/],
    ['audit', ['--follow=yes'], AUDIT, /^audit: --follow takes no value$/],
    ['audit', ['extra'], AUDIT, /^audit: unexpected argument "extra"$/],
    ['audit', ['--config'], AUDIT, /^audit: --config needs a file$/],
  ];
  for (const [verb, args, spec, message] of cases) {
    const e = t.throws(() => parseArgs(verb, args, spec), { instanceOf: UsageError }, args.join(' '));
    t.regex(e!.message, message);
    t.false(e!.message.includes('\n'));
  }
});

test('cli audit: --since takes durations and dates, nothing else', (t) => {
  const now = Date.parse('2026-11-24T12:00:00Z');
  t.is(parseSince('90m', now).toISOString(), '2026-11-24T10:30:00.000Z');
  t.is(parseSince('2d', now).toISOString(), '2026-11-22T12:00:00.000Z');
  t.is(parseSince('2026-11-01T08:00Z', now).toISOString(), '2026-11-01T08:00:00.000Z');
  for (const bad of ['10x', '1 h', '-1h', 'yesterday', '', '2026-13-45']) t.throws(() => parseSince(bad, now), { instanceOf: UsageError }, bad);
});

test('cli audit: a readable line shows every field, and no control or bidi character raw', (t) => {
  const line = readableLine({
    v: 1, time: '2026-11-24T12:00:00.000Z', type: 'user.create', who: 'user:alice', what: 'bob\u001b[2J\u202e', outcome: 'ok', actor: 'auth',
    details: { admin: true, note: 'two words\nline' },
  });
  t.is(line, '2026-11-24T12:00:00.000Z  user.create  ok  who=user:alice  what="bob\\u001b[2J\\u202e"  actor=auth  admin=true  note="two words\\nline"');
  t.false(/[\u0000-\u001f\u007f-\u009f\u202e]/.test(line));
});
