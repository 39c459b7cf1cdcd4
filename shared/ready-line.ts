// What a person reads when the hub has started: one plain line with the URL to open and, while the
// hub has no admin, how to get in: the first-admin set-up code, which the auth actor sends over its
// IPC channel (not through logs, not over gRPC: that would load a gRPC client, ~12 MB, into the
// supervisor for one call). It is the one deliberate secret in the output.
import http from 'node:http';
import { internalHubUrl, publicHubUrl, type HubConfig } from './config.js';
import type { Logger } from './log.js';
import type { SupervisedChild } from './supervision.js';
import { pushAll } from './lists.js';

const POLL_MS = 200;

/** node:http, not fetch: the supervisor runs without WebAssembly (--no-expose-wasm), which fetch's parser needs. */
const healthy = (url: string) => new Promise<boolean>((resolve) => {
  const req = http.get(url, { timeout: 2000 }, (res) => {
    res.resume();
    resolve(res.statusCode === 200);
  });
  req.on('timeout', () => req.destroy());
  req.on('error', () => resolve(false));
});

/** What the auth actor sends its supervisor when it opens a first-admin set-up. */
export const SETUP_CODE_MESSAGE = 'hub.setup-code';
export interface SetupCodeMessage { event: typeof SETUP_CODE_MESSAGE; code: string }

const isSetupCode = (m: unknown): m is SetupCodeMessage =>
  typeof m === 'object' && m !== null && (m as SetupCodeMessage).event === SETUP_CODE_MESSAGE && typeof (m as SetupCodeMessage).code === 'string';

/** The address browsers use, under Hub.base_url: `Hub.public_url`'s origin, else the gateway's (a wildcard address shown as 127.0.0.1). */
const hubAddress = (config: HubConfig): string => publicHubUrl(config, '/');

const setupLines = (url: string, code: string) => [
  `No admin yet: open ${url}hub/setup and enter the one-time set-up code ${code}`,
  'with the name and password of the first admin (or run `hub add-user NAME --admin`).',
];

/**
 * Waits (bounded) for /hub/health, then prints the ready line and, when the auth actor opened a set-up,
 * its code; a code sent later (the auth actor restarted) is printed when it comes. True once healthy.
 */
export async function announceReady(config: HubConfig, log: Logger, auth: SupervisedChild | undefined,
  out: (text: string) => void = (t) => process.stdout.write(`${t}\n`)): Promise<boolean> {
  const url = hubAddress(config);
  let code = '';
  let announced = false;
  if (auth) {
    auth.onMessage((m) => {
      if (!isSetupCode(m)) return;
      if (announced) out(['The auth service restarted with a new set-up code.', ...setupLines(url, m.code)].join('\n'));
      else code = m.code;
    });
  }
  const health = internalHubUrl(config, '/hub/health');
  const budgetMs = Math.max(30_000, config.Supervisor.startup_timeout * 4000);
  const deadline = Date.now() + budgetMs;
  while (!(await healthy(health))) {
    if (Date.now() > deadline) {
      log.warn({ event: 'supervisor.not_ready', seconds: budgetMs / 1000 }, 'the hub did not become healthy: see the lines above');
      return false;
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
  announced = true;
  const lines = [`Hub ready: open ${url}`];
  if (code) pushAll(lines, setupLines(url, code));
  else if (config.Hub.authenticator_class === 'dummy') lines.push('Demo logins (DummyAuthenticator): any name signs in with the configured password.');
  code = '';
  out(lines.join('\n'));
  return true;
}
