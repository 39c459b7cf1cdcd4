// The compiled code every hub process loads is ASCII with no comments (scripts/slim-dist.mjs after tsc): V8 keeps
// each loaded module's whole text in the process's heap, two bytes a character once one character is not Latin-1.
import test from 'ava';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { REPO } from '../harness.js';

const { slimDist } = (await import(pathToFileURL(join(REPO, 'scripts', 'slim-dist.mjs')).href)) as { slimDist(dir: string): { before: number; after: number } };

function jsFiles(path: string): string[] {
  if (statSync(path).isFile()) return path.endsWith('.js') ? [path] : [];
  return readdirSync(path).flatMap((name) => jsFiles(join(path, name)));
}

test('every compiled file the hub runs is one byte a character (Latin-1) in each process', (t) => {
  const dist = join(REPO, 'dist');
  const files = jsFiles(dist);
  t.true(files.length > 50, `found ${files.length} compiled files under ${dist}: build first (npm test does)`);
  const wide = files.filter((f) => /[^\u0000-\u00ff]/.test(readFileSync(f, 'utf8'))).map((f) => relative(dist, f));
  t.deepEqual(wide, [], 'built without scripts/slim-dist.mjs: `npm run build` runs it after tsc');
});

test('slimming keeps what the code does and says: escaped text, no comments', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'slim-dist-'));
  try {
    const file = join(dir, 'm.js');
    writeFileSync(file, [
      '// a comment — with a dash',
      'export const message = `wait… ${1 + 1} “quoted” ✓`;',
      '/** doc */ export const re = /é+/u;',
      'export function f() { return "naïve"; }',
    ].join('\n'));
    const { before, after } = slimDist(dir);
    const out = readFileSync(file, 'utf8');
    t.true(after < before + 64, `${before} → ${after}`);
    t.false(/[^\u0000-\u00ff]/.test(out), out);
    t.false(out.includes('a comment'), out);
    const m = (await import(`${pathToFileURL(file).href}?v=1`)) as { message: string; re: RegExp; f(): string };
    t.is(m.message, 'wait… 2 “quoted” ✓');
    t.true(m.re.test('éé'));
    t.is(m.f(), 'naïve');
    writeFileSync(file, 'export const dash = /a—b/;\n');
    t.throws(() => slimDist(dir), { message: /m\.js: "—" \(U\+2014\) is left in the compiled code/ });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
