// `hub set-password <user>`: sets the password the "password" authenticator checks. The user must exist
// (`hub add-user` creates one).
import type { VerbInput } from './main.js';
import { cliIdentity, userNameArg } from './hub.js';
import { readNewPassword } from './secret.js';
import { withUsers } from './users.js';

export async function setPassword({ config, positional }: VerbInput): Promise<number> {
  const name = userNameArg('set-password', positional[0]);
  const rules = await withUsers(config, async (users, rules) => {
    await users.getUser({ name }); // no prompt for a user who is not there
    const password = await readNewPassword(name, rules.PasswordAuthenticator.min_password_length);
    await users.setPassword({ name, password, by: cliIdentity() });
    return rules;
  });
  process.stderr.write(`password set for ${name}\n`);
  if (rules.Hub.authenticator_class !== 'password') {
    process.stderr.write(`note: Hub.authenticator_class is "${rules.Hub.authenticator_class}": only the "password" authenticator checks passwords\n`);
  }
  return 0;
}
