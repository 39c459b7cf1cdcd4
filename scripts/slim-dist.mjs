// After tsc (which drops comments: tsconfig's removeComments): every non-ASCII character of dist/ written as an
// escape. Why: V8 keeps the whole source text of every loaded module in each process's heap for its lifetime, at
// one byte a character only when the text is all Latin-1, so one "—" doubles a file's size in memory; half of our
// compiled code was in such files, and each of a hub's seven Node processes loads its own copy. Measured
// 2026-11-28 (the gateway's and shared/'s 163 modules imported into one process, heap after a full collection,
// twice each, alternating): 3.44-3.67 MB as tsc wrote them, 3.16-3.18 MB without comments and escaped: 0.3-0.5 MB
// less per process, 2-3 MB a hub (`npm run bench memory` cannot see it: its runs differ by more). esbuild (a
// transform per file: no bundling, names and code lines kept) because it already runs our TypeScript in tests.
// Usage: node scripts/slim-dist.mjs [dist-dir]  (npm run build runs it; so does the set-up after a build)
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { transformSync } from 'esbuild';

function* jsFiles(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* jsFiles(path);
    else if (entry.name.endsWith('.js')) yield path;
  }
}

/** Rewrites every .js under `dist` in place; returns the characters before and after. */
export function slimDist(dist) {
  let before = 0;
  let after = 0;
  for (const file of jsFiles(dist)) {
    const source = readFileSync(file, 'utf8');
    // ES2022 as tsconfig's target: nothing is rewritten to older syntax, only comments and text escapes change
    const { code } = transformSync(source, { loader: 'js', format: 'esm', target: 'es2022', legalComments: 'none', charset: 'ascii', sourcefile: file });
    // esbuild leaves regular expression literals as written: one character past Latin-1 there keeps the file wide
    const wide = /[^\u0000-\u00ff]/.exec(code);
    if (wide) throw new Error(`${file}: "${wide[0]}" (U+${wide[0].codePointAt(0).toString(16).toUpperCase()}) is left in the compiled code (a regular expression literal?): write it as an escape (\\u…) in the source`);
    before += source.length;
    after += code.length;
    writeFileSync(file, code);
  }
  return { before, after };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const dist = resolve(process.argv[2] ?? join(fileURLToPath(new URL('..', import.meta.url)), 'dist'));
  const { before, after } = slimDist(dist);
  console.log(`slim-dist: ${dist}: ${before} → ${after} characters`);
}
