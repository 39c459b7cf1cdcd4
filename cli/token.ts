// `hub token <user>`: prints a new API token with all of the user's scopes. With a hub running, the tokens
// actor issues it, so it works at once on every gateway and the audit trail names the operator.
import type { VerbInput } from './main.js';
import { actorClient, cliIdentity, runningHub, userNameArg } from './hub.js';
import { offlineNote, openOffline } from './offline.js';

export async function token({ config, positional }: VerbInput): Promise<number> {
  const request = { user: userNameArg('token', positional[0]), note: 'command-line generated', by: cliIdentity() };
  const hub = runningHub(config);
  let secret: string;
  if (hub) {
    const tokens = await actorClient(hub, 'tokens');
    try {
      secret = (await tokens.issueUserToken(request)).token;
    } finally {
      tokens.close();
    }
  } else {
    const offline = await openOffline(config);
    try {
      secret = (await (await offline.tokens()).issueUserToken(request)).token;
    } finally {
      await offline.close();
    }
    process.stderr.write(offlineNote(config.Hub.data_dir));
  }
  process.stdout.write(`${secret}\n`);
  return 0;
}
