// `dummy`: any name logs in, with DummyAuthenticator.password when set ("" = any password). For demos and tests.
import { timingSafeEqual } from 'node:crypto';
import type { AuthenticatorFactory } from './contract.js';

const same = (a: string, b: string) => {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
};

export const createDummyAuthenticator: AuthenticatorFactory = ({ config }) => ({
  offer: { form: true },
  admitsAllByDefault: true,
  hasAllowRule: false,

  async authenticate({ hubName, password }) {
    const want = config.DummyAuthenticator.password;
    return want === '' || same(password, want) ? { ok: true, identity: { name: hubName } } : { ok: false, reason: 'invalid credentials' };
  },
});
