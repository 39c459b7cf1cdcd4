// `hub credentials audit|metrics|nats-config`: what an operator's tools need to reach the hub's NATS with no more
// rights than their job (shared/nats-auth.ts). `audit` may only read the audit stream and hub.audit.>; `metrics`
// may only ask for each actor's metrics and discover them; `nats-config` prints the users and permissions to give an
// external NATS (Hub.nats_url) that the hub does not start. Printed to standard output only, never logged.
import { natsUrl } from '../shared/actor.js';
import { NATS_TOKEN_ENV, natsServers, type HubConfig } from '../shared/config.js';
import { internalTlsFiles, operatorClientCertificate, type NatsTlsFiles } from '../shared/internal-ssl.js';
import { ADMIN_USER, busAuth, busSecret, natsAuthorization, credentialUrl, type BusAuth, type OperatorCredential } from '../shared/nats-auth.js';
import type { NatsLink } from '../shared/nats.js';
import { UsageError } from './args.js';
import { CliError } from './hub.js';
import type { VerbInput } from './main.js';

function secretOf(config: HubConfig): string {
  const secret = busSecret(config.Hub.data_dir, process.env[NATS_TOKEN_ENV], false);
  if (!secret) throw new CliError(`no NATS secret in ${config.Hub.data_dir} (the hub makes it at its first start; or set ${NATS_TOKEN_ENV})`);
  return secret;
}

/**
 * How a command-line tool on this node connects as one of the operators' credentials: its user, and under
 * Hub.internal_ssl this node's certificate (the command line runs with the hub's own rights on its data dir).
 * Without a secret (no hub ever ran on this data dir) it connects as nobody: an external NATS without users
 * still answers, and a missing NATS says so as it always did.
 */
export function operatorNatsLink(config: HubConfig, credential: OperatorCredential): NatsLink {
  const secret = busSecret(config.Hub.data_dir, process.env[NATS_TOKEN_ENV], false);
  return { auth: secret ? busAuth(secret, credential) : undefined, tls: internalTlsFiles(config) };
}

/** The bus's admin (every subject): for commands that speak to every node's supervisor (`hub reload --all-nodes`). */
export function adminNatsLink(config: HubConfig): NatsLink {
  return { auth: busAuth(secretOf(config), ADMIN_USER), tls: internalTlsFiles(config) };
}

/** nats.js connection options from a link (the CLI connects with nats.js directly). */
export function connectOptions(link: NatsLink): { user?: string; pass?: string; inboxPrefix?: string; tls?: NatsTlsFiles } {
  const a: BusAuth | undefined = link.auth;
  return { ...(a ? { user: a.user, pass: a.pass, ...(a.inboxPrefix ? { inboxPrefix: a.inboxPrefix } : {}) } : {}), ...(link.tls ? { tls: link.tls } : {}) };
}

export async function credentials({ config, positional }: VerbInput): Promise<number> {
  const [what] = positional;
  if (what === 'nats-config') {
    process.stdout.write(`# the hub's NATS users for an external NATS (Hub.nats_url): put this in its configuration\n${natsAuthorization(secretOf(config))}`);
    return 0;
  }
  if (what !== 'audit' && what !== 'metrics') throw new UsageError(`credentials: expected audit, metrics or nats-config; got ${JSON.stringify(String(what).slice(0, 40))}`);
  const auth = busAuth(secretOf(config), what);
  const urls = natsServers(natsUrl(config)).map((u) => credentialUrl(config.Hub.internal_ssl ? u.replace(/^nats:/, 'tls:') : u, auth));
  process.stdout.write(`${urls.join(',')}\n`);
  if (config.Hub.internal_ssl) {
    const tls = operatorClientCertificate(config, what);
    process.stderr.write(tls
      ? `with Hub.internal_ssl, connect with TLS and this client certificate: --tlsca ${tls.caFile} --tlscert ${tls.certFile} --tlskey ${tls.keyFile}\n`
      : 'with Hub.internal_ssl, connect with TLS and a client certificate signed by Hub.internal_ssl_ca\n');
  }
  return 0;
}
