// `dummy`: any name logs in, with DummyAuthenticator.password when set ("" = any password). For demos and tests.
import { macEquals } from '../../../shared/cookies.js';
import type { AuthenticatorFactory } from './contract.js';

export const createDummyAuthenticator: AuthenticatorFactory = ({ config }) => ({
  offer: { form: true },
  admitsAllByDefault: true,
  hasAllowRule: false,

  async authenticate({ hubName, password }) {
    const want = config.DummyAuthenticator.password;
    return want === '' || macEquals(password, want) ? { ok: true, identity: { name: hubName } } : { ok: false, reason: 'invalid credentials' };
  },
});
