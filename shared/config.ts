// The hub's configuration: one file (JSON or a TypeScript/JavaScript module exporting an object),
// keyed `{Section: {option: value}}` as the established hub keys its options, plus `--Section.option=value`
// overrides. Validated once at start with every problem listed; frozen; actors read the resolved copy.
import { mkdirSync, readFileSync, writeFileSync, existsSync, lstatSync, renameSync, statSync } from 'node:fs';
import { isIP } from 'node:net';
import { hostname } from 'node:os';
import { dirname, isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { checkExtraCreate, checkExtraHostConfig, checkHost, checkNameTemplate, checkVolumes } from './containers.js';
import { parseByteSize } from './bytes.js';
import { applyKubespawnerOverride, kubeProfileList, kubeSpawnerOptionProblems } from '../services/spawner/backends/kubernetes-objects.js';
import { invalidNameReason } from './names.js';
import { finishPendingImport } from './import-journal.js';
import { ACTORS as ALL_ACTORS, importedConfigPath } from './paths.js';
import { isValidRoleName } from './roles.js';
import { validateScopes } from './scopes.js';
import { pushAll } from './lists.js';
import { invalidBaseUrlReason, normaliseBaseUrl, underPrefix } from './urls.js';

type Kind = 'string' | 'integer' | 'number' | 'boolean' | 'object' | 'string-map' | 'string-list' | 'list' | 'bytes' | 'json';

export interface OptionSpec {
  kind: Kind;
  default: unknown;
  help: string;
  min?: number;
  max?: number;
  choices?: readonly string[];
  /** deeper checks of a value of the right kind; each problem is a line naming what is wrong */
  check?: (value: any) => string[];
}

const port = (dflt: number, help: string) => ({ kind: 'integer' as const, default: dflt, help, min: 1, max: 65535 });
const seconds = (dflt: number, help: string) => ({ kind: 'number' as const, default: dflt, help, min: 0 });

/**
 * The job script of `Hub.spawner_class: "slurm"`: the server's environment comes with the job (sbatch's
 * own, never written into the script), its output goes to the account's home.
 */
const SLURM_BATCH_SCRIPT = `#!/bin/sh
#SBATCH --job-name={job_name}
#SBATCH --chdir={workdir}
#SBATCH --output={homedir}/.hub-slurm-%j.log
#SBATCH --partition={partition}
#SBATCH --mem={memory}
#SBATCH --cpus-per-task={nprocs}
#SBATCH --time={runtime}
{options}
exec {cmd}
`;

/** Every option the hub knows, by section. An option not listed here is a configuration error. */
export const SCHEMA = {
  Hub: {
    ip: { kind: 'string', default: '127.0.0.1', help: 'address the public gateway listens on' },
    port: port(8000, 'public port of the gateway'),
    data_dir: { kind: 'string', default: './data', help: 'directory for stores, sockets and secrets (created 0700)' },
    db_url: { kind: 'string', default: '', help: 'where the actors keep their stores: "" (or "sqlite") = one SQLite file per actor in Hub.data_dir; "postgresql://user:password@host:5432/db?sslmode=verify-full&sslrootcert=/ca.pem" = one PostgreSQL database every node shares, each actor in its own schema (env HUB_DB_URL keeps the password out of the file)', check: checkDbUrl },
    db_kwargs: { kind: 'object', default: {}, help: 'PostgreSQL pool options: {"max": 10 (connections per actor), "connectionTimeoutMillis": 10000, "idleTimeoutMillis": 30000, "statement_timeout": 0 (ms, 0 = none), "idle_in_transaction_session_timeout": 10000 (ms a session may sit in a transaction without a statement: a dead node\'s locks are released after it; 0 = never)}; TLS comes with Hub.db_url\'s sslmode', check: checkDbKwargs },
    nats_port: port(4222, 'port of the NATS server the hub starts on 127.0.0.1'),
    nats_url: { kind: 'string', default: '', help: 'the NATS servers actors connect to, comma-separated (members of one cluster), e.g. "nats://10.0.0.1:4222,nats://10.0.0.2:4222" (env HUB_NATS_URL); alone it means an existing NATS, not started by the hub', check: checkNatsUrls },
    nats_cluster_port: { kind: 'integer', default: 0, help: 'start the hub\'s own NATS as a member of a cluster, taking routes on this port (0 = a lone NATS); all members share HUB_NATS_TOKEN', min: 0, max: 65535 },
    nats_cluster_ip: { kind: 'string', default: '127.0.0.1', help: 'address the NATS cluster port listens on (the other members must reach it)' },
    nats_routes: { kind: 'string-list', default: [], help: 'cluster URLs of the other NATS members, e.g. ["nats://10.0.0.2:6222"] (credentials are added by the hub)', check: (urls: string[]) => urls.flatMap((u) => (/^nats:\/\/[^/@\s]+:\d{1,5}$/.test(u) ? [] : [`Hub.nats_routes: ${JSON.stringify(u)} is not nats://host:port`])) },
    nats_replicas: { kind: 'integer', default: 1, help: 'copies of every JetStream bucket and stream the hub creates (3 on a three-member cluster: one member may die)', min: 1, max: 5 },
    internal_ssl: { kind: 'boolean', default: false, help: 'every NATS connection (actors to NATS, routes between cluster members) speaks TLS with certificates on both sides, from a CA the hub makes in Hub.internal_certs_location (or Hub.internal_ssl_ca/_cert/_key); a NATS that accepts plain connections stops the start' },
    internal_certs_location: { kind: 'string', default: '', help: 'directory of the hub\'s internal CA (ca.crt, ca.key; made at the first start with internal_ssl); "" = <data_dir>/internal-ssl. Nodes of one hub share the CA: copy this directory to each' },
    internal_ssl_ca: { kind: 'string', default: '', help: 'PEM file of the CA that signs every internal certificate (the operator\'s own PKI; with internal_ssl_cert and internal_ssl_key, instead of the hub\'s CA)' },
    internal_ssl_cert: { kind: 'string', default: '', help: 'PEM certificate of this node, signed by Hub.internal_ssl_ca, for server and client use (its names must include the addresses NATS is reached at)' },
    internal_ssl_key: { kind: 'string', default: '', help: 'PEM private key of Hub.internal_ssl_cert' },
    trusted_alt_names: { kind: 'string-list', default: [], help: 'extra names of the node certificate the hub makes, as "DNS:name" or "IP:address" (the addresses other nodes reach this node\'s NATS at)', check: (names: string[]) => names.filter((n) => !/^(DNS:[A-Za-z0-9*.-]+|IP:[0-9A-Fa-f.:]+)$/.test(n)).map((n) => `Hub.trusted_alt_names: ${JSON.stringify(n)} is not "DNS:name" or "IP:address"`) },
    node_name: { kind: 'string', default: '', help: 'this node\'s name in server records, logs, audit events and `hub status` ("" = the host name)', check: (v: string) => (v && !NODE_NAME_RE.test(v) ? [`Hub.node_name: ${JSON.stringify(v)}: expected 1 to 63 letters, digits, ".", "_" and "-"`] : []) },
    log_level: { kind: 'string', default: 'info', help: 'pino log level (also --log-level)', choices: ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] },
    log_format: { kind: 'string', default: 'auto', help: 'log lines: "pretty" (readable), "json" (one JSON object a line), "auto" (pretty when stdout is a terminal)', choices: ['auto', 'pretty', 'json'] },
    authenticate_prometheus: { kind: 'boolean', default: true, help: 'GET /hub/metrics needs the read:metrics scope (false: open to anyone who reaches the gateway)' },
    max_body_size: { kind: 'integer', default: 1048576, help: 'largest request body the hub itself reads, in bytes (413 beyond)', min: 0 },
    max_names_per_request: { kind: 'integer', default: 50000, help: 'most names one API request may list (users to create, group members to add or remove): 413 beyond, so a request\'s answer and its events stay within the internal message sizes', min: 1, max: 100000 },
    max_json_depth: { kind: 'integer', default: 64, help: 'deepest nesting of arrays/objects in a JSON body, user_options or group properties (400 beyond)', min: 1, max: 1000 },
    rpc_timeout: seconds(5, 'deadline of one internal gRPC or NATS call'),
    health_timeout: seconds(1, 'how long /hub/health waits for each actor'),
    audit_retention_days: { kind: 'number', default: 90, help: 'how long audit events stay in the HUB_AUDIT stream', min: 0 },
    api_page_default_limit: { kind: 'integer', default: 50, help: 'page size of paginated lists when `limit` is absent', min: 1 },
    api_page_max_limit: { kind: 'integer', default: 200, help: 'largest page a client may ask for', min: 1 },
    api_tokens: { kind: 'string-map', default: {}, help: 'token -> user name, registered at start (users created when missing)', check: checkApiTokens },
    services: { kind: 'list', default: [], help: 'registered services (see the README)', check: checkServices },
    extra_user_scopes: { kind: 'string-list', default: [], help: 'scopes every user holds besides `self` (the `user` role\'s, as the established hub 6\'s option adds them), e.g. ["read:groups!group=class", "list:users"]', check: (scopes: string[]) => { const v = validateScopes(scopes); return v.ok ? [] : [`Hub.extra_user_scopes: ${JSON.stringify(v.bad)}: ${v.reason}`]; } },
    load_roles: { kind: 'list', default: [], help: 'roles: {name, description, scopes, users, groups, services}', check: checkRoles },
    cache_max_bytes: { kind: 'integer', default: 33554432, help: 'bytes each gateway\'s caches may hold together (token resolutions and user models 40 % each, login sessions and their scopes 10 % each), estimated per entry; the oldest entries go first', min: 1048576 },
    cache_max_age: seconds(300, 'longest time a gateway keeps a token resolution or model without an event refreshing it'),
    activity_resolution: seconds(30, 'how often recorded activity is written, at most'),
    spawner_class: { kind: 'string', default: 'simple', help: 'how single-user servers run: "simple" (as the hub\'s own account), "localprocess" (each as its user\'s system account; needs root), "docker" (each in a container, DockerSpawner), "slurm" (each as a SLURM batch job, SlurmSpawner) or "kubernetes" (each in a pod, KubeSpawner)', choices: ['simple', 'localprocess', 'docker', 'slurm', 'kubernetes'] },
    env_prefix_aliases: { kind: 'string-list', default: [], help: 'each HUB_* variable given to servers and hub-managed services is also set under these prefixes (e.g. ["JUPYTERHUB_"])', check: (list: string[]) => list.filter((p) => !/^[A-Z][A-Z0-9_]*_$/.test(p)).map((p) => `Hub.env_prefix_aliases: ${JSON.stringify(p)} is not an environment variable prefix (capitals, digits and "_", ending with "_")`) },
    allow_named_servers: { kind: 'boolean', default: false, help: 'whether users may run named servers besides their default one' },
    named_server_limit_per_user: { kind: 'integer', default: 0, help: 'named servers a user may have (0 = no limit)', min: 0 },
    concurrent_spawn_limit: { kind: 'integer', default: 100, help: 'servers starting at once; later starts wait in the spawn queue (0 = no limit)', min: 0 },
    spawn_queue_limit: { kind: 'integer', default: 1000, help: 'starts that may wait beyond concurrent_spawn_limit, first come first served; past it 429 (0 = no waiting)', min: 0 },
    active_server_limit: { kind: 'integer', default: 0, help: 'running or starting servers, hub-wide, before 429 (0 = no limit)', min: 0 },
    cleanup_servers: { kind: 'boolean', default: true, help: 'stop single-user servers when the hub shuts down cleanly (false leaves them running, re-adopted at the next start)' },
    authenticator_class: { kind: 'string', default: 'password', help: 'how people log in', choices: ['password', 'dummy', 'pam', 'ldap', 'oauth', 'shared-password'] },
    base_url: { kind: 'string', default: '/', help: 'the path prefix the whole hub is served under, e.g. /jupyter/ (pages and API under /jupyter/hub/, servers under /jupyter/user/<name>/; other paths redirect into it)', check: (v: string) => { const why = invalidBaseUrlReason(v); return why ? [`Hub.base_url: ${JSON.stringify(v)}: ${why}`] : []; } },
    public_url: { kind: 'string', default: '', help: 'the URL browsers use to reach the hub, e.g. https://hub.example.org or https://example.org/jupyter/ (its path, if any, must be Hub.base_url; default http://<ip>:<port>)' },
    subdomain_host: { kind: 'string', default: '', help: 'serve each user\'s servers on a host of their own under this one, as the established hub\'s JupyterHub.subdomain_host: "https://hub.example.org" puts the hub\'s pages at that host and alice\'s servers at https://alice.hub.example.org/user/alice/ (needs wildcard DNS, and a wildcard certificate for https); "" = every server under the hub\'s own host', check: checkSubdomainHost },
    subdomain_hook: { kind: 'string', default: 'idna', help: 'how names become host labels with subdomain_host, as the established hub 6.1\'s: "idna" (names that are already valid labels as they are, other Unicode names IDNA-encoded, anything else a safe stub plus a hash; services at <name>--service.<host>) or "legacy" (percent-escapes with "_"; every service at services.<host>)', choices: ['idna', 'legacy'] },
    cookie_host_prefix_enabled: { kind: 'boolean', default: false, help: 'the hub\'s login cookie and servers\' OAuth cookies are named "__Host-…" (Secure, path "/", never settable by a sibling host), which stops a user\'s server from planting cookies for the hub; meant with subdomain_host, and needs https' },
    cookie_secret: { kind: 'string', default: '', help: 'hex key (64 hex chars) for the login cookie; env HUB_COOKIE_SECRET; else generated once into <data_dir>/cookie_secret', check: (v: string) => (v && !/^[0-9a-fA-F]{64}$/.test(v) ? ['Hub.cookie_secret: expected 64 hex characters (32 bytes)'] : []) },
    cookie_max_age_days: { kind: 'number', default: 14, help: 'lifetime of the login cookie (and, by default, of OAuth tokens)', min: 0 },
    shutdown_on_logout: { kind: 'boolean', default: false, help: 'logging out stops the person\'s running servers first' },
    allow_token_in_url: { kind: 'boolean', default: true, help: 'API requests may carry their token as ?token= (the seed\'s contract); false: only in the Authorization header, as the established hub 5.0+ reads it (a token in a URL ends up in logs, history and Referer headers)' },
    oauth_require_pkce: { kind: 'boolean', default: false, help: 'OAuth clients of the hub (servers, services) must send a PKCE code_challenge with each authorization request (the hub\'s own servers always do)' },
    token_expires_in_max_seconds: { kind: 'integer', default: 0, help: 'longest lifetime of an API token made through the API or the token page, in seconds (0 = no limit); a token asked without an expiry gets this one', min: 0 },
    oauth_token_expires_in: seconds(0, 'lifetime of OAuth access tokens (0 = the login cookie lifetime)'),
    ssl_cert: { kind: 'string', default: '', help: 'PEM certificate file (the certificate first, then its chain) that makes Hub.port speak HTTPS; a new file is picked up without a restart' },
    ssl_key: { kind: 'string', default: '', help: 'PEM private key file of Hub.ssl_cert (unencrypted, readable by the hub only)' },
    http_redirect_port: { kind: 'integer', default: 0, help: 'with HTTPS, a plain-HTTP port (on Hub.ip) that redirects to https:// and answers ACME HTTP-01 challenges, e.g. 80 (0 = none)', min: 0, max: 65535 },
    hub_port: port(8081, 'with HTTPS on Hub.port, the plain-HTTP port on 127.0.0.1 where the hub\'s own processes and local servers reach its API (HUB_API_URL)'),
    bind_url: { kind: 'string', default: '', help: 'as the established hub\'s JupyterHub.bind_url, for a unix socket only: "http+unix://%2Fsrv%2Fhub%2Fhub.sock" (the percent-encoded absolute path; "unix+http://" too) makes the gateway listen on that socket instead of Hub.ip:Hub.port, and the hub\'s own processes and local servers reach it on 127.0.0.1:Hub.hub_port; a path after it must be Hub.base_url; "" = Hub.ip and Hub.port', check: (v: string) => bindUrlProblems(v) },
    hub_socket_mode: { kind: 'string', default: '0600', help: 'the file mode of Hub.bind_url\'s unix socket, in octal, e.g. "0660" to let a group (a reverse proxy\'s) connect; as the established hub\'s JupyterHub.hub_socket_mode', check: (v: string) => (/^0?[0-7]{3}$/.test(v) ? [] : [`Hub.hub_socket_mode: ${JSON.stringify(v)} is not an octal file mode such as "0600" or "0660"`]) },
    letsencrypt_email: { kind: 'string', default: '', help: 'contact address of the ACME account (automatic certificates, with Hub.letsencrypt_domains)' },
    letsencrypt_domains: { kind: 'string-list', default: [], help: 'DNS names to obtain and renew a certificate for from the ACME CA (HTTP-01 on Hub.http_redirect_port), e.g. ["hub.example.org"]', check: (names: string[]) => names.filter((n) => !DOMAIN_RE.test(n)).map((n) => `Hub.letsencrypt_domains: ${JSON.stringify(n)} is not a DNS name (no wildcards: HTTP-01 cannot prove them)`) },
    acme_directory_url: { kind: 'string', default: 'https://acme-v02.api.letsencrypt.org/directory', help: 'the ACME CA\'s directory (a CA of one\'s own: trust its root with NODE_EXTRA_CA_CERTS)', check: (v: string) => (/^https:\/\/[^/\s]+/.test(v) ? [] : [`Hub.acme_directory_url: ${JSON.stringify(v)} is not an https URL`]) },
    oidc_issuer: { kind: 'string', default: '', help: 'the hub\'s OpenID Connect issuer, as relying parties see it (default <public_url>/hub); its discovery document is <issuer>/.well-known/openid-configuration', check: (v: string) => (v && !/^https?:\/\/[^/?#]+(\/[^?#]*)?$/.test(v) ? ['Hub.oidc_issuer: expected an http(s) URL without query or fragment'] : []) },
    oauth_clients: { kind: 'list', default: [], help: 'OAuth / OpenID Connect clients that are not services (a dashboard, a file browser): {client_id, client_secret (none = public, PKCE required), redirect_uris, post_logout_redirect_uris, allowed_scopes, oauth_no_confirm, require_nonce, description}; who may sign in: access:services!service=<client_id>', check: checkOAuthClients },
    extra_headers: { kind: 'string-map', default: {}, help: 'HTTP headers added to (or replacing) those of every answer the hub gives itself, e.g. {"Content-Security-Policy": "... frame-ancestors \'self\' https://portal.example.org"}', check: checkHeaders },
  },
  Supervisor: {
    restart_backoff_initial: seconds(0.1, 'first restart delay of a dead child'),
    restart_backoff_max: seconds(30, 'longest restart delay'),
    stable_uptime: seconds(10, 'uptime after which a child counts as healthy again and its backoff resets'),
    restart_intensity: { kind: 'integer', default: 5, help: 'restarts allowed within restart_period before a child is marked failed', min: 1 },
    restart_period: seconds(60, 'window for restart_intensity'),
    shutdown_timeout: seconds(10, 'how long a child may take to stop before it is killed (the spawner stops servers within it)'),
    startup_timeout: seconds(15, 'how long NATS may take to accept connections at start (and JetStream to be ready, in a cluster, twice that)'),
    drain_timeout: seconds(60, '`hub restart`: how long a replaced process may finish its work once its successor serves (a gateway: its open WebSockets, event streams and requests in flight; the spawner: the server starts and stops it began; every actor: its calls under way)'),
    actors: { kind: 'string-list', default: [...ALL_ACTORS], help: 'which actors this node runs (several nodes share one hub over NATS: e.g. ["spawner", "gateway"] on an extra node)', check: checkActors },
    gateways: { kind: 'integer', default: 1, help: 'gateway processes on this node, all on Hub.port (SO_REUSEPORT: the kernel spreads connections)', min: 1, max: 32 },
  },
  Spawner: {
    cmd: { kind: 'string-list', default: [], help: 'command of the single-user server ([] = this project\'s own)' },
    args: { kind: 'string-list', default: [], help: 'extra arguments after cmd' },
    environment: { kind: 'string-map', default: {}, help: 'extra environment of single-user servers' },
    start_timeout: seconds(60, 'how long a server may take to answer HTTP before its start fails'),
    http_timeout: seconds(30, 'how long one readiness check may wait for an answer'),
    slow_spawn_timeout: seconds(10, 'how long a start request waits for readiness before answering 202'),
    slow_stop_timeout: seconds(10, 'how long a stop request waits before answering 202'),
    stop_signal_timeout: seconds(2, 'wait after SIGINT, then after SIGTERM, before the next signal'),
    poll_interval: seconds(5, 'how often servers the spawner did not start itself are checked for life'),
    notebook_dir: { kind: 'string', default: '', help: 'working directory of servers ("" = the account\'s home with localprocess, the hub\'s with simple; "~" is the home)' },
    default_url: { kind: 'string', default: '', help: 'the page a server opens at, under its own URL, e.g. "/lab" for JupyterLab or "/tree/home/{username}" ({username} becomes the user\'s name); given to the server as HUB_DEFAULT_URL ("" = the server\'s own default)', check: (v: string) => (v === '' || /^\/[^\s]*$/.test(v) ? [] : [`Spawner.default_url: ${JSON.stringify(v)} must be a path starting with "/" (no spaces), e.g. "/lab"`]) },
    debug: { kind: 'boolean', default: false, help: 'servers log at debug level (given as HUB_DEBUG=1)' },
    disable_user_config: { kind: 'boolean', default: false, help: 'servers ignore the configuration files in the user\'s home (given as HUB_DISABLE_USER_CONFIG=1); a user who controls the server\'s own software environment can still get around it' },
    mem_limit: { kind: 'bytes', default: '', help: 'memory a server may use, enforced (bytes, or "512M", "2G"; "" = no limit); the server sees it as MEM_LIMIT' },
    cpu_limit: { kind: 'number', default: 0, help: 'cores a server may use, fractional, enforced (0 = no limit); the server sees it as CPU_LIMIT', min: 0 },
    placement: { kind: 'string', default: 'spread', help: 'which node\'s spawner starts a server when several nodes run one: "spread" (the node with the fewest active, starting and queued servers; ties in turn) or "pack" (the most, below Spawner.node_limit)', choices: ['spread', 'pack'] },
    node_limit: { kind: 'integer', default: 0, help: 'with placement "pack": servers per node before starts spill over to the next node (0 = no limit)', min: 0 },
    node: { kind: 'string', default: '', help: 'the node (Hub.node_name) whose spawner starts servers, overriding Spawner.placement; meant for a profile ("Spawner.node": "gpu-1"); "" = placement decides', check: (v: string) => (v && !NODE_NAME_RE.test(v) ? [`Spawner.node: ${JSON.stringify(v)}: expected a node name (1 to 63 letters, digits, ".", "_" and "-")`] : []) },
    node_lost_timeout: seconds(60, 'a spawner node not answering for longer than this has its servers marked stopped ("node <name> lost"); adopted again if it comes back with them running'),
    profiles: { kind: 'list', default: [], help: 'named choices offered at spawn: {name, display_name, description, default, overrides: {"Spawner.mem_limit": "2G", ...}}; user_options.profile picks one', check: checkProfiles },
    group_overrides: { kind: 'object', default: {}, help: 'options set per start for members of groups, as the established hub 5\'s: {"<name>": {"groups": ["gpu-users"], "spawner_override": {"mem_limit": "8G", "environment": {"GPU": "1"}}}}; every entry naming one of the user\'s groups applies, in the order of the names sorted, before user options and the profile; objects (environment) are merged, null removes a key', check: checkGroupOverrides },
    apply_user_options: { kind: 'string-map', default: {}, help: 'user_options keys a start may give and the option each sets, as the established hub 5.3\'s: {"image": "DockerSpawner.image", "mem": "mem_limit"}; a value of the wrong type is a 400; nothing else can be set by users', check: checkApplyUserOptions },
  },
  LocalProcessSpawner: {
    create_system_users: { kind: 'boolean', default: false, help: 'create a missing system account (useradd -m, home 0700) instead of failing the spawn' },
    min_uid: { kind: 'integer', default: 1000, help: 'lowest uid a server may run as: root and system accounts never run servers', min: 1 },
  },
  DockerSpawner: {
    host: { kind: 'string', default: '', help: 'the Docker Engine API: unix:///path/to/docker.sock (Podman: its `podman system service` socket), tcp://host:2375 or https://host:2376 (certificates from $DOCKER_CERT_PATH); "" = $DOCKER_HOST, else unix:///var/run/docker.sock', check: checkHost },
    image: { kind: 'string', default: '', help: 'the image servers run in (required with spawner_class "docker"; a profile may choose another)' },
    pull_policy: { kind: 'string', default: 'ifnotpresent', help: 'when the image is pulled: "ifnotpresent", "always" (at every start) or "never" (it must be on the Docker host already)', choices: ['ifnotpresent', 'always', 'never'] },
    pull_timeout: seconds(300, 'how long one pull may take before the start fails'),
    network_name: { kind: 'string', default: 'bridge', help: 'the network containers join: "bridge" (the engine\'s default; the hub reaches the container\'s address on DockerSpawner.port), a network\'s name, or "host" (the engine\'s own network; a free port on 127.0.0.1)', check: (v: string) => (/^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/.test(v) ? [] : [`DockerSpawner.network_name: ${JSON.stringify(v)} is not a network name`]) },
    port: port(8888, 'the port servers listen on inside their container (not with network_name "host")'),
    hub_connect_url: { kind: 'string', default: '', help: 'where servers in containers reach the hub (e.g. http://10.88.0.1:8000); "" = the hub\'s own address, right only with network_name "host"', check: (v: string) => (v && !/^https?:\/\/[^/]+\/?$/.test(v) ? [`DockerSpawner.hub_connect_url: expected http(s)://host:port, got ${JSON.stringify(v)}`] : []) },
    volumes: { kind: 'string-map', default: {}, help: 'host path or volume name → path in the container (":ro" at the end for read-only); {username} and {servername} expand (made safe for names), e.g. {"hub-home-{username}": "/home/jovyan"}', check: checkVolumes },
    remove: { kind: 'boolean', default: true, help: 'remove the container when its server stops (false keeps it, stopped, until the next start replaces it)' },
    name_template: { kind: 'string', default: 'hub-{username}--{servername}', help: 'container names; {username} and {servername} expand (made safe; a default server drops the trailing "--")', check: checkNameTemplate },
    cmd_from_image: { kind: 'boolean', default: false, help: 'run the image\'s own command instead of Spawner.cmd (the environment still says where to listen)' },
    extra_create_kwargs: { kind: 'object', default: {}, help: 'more fields of the engine\'s create call (e.g. {"User": "1000"}); Env and Labels are added to the hub\'s, the rest replaces', check: checkExtraCreate },
    extra_host_config: { kind: 'object', default: {}, help: 'more fields of the create call\'s HostConfig (e.g. {"ShmSize": 268435456}); Binds are added to DockerSpawner.volumes, the rest replaces', check: checkExtraHostConfig },
  },
  SlurmSpawner: {
    batch_script: { kind: 'string', default: SLURM_BATCH_SCRIPT, help: 'the job script given to sbatch on its standard input; placeholders {job_name} {username} {servername} {homedir} {workdir} {partition} {memory} {nprocs} {runtime} {options} {cmd} ({cmd} is required: the hub\'s wrapper and the server command, shell-quoted); a line with a placeholder whose value is empty is left out', check: checkBatchScript },
    partition: { kind: 'string', default: '', help: 'SLURM partition of the jobs ("" = the cluster\'s default)', check: (v: string) => (/^[A-Za-z0-9_.,-]*$/.test(v) ? [] : [`SlurmSpawner.partition: ${JSON.stringify(v)} is not a partition name (letters, digits, "_", ".", "-", "," between several)`]) },
    req_memory: { kind: 'string', default: '', help: 'memory per job as sbatch --mem takes it, e.g. "4G" ("" = Spawner.mem_limit when set, else the partition\'s default)', check: (v: string) => (/^(\d+[KMGT]?)?$/.test(v) ? [] : [`SlurmSpawner.req_memory: ${JSON.stringify(v)} is not a size sbatch --mem takes (a number with K, M, G or T)`]) },
    req_nprocs: { kind: 'integer', default: 0, help: 'CPUs per job (--cpus-per-task; 0 = Spawner.cpu_limit rounded up when set, else 1)', min: 0 },
    req_runtime: { kind: 'string', default: '', help: 'time limit of each job as sbatch --time takes it, e.g. "8:00:00" or "1-00:00:00" ("" = the partition\'s default); the server stops when it is reached', check: (v: string) => (/^(|UNLIMITED|(\d+-)?\d+(:\d+){0,2})$/.test(v) ? [] : [`SlurmSpawner.req_runtime: ${JSON.stringify(v)} is not a time sbatch --time takes (minutes, [days-]hours:minutes:seconds, ...)`]) },
    req_options: { kind: 'string-list', default: [], help: 'more sbatch options, one per line of the script, e.g. ["--gres=gpu:1", "--qos=interactive"]', check: (list: string[]) => list.filter((o) => !/^--?[A-Za-z][A-Za-z0-9-]*(=[^\n\r]*)?$/.test(o)).map((o) => `SlurmSpawner.req_options: ${JSON.stringify(o)} is not one sbatch option ("--name" or "--name=value", one line)`) },
    sbatch: { kind: 'string-list', default: ['sbatch'], help: 'the sbatch command (a path, or a prefix and the command, e.g. ["/opt/slurm/bin/sbatch"])', check: (v: string[]) => (v.length ? [] : ['SlurmSpawner.sbatch: must name a command']) },
    squeue: { kind: 'string-list', default: ['squeue'], help: 'the squeue command', check: (v: string[]) => (v.length ? [] : ['SlurmSpawner.squeue: must name a command']) },
    scontrol: { kind: 'string-list', default: ['scontrol'], help: 'the scontrol command', check: (v: string[]) => (v.length ? [] : ['SlurmSpawner.scontrol: must name a command']) },
    scancel: { kind: 'string-list', default: ['scancel'], help: 'the scancel command', check: (v: string[]) => (v.length ? [] : ['SlurmSpawner.scancel: must name a command']) },
    sacct: { kind: 'string-list', default: ['sacct'], help: 'the sacct command (asked why a job ended once scontrol has forgotten it)', check: (v: string[]) => (v.length ? [] : ['SlurmSpawner.sacct: must name a command']) },
    slurm_conf: { kind: 'string', default: '', help: 'the cluster\'s slurm.conf, given to every command as SLURM_CONF ("" = the commands\' own default)' },
    poll_interval: { kind: 'number', default: 5, help: 'how often the jobs are looked at (one squeue for all of them); a job that ends shows as a stopped server within it', min: 0.1 },
    hub_api_url: { kind: 'string', default: '', help: 'the hub\'s API as the compute nodes reach it, e.g. http://hub.cluster:8000/hub/api ("" = the hub\'s own address, right when jobs run on this machine)', check: (v: string) => (v === '' || /^https?:\/\/[^\s/]+(\/[^\s]*)?\/hub\/api$/.test(v) ? [] : [`SlurmSpawner.hub_api_url: ${JSON.stringify(v)} must be an http(s) URL ending in /hub/api`]) },
    server_ip: { kind: 'string', default: '0.0.0.0', help: 'the address servers listen on, on their node (the hub must reach them there)', check: (v: string) => (isIP(v) ? [] : [`SlurmSpawner.server_ip: ${JSON.stringify(v)} is not an IP address`]) },
  },
  // KubeSpawner's options (services/spawner/backends/kubernetes-objects.ts makes the pod from them, and checks them all
  // at once: kubeSpawnerOptionProblems in the backend's preflight); "json" options take the several shapes KubeSpawner's do
  KubeSpawner: {
    image: { kind: 'string', default: '', help: 'the image servers run in (required with spawner_class "kubernetes"; a profile may choose another)' },
    image_pull_policy: { kind: 'string', default: '', help: 'the container\'s imagePullPolicy: "IfNotPresent", "Always" or "Never" ("" = the cluster\'s default for the tag)', choices: ['', 'IfNotPresent', 'Always', 'Never'] },
    image_pull_secrets: { kind: 'json', default: null, help: 'names of Secrets holding registry credentials: a name or a list of names (or of {"name": ...})' },
    cmd: { kind: 'json', default: null, help: 'the command run in the image: a list of strings, or one string; null = Spawner.cmd (+ args); [] = the image\'s own' },
    environment: { kind: 'object', default: {}, help: 'more environment variables: name → value (with {username}, {servername}... expanded) or an EnvVar object ({"valueFrom": ...})' },
    working_dir: { kind: 'string', default: '', help: 'the container\'s working directory ("" = Spawner.notebook_dir when absolute, else the image\'s)' },
    port: port(8888, 'the port the server listens on in its pod (the hub reaches the pod\'s IP on it)'),
    namespace: { kind: 'string', default: '', help: 'the namespace of the servers\' pods ("" = the hub\'s own pod\'s namespace when in the cluster, else the kubeconfig context\'s, else "default")' },
    enable_user_namespaces: { kind: 'boolean', default: false, help: 'each user\'s pods in a namespace of their own (KubeSpawner.user_namespace_template), made at their first start; the hub then watches pods in all namespaces' },
    user_namespace_template: { kind: 'string', default: '{hubnamespace}-{username}', help: 'the per-user namespace\'s name; {hubnamespace}, {username} expand (KubeSpawner\'s safe slugs)' },
    user_namespace_labels: { kind: 'string-map', default: {}, help: 'more labels of per-user namespaces (templates expanded)' },
    user_namespace_annotations: { kind: 'string-map', default: {}, help: 'more annotations of per-user namespaces (templates expanded)' },
    slug_scheme: { kind: 'string', default: 'safe', help: 'how user and server names become parts of object names: "safe" (KubeSpawner 7: as they are when valid, else their safe letters and a hash) or "escape" (KubeSpawner 6\'s)', choices: ['safe', 'escape'] },
    pod_name_template: { kind: 'string', default: 'jupyter-{user_server}', help: 'pod names (and their Secrets\'); {username}, {servername}, {user_server}, {unescaped_username}... expand as KubeSpawner 7 slugs them' },
    pvc_name_template: { kind: 'string', default: 'claim-{user_server}', help: 'the claim\'s name (KubeSpawner\'s scheme, so claims KubeSpawner made are found again)' },
    storage_pvc_ensure: { kind: 'boolean', default: false, help: 'make the claim (KubeSpawner.pvc_name_template) at the first start; it stays when the server stops or is removed' },
    storage_class: { kind: 'json', default: null, help: 'the claim\'s storageClassName (null = the cluster\'s default class; "" = none)' },
    storage_capacity: { kind: 'string', default: '', help: 'the size the claim asks for, e.g. "10Gi"' },
    storage_access_modes: { kind: 'string-list', default: ['ReadWriteOnce'], help: 'the claim\'s access modes' },
    storage_selector: { kind: 'object', default: {}, help: 'the claim\'s selector (a LabelSelector)' },
    storage_extra_labels: { kind: 'string-map', default: {}, help: 'more labels of the claim' },
    storage_extra_annotations: { kind: 'string-map', default: {}, help: 'more annotations of the claim' },
    volumes: { kind: 'json', default: [], help: 'the pod\'s volumes: a list of Kubernetes Volume objects (or a dict of them, taken in key order), templates expanded' },
    volume_mounts: { kind: 'json', default: [], help: 'the server container\'s volumeMounts, as volumes' },
    cpu_limit: { kind: 'json', default: null, help: 'cores the container may use (its resources.limits.cpu; null = Spawner.cpu_limit)' },
    cpu_guarantee: { kind: 'json', default: null, help: 'cores reserved for it (resources.requests.cpu)' },
    mem_limit: { kind: 'json', default: null, help: 'bytes it may use, e.g. "2G" (resources.limits.memory; null = Spawner.mem_limit)' },
    mem_guarantee: { kind: 'json', default: null, help: 'bytes reserved for it (resources.requests.memory)' },
    extra_resource_limits: { kind: 'object', default: {}, help: 'more resource limits, e.g. {"nvidia.com/gpu": "1"} (extended resources such as GPUs)' },
    extra_resource_guarantees: { kind: 'object', default: {}, help: 'more resource requests' },
    node_selector: { kind: 'string-map', default: {}, help: 'labels a node must have to run the pod' },
    tolerations: { kind: 'json', default: [], help: 'the pod\'s tolerations (Kubernetes Toleration objects)' },
    node_affinity_required: { kind: 'json', default: [], help: 'NodeSelectorTerms the node must match' },
    node_affinity_preferred: { kind: 'json', default: [], help: 'PreferredSchedulingTerms' },
    pod_affinity_required: { kind: 'json', default: [], help: 'PodAffinityTerms' },
    pod_affinity_preferred: { kind: 'json', default: [], help: 'WeightedPodAffinityTerms' },
    pod_anti_affinity_required: { kind: 'json', default: [], help: 'PodAffinityTerms the pod must avoid' },
    pod_anti_affinity_preferred: { kind: 'json', default: [], help: 'WeightedPodAffinityTerms to avoid' },
    service_account: { kind: 'string', default: '', help: 'the pod\'s service account ("" = the namespace\'s default, its token not mounted unless automount_service_account_token)' },
    automount_service_account_token: { kind: 'json', default: null, help: 'mount the service account\'s token in the pod (null = only when service_account is set)' },
    uid: { kind: 'json', default: null, help: 'the user id the container runs as (null = the image\'s)' },
    gid: { kind: 'json', default: null, help: 'its group id (null = the image\'s)' },
    fs_gid: { kind: 'json', default: null, help: 'the group owning mounted volumes (the pod\'s fsGroup)' },
    supplemental_gids: { kind: 'json', default: null, help: 'more groups of the container\'s processes' },
    privileged: { kind: 'boolean', default: false, help: 'run the container privileged' },
    allow_privilege_escalation: { kind: 'json', default: false, help: 'the container\'s allowPrivilegeEscalation (null = the cluster\'s default)' },
    container_security_context: { kind: 'object', default: {}, help: 'more of the container\'s securityContext' },
    pod_security_context: { kind: 'object', default: {}, help: 'more of the pod\'s securityContext' },
    extra_labels: { kind: 'string-map', default: {}, help: 'more labels of the pod (templates expanded)' },
    extra_annotations: { kind: 'string-map', default: {}, help: 'more annotations of the pod (templates expanded)' },
    extra_pod_config: { kind: 'object', default: {}, help: 'more fields of the pod\'s spec, merged over the hub\'s' },
    extra_container_config: { kind: 'object', default: {}, help: 'more fields of the server container, merged over the hub\'s' },
    init_containers: { kind: 'json', default: [], help: 'containers run before the server\'s' },
    extra_containers: { kind: 'json', default: [], help: 'containers run beside the server\'s' },
    lifecycle_hooks: { kind: 'object', default: {}, help: 'the server container\'s lifecycle (postStart, preStop)' },
    priority_class_name: { kind: 'string', default: '', help: 'the pod\'s priorityClassName' },
    scheduler_name: { kind: 'string', default: '', help: 'the scheduler that places the pod ("" = the cluster\'s default)' },
    profile_list: { kind: 'json', default: [], help: 'profiles offered at spawn, in KubeSpawner\'s form: [{display_name, slug, description, default, kubespawner_override: {option: value}, profile_options: {<name>: {display_name, choices: {<key>: {display_name, default, kubespawner_override}}, unlisted_choice: {enabled, validation_regex, validation_message, kubespawner_override ({value} expands)}}}}] (or an object of them, in key order); user_options.profile picks one (by slug), user_options.<name> a choice, user_options["<name>--unlisted-choice"] a free-form value; overrides merge objects, null removes a key' },
    delete_grace_period: { kind: 'integer', default: 1, help: 'seconds a stopped server\'s containers have to end before they are killed (the pod deletion\'s grace period)', min: 0 },
    hub_connect_url: { kind: 'string', default: '', help: 'where servers in pods reach the hub, e.g. http://hub.jhub.svc:8081 or the node address of a hub outside the cluster ("" = the hub\'s own address, which pods reach only if it is not loopback)', check: (v: string) => (v && !/^https?:\/\/[^/]+\/?$/.test(v) ? [`KubeSpawner.hub_connect_url: expected http(s)://host:port, got ${JSON.stringify(v)}`] : []) },
    k8s_api_host: { kind: 'string', default: '', help: 'the API server\'s URL, instead of the service account\'s or the kubeconfig\'s (same credentials)' },
    k8s_api_ssl_ca_cert: { kind: 'string', default: '', help: 'a PEM file of the CA that signs the API server\'s certificate, instead of the credentials\' own' },
    k8s_api_verify_ssl: { kind: 'boolean', default: true, help: 'verify the API server\'s certificate' },
    k8s_api_request_timeout: seconds(3, 'how long one API request may take before it is tried again'),
    k8s_api_request_retry_timeout: seconds(30, 'how long an API call is tried again (after a timeout, a refused connection or a 5xx) before it fails'),
  },
  Proxy: {
    connect_timeout: seconds(5, 'how long the gateway waits for a proxied target to accept a connection (and a WebSocket handshake)'),
    idle_timeout: seconds(300, 'longest silence from a proxied target mid-exchange before it is given up (504, or a cut response)'),
    keepalive_timeout: seconds(4, 'how long an idle pooled connection to a target is kept; below the targets\' own keep-alive (node: 5 s)'),
  },
  Authenticator: {
    admin_users: { kind: 'string-list', default: [], help: 'users who are admins (created at start when missing)', check: (names: string[]) => names.flatMap((n) => nameProblem('Authenticator.admin_users', n)) },
    username_map: { kind: 'string-map', default: {}, help: 'login name -> hub user name, applied (after lower-casing) wherever a name enters the hub: logins, the API, the set-up page; e.g. {"alice.smith@example.org": "asmith"}', check: checkUsernameMap },
    blocked_users: { kind: 'string-list', default: [], help: 'who may never log in, whatever else says they may (admins too)', check: (names: string[]) => names.flatMap((n) => nameProblem('Authenticator.blocked_users', n)) },
    allowed_users: { kind: 'string-list', default: [], help: 'who may log in besides admins and what the authenticator\'s own rules admit (allowed_groups)', check: (names: string[]) => names.flatMap((n) => nameProblem('Authenticator.allowed_users', n)) },
    allow_all: { kind: 'boolean', default: false, help: 'let everyone the authenticator accepts in; otherwise (as in the established hub 5) pam, ldap and oauth admit only admins, allowed_users, their allowed_groups and, with allow_existing_users, users already in the hub (password and dummy, with no allow option set, admit everyone they accept: a password is given by an admin)' },
    allow_existing_users: { kind: 'boolean', default: false, help: 'users that exist in the hub (made by an admin through the API or the admin page) may log in; deleting a user takes that away' },
    auth_refresh_age: seconds(300, 'how old a login may get before the authenticator refreshes the user'),
    refresh_pre_spawn: { kind: 'boolean', default: false, help: 'refresh the user before starting their server' },
    password_form: { kind: 'boolean', default: false, help: 'with an identity provider (oauth): the sign-in page also shows a name-and-password form for the hub\'s own passwords (set by an admin: `hub set-password`), e.g. for a break-glass admin; the allow options apply to it as to the provider\'s logins' },
    auto_login: { kind: 'boolean', default: false, help: 'the sign-in page sends the browser straight to the identity provider instead of showing its "Sign in with …" button' },
    manage_groups: { kind: 'boolean', default: false, help: 'hub groups follow what the authenticator says at each login and refresh (created when missing); group membership is then read-only in the API and the admin page' },
    manage_roles: { kind: 'boolean', default: false, help: 'a user\'s roles follow what the authenticator says at each login and refresh (names of Hub.load_roles roles; oauth: OAuthenticator.claim_roles_key); Hub.load_roles may then not assign roles to users or groups' },
    enable_auth_state: { kind: 'boolean', default: false, help: 'keep what a login returns (tokens, user info, directory attributes) encrypted with HUB_CRYPT_KEY (32 bytes in hex; several, separated by ";", the first encrypting, to rotate); readable with admin:auth_state' },
    auth_state_environment: { kind: 'string-map', default: {}, help: 'environment variable -> auth state field (a dotted path, e.g. "access_token" or "user.email") given to each server at its start, refreshed first with refresh_pre_spawn; needs enable_auth_state', check: checkAuthStateEnvironment },
  },
  PasswordAuthenticator: {
    failed_login_limit: { kind: 'integer', default: 5, help: 'failed logins (per user, and per client address) before a lockout; applies to every form login (password, dummy, pam, ldap)', min: 1 },
    lockout_seconds: seconds(300, 'how long a lockout lasts'),
    min_password_length: { kind: 'integer', default: 8, help: 'shortest password `hub add-user`, `hub set-password` and the API accept', min: 1 },
  },
  SharedPasswordAuthenticator: {
    user_password: { kind: 'string', default: '', help: 'the password every non-admin name logs in with (at least 8 characters): anyone who has it may log in as any such name' },
    admin_password: { kind: 'string', default: '', help: 'the password Authenticator.admin_users log in with, as admins (at least 32 characters, not user_password)' },
    password_groups: { kind: 'object', default: {}, help: 'password -> groups: whoever logs in with one of these passwords gets those groups (needs Authenticator.manage_groups)' },
  },
  DummyAuthenticator: {
    password: { kind: 'string', default: '', help: 'the one password every user name logs in with ("" = any password; for demos and tests only)' },
  },
  PAMAuthenticator: {
    service: { kind: 'string', default: 'login', help: 'the PAM service whose stack checks passwords (/etc/pam.d/<service>)', check: (v: string) => (/^[A-Za-z0-9_.-]{1,64}$/.test(v) ? [] : [`PAMAuthenticator.service: ${JSON.stringify(v)} is not a PAM service name`]) },
    allowed_groups: { kind: 'string-list', default: [], help: 'Unix groups (primary or supplementary) whose members may log in' },
    admin_groups: { kind: 'string-list', default: [], help: 'Unix groups whose members are hub admins' },
    open_sessions: { kind: 'boolean', default: false, help: 'open a PAM session for each login (pam_open_session) and close it at logout' },
    check_account: { kind: 'boolean', default: true, help: 'run PAM\'s account checks (pam_acct_mgmt: expired, locked) after the password' },
    encoding: { kind: 'string', default: 'utf8', help: 'encoding of names and passwords handed to PAM', choices: ['utf8', 'latin1'] },
  },
  LDAPAuthenticator: {
    server_address: { kind: 'string', default: '', help: 'the directory\'s host name or address (required with authenticator_class "ldap")' },
    server_port: { kind: 'integer', default: 0, help: 'its port (0 = 636 with tls_strategy "on_connect", else 389)', min: 0, max: 65535 },
    tls_strategy: { kind: 'string', default: 'before_bind', help: '"before_bind" (StartTLS before any bind), "on_connect" (LDAPS) or "insecure" (plain LDAP: passwords in the clear)', choices: ['before_bind', 'on_connect', 'insecure'] },
    tls_kwargs: { kind: 'object', default: {}, help: 'TLS options: {"ca_certs_file": "/path/ca.pem", "validate": "CERT_REQUIRED" | "CERT_NONE"}; certificates are checked unless validate is "CERT_NONE" (the established hub\'s ldap3 checks none by default)', check: checkLdapTls },
    bind_dn_template: { kind: 'string-list', default: [], help: 'DN templates with {username}, tried in order, e.g. ["uid={username},ou=people,dc=example,dc=org"]', check: (v: string[]) => v.filter((t) => !t.includes('{username}')).map((t) => `LDAPAuthenticator.bind_dn_template: ${JSON.stringify(t)} has no {username}`) },
    lookup_dn: { kind: 'boolean', default: false, help: 'find the person\'s DN by a search (user_search_base, user_attribute) instead of bind_dn_template' },
    user_search_base: { kind: 'string', default: '', help: 'where to search for people, e.g. "ou=people,dc=example,dc=org"' },
    user_attribute: { kind: 'string', default: 'uid', help: 'the attribute that holds the login name (uid, sAMAccountName, …)' },
    lookup_dn_search_filter: { kind: 'string', default: '({login_attr}={login})', help: 'the search for the person, with {login_attr} and {login} (escaped)' },
    lookup_dn_search_user: { kind: 'string', default: '', help: 'the DN that searches ("" = an anonymous search)' },
    lookup_dn_search_password: { kind: 'string', default: '', help: 'its password' },
    lookup_dn_user_dn_attribute: { kind: 'string', default: '', help: 'an attribute of the found entry to use as the hub user name ("" = the login name)' },
    escape_userdn: { kind: 'boolean', default: false, help: 'escape the found DN again before binding (directories with special characters in DNs)' },
    allowed_groups: { kind: 'string-list', default: [], help: 'group DNs whose members may log in' },
    admin_groups: { kind: 'string-list', default: [], help: 'group DNs whose members are hub admins' },
    group_search_filter: { kind: 'string', default: '(|(member={userdn})(uniqueMember={userdn})(memberUid={uid}))', help: 'how membership of one of those groups is checked, with {userdn} and {uid} (escaped); groupOfNames, groupOfUniqueNames and posixGroup by default' },
    group_search_base: { kind: 'string', default: '', help: 'with manage_groups: where to look for every group the person is in (by group_search_filter); "" = only the groups named in allowed_groups and admin_groups' },
    group_attributes: { kind: 'string-list', default: ['cn'], help: 'with manage_groups: the attribute of each group entry the person is in that names the hub group' },
    valid_username_regex: { kind: 'string', default: '^[a-z][.a-z0-9_-]*$', help: 'login names that reach the directory at all (others are refused before any request)', check: (v: string) => { try { new RegExp(v); return []; } catch { return [`LDAPAuthenticator.valid_username_regex: ${JSON.stringify(v)} is not a regular expression`]; } } },
    auth_state_attributes: { kind: 'string-list', default: [], help: 'attributes of the person\'s entry kept in auth state (with enable_auth_state)' },
    use_lookup_dn_username: { kind: 'boolean', default: true, help: 'with lookup_dn and lookup_dn_user_dn_attribute: the hub user name is that attribute\'s value' },
  },
  OAuthenticator: {
    oidc_issuer: { kind: 'string', default: '', help: 'an OpenID Connect provider\'s issuer URL: endpoints and keys come from its discovery document (then authorize_url, token_url and userdata_url are not needed)', check: (v: string) => (v === '' || /^https?:\/\/[^\s]+$/.test(v) ? [] : [`OAuthenticator.oidc_issuer: ${JSON.stringify(v)} is not an http(s) URL`]) },
    authorize_url: { kind: 'string', default: '', help: 'the identity provider\'s authorization endpoint (plain OAuth 2, or to override discovery)' },
    token_url: { kind: 'string', default: '', help: 'its token endpoint' },
    userdata_url: { kind: 'string', default: '', help: 'its user-info endpoint' },
    client_id: { kind: 'string', default: '', help: 'the hub\'s client id at the provider' },
    client_secret: { kind: 'string', default: '', help: 'the hub\'s client secret at the provider' },
    scope: { kind: 'string-list', default: ['openid'], help: 'scopes the hub asks the provider for' },
    username_claim: { kind: 'string', default: 'preferred_username', help: 'which claim of the id_token or user info is the user name' },
    allowed_users: { kind: 'string-list', default: [], help: 'who may log in through the provider (added to Authenticator.allowed_users)' },
    admin_users: { kind: 'string-list', default: [], help: 'provider users who are hub admins (added to Authenticator.admin_users)' },
    auth_state_groups_key: { kind: 'string', default: 'groups', help: 'the claim (a dotted path into the id_token claims and user info) that lists the person\'s groups' },
    claim_roles_key: { kind: 'string', default: 'roles', help: 'with Authenticator.manage_roles: the claim (a dotted path, e.g. realm_access.roles) that lists the person\'s hub roles' },
    allowed_groups: { kind: 'string-list', default: [], help: 'provider groups whose members may log in' },
    admin_groups: { kind: 'string-list', default: [], help: 'provider groups whose members are hub admins' },
    logout_redirect_url: { kind: 'string', default: '', help: 'where the browser goes after the hub\'s logout ("" = the provider\'s end-session endpoint when it has one, else the login page)' },
    login_service: { kind: 'string', default: 'OAuth 2.0', help: 'the name on the login button: "Sign in with <login_service>"' },
    extra_authorize_params: { kind: 'string-map', default: {}, help: 'more query parameters for the provider\'s authorization request, e.g. {"access_type": "offline", "prompt": "login"} (the hub\'s own, such as state and redirect_uri, cannot be replaced)', check: (m: Record<string, string>) => Object.keys(m).filter((k) => ['state', 'nonce', 'client_id', 'redirect_uri', 'response_type', 'code_challenge', 'code_challenge_method', 'scope'].includes(k)).map((k) => `OAuthenticator.extra_authorize_params.${k}: set by the hub itself`) },
    enable_pkce: { kind: 'boolean', default: true, help: 'send a PKCE challenge (S256) with each login' },
    token_endpoint_auth_method: { kind: 'string', default: 'client_secret_post', help: 'how the hub authenticates to the token endpoint', choices: ['client_secret_post', 'client_secret_basic', 'none'] },
  },
} as const satisfies Record<string, Record<string, OptionSpec>>;

// ---- deeper checks of structured options --------------------------------------------

function checkAuthStateEnvironment(map: Record<string, string>): string[] {
  return Object.entries(map).flatMap(([name, path]) => [
    ...(/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) ? [] : [`Authenticator.auth_state_environment: ${JSON.stringify(name)} is not an environment variable name`]),
    ...(/^[^.\s]+(\.[^.\s]+)*$/.test(path) ? [] : [`Authenticator.auth_state_environment.${name}: ${JSON.stringify(path)} is not a dotted path into the auth state`]),
  ]);
}

function checkLdapTls(v: Record<string, unknown>): string[] {
  return Object.entries(v).flatMap(([k, x]) => {
    if (k === 'ca_certs_file') return typeof x === 'string' && isAbsolute(x) ? [] : [`LDAPAuthenticator.tls_kwargs.ca_certs_file: must be an absolute path`];
    if (k === 'validate') return x === 'CERT_REQUIRED' || x === 'CERT_NONE' ? [] : [`LDAPAuthenticator.tls_kwargs.validate: "CERT_REQUIRED" or "CERT_NONE"`];
    return [`LDAPAuthenticator.tls_kwargs: unknown key ${JSON.stringify(k)} (known: ca_certs_file, validate)`];
  });
}

/** Placeholders a SLURM batch script may use (the slurm backend fills them). */
export const SLURM_PLACEHOLDERS = ['job_name', 'username', 'servername', 'homedir', 'workdir', 'partition', 'memory', 'nprocs', 'runtime', 'options', 'cmd'] as const;

function checkBatchScript(script: string): string[] {
  const used = [...script.matchAll(/\{([a-z_]+)\}/g)].map((m) => m[1]);
  return [
    ...(used.includes('cmd') ? [] : ['SlurmSpawner.batch_script: must contain {cmd} (the line that runs the server)']),
    ...[...new Set(used)].filter((p) => !(SLURM_PLACEHOLDERS as readonly string[]).includes(p)).map((p) => `SlurmSpawner.batch_script: unknown placeholder {${p}} (known: ${SLURM_PLACEHOLDERS.map((x) => `{${x}}`).join(' ')})`),
  ];
}

const NODE_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;
/** A DNS name a certificate may be issued for (letters, digits, "-" and "." labels; no wildcard). */
const DOMAIN_RE = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/i;

function checkActors(names: string[]): string[] {
  const unknown = names.filter((n) => !(ALL_ACTORS as readonly string[]).includes(n));
  const twice = names.filter((n, i) => names.indexOf(n) !== i);
  return [
    ...unknown.map((n) => `Supervisor.actors: unknown actor ${JSON.stringify(n)} (known: ${ALL_ACTORS.join(', ')})`),
    ...[...new Set(twice)].map((n) => `Supervisor.actors: ${JSON.stringify(n)} is listed twice (several gateways: Supervisor.gateways)`),
  ];
}

function checkDbUrl(v: string): string[] {
  if (v === '' || v === 'sqlite' || /^postgres(ql)?:\/\/[^\s]+$/.test(v)) return [];
  // never the value itself: it may hold a password
  return ['Hub.db_url: expected "" or "sqlite" (SQLite files in Hub.data_dir) or a postgresql:// URL'];
}

const DB_KWARGS = ['max', 'connectionTimeoutMillis', 'idleTimeoutMillis', 'statement_timeout', 'idle_in_transaction_session_timeout'];
function checkDbKwargs(v: Record<string, unknown>): string[] {
  return Object.entries(v).flatMap(([k, x]) => {
    if (!DB_KWARGS.includes(k)) return [`Hub.db_kwargs: unknown key ${JSON.stringify(k)} (known: ${DB_KWARGS.join(', ')})`];
    return Number.isInteger(x) && (x as number) >= (k === 'max' ? 1 : 0) && (x as number) <= 3_600_000 ? [] : [`Hub.db_kwargs.${k}: expected a whole number${k === 'max' ? ' from 1' : ' of ms'}`];
  });
}

/** `Hub.nats_url`: one or more `nats://host:port`, comma-separated. */
export function natsServers(url: string): string[] {
  return url.split(',').map((u) => u.trim()).filter(Boolean);
}

function checkNatsUrls(v: string): string[] {
  return natsServers(v).filter((u) => !/^(nats|tls):\/\/[^/\s]+(:\d{1,5})?$/.test(u)).map((u) => `Hub.nats_url: ${JSON.stringify(u)} is not nats://host:port`);
}

/** Options that only make sense together; each problem is a line. */
function crossChecks(c: HubConfig): string[] {
  const h = c.Hub;
  const problems: string[] = [];
  if (h.spawner_class === 'kubernetes') pushAll(problems, kubeSpawnerProblems(c));
  // the established hub 5.0's rule: roles the authenticator manages are not also given by the configuration
  if (c.Authenticator.manage_roles) {
    const assigning = (h.load_roles as { name?: string; users?: unknown[]; groups?: unknown[] }[]).filter((r) => r.users?.length || r.groups?.length).map((r) => r.name);
    if (assigning.length) problems.push(`Hub.load_roles: with Authenticator.manage_roles, roles are not assigned to users or groups here (${assigning.join(', ')})`);
  }
  if (h.nats_routes.length && !h.nats_cluster_port) problems.push('Hub.nats_routes: needs Hub.nats_cluster_port (the port this member takes routes on)');
  if (h.nats_cluster_port && h.nats_cluster_port === h.nats_port) problems.push('Hub.nats_cluster_port: must differ from Hub.nats_port');
  const ownInternalPki = [h.internal_ssl_ca, h.internal_ssl_cert, h.internal_ssl_key].filter(Boolean).length;
  if (ownInternalPki && ownInternalPki < 3) problems.push('Hub.internal_ssl_ca, Hub.internal_ssl_cert, Hub.internal_ssl_key: give all three or none');
  if (h.nats_replicas > 1 && !h.nats_cluster_port && !h.nats_url) problems.push(`Hub.nats_replicas: ${h.nats_replicas} copies need a NATS cluster (Hub.nats_cluster_port and Hub.nats_routes, or Hub.nats_url naming one)`);
  const publicPath = /^https?:\/\/[^/]+(\/.*)?$/.exec(h.public_url)?.[1] ?? '/';
  if (h.public_url && !/^https?:\/\/[^/?#\s]+(\/[^?#\s]*)?$/.test(h.public_url)) problems.push(`Hub.public_url: ${JSON.stringify(h.public_url)} is not an http(s) URL without query or fragment`);
  else if (normaliseBaseUrl(publicPath) !== '/' && normaliseBaseUrl(publicPath) !== normaliseBaseUrl(h.base_url)) problems.push(`Hub.public_url: its path ${JSON.stringify(publicPath)} must be Hub.base_url (${JSON.stringify(normaliseBaseUrl(h.base_url))}) or empty`);
  if (h.subdomain_host && h.public_url && originOf(h.public_url) !== originOf(h.subdomain_host)) problems.push(`Hub.public_url: ${JSON.stringify(h.public_url)} must be at the host of Hub.subdomain_host (${JSON.stringify(h.subdomain_host)}): the hub's pages are there`);
  // HTTPS at the front door: files, or automatic (ACME), not both; the plain ports it adds differ from Hub.port
  if (Boolean(h.ssl_cert) !== Boolean(h.ssl_key)) problems.push(h.ssl_cert ? 'Hub.ssl_key: needed with Hub.ssl_cert' : 'Hub.ssl_cert: needed with Hub.ssl_key');
  if (h.ssl_cert && h.letsencrypt_domains.length) problems.push('Hub.letsencrypt_domains: not with Hub.ssl_cert (the certificate comes from the files or from the ACME CA, not both)');
  if (h.letsencrypt_domains.length && !h.letsencrypt_email) problems.push('Hub.letsencrypt_email: needed with Hub.letsencrypt_domains (the ACME account\'s contact)');
  if (h.letsencrypt_email && !h.letsencrypt_domains.length) problems.push('Hub.letsencrypt_domains: needed with Hub.letsencrypt_email (the names to certify)');
  if (h.letsencrypt_domains.length && !h.http_redirect_port) problems.push('Hub.http_redirect_port: needed with Hub.letsencrypt_domains (HTTP-01 challenges arrive there: port 80 as the CA sees it)');
  const tls = Boolean(h.ssl_cert || h.letsencrypt_domains.length);
  if (h.http_redirect_port && !tls) problems.push('Hub.http_redirect_port: only with HTTPS (Hub.ssl_cert or Hub.letsencrypt_domains)');
  if (h.http_redirect_port && h.http_redirect_port === h.port) problems.push('Hub.http_redirect_port: must differ from Hub.port');
  if (tls && (h.hub_port === h.port || h.hub_port === h.http_redirect_port)) problems.push('Hub.hub_port: must differ from Hub.port and Hub.http_redirect_port');
  if (h.bind_url && !bindUrlProblems(h.bind_url).length) {
    if (tls) problems.push('Hub.bind_url: a unix socket speaks plain HTTP: not with Hub.ssl_cert or Hub.letsencrypt_domains (terminate TLS in the proxy in front of the socket)');
    if (c.Supervisor.gateways > 1) problems.push(`Hub.bind_url: a unix socket has one listener: Supervisor.gateways must be 1 (it is ${c.Supervisor.gateways})`);
    const path = /^[a-z+]+:\/\/[^/]+(\/.*)?$/.exec(h.bind_url)?.[1] ?? '/';
    if (normaliseBaseUrl(path) !== '/' && normaliseBaseUrl(path) !== normaliseBaseUrl(h.base_url)) problems.push(`Hub.bind_url: its path ${JSON.stringify(path)} must be Hub.base_url (${JSON.stringify(normaliseBaseUrl(h.base_url))}) or empty`);
  }
  const serviceNames = new Set(h.services.map((svc) => (svc as { name?: unknown }).name));
  for (const client of h.oauth_clients as { client_id?: unknown }[]) {
    if (serviceNames.has(client.client_id)) problems.push(`Hub.oauth_clients ${JSON.stringify(client.client_id)}: a service has this name (they would share access:services!service=${String(client.client_id)})`);
  }
  if (c.Supervisor.gateways > 1 && !c.Supervisor.actors.includes('gateway')) problems.push('Supervisor.gateways: more than one gateway, but Supervisor.actors does not include "gateway"');
  return problems;
}

/** User, group, service and server names: the rule every actor applies (see shared/names.ts). */
const originOf = (url: string) => {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
};

/**
 * The Kubernetes backend's options as each start may use them: the section alone, or under each profile (ours, or
 * KubeSpawner.profile_list's with its choices); a kubespawner_override key must be an option of KubeSpawner or Spawner.
 */
function kubeSpawnerProblems(c: HubConfig): string[] {
  const section = c.KubeSpawner as unknown as Record<string, unknown>;
  const problems: string[] = [];
  const profiles = c.Spawner.profiles as { name?: string; overrides?: Record<string, unknown> }[];
  if (!profiles.length) pushAll(problems, kubeSpawnerOptionProblems(section));
  for (const p of profiles) {
    const mine = Object.fromEntries(Object.entries(p.overrides ?? {}).filter(([k]) => k.startsWith('KubeSpawner.')).map(([k, v]) => [k.slice('KubeSpawner.'.length), v]));
    for (const line of kubeSpawnerOptionProblems({ ...section, ...mine })) problems.push(`Spawner.profiles ${JSON.stringify(p.name)}: ${line}`);
  }
  // group overrides setting KubeSpawner options: each as a member's start would run with it (objects merged)
  for (const [name, entry] of Object.entries(c.Spawner.group_overrides as Record<string, { spawner_override?: Record<string, unknown> }>)) {
    const mine: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(entry.spawner_override ?? {})) {
      const target = startOption(key);
      if (typeof target !== 'string' && target.section === 'KubeSpawner') mine[target.option] = value;
    }
    if (!Object.keys(mine).length) continue;
    for (const line of kubeSpawnerOptionProblems(applyKubespawnerOverride(section, mine))) problems.push(`Spawner.group_overrides ${JSON.stringify(name)}: ${line}`);
  }
  const { profiles: kube } = kubeProfileList(section.profile_list);
  for (const p of kube) {
    const overrides = [p.kubespawner_override, ...Object.values(p.profile_options).flatMap((o) => [o.unlisted_choice.kubespawner_override, ...Object.values(o.choices).map((ch) => ch.kubespawner_override)])];
    for (const key of new Set(overrides.flatMap((o) => Object.keys(o)))) {
      const target = startOption(key);
      if (!Object.hasOwn(SCHEMA.KubeSpawner, key) && (typeof target === 'string' || target.section !== 'Spawner')) {
        problems.push(`KubeSpawner.profile_list ${JSON.stringify(p.slug)}: kubespawner_override ${JSON.stringify(key)} is not an option of KubeSpawner or Spawner a start can set`);
      }
    }
  }
  return problems;
}

/** A base URL of http(s), a host name (no address: users' hosts are names under it), an optional port, nothing else. */
function checkSubdomainHost(v: string): string[] {
  if (!v) return [];
  let url: URL;
  try {
    url = new URL(v);
  } catch {
    return [`Hub.subdomain_host: ${JSON.stringify(v)} is not a URL; expected e.g. "https://hub.example.org"`];
  }
  const problems: string[] = [];
  if (url.protocol !== 'http:' && url.protocol !== 'https:') problems.push(`Hub.subdomain_host: ${JSON.stringify(v)} must start with https:// (or http://)`);
  if (url.username || url.password || url.search || url.hash || url.pathname !== '/') problems.push(`Hub.subdomain_host: ${JSON.stringify(v)} must be only scheme, host and port, e.g. "https://hub.example.org"`);
  if (isIP(url.hostname.replace(/^\[|\]$/g, '')) || !url.hostname.includes('.')) problems.push(`Hub.subdomain_host: ${JSON.stringify(v)} must name a host with a domain (users' servers are at <name>.${url.hostname}), not an address or a bare name`);
  return problems;
}

function nameProblem(where: string, name: string): string[] {
  const why = invalidNameReason(name);
  return why ? [`${where}: invalid name ${JSON.stringify(name)} (${why})`] : [];
}

function checkUsernameMap(map: Record<string, string>): string[] {
  return Object.entries(map).flatMap(([from, to]) => [
    ...(from !== from.toLowerCase() ? [`Authenticator.username_map: ${JSON.stringify(from)} is never looked up: names are lower-cased first; write it in lower case`] : []),
    ...nameProblem('Authenticator.username_map', to),
  ]);
}

function checkApiTokens(map: Record<string, string>): string[] {
  return Object.entries(map).flatMap(([token, user]) => [
    ...(token.length <= 8 ? [`Hub.api_tokens: a token for ${JSON.stringify(user)} is ${token.length} characters; tokens must be longer than 8`] : []),
    ...nameProblem('Hub.api_tokens', user),
  ]);
}

/** Header names are HTTP tokens; values are one line (a newline would inject headers). */
function checkHeaders(map: Record<string, string>): string[] {
  return Object.entries(map).flatMap(([name, value]) => [
    ...(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name) ? [] : [`Hub.extra_headers: ${JSON.stringify(name)} is not a valid header name`]),
    // eslint-disable-next-line no-control-regex
    ...(/[\u0000-\u0008\u000a-\u001f\u007f]/.test(value) ? [`Hub.extra_headers ${JSON.stringify(name)}: the value must be one line without control characters`] : []),
    ...(/^(content-length|transfer-encoding|connection|set-cookie|location|content-type)$/i.test(name) ? [`Hub.extra_headers: ${name} is set by the hub per answer and cannot be configured`] : []),
  ]);
}

const SERVICE_KEYS: Record<string, Kind> = {
  name: 'string', admin: 'boolean', url: 'string', api_token: 'string', display: 'boolean', oauth_no_confirm: 'boolean',
  environment: 'string-map', user: 'string', cwd: 'string', info: 'object', oauth_client_id: 'string',
  oauth_redirect_uri: 'string', oauth_client_allowed_scopes: 'string-list', oauth_roles: 'string-list', timeout: 'integer',
};

/** One option of an entry in a list option (a service, an OAuth client): known, and of its kind. */
function optionProblems(label: string, key: string, value: unknown, kinds: Record<string, Kind>): string[] {
  const kind = kinds[key];
  if (!kind) return [`${label}.${key}: unknown option`];
  return fits({ kind, default: null, help: '' }, value) ? [] : [`${label}.${key}: expected ${describe({ kind, default: null, help: '' })}`];
}

export function checkServices(services: unknown[]): string[] {
  const problems: string[] = [];
  const names = new Set<string>();
  const tokens = new Map<string, string>();
  services.forEach((svc, i) => {
    const where = `Hub.services[${i}]`;
    if (!isObject(svc)) return void problems.push(`${where}: expected an object`);
    const name = typeof svc.name === 'string' ? svc.name : undefined;
    const label = name ? `Hub.services ${JSON.stringify(name)}` : where;
    if (!name) problems.push(`${where}.name: required, a string`);
    else {
      pushAll(problems, nameProblem(label, name));
      if (names.has(name)) problems.push(`${label}: defined twice`);
      names.add(name);
    }
    for (const [key, value] of Object.entries(svc)) {
      if (key === 'command') {
        if (!(typeof value === 'string' || (Array.isArray(value) && value.length > 0 && value.every((x) => typeof x === 'string')))) {
          problems.push(`${label}.command: expected a string or a non-empty list of strings`);
        }
        continue;
      }
      pushAll(problems, optionProblems(label, key, value, SERVICE_KEYS));
    }
    if (typeof svc.api_token === 'string') {
      if (svc.api_token.length <= 8) problems.push(`${label}.api_token: must be longer than 8 characters`);
      const other = tokens.get(svc.api_token);
      if (other !== undefined) problems.push(`${label}.api_token: the same token as service ${JSON.stringify(other)}; tokens must be unique`);
      tokens.set(svc.api_token, name ?? where);
    }
    if (typeof svc.url === 'string' && !/^https?:\/\/[^/]+/.test(svc.url)) problems.push(`${label}.url: expected an http(s) URL`);
    if (typeof svc.timeout === 'number' && svc.timeout < 1) problems.push(`${label}.timeout: seconds to wait for the service at start, at least 1`);
    if (typeof svc.oauth_client_id === 'string' && !svc.oauth_client_id.startsWith('service-')) problems.push(`${label}.oauth_client_id: must start with "service-"`);
    if (typeof svc.oauth_client_id === 'string' && svc.url === undefined && svc.oauth_redirect_uri === undefined) {
      problems.push(`${label}.oauth_redirect_uri: required for an OAuth client without a url`);
    }
  });
  return problems;
}

const OAUTH_CLIENT_KEYS: Record<string, Kind> = {
  client_id: 'string', client_secret: 'string', redirect_uris: 'string-list', post_logout_redirect_uris: 'string-list',
  allowed_scopes: 'string-list', oauth_no_confirm: 'boolean', require_nonce: 'boolean', description: 'string',
};

/** An absolute redirect URI as RFC 6749 §3.1.2 has it: http(s), no fragment. */
const ABSOLUTE_URI = /^https?:\/\/[^/?#\s]+[^#\s]*$/;

function checkOAuthClients(clients: unknown[]): string[] {
  const problems: string[] = [];
  const ids = new Set<string>();
  clients.forEach((c, i) => {
    const where = `Hub.oauth_clients[${i}]`;
    if (!isObject(c)) return void problems.push(`${where}: expected an object`);
    const id = typeof c.client_id === 'string' ? c.client_id : undefined;
    const label = id ? `Hub.oauth_clients ${JSON.stringify(id)}` : where;
    if (!id) problems.push(`${where}.client_id: required, a string`);
    else {
      // the client id names its access scope (access:services!service=<client_id>): the service name rule
      pushAll(problems, nameProblem(`${label}.client_id`, id));
      if (id.startsWith('service-') || id.startsWith('hub-user-')) problems.push(`${label}.client_id: "service-" and "hub-user-" name the hub's own clients`);
      if (ids.has(id)) problems.push(`${label}: defined twice`);
      ids.add(id);
    }
    for (const [key, value] of Object.entries(c)) pushAll(problems, optionProblems(label, key, value, OAUTH_CLIENT_KEYS));
    if (typeof c.client_secret === 'string' && c.client_secret.length < 16) problems.push(`${label}.client_secret: at least 16 characters (or none for a public client)`);
    const uris = Array.isArray(c.redirect_uris) ? (c.redirect_uris as unknown[]) : [];
    if (!uris.length) problems.push(`${label}.redirect_uris: at least one redirect URI`);
    for (const key of ['redirect_uris', 'post_logout_redirect_uris']) {
      for (const u of Array.isArray(c[key]) ? (c[key] as unknown[]) : []) {
        if (typeof u === 'string' && !ABSOLUTE_URI.test(u)) problems.push(`${label}.${key}: ${JSON.stringify(u)} is not an absolute http(s) URI without a fragment`);
      }
    }
    if (Array.isArray(c.allowed_scopes)) {
      const v = validateScopes((c.allowed_scopes as unknown[]).filter((x): x is string => typeof x === 'string'));
      if (!v.ok) problems.push(`${label}.allowed_scopes: ${JSON.stringify(v.bad)}: ${v.reason}`);
    }
  });
  return problems;
}

/** Sizes in bytes: see shared/bytes.ts (kept importable from here). */
export { parseByteSize };

const PROFILE_KEYS = new Set(['name', 'display_name', 'description', 'default', 'overrides']);

/** Profiles override options of `Spawner` and of backend sections (`<Name>Spawner`), never anything else. */
function checkProfiles(profiles: unknown[]): string[] {
  const problems: string[] = [];
  const names = new Set<string>();
  let defaults = 0;
  profiles.forEach((p, i) => {
    const where = `Spawner.profiles[${i}]`;
    if (!isObject(p)) return void problems.push(`${where}: expected an object`);
    const label = typeof p.name === 'string' ? `Spawner.profiles ${JSON.stringify(p.name)}` : where;
    if (typeof p.name !== 'string' || !/^[a-z0-9][a-z0-9_.-]{0,62}$/.test(p.name)) problems.push(`${label}.name: required, 1 to 63 lowercase letters, digits, "_", "." and "-"`);
    else if (names.has(p.name)) problems.push(`${label}: defined twice`);
    else names.add(p.name);
    if (typeof p.display_name !== 'string' || !p.display_name) problems.push(`${label}.display_name: required, a string`);
    if (p.description !== undefined && typeof p.description !== 'string') problems.push(`${label}.description: expected a string`);
    if (p.default !== undefined && typeof p.default !== 'boolean') problems.push(`${label}.default: expected a boolean`);
    if (p.default === true) defaults++;
    for (const key of Object.keys(p)) if (!PROFILE_KEYS.has(key)) problems.push(`${label}.${key}: unknown option (known: ${[...PROFILE_KEYS].join(', ')})`);
    if (p.overrides === undefined) return;
    if (!isObject(p.overrides)) return void problems.push(`${label}.overrides: expected an object of "Section.option": value`);
    for (const [key, value] of Object.entries(p.overrides)) {
      const [section, option, ...rest] = key.split('.');
      const spec = (SCHEMA as Record<string, Record<string, OptionSpec>>)[section]?.[option];
      if (rest.length || !section.endsWith('Spawner') || option === 'profiles' || !spec) {
        problems.push(`${label}.overrides: ${JSON.stringify(key)} is not an option a profile can override (Spawner.* or a spawner backend's section)`);
      } else if (!fits(spec, value)) problems.push(`${label}.overrides["${key}"]: expected ${describe(spec)}, got ${JSON.stringify(value)}`);
      else pushAll(problems, (spec.check?.(value) ?? []).map((line) => `${label}.overrides: ${line}`));
    }
  });
  if (defaults > 1) problems.push('Spawner.profiles: more than one profile is marked default');
  return problems;
}

/**
 * Spawner options no single start has its own value of: they apply to the whole hub (timeouts of requests and
 * stops, polling, placement) or are decided before a spawner takes the start (`node`: placement reads profiles).
 */
const HUB_WIDE_SPAWNER_OPTIONS = new Set(['slow_spawn_timeout', 'slow_stop_timeout', 'stop_signal_timeout', 'poll_interval', 'placement', 'node_limit', 'node', 'node_lost_timeout', 'profiles', 'group_overrides', 'apply_user_options']);

/**
 * The option a group override or a user option sets (`Spawner.group_overrides`, `Spawner.apply_user_options`):
 * `"Section.option"` as profiles name them, or a bare name as the established hub's spawner attributes are named
 * (`Spawner`'s own, else the spawner backend's section that has it). A string says why the key cannot be one.
 */
export function startOption(key: string): { section: string; option: string; spec: OptionSpec } | string {
  const sections = SCHEMA as Record<string, Record<string, OptionSpec>>;
  const parts = key.split('.');
  const has = (section: string, option: string) => Object.hasOwn(sections, section) && section.endsWith('Spawner') && Object.hasOwn(sections[section], option);
  const [section, option] = parts.length === 2 ? parts
    : parts.length === 1 ? [has('Spawner', key) ? 'Spawner' : Object.keys(sections).find((s) => has(s, key)) ?? '', key] : ['', ''];
  if (!section || !has(section, option)) return 'is not an option of Spawner or of a spawner backend\'s section';
  if (section === 'Spawner' && HUB_WIDE_SPAWNER_OPTIONS.has(option)) return 'applies to the whole hub, not to one start';
  return { section, option, spec: sections[section][option] };
}

/** An object with its null values (keys an override removes) left out, at every depth. */
function withoutNulls(v: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(v).filter(([, x]) => x !== null).map(([k, x]) => [k, isObject(x) ? withoutNulls(x) : x]));
}

const GROUP_OVERRIDE_KEYS = ['groups', 'spawner_override'];

function checkGroupOverrides(all: Record<string, unknown>): string[] {
  const problems: string[] = [];
  for (const [name, entry] of Object.entries(all)) {
    const label = `Spawner.group_overrides ${JSON.stringify(name)}`;
    if (!isObject(entry)) {
      problems.push(`${label}: expected {"groups": [...], "spawner_override": {...}}`);
      continue;
    }
    for (const key of Object.keys(entry)) if (!GROUP_OVERRIDE_KEYS.includes(key)) problems.push(`${label}.${key}: unknown option (known: ${GROUP_OVERRIDE_KEYS.join(', ')})`);
    if (!(Array.isArray(entry.groups) && entry.groups.every((g) => typeof g === 'string'))) problems.push(`${label}.groups: required, a list of group names`);
    if (!isObject(entry.spawner_override)) {
      problems.push(`${label}.spawner_override: required, an object of option: value`);
      continue;
    }
    for (const [key, value] of Object.entries(entry.spawner_override)) {
      const target = startOption(key);
      if (typeof target === 'string') {
        problems.push(`${label}.spawner_override: ${JSON.stringify(key)} ${target}`);
        continue;
      }
      // objects are merged into the option's value (null removes a key): what is checked is what they add
      const merged = isObject(value) && (target.spec.kind === 'object' || target.spec.kind === 'string-map');
      const checked = merged ? withoutNulls(value) : value;
      if (!fits(target.spec, checked)) problems.push(`${label}.spawner_override["${key}"]: expected ${describe(target.spec)}, got ${JSON.stringify(value)}`);
      else pushAll(problems, (target.spec.check?.(checked) ?? []).map((line) => `${label}.spawner_override: ${line}`));
    }
  }
  return problems;
}

function checkApplyUserOptions(map: Record<string, string>): string[] {
  return Object.entries(map).flatMap(([key, name]) => {
    if (key === 'profile') return ['Spawner.apply_user_options: "profile" is taken: user_options.profile chooses one of Spawner.profiles'];
    const target = startOption(name);
    return typeof target === 'string' ? [`Spawner.apply_user_options[${JSON.stringify(key)}]: ${JSON.stringify(name)} ${target}`] : [];
  });
}

/**
 * A value from outside (user_options) for an option: as given when it fits, else a string read as the
 * option's kind reads one (numbers, true/false/1/0), as the established hub coerces form strings; then the
 * option's own checks. `problem` says what was expected.
 */
export function optionValueFrom(spec: OptionSpec, value: unknown): { value: unknown } | { problem: string } {
  let v = value;
  if (!fits(spec, v) && typeof v === 'string') {
    const s = v.trim();
    if (spec.kind === 'integer' && /^[+-]?\d+$/.test(s)) v = Number(s);
    else if (spec.kind === 'number' && s !== '' && Number.isFinite(Number(s))) v = Number(s);
    else if (spec.kind === 'boolean' && /^(true|1|false|0)$/i.test(s)) v = /^(true|1)$/i.test(s);
  }
  if (!fits(spec, v)) return { problem: `expected ${describe(spec)}, got ${JSON.stringify(value)?.slice(0, 80)}` };
  const wrong = spec.check?.(v) ?? [];
  return wrong.length ? { problem: wrong[0] } : { value: v };
}

const ROLE_KEYS = new Set(['name', 'description', 'scopes', 'users', 'groups', 'services']);

function checkRoles(roles: unknown[]): string[] {
  const problems: string[] = [];
  roles.forEach((role, i) => {
    const where = `Hub.load_roles[${i}]`;
    if (!isObject(role)) return void problems.push(`${where}: expected an object`);
    const label = typeof role.name === 'string' ? `Hub.load_roles ${JSON.stringify(role.name)}` : where;
    if (typeof role.name !== 'string' || !isValidRoleName(role.name)) problems.push(`${label}.name: required, lowercase letters, digits and -_~. (3 to 255 characters)`);
    for (const [key, value] of Object.entries(role)) {
      if (!ROLE_KEYS.has(key)) problems.push(`${label}.${key}: unknown option`);
      else if (key === 'description' && typeof value !== 'string') problems.push(`${label}.description: expected a string`);
      else if (key !== 'name' && key !== 'description' && !(Array.isArray(value) && value.every((x) => typeof x === 'string'))) problems.push(`${label}.${key}: expected a list of strings`);
    }
    if (Array.isArray(role.scopes) && role.scopes.every((x) => typeof x === 'string')) {
      const v = validateScopes(role.scopes as string[]);
      if (!v.ok) problems.push(`${label}.scopes: ${v.reason}`);
    }
    if (role.name === 'admin' && role.scopes !== undefined) problems.push(`${label}.scopes: the admin role's scopes cannot be changed (assign members only)`);
  });
  return problems;
}

type Section = keyof typeof SCHEMA;
type ValueOf<S extends OptionSpec> = S['kind'] extends 'string' ? string
  : S['kind'] extends 'integer' | 'number' ? number
  : S['kind'] extends 'boolean' ? boolean
  : S['kind'] extends 'string-map' ? Record<string, string>
  : S['kind'] extends 'string-list' ? string[]
  : S['kind'] extends 'list' ? unknown[]
  : S['kind'] extends 'bytes' ? string | number
  : S['kind'] extends 'json' ? unknown
  : Record<string, unknown>;

export type HubConfig = {
  readonly [S in Section]: { readonly [K in keyof (typeof SCHEMA)[S]]: (typeof SCHEMA)[S][K] extends OptionSpec ? ValueOf<(typeof SCHEMA)[S][K]> : never };
};

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n  ${problems.join('\n  ')}`);
    this.name = 'ConfigError';
  }
}

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);

function describe(spec: OptionSpec): string {
  if (spec.choices) return `one of ${spec.choices.map((c) => JSON.stringify(c)).join(', ')}`;
  const range = spec.min !== undefined && spec.max !== undefined ? ` between ${spec.min} and ${spec.max}`
    : spec.min !== undefined ? ` >= ${spec.min}` : '';
  const noun: Record<Kind, string> = {
    string: 'a string', integer: 'an integer', number: 'a number', boolean: 'a boolean', object: 'an object',
    'string-map': 'an object of strings', 'string-list': 'a list of strings', list: 'a list',
    bytes: 'a size in bytes (a number, or a string such as "512M" or "2G")', json: 'a JSON value',
  };
  return noun[spec.kind] + range;
}

function fits(spec: OptionSpec, v: unknown): boolean {
  let ok: boolean;
  switch (spec.kind) {
    case 'string': ok = typeof v === 'string'; break;
    case 'integer': ok = Number.isInteger(v); break;
    case 'number': ok = typeof v === 'number' && Number.isFinite(v); break;
    case 'boolean': ok = typeof v === 'boolean'; break;
    case 'object': ok = isObject(v); break;
    case 'string-map': ok = isObject(v) && Object.values(v).every((x) => typeof x === 'string'); break;
    case 'string-list': ok = Array.isArray(v) && v.every((x) => typeof x === 'string'); break;
    case 'list': ok = Array.isArray(v); break;
    case 'bytes': ok = v === '' || ((typeof v === 'string' || typeof v === 'number') && parseByteSize(v) !== null); break;
    case 'json': ok = true; break; // options taking several shapes, as KubeSpawner's do: their check says what is wrong
  }
  if (!ok) return false;
  if (spec.choices && !spec.choices.includes(v as string)) return false;
  if (typeof v === 'number' && ((spec.min !== undefined && v < spec.min) || (spec.max !== undefined && v > spec.max))) return false;
  return true;
}

/** Validates raw `{Section: {...}}` input against SCHEMA and fills defaults; throws one ConfigError listing every problem. */
export function validateConfig(raw: unknown): HubConfig {
  const problems: string[] = [];
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ConfigError(['the configuration must be an object of sections']);
  const out: Record<string, Record<string, unknown>> = {};
  for (const [section, options] of Object.entries(SCHEMA) as [string, Record<string, OptionSpec>][]) {
    out[section] = Object.fromEntries(Object.entries(options).map(([k, s]) => [k, structuredClone(s.default)]));
  }
  for (const [section, values] of Object.entries(raw as Record<string, unknown>)) {
    const options = (SCHEMA as Record<string, Record<string, OptionSpec>>)[section];
    if (!options) {
      problems.push(`${section}: unknown section (known: ${Object.keys(SCHEMA).join(', ')})`);
      continue;
    }
    if (typeof values !== 'object' || values === null || Array.isArray(values)) {
      problems.push(`${section}: expected an object of options`);
      continue;
    }
    for (const [key, value] of Object.entries(values)) {
      const spec = options[key];
      if (!spec) problems.push(`${section}.${key}: unknown option`);
      else if (!fits(spec, value)) problems.push(`${section}.${key}: expected ${describe(spec)}, got ${JSON.stringify(value)}`);
      else {
        const deeper = spec.check?.(value) ?? [];
        if (deeper.length) pushAll(problems, deeper);
        else out[section][key] = value;
      }
    }
  }
  if (problems.length) throw new ConfigError(problems);
  const cross = crossChecks(out as unknown as HubConfig);
  if (cross.length) throw new ConfigError(cross);
  out.Hub.base_url = normaliseBaseUrl(out.Hub.base_url as string);
  return deepFreeze(out) as unknown as HubConfig;
}

function deepFreeze<T>(o: T): T {
  if (typeof o === 'object' && o !== null) {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

/** `--Hub.port=8001` → ['Hub', 'port', 8001]. Values parse as JSON when they can, else stay strings. */
export function parseOverride(arg: string): [string, string, unknown] | null {
  const m = /^--([A-Za-z][A-Za-z0-9_]*)\.([A-Za-z][A-Za-z0-9_]*)=(.*)$/s.exec(arg);
  if (!m) return null;
  let value: unknown = m[3];
  try {
    value = JSON.parse(m[3]);
  } catch {
    // a bare word such as --Hub.ip=0.0.0.0 stays a string
  }
  return [m[1], m[2], value];
}

async function readConfigFile(path: string): Promise<unknown> {
  if (!existsSync(path)) throw new ConfigError([`--config ${path}: no such file`]);
  if (path.endsWith('.json')) {
    try {
      return JSON.parse(readFileSync(path, 'utf8'));
    } catch (e) {
      throw new ConfigError([`--config ${path}: not valid JSON (${(e as Error).message})`]);
    }
  }
  const mod = /\.(ts|mts|cts)$/.test(path)
    ? await (await import('tsx/esm/api')).tsImport(pathToFileURL(path).href, import.meta.url) // tsx only when needed
    : await import(pathToFileURL(path).href);
  const exported = mod.default ?? mod.config;
  // a .ts file outside an ESM package loads as CommonJS: its `export default` arrives one level down
  return exported && typeof exported.default === 'object' ? exported.default : exported;
}

export interface LoadOptions {
  argv: readonly string[];
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

/** Loads the config file named by `--config` (or HUB_CONFIG), applies overrides and env, validates. */
export async function loadConfig({ argv, env = process.env, cwd = process.cwd() }: LoadOptions): Promise<HubConfig> {
  const i = argv.indexOf('--config');
  const inline = argv.find((a) => a.startsWith('--config='));
  const file = inline ? inline.slice('--config='.length) : i >= 0 ? argv[i + 1] : env.HUB_CONFIG;
  if (i >= 0 && !argv[i + 1]) throw new ConfigError(['--config: expected a file path']);
  const raw = (file ? await readConfigFile(resolve(cwd, file)) : {}) as Record<string, Record<string, unknown>>;
  const merged: Record<string, Record<string, unknown>> = typeof raw === 'object' && raw !== null ? structuredClone(raw) : raw;
  const problems: string[] = [];
  for (const arg of argv) {
    if (!arg.startsWith('--') || arg.startsWith('--config')) continue;
    const o = parseOverride(arg);
    if (!o) {
      problems.push(`${arg}: not an option override (expected --Section.option=value)`);
      continue;
    }
    (merged[o[0]] ??= {})[o[1]] = o[2];
  }
  if (problems.length) throw new ConfigError(problems);
  if (env.HUB_NATS_URL) (merged.Hub ??= {}).nats_url = env.HUB_NATS_URL;
  if (env.HUB_DB_URL) (merged.Hub ??= {}).db_url = env.HUB_DB_URL;
  let config = validateConfig(merged) as HubConfig & { Hub: { data_dir: string } };
  const dataDir = isAbsolute(config.Hub.data_dir) ? config.Hub.data_dir : resolve(cwd, config.Hub.data_dir);
  // an import killed after its commit point is finished first: no process ever sees half of one
  finishPendingImport(dataDir);
  if (mergeImported(merged, importedConfigPath(dataDir))) config = validateConfig(merged) as typeof config;
  // the host name may not fit a node name (it is one for almost every host): then it is cut to fit
  const nodeName = config.Hub.node_name || hostname().replace(/[^A-Za-z0-9_.-]/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 63) || 'node';
  return deepFreeze({ ...config, Hub: { ...config.Hub, data_dir: dataDir, node_name: nodeName } }) as HubConfig;
}

/**
 * `hub import jupyterhub` keeps the established hub's roles and services (configuration in both hubs) in the data
 * dir: they join the operator's own, and a role or service the operator configured by the same name wins whole.
 */
function mergeImported(merged: Record<string, Record<string, unknown>>, path: string): boolean {
  if (!existsSync(path)) return false;
  let imported: { Hub?: { load_roles?: { name?: unknown }[]; services?: { name?: unknown }[] } };
  try {
    imported = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new ConfigError([`${path}: not the JSON \`hub import jupyterhub\` writes (${(e as Error).message}); import again or remove it`]);
  }
  const hub = (merged.Hub ??= {});
  for (const key of ['load_roles', 'services'] as const) {
    const own = Array.isArray(hub[key]) ? (hub[key] as { name?: unknown }[]) : [];
    const names = new Set(own.map((x) => x?.name));
    const extra = (imported.Hub?.[key] ?? []).filter((x) => !names.has(x?.name));
    if (extra.length) hub[key] = [...extra, ...own];
  }
  return true;
}

