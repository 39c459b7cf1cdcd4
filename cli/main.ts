// The `hub` command-line tool: every verb but `start` (which supervisor.ts runs). One file per verb; this one
// holds the table of verbs, their arguments and help, and the exit codes: 0 done, 1 refused or failed (one
// line saying why), 2 bad arguments or configuration. How a verb reaches the hub: cli/hub.ts.
import { ConfigError, loadConfig, type HubConfig } from '../shared/config.js';
import { HubError } from '../shared/errors.js';
import { commandOf, parseArgs, UsageError, type ArgSpec } from './args.js';
import { CliError } from './hub.js';
import { useBaseUrl } from '../shared/urls.js';

export interface VerbInput {
  config: HubConfig;
  positional: string[];
  flags: Record<string, string | true>;
}

interface Verb extends ArgSpec {
  /** what `hub help` says, one line per entry */
  help: string[];
  run: () => Promise<(input: VerbInput) => Promise<number>>;
}

// Verb modules load only when their verb runs: `hub token` pays for no NATS client, `hub audit` for no SQLite.
const VERBS: Record<string, Verb> = {
  status: {
    positional: [0, 0], usage: 'status',
    help: ["the running hub's processes with their memory (RSS and PSS), start time and code",
      "(release and commit), and each actor's answer to a gRPC ping"],
    run: async () => (await import('./status.js')).status,
  },
  restart: {
    positional: [0, 1], flags: { build: 'boolean' }, usage: 'restart [ACTOR] [--build]',
    help: ['replace every actor and gateway (or those of ACTOR) one at a time with a fresh process running',
      'the code now in dist/, without failing a request or stopping a server (--build: `npm run build`',
      'first, an upgrade); gateways hand the port over and drain up to Supervisor.drain_timeout'],
    run: async () => (await import('./restart.js')).restart,
  },
  reload: {
    positional: [0, 0], flags: { 'all-nodes': 'boolean' }, usage: 'reload [--all-nodes]',
    help: ['read and check the configuration again and apply what can change live (roles, services, api_tokens,',
      'who may log in, what the next server start takes, limits, extra_headers, log level); an invalid file',
      'changes nothing (exit 1, with why); other changes are named as needing `hub restart`. Also SIGHUP to',
      'the supervisor. --all-nodes: every node of the hub reloads'],
    run: async () => (await import('./reload.js')).reload,
  },
  'add-user': {
    positional: [1, 1], flags: { admin: 'boolean' }, missing: 'a user name', usage: 'add-user NAME [--admin]',
    help: ['create a user (an admin with --admin) and set their password, so they can log in',
      '(first run: `hub add-user alice --admin`)'],
    run: async () => (await import('./add-user.js')).addUser,
  },
  'set-password': {
    positional: [1, 1], missing: 'a user name', usage: 'set-password NAME',
    help: ["set an existing user's password for the password authenticator"],
    run: async () => (await import('./set-password.js')).setPassword,
  },
  token: {
    positional: [1, 1], missing: 'a user name', usage: 'token NAME',
    help: ["print a new API token with all of the user's scopes"],
    run: async () => (await import('./token.js')).token,
  },
  'rotate-oidc-key': {
    positional: [0, 0], usage: 'rotate-oidc-key',
    help: ['sign id_tokens with a new OpenID Connect key; the old key stays published',
      '(JWKS) so id_tokens already given out still verify'],
    run: async () => (await import('./rotate-oidc-key.js')).rotateOidcKey,
  },
  audit: {
    positional: [0, 0], flags: { follow: 'boolean', json: 'boolean', since: 'value', type: 'value', who: 'value' },
    usage: "audit [--follow] [--since 1h] [--type 'server.*'] [--who alice] [--json]",
    help: ['the audit trail, one line per event (JSON lines with --json); --follow waits for new',
      "events until Ctrl-C; --type and --who take globs (`--who alice` also finds user:alice)"],
    run: async () => (await import('./audit.js')).audit,
  },
  credentials: {
    positional: [1, 1], missing: 'which credential (audit, metrics or nats-config)', usage: 'credentials audit|metrics|nats-config',
    help: ["print a NATS URL (user and password) that may only read the audit trail (audit) or the actors' metrics",
      "(metrics); nats-config prints the hub's NATS users and permissions for an external NATS (Hub.nats_url)"],
    run: async () => (await import('./credentials.js')).credentials,
  },
  import: {
    positional: [1, 1], flags: { db: 'value', 'dry-run': 'boolean' }, missing: 'what to import from ("jupyterhub")',
    usage: 'import jupyterhub --db URL [--dry-run]',
    help: ["bring the established hub's database over (a SQLite file or a postgresql:// URL): users, groups,",
      'roles, API tokens (every token keeps working), named servers, shares, share codes, services, auth state',
      '(with JUPYTERHUB_CRYPT_KEY); --dry-run prints what would change. The hub must be stopped'],
    run: async () => (await import('./import-jupyterhub.js')).importVerb,
  },
  'import-config': {
    positional: [1, 1], flags: { out: 'value', force: 'boolean', json: 'boolean' }, missing: 'the established hub\'s config file',
    usage: 'import-config jupyterhub_config.py [--out hub-config.json] [--force] [--json]',
    help: ["an established hub's (JupyterHub 6.1) config file made this hub's, loaded by its own loader;",
      'written to --out (default hub-config.json; over an existing file only with --force), with a report:',
      'what was carried, what was not and why, the Python to port by hand with its lines (--json: as JSON)'],
    run: async () => (await import('./import-config.js')).importConfig,
  },
  help: {
    positional: [0, 1], usage: 'help [COMMAND]',
    help: ["show this text, or one command's"],
    run: async () => async () => 0, // answered below, before any configuration is read
  },
};

