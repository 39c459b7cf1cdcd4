// `hub import-config jupyterhub_config.py [--out FILE]`: an established hub's configuration made this hub's. The
// file is loaded by the established hub's own loader (traitlets, in the Python of the venv the set-up makes:
// cli/import-config.py), mapped by cli/import-config-map.ts, checked as `hub start` would check it, then written
// whole (0600: it may hold secrets) with a report of what was carried, what was not and why, and which Python
// to port by hand. Bad input writes nothing.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { ConfigError, validateConfig } from '../shared/config.js';
import { REPO_ROOT } from '../shared/paths.js';
import { CliError } from './hub.js';
import type { VerbInput } from './main.js';
import { mapConfig, UnknownClassError, type ImportReport, type Loaded } from './import-config-map.js';

/** The venv `node scripts/setup.mjs --for-import` (and `--for-tests`) makes, with jupyterhub 6.1.1 and its traitlets. */
export const LOADER_VENV = join(REPO_ROOT, '.cache', 'jupyter-6.1');
const LOADER_PIN = 'jupyterhub==6.1.1';
const LOADER_SCRIPT = join(REPO_ROOT, 'cli', 'import-config.py');
/** Loading runs the operator's file: one that never ends is stopped. */
const LOAD_TIMEOUT_MS = 60_000;

function loaderPython(): string {
  const python = join(LOADER_VENV, 'bin', 'python');
  const stamp = join(LOADER_VENV, '.installed');
  if (!existsSync(python) || !existsSync(stamp) || !readFileSync(stamp, 'utf8').split('\n').includes(LOADER_PIN)) {
    throw new CliError(`the established hub's config loader is not installed (${LOADER_PIN} in ${relative(process.cwd(), LOADER_VENV) || LOADER_VENV}): `
      + `run \`node scripts/setup.mjs --for-import\` in ${REPO_ROOT} (it makes that virtual environment with pip, about a minute), then run this again`);
  }
  return python;
}

type LoaderAnswer = Loaded & { ok: true } | { ok: false; kind: 'missing' | 'syntax' | 'raised'; message: string; line: number | null };

/** Runs cli/import-config.py on the file; its own output (a config may print) goes to our standard error. */
async function load(file: string): Promise<LoaderAnswer> {
  const python = loaderPython();
  const dir = mkdtempSync(join(tmpdir(), 'hub-import-config-'));
  const result = join(dir, 'loaded.json');
  try {
    const exit = await new Promise<{ code: number | null; signal: string | null; stderr: string }>((done, fail) => {
      const child = spawn(python, ['-B', LOADER_SCRIPT, file, result], { stdio: ['ignore', 'inherit', 'pipe'], env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' } });
      let stderr = '';
      child.stderr.on('data', (d) => { stderr = (stderr + d).slice(-4000); process.stderr.write(d); });
      const timer = setTimeout(() => child.kill('SIGKILL'), LOAD_TIMEOUT_MS);
      child.on('error', fail);
      child.on('exit', (code, signal) => { clearTimeout(timer); done({ code, signal, stderr }); });
    });
    if (exit.signal === 'SIGKILL') throw new CliError(`loading ${file} took longer than ${LOAD_TIMEOUT_MS / 1000} s and was stopped; nothing written`);
    if (exit.code !== 0 || !existsSync(result)) {
      throw new CliError(`the config loader failed (${exit.code ?? exit.signal}): ${exit.stderr.trim().split('\n').at(-1) ?? ''}; nothing written`);
    }
    return JSON.parse(readFileSync(result, 'utf8')) as LoaderAnswer;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const at = (file: string, line?: number) => (line ? `${basename(file)}:${line}` : basename(file));

/** The report as a person reads it: one line per option. */
export function reportText(report: ImportReport, out: string): string {
  const lines: string[] = [`${report.source} → ${out}`];
  // no spread into a call anywhere at run time (test/contracts/no-spread.test.ts): reduce, and lines joined
  const width = (xs: string[]) => Math.min(48, xs.reduce((w, x) => Math.max(w, x.length), 0));
  const section = (title: string, rows: [string, string][]) => {
    if (!rows.length) return;
    const w = width(rows.map(([a]) => a));
    lines.push('', `${title} (${rows.length}):`, rows.map(([a, b]) => `  ${a.padEnd(w)}  ${b}`).join('\n'));
  };
  section('Carried over', report.mapped.map((m) => [`${m.option}${m.line ? ` (line ${m.line})` : ''}`, `→ ${m.to.join(', ') || '(nothing to set)'}${m.note ? `  ${m.note}` : ''}`]));
  section('Established defaults written', report.defaults.map((d) => [d.to, `= ${JSON.stringify(d.value)}  ${d.why}`]));
  section('Not carried', report.unmapped.map((u) => [`${u.option}${u.line ? ` (line ${u.line})` : ''}`, u.why]));
  if (report.notes.length) lines.push('', 'Note:', report.notes.map((n) => `  ${n}`).join('\n'));
  section('Python to port by hand', report.callables.map((c) => [c.option, `${c.name}, set at ${at(report.source, c.line)}${c.defined ? `, defined at ${at(c.defined.file, c.defined.line)}` : ''}: ${c.why}`]));
  return `${lines.join('\n')}\n`;
}

export async function importConfig({ positional, flags }: VerbInput): Promise<number> {
  const file = resolve(positional[0]);
  const out = resolve(typeof flags.out === 'string' ? flags.out : 'hub-config.json');
  if (!existsSync(file)) throw new CliError(`${positional[0]}: no such file; nothing written`);
  if (existsSync(out) && !flags.force) throw new CliError(`${out} exists: give another --out, or --force to replace it; nothing written`);
  const loaded = await load(file);
  if (!loaded.ok) {
    const where = loaded.line ? `${positional[0]}, line ${loaded.line}` : positional[0];
    throw new CliError(`${where}: ${loaded.kind === 'missing' ? 'no such file' : loaded.message}; nothing written`);
  }
  let mapped: ReturnType<typeof mapConfig>;
  try {
    mapped = mapConfig(loaded);
    validateConfig(mapped.config); // mapConfig leaves out what this hub refuses: this only confirms it
  } catch (e) {
    if (e instanceof UnknownClassError) throw new CliError(`${positional[0]}: ${e.message}; nothing written`);
    if (e instanceof ConfigError) throw new CliError(`the imported config does not validate (${e.problems.join('; ')}); nothing written`);
    throw e;
  }
  const tmp = join(dirname(out), `.${basename(out)}.${process.pid}.tmp`);
  writeFileSync(tmp, `${JSON.stringify(mapped.config, null, 2)}\n`, { mode: 0o600 });
  renameSync(tmp, out);
  process.stdout.write(flags.json ? `${JSON.stringify({ out, config: mapped.config, report: mapped.report }, null, 2)}\n` : reportText(mapped.report, out));
  return 0;
}
