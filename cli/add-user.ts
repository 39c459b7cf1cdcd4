// `hub add-user NAME [--admin]`: first run, or any time: creates the user (an admin with --admin) and, for the
// "password" authenticator, sets their password, so they can log in at once.
import { HubError } from '../shared/errors.js';
import type { VerbInput } from './main.js';
import { CliError, cliIdentity, userNameArg } from './hub.js';
import { readNewPassword } from './secret.js';
import { withUsers } from './users.js';

export async function addUser({ config, positional, flags }: VerbInput): Promise<number> {
  const name = userNameArg('add-user', positional[0]);
  const admin = flags.admin === true;
  const by = cliIdentity();
  const rules = await withUsers(config, async (users, rules) => {
    const exists = await users.getUser({ name }).then(() => true, (e: unknown) => {
      if (e instanceof HubError && e.status === 404) return false;
      throw e;
    });
    if (exists) throw new CliError(`User ${name} already exists (\`hub set-password ${name}\` changes their password)`);
    const password = rules.Hub.authenticator_class === 'password'
      ? await readNewPassword(name, rules.PasswordAuthenticator.min_password_length) : null;
    await users.createUser({ name, admin, by });
    if (password !== null) {
      try {
        await users.setPassword({ name, password, by });
      } catch (e) {
        // no half-made user: without the password asked for, nobody could log in as them
        const undone = await users.deleteUser({ name, by }).then(() => true, () => false);
        throw new CliError(`${(e as Error).message}; ${undone ? 'the user was not added' : `user ${name} was created without a password`}`);
      }
    }
    return rules;
  });
  process.stderr.write(`added ${admin ? 'admin' : 'user'} ${name}${rules.Hub.authenticator_class === 'password' ? ' with a password' : ''}\n`);
  const { allowed_users: allowed, admin_users: admins } = rules.Authenticator;
  if (allowed.length && !allowed.includes(name) && !admins.includes(name)) {
    process.stderr.write(`note: Authenticator.allowed_users does not list ${name}: they cannot log in until it does\n`);
  }
  return 0;
}
