// The configuration of the nats-server the supervisor starts, written at each start to <data_dir>/run/nats.conf
// (0600: it holds the bus users' passwords). One lone server on 127.0.0.1, or a member of a cluster (routes to
// the others, which admit each other as `hub` with the hub's NATS secret); with Hub.internal_ssl, TLS with
// client certificates on both the client port and the routes.
import { natsAuthorization } from './nats-auth.js';
import type { NatsTlsFiles } from './internal-ssl.js';

export interface NatsServerOptions {
  port: number;
  /** unique per member of a cluster */
  name: string;
  storeDir: string;
  pidFile: string;
  secret: string;
  tls?: NatsTlsFiles;
  cluster?: { host: string; port: number; routes: string[] };
}

/** The user the members of a cluster admit each other's routes as (its password is the hub's NATS secret). */
export const ROUTE_USER = 'hub';

export function natsServerConfig(o: NatsServerOptions): string {
  const q = (v: string | number): string => JSON.stringify(v);
  // certificates on both sides, TLS 1.2 at least (nats-server's own default), a slow handshake cut after 2 s
  const tls = (indent: string) => (o.tls
    ? `${indent}tls {\n${indent}  cert_file: ${q(o.tls.certFile)}\n${indent}  key_file: ${q(o.tls.keyFile)}\n`
      + `${indent}  ca_file: ${q(o.tls.caFile)}\n${indent}  verify: true\n${indent}  timeout: 2\n${indent}}\n`
    : '');
  const routes = o.cluster?.routes.map((u) => u.replace(/^nats:\/\//, `nats://${ROUTE_USER}:${o.secret}@`)) ?? [];
  return [
    '# Written by the hub\'s supervisor at each start: edits here are lost (see shared/nats-server-config.ts).\n',
    // only the hub's processes: single-user servers run on this machine too, as other accounts with localprocess
    'host: "127.0.0.1"\n', `port: ${o.port}\n`, `server_name: ${q(o.name)}\n`, 'max_payload: 8MB\n', `pid_file: ${q(o.pidFile)}\n`,
    natsAuthorization(o.secret),
    tls(''),
    `jetstream {\n  store_dir: ${q(o.storeDir)}\n  max_memory_store: 256MB\n  max_file_store: 4GB\n}\n`,
    o.cluster
      ? `cluster {\n  name: "hub"\n  host: ${q(o.cluster.host)}\n  port: ${o.cluster.port}\n`
        + `  authorization {\n    user: ${q(ROUTE_USER)}\n    password: ${q(o.secret)}\n  }\n`
        + `  routes: [${routes.map(q).join(', ')}]\n${tls('  ')}}\n`
      : '',
  ].join('');
}
