// Log lines never carry a secret: the keys shared/log.ts names are censored on the line, one object down and in a
// `headers` object at either level, in a real process writing its lines as any actor does; the caller's objects
// are left as they were, and an error keeps its message.
import test from 'ava';
import { join } from 'node:path';
import { REPO, runCommand } from '../harness.js';

const SCRIPT = `
import { createLogger } from ${JSON.stringify(join(REPO, 'dist', 'shared', 'log.js'))};
const log = createLogger('test', 'info', 'json');
const request = { headers: { authorization: 'token s3cret-a', cookie: 'c=s3cret-b', accept: 'text/html' }, path: '/x' };
const err = Object.assign(new Error('went wrong'), { headers: { 'set-cookie': 's3cret-c' }, status: 502 });
log.info({ event: 'one', token: 's3cret-d', request, user: { name: 'alice', password: 's3cret-e' } }, 'first');
log.error({ event: 'two', err, headers: { cookie: 's3cret-f', host: 'h' } }, 'second');
log.child({ api_token: 's3cret-g' }).info({ event: 'three', deep: { deeper: { token: 'not-a-secret-key-this-deep' } } }, 'third');
// the caller's objects are untouched
console.error(JSON.stringify([request.headers.authorization, err.headers['set-cookie'], err.message]));
`;

test('logs: secrets are censored on the line, one level down and in headers; the caller objects are untouched', async (t) => {
  const r = await runCommand(process.execPath, ['--input-type=module', '-e', SCRIPT], { env: { PATH: process.env.PATH } });
  t.is(r.code, 0, r.stderr);
  const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
  t.is(lines.length, 3);
  t.false(r.stdout.includes('s3cret'), r.stdout);
  t.like(lines[0], { event: 'one', token: '[redacted]', request: { headers: { authorization: '[redacted]', cookie: '[redacted]', accept: 'text/html' }, path: '/x' }, user: { name: 'alice', password: '[redacted]' } });
  t.like(lines[1], { event: 'two', headers: { cookie: '[redacted]', host: 'h' } });
  t.is(lines[1].err.message, 'went wrong');
  t.regex(lines[1].err.stack, /went wrong/);
  t.is(lines[1].err.headers['set-cookie'], '[redacted]');
  t.is(lines[1].err.status, 502);
  t.is(lines[2].api_token, '[redacted]');
  t.is(lines[2].deep.deeper.token, 'not-a-secret-key-this-deep', 'only the levels the rule names');
  t.deepEqual(JSON.parse(r.stderr.trim().split('\n').at(-1)!), ['token s3cret-a', 's3cret-c', 'went wrong']);
});
