// The command line's grammar: `hub [verb] [arguments] [--verb-flags] [--config FILE] [--Section.option=value ...]`.
// A verb's own flags are lower-case words (`--admin`, `--since 1h`); configuration overrides name a section
// (`--Hub.port=8001`); anything else is a usage error (exit code 2), reported in one line.
import { pushAll } from '../shared/lists.js';

export class UsageError extends Error {
  override name = 'UsageError';
}

/** The verb `argv` asks for: the first word, `help` for -h/--help anywhere, `start` when there is none. */
export function commandOf(argv: readonly string[]): string {
  if (argv.includes('--help') || argv.includes('-h')) return 'help';
  return argv[0] && !argv[0].startsWith('-') ? argv[0] : 'start';
}

export interface ArgSpec {
  /** how many positional arguments, at least and at most */
  positional: [number, number];
  /** the verb's flags: `boolean` (present or not) or `value` (`--since 1h` or `--since=1h`) */
  flags?: Record<string, 'boolean' | 'value'>;
  /** what the positional arguments are, for the message when they are missing ("a user name") */
  missing?: string;
  /** shown after "usage: " when the arguments do not fit */
  usage?: string;
}

export interface ParsedArgs {
  positional: string[];
  flags: Record<string, string | true>;
  /** `--config FILE` and `--Section.option=value`, for loadConfig */
  configArgs: string[];
}

const OVERRIDE = /^--[A-Za-z][A-Za-z0-9_]*\.[A-Za-z]/;

/** Splits the arguments after the verb; throws a UsageError naming the first problem. */
export function parseArgs(verb: string, args: readonly string[], spec: ArgSpec): ParsedArgs {
  const fail = (problem: string): never => {
    throw new UsageError(`${verb}: ${problem}${spec.usage ? ` (usage: hub ${spec.usage})` : ''}`);
  };
  const out: ParsedArgs = { positional: [], flags: {}, configArgs: [] };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === '--') {
      pushAll(out.positional, args.slice(i + 1));
      break;
    }
    if (arg === '--config') {
      if (i + 1 >= args.length) fail('--config needs a file');
      out.configArgs.push(arg, args[++i]);
    } else if (arg.startsWith('--config=') || OVERRIDE.test(arg)) {
      out.configArgs.push(arg);
    } else if (arg.startsWith('-') && arg !== '-') {
      const eq = arg.indexOf('=');
      const name = arg.slice(2, eq < 0 ? undefined : eq);
      const kind = arg.startsWith('--') ? spec.flags?.[name] : undefined;
      if (!kind) fail(`unknown option ${JSON.stringify(arg.slice(0, 60))}`);
      if (kind === 'boolean') {
        if (eq >= 0) fail(`--${name} takes no value`);
        out.flags[name] = true;
      } else if (eq >= 0) {
        out.flags[name] = arg.slice(eq + 1);
      } else {
        if (i + 1 >= args.length) fail(`--${name} needs a value`);
        out.flags[name] = args[++i];
      }
    } else {
      out.positional.push(arg);
    }
  }
  const [min, max] = spec.positional;
  if (out.positional.length < min) fail(`expected ${spec.missing ?? (min === 1 ? 'an argument' : `${min} arguments`)}`);
  if (out.positional.length > max) fail(`unexpected argument ${JSON.stringify(out.positional[max].slice(0, 60))}`);
  return out;
}
