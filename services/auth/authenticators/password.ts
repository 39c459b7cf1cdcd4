// `password`: the hub's own accounts, with passwords an admin (or the first-admin set-up) gave, hashed with scrypt
// in the auth store. Anyone with a password may log in unless an allow option narrows it.
import { randomBytes } from 'node:crypto';
import { hashPassword, verifyPassword } from '../passwords.js';
import type { AuthenticatorFactory } from './contract.js';

/** A password hash to compare against when the user has none, so timing does not tell who exists. */
const DECOY = hashPassword(randomBytes(16).toString('hex'));

export const createPasswordAuthenticator: AuthenticatorFactory = ({ passwordOf }) => ({
  offer: { form: true },
  admitsAllByDefault: true,
  hasAllowRule: false,

  async authenticate({ hubName, password }) {
    const stored = await passwordOf(hubName);
    const ok = await verifyPassword(password, stored ?? (await DECOY));
    return ok && stored !== undefined ? { ok: true, identity: { name: hubName } } : { ok: false, reason: 'invalid credentials' };
  },
});
