// No call in the hub's runtime code spreads a list into arguments (`push(...xs)`, `Math.min(...xs)`, `f(...xs)`)
// or passes one through `apply`: each item becomes an argument on the stack, and past ~120,000 items (users,
// members, tokens) that throws RangeError — which once kept the auth actor from starting at 125,000 users.
// Use `pushAll` (shared/lists.ts) or a loop. Array literals (`[...xs]`) build on the heap and are fine.
// Checked on the compiled JavaScript in dist/ (the code that runs), parsed with acorn.
import test from 'ava';
import { parse } from 'acorn';
import { simple } from 'acorn-walk';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { REPO } from '../harness.js';

const RUNTIME = ['services', 'shared', 'cli', 'hub-services', 'singleuser', 'supervisor.js'];

function jsFiles(path: string): string[] {
  if (statSync(path).isFile()) return path.endsWith('.js') ? [path] : [];
  return readdirSync(path).flatMap((name) => (name === 'generated' ? [] : jsFiles(join(path, name))));
}

/** `file:line` of every call or `new` with a spread argument, and of every `.apply(` call. */
export function spreadCalls(source: string, file: string): string[] {
  const found: string[] = [];
  const ast = parse(source, { ecmaVersion: 'latest', sourceType: 'module', locations: true });
  const check = (node: any) => {
    const where = `${file}:${node.loc.start.line}`;
    if (node.arguments.some((a: any) => a.type === 'SpreadElement')) found.push(`${where} spreads a list into a call`);
    if (node.callee?.type === 'MemberExpression' && !node.callee.computed && node.callee.property.name === 'apply' && node.arguments.length === 2) found.push(`${where} calls .apply`);
  };
  simple(ast, { CallExpression: check, NewExpression: check });
  return found;
}

test('no runtime code spreads a list into a call or uses apply (the stack limit at ~120,000 items)', (t) => {
  const dist = join(REPO, 'dist');
  const files = RUNTIME.flatMap((p) => jsFiles(join(dist, p)));
  t.true(files.length > 50, `found ${files.length} compiled files under ${dist}: build first (npm test does)`);
  const found = files.flatMap((f) => spreadCalls(readFileSync(f, 'utf8'), relative(dist, f)));
  t.deepEqual(found, []);
});

test('the check finds what it must and passes what is fine', (t) => {
  t.is(spreadCalls('a.push(...b); Math.min(...c); new Set(...d); f.apply(null, e);', 'x.js').length, 4);
  t.deepEqual(spreadCalls('const a = [...b, ...c]; const o = { ...d }; f(g, [...h]);', 'x.js'), []);
});
