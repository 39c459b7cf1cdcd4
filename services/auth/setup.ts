// First-admin set-up: a hub with the password authenticator and no admin makes a one-time code at
// start, sends it once to the supervisor over the IPC channel (not a log line: the supervisor prints it
// in its ready line, the one deliberate secret in the output), and keeps only its SHA-256.
// The code, a name and a password make that person an admin; then the set-up is closed for good
// (a restart with no admin makes a new code). Wrong codes are counted: too many close it too.
import { createHash, randomInt, timingSafeEqual } from 'node:crypto';
import type { AuditPublisher } from '../../shared/audit.js';
import type { HubConfig } from '../../shared/config.js';
import { errors } from '../../shared/errors.js';
import type { Logger } from '../../shared/log.js';
import { SETUP_CODE_MESSAGE, type SetupCodeMessage } from '../../shared/ready-line.js';
import { invalidNameReason, normalizeUsername } from '../../shared/names.js';
import type { UserModel } from './handlers.js';
import type { AuthStore } from './store.js';

/** Crockford's base32 without look-alikes: easy to read from a terminal and type. */
const ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const GROUPS = 3;
const GROUP_LENGTH = 4;
/** Wrong codes before the set-up closes (60 bits of code: guessing is hopeless long before). */
export const MAX_SETUP_ATTEMPTS = 10;

const digest = (code: string) => createHash('sha256').update(code.toUpperCase().replace(/[^0-9A-Z]/g, '')).digest();

export interface SetupDeps {
  config: HubConfig;
  store: AuthStore;
  audit: AuditPublisher;
  log: Logger;
  ensureUser: (name: string, admin: boolean) => Promise<void>;
  setPassword: (r: { name: string; password: string; by: string }) => Promise<unknown>;
  getUser: (r: { name: string }) => Promise<UserModel>;
}

export async function createFirstAdminSetup({ config, store, audit, log, ensureUser, setPassword, getUser }: SetupDeps) {
  let hash: Buffer | null = null;
  let failures = 0;
  if (config.Hub.authenticator_class === 'password' && (await store.adminCount()) === 0) {
    const chars = Array.from({ length: GROUPS * GROUP_LENGTH }, () => ALPHABET[randomInt(ALPHABET.length)]).join('');
    const code = chars.match(new RegExp(`.{${GROUP_LENGTH}}`, 'g'))!.join('-');
    hash = digest(code);
    // a callback, so a supervisor already gone is not an uncaught 'error' event
    process.send?.({ event: SETUP_CODE_MESSAGE, code } satisfies SetupCodeMessage, undefined, {}, () => undefined);
    log.info({ event: 'setup.open' }, 'no admin yet: first-admin set-up is open (the supervisor prints its code)');
  }

  /** Still open: a code exists and no admin has appeared since (one made by `hub add-user --admin` or the API closes it). */
  async function open(): Promise<boolean> {
    if (!hash) return false;
    if ((await store.adminCount()) > 0) hash = null;
    return hash !== null;
  }

  return {
    setupStatus: async () => ({ needed: await open() }),

    async completeSetup(r: { code: string; name: string; password: string; remote_addr: string }) {
      if (!(await open())) throw errors.notFound('The first-admin set-up is closed: an admin exists');
      const given = digest(typeof r.code === 'string' ? r.code : '');
      if (!timingSafeEqual(given, hash!)) {
        failures++;
        void audit.publish('user', 'setup', { who: `anonymous@${r.remote_addr}`, what: 'first admin', outcome: 'denied', reason: 'wrong code' });
        if (failures >= MAX_SETUP_ATTEMPTS) {
          hash = null;
          log.warn({ event: 'setup.closed', failures }, 'too many wrong set-up codes: set-up closed until the hub restarts');
        }
        throw errors.forbidden('That set-up code is not right. It was printed when the hub started.', 'HUB_ERR_SETUP_CODE');
      }
      const name = normalizeUsername((r.name ?? '').trim(), config.Authenticator.username_map);
      const why = invalidNameReason(name);
      if (why) throw errors.badRequest(`Invalid user name: ${why}`);
      if (typeof r.password !== 'string' || r.password.length < config.PasswordAuthenticator.min_password_length) {
        throw errors.badRequest(`Passwords must be at least ${config.PasswordAuthenticator.min_password_length} characters`);
      }
      const claimed = hash;
      hash = null; // claimed: a second set-up racing this one finds it closed
      try {
        await ensureUser(name, true);
        await setPassword({ name, password: r.password, by: 'first-admin set-up' });
      } catch (e) {
        hash = claimed;
        throw e;
      }
      log.info({ event: 'setup.done', user: name }, 'first admin set up');
      void audit.publish('user', 'setup', { who: `anonymous@${r.remote_addr}`, what: name, outcome: 'ok' });
      return getUser({ name });
    },
  };
}