// ---- the resolved copy the supervisor hands to its children ------------------

export const RESOLVED_CONFIG_ENV = 'HUB_RESOLVED_CONFIG';

/** The hub's NATS admits only clients with this token; the supervisor hands it to its actors in this variable. */
export const NATS_TOKEN_ENV = 'HUB_NATS_TOKEN';

/** Written 0600 into the data dir: it may hold secrets, so it never travels in the environment. */
export function writeResolvedConfig(config: HubConfig, path: string): void {
  mkdirSync(resolve(path, '..'), { recursive: true, mode: 0o700 });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(config), { mode: 0o600 });
  renameSync(tmp, path);
}

const UNIX_BIND_RE = /^(?:http\+unix|unix\+http):\/\/([^/?#]+)(\/[^?#]*)?$/;

/** What is wrong with a Hub.bind_url (one line each): only unix sockets, at an absolute path. */
function bindUrlProblems(v: string): string[] {
  if (!v) return [];
  const m = UNIX_BIND_RE.exec(v);
  if (!m) return [`Hub.bind_url: ${JSON.stringify(v)}: only a unix socket is accepted here, e.g. "http+unix://%2Fsrv%2Fhub%2Fhub.sock" (for an address and port use Hub.ip, Hub.port and Hub.base_url)`];
  let path: string;
  try {
    path = decodeURIComponent(m[1]);
  } catch {
    return [`Hub.bind_url: ${JSON.stringify(v)}: the socket's path is not percent-encoded properly`];
  }
  if (!path.startsWith('/')) return [`Hub.bind_url: the socket's path ${JSON.stringify(path)} must be absolute (percent-encoded: %2Fsrv%2Fhub%2Fhub.sock)`];
  // sockaddr_un.sun_path holds 107 bytes and a NUL
  if (Buffer.byteLength(path) > 107) return [`Hub.bind_url: the socket's path ${JSON.stringify(path)} is longer than a unix socket's 107 bytes`];
  return [];
}

/** The unix socket the gateway listens on instead of Hub.ip:Hub.port (Hub.bind_url), or null. */
export function bindSocketPath(config: HubConfig): string | null {
  const m = UNIX_BIND_RE.exec(config.Hub.bind_url);
  return m ? decodeURIComponent(m[1]) : null;
}

/** The socket's directory exists, and nothing but a (stale) socket is at its path: checked before start. */
export function bindSocketProblems(config: HubConfig): string[] {
  const path = bindSocketPath(config);
  if (!path) return [];
  const dir = dirname(path);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) return [`Hub.bind_url: the socket's directory ${dir} does not exist`];
  if (existsSync(path) && !lstatSync(path).isSocket()) return [`Hub.bind_url: ${path} exists and is not a socket (the hub replaces only a stale socket)`];
  return [];
}

/** For actors: the config the supervisor resolved and validated. */
export function readResolvedConfig(env: NodeJS.ProcessEnv = process.env): HubConfig {
  const path = env[RESOLVED_CONFIG_ENV];
  if (!path) throw new Error(`${RESOLVED_CONFIG_ENV} is not set: actors are started by the supervisor (npm start)`);
  return validateConfig(JSON.parse(readFileSync(path, 'utf8')));
}

/** Where the hub's own processes and the servers it starts reach the gateway: the listen address, or loopback when it listens on all. */
/**
 * Where browsers reach the hub, without a trailing slash and without Hub.base_url (its origin): Hub.public_url's
 * origin, else Hub.subdomain_host (as the established hub defaults its public URL), else its own address. Whole URLs
 * are this plus `hubUrl(path)` (shared/urls.ts): see `publicHubUrl`.
 */
export function hubPublicUrl(config: HubConfig): string {
  const h = config.Hub;
  if (h.public_url) return new URL(h.public_url).origin;
  // as the established hub defaults its public URL
  if (h.subdomain_host) return new URL(h.subdomain_host).origin;
  if (!usesTls(config)) return hubInternalUrl(config);
  // HTTPS by default when the front door speaks it: the certified name, else the address it listens on
  const host = h.letsencrypt_domains[0] ?? listenHost(h.ip);
  return `https://${host}${h.port === 443 ? '' : `:${h.port}`}`;
}

/** The front door speaks HTTPS (certificate files, or automatic from an ACME CA): see shared/tls.ts. */
export function usesTls(config: HubConfig): boolean {
  return Boolean(config.Hub.ssl_cert || config.Hub.letsencrypt_domains.length);
}

const listenHost = (ip: string) => (ip === '0.0.0.0' || ip === '::' || ip === '' ? '127.0.0.1' : ip.includes(':') ? `[${ip}]` : ip);

/** A whole URL of the hub as browsers reach it: `publicHubUrl(config, '/hub/login')` → `https://example.org/jupyter/hub/login`. */
export function publicHubUrl(config: HubConfig, path: string): string {
  return hubPublicUrl(config) + underPrefix(config.Hub.base_url, path);
}

/** A whole URL of the hub as its own processes and servers reach it: `internalHubUrl(config, '/hub/api')`. */
export function internalHubUrl(config: HubConfig, path: string): string {
  return hubInternalUrl(config) + underPrefix(config.Hub.base_url, path);
}

/** The hub's OpenID Connect issuer: Hub.oidc_issuer, else where browsers reach the hub's /hub (under Hub.base_url). */
export function oidcIssuer(config: HubConfig): string {
  return config.Hub.oidc_issuer.replace(/\/+$/, '') || publicHubUrl(config, '/hub');
}

export function hubInternalUrl(config: HubConfig): string {
  // with HTTPS on the public port, the hub's own processes and local servers use the plain loopback listener
  // (a certificate for the public name would not verify for 127.0.0.1)
  // the same with a unix socket as the front door (Hub.bind_url): servers and services speak TCP
  if (usesTls(config) || bindSocketPath(config)) return `http://127.0.0.1:${config.Hub.hub_port}`;
  return `http://${listenHost(config.Hub.ip)}:${config.Hub.port}`;
}