/** `  usage   first line of help` with the rest aligned under it; a long usage gets a line of its own. */
function entry(usage: string, help: string[]): string {
  const indent = ' '.repeat(27);
  const head = usage.length < 24 ? `  ${usage.padEnd(24)} ${help[0]}` : `  ${usage}\n${indent}${help[0]}`;
  return [head, ...help.slice(1).map((l) => indent + l)].join('\n');
}

const HELP = `usage: hub [command] [arguments] [--config FILE] [--Section.option=value ...]

commands:
${entry('start', ['run the hub: NATS and the actors, restarted when they die (default)'])}
${Object.values(VERBS).map((v) => entry(v.usage!, v.help)).join('\n')}

While the hub runs, add-user, set-password, token and rotate-oidc-key ask its actors (over gRPC, on the sockets in
<data_dir>/run/); without it they change the stores in the data dir themselves. Passwords are asked for
without echo on a terminal, or read as one line from standard input. audit reads the hub's NATS.

options:
  --config FILE            JSON, or a TypeScript/JavaScript module exporting the config object (env HUB_CONFIG);
                           give the hub's own, so the command finds its data dir
  --Section.option=value   override one option, e.g. --Hub.data_dir=/srv/hub
`;

/** Runs one verb to completion and returns the process's exit code. */
export async function runCli(argv: readonly string[]): Promise<number> {
  const name = commandOf(argv);
  const verb = Object.hasOwn(VERBS, name) ? VERBS[name] : undefined;
  if (!verb) {
    process.stderr.write(`hub: unknown command ${JSON.stringify(name.slice(0, 60))} (\`hub help\` lists them)\n`);
    return 2;
  }
  try {
    if (name === 'help') {
      const topic = argv.find((a) => !a.startsWith('-') && a !== 'help'); // `hub help audit`, `hub audit --help`
      const about = topic && Object.hasOwn(VERBS, topic) ? VERBS[topic] : undefined;
      process.stdout.write(about ? `usage: hub ${about.usage}\n  ${about.help.join('\n  ')}\n` : HELP);
      return 0;
    }
    const { positional, flags, configArgs } = parseArgs(name, argv.slice(1), verb);
    const config = await loadConfig({ argv: configArgs });
    useBaseUrl(config.Hub.base_url);
    return await (await verb.run())({ config, positional, flags });
  } catch (e) {
    if (e instanceof ConfigError && name === 'reload') {
      process.stderr.write(`hub reload: configuration not reloaded (nothing changed): ${e.message}\n`); // the running hub is untouched
      return 1;
    }
    if (e instanceof UsageError || e instanceof ConfigError) {
      process.stderr.write(`hub${e instanceof UsageError ? ' ' : ': '}${e.message}\n`); // a UsageError names its verb
      return 2;
    }
    if (e instanceof CliError || e instanceof HubError) {
      process.stderr.write(`hub ${name}: ${e.message}\n`);
      return 1;
    }
    process.stderr.write(`hub ${name}: ${(e as Error)?.message ?? String(e)}\n`);
    return 1;
  }
}
