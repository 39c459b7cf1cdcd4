// COMPATIBILITY.md read as data: for every option of the established hub 6.1.1 (and its companions) it lists, the
// mark (✓ same, ≈ another way, ✗ not supported) and what the third column says. `hub import-config` takes its
// decisions and its reasons from here, so the page and the importer cannot disagree (cli/import-config-map.ts).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../shared/paths.js';

export type Mark = '✓' | '≈' | '✗';

export interface OptionRow {
  /** `Class.option` as the established hub names it (the class that defines it) */
  key: string;
  mark: Mark;
  /** the third column: where it went, how it differs, or why it is not supported */
  note: string;
  /** every option of the same row, in the order the row names them (the note may name one target each) */
  row: string[];
}

export interface ClassRow {
  mark: Mark;
  /** the first column as written (class names in backticks or plain) */
  classes: string;
  note: string;
}

export interface Compatibility {
  options: Map<string, OptionRow>;
  classes: ClassRow[];
}

/** Tables whose rows are not configuration options. */
const NOT_OPTIONS = /^(Classes|The single-user server's environment)$/;
/** Companion tables titled by their package whose rows name bare options: the class they belong to. */
const TITLED_CLASSES: Record<string, string> = { oauthenticator: 'OAuthenticator', dockerspawner: 'DockerSpawner', kubespawner: 'KubeSpawner' };

const cells = (line: string) => {
  const parts = line.split('|').slice(1, -1).map((c) => c.trim());
  return parts.length > 3 ? [parts[0], parts[1], parts.slice(2).join('|')] : parts;
};

/** `Class.option` names in a first column: `a`, `b` inherit the last class named, or the table's. */
function optionNames(first: string, tableClass: string): string[] {
  const text = first.replace(/^deprecated:\s*/, '').replace(/\([^)]*\)/g, ''); // "(→ `Authenticator.admin_users`)" names no row
  let owner = tableClass;
  const names: string[] = [];
  for (const [, token] of text.matchAll(/`([^`]+)`/g)) {
    const m = /^([A-Za-z]+)\.([A-Za-z_][A-Za-z0-9_]*)$/.exec(token);
    if (m) {
      owner = m[1];
      names.push(token);
    } else if (/^[a-z_][a-z0-9_]*$/.test(token) && owner) names.push(`${owner}.${token}`); // k8s_api_host
  }
  return names;
}

export function parseCompatibility(text: string): Compatibility {
  const options = new Map<string, OptionRow>();
  const classes: ClassRow[] = [];
  let heading = '';
  let title = '';
  let tableClass = '';
  let inTable = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('## ')) {
      heading = line.slice(3).trim();
      title = '';
      inTable = false;
      continue;
    }
    const bold = /^\*\*([^*]+)\*\*\s*$/.exec(line);
    if (bold) title = bold[1];
    if (!line.startsWith('|')) {
      inTable = false;
      continue;
    }
    const row = cells(line);
    if (!inTable) { // the header row: "`JupyterHub.` option", "option", "variable"
      inTable = true;
      const prefix = /^`([A-Za-z]+)\.`/.exec(row[0]);
      tableClass = prefix ? prefix[1] : TITLED_CLASSES[title.split(' ')[0]] ?? '';
      continue;
    }
    if (/^-+$/.test(row[0]) || row.length < 3) continue;
    const mark = row[1] as Mark;
    if (!['✓', '≈', '✗'].includes(mark)) continue;
    if (heading === 'Classes') {
      classes.push({ mark, classes: row[0], note: row[2] });
      continue;
    }
    if (NOT_OPTIONS.test(heading)) continue;
    const names = optionNames(row[0], tableClass);
    // "deprecated: `a`, `b` | ✗ | unknown options here": the row's first words are part of the reason
    const note = /^deprecated:/.test(row[0]) && !/deprecated/.test(row[2]) ? `deprecated there; ${row[2]}` : row[2];
    for (const key of names) if (!options.has(key)) options.set(key, { key, mark, note, row: names });
  }
  return { options, classes };
}

let cached: Compatibility | undefined;

/** The repository's COMPATIBILITY.md, read once. */
export function compatibility(): Compatibility {
  cached ??= parseCompatibility(readFileSync(join(REPO_ROOT, 'COMPATIBILITY.md'), 'utf8'));
  return cached;
}
