// `kubernetes`: each server in a pod, as the established hub's KubeSpawner runs it. What the pod, its volume claim,
// its Secret (the server's token, never in the pod's spec) and its namespace look like is kubernetes-objects.ts's
// business (every `KubeSpawner.*` option); this file runs them: creates, follows, stops, finds again. It never asks
// the API about one pod: a reflector (kubernetes-reflector.ts) keeps all of this hub's server pods by LIST + WATCH,
// and starts, polls, stops and adoptions read it. A start ends as soon as the pod can be reached (Running, with its
// IP: the target), or with the reason it cannot be, in the cluster's words (unschedulable, image missing, container
// exited); the pod's events are the start's progress lines meanwhile. Credentials: the pod's service account when
// the hub runs in the cluster, else a kubeconfig (KUBECONFIG or ~/.kube/config); `KubeSpawner.k8s_api_*` adjust it.
// The client (@kubernetes/client-node) is loaded only when this backend is used.
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { CoreV1Event, CoreV1Api, KubeConfig, V1ContainerStatus, V1Pod, Watch } from '@kubernetes/client-node';
import { hubInternalUrl, hubPublicUrl, usesTls } from '../../../shared/config.js';
import { isActive, type ServerRecord } from '../../../shared/servers.js';
import type { Adopted, BackendContext, BackendState, ExitStatus, Listen, PollResult, Preflight, SpawnerBackend, StartRequest, Started } from '../backend.js';
import { HUB_LABELS, kubeObjects, kubeSpawnerOptionProblems } from './kubernetes-objects.js';
import { apiMessage, PodEvents, PodReflector } from './kubernetes-reflector.js';

/** What the registry keeps of a pod server (no secret: admins may read it). */
export interface KubeState {
  namespace: string;
  pod: string;
  uid: string;
  /** where the server listens in the pod */
  port: number;
  /** its volume claim ('' = none): kept at stop, found again by name at the next start */
  pvc: string;
  /** the Secret holding the server's token, deleted with the pod */
  secret: string;
  /** KubeSpawner.delete_grace_period of this start, seconds */
  grace: number;
}

/** Labels as KubeSpawner sets them (kubernetes-objects.ts), and ours to tell hubs apart. */
const LABELS = { component: 'component', username: 'hub.jupyter.org/username', servername: 'hub.jupyter.org/servername', hub: HUB_LABELS.hubId } as const;
/** KubeSpawner's annotations: the names unescaped (labels hold a safe form). */
const ANNOTATIONS = { username: 'hub.jupyter.org/username', servername: 'hub.jupyter.org/servername' } as const;
const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';

/** A stale pod in a start's way is deleted and the create retried at most this many times. */
const CREATE_ATTEMPTS = 3;
/** After its grace period, a deleted pod has this long to disappear (the kubelet confirms the containers ended). */
const GONE_MARGIN_MS = 60_000;

/** The `KubeSpawner` config section (hub-wide: credentials, the watch's scope). */
const sectionOf = (ctx: BackendContext) => ctx.config.KubeSpawner as unknown as Record<string, unknown>;
const str = (v: unknown, fallback = '') => (typeof v === 'string' ? v : fallback);
const num = (v: unknown, fallback: number) => (typeof v === 'number' && Number.isFinite(v) ? v : fallback);

const statusOf = (e: unknown) => (e as { code?: number }).code;

/** KubeSpawner's default namespace: the hub's own pod's when in the cluster, else the kubeconfig context's, else "default". */
function defaultNamespace(kc: KubeConfig | null): string {
  try {
    if (process.env.KUBERNETES_SERVICE_HOST && existsSync(join(SERVICE_ACCOUNT, 'namespace'))) return readFileSync(join(SERVICE_ACCOUNT, 'namespace'), 'utf8').trim();
  } catch { /* not in a pod */ }
  return kc?.getContextObject(kc.getCurrentContext())?.namespace || 'default';
}

/** Where the hub's credentials come from, or why there are none. */
function credentialSource(): { incluster: boolean; kubeconfig: string } | string {
  if (process.env.KUBERNETES_SERVICE_HOST && existsSync(join(SERVICE_ACCOUNT, 'token'))) return { incluster: true, kubeconfig: '' };
  const files = (process.env.KUBECONFIG ?? '').split(':').filter(Boolean);
  if (files.length) {
    const missing = files.filter((f) => !existsSync(f));
    return missing.length === files.length ? `KUBECONFIG names ${missing.join(', ')}, which does not exist` : { incluster: false, kubeconfig: files.join(':') };
  }
  const home = join(homedir(), '.kube', 'config');
  if (existsSync(home)) return { incluster: false, kubeconfig: home };
  return 'no Kubernetes credentials: the hub runs neither in a pod with a service account nor with a kubeconfig (set KUBECONFIG, or put one at ~/.kube/config)';
}

export function preflight(ctx: BackendContext): Preflight {
  const section = sectionOf(ctx);
  const problems = [...kubeSpawnerOptionProblems(section)];
  const warnings: string[] = [];
  const source = credentialSource();
  if (typeof source === 'string') problems.push(`Hub.spawner_class is "kubernetes": ${source}`);
  const caFile = str(section.k8s_api_ssl_ca_cert);
  if (caFile && !existsSync(caFile)) problems.push(`KubeSpawner.k8s_api_ssl_ca_cert ${caFile} does not exist`);
  const reach = usesTls(ctx.config) ? hubPublicUrl(ctx.config) : hubInternalUrl(ctx.config);
  if (!str(section.hub_connect_url) && /^(127\.|localhost$|\[::1\]$)/.test(new URL(reach).hostname)) {
    warnings.push(`KubeSpawner.hub_connect_url is not set and the hub listens on ${reach}, which pods cannot reach: servers will not reach the hub's API (set KubeSpawner.hub_connect_url to an address of the hub the pods reach, e.g. its Service, or the node's address)`);
  }
  return { problems, warnings };
}

/** Why the pod cannot (or can no longer) serve, in words, or null while it may. */
export function podProblem(pod: V1Pod): { reason: string; code: number | null } | null {
  const status = pod.status ?? {};
  const main = pod.spec?.containers?.[0]?.name;
  const image = pod.spec?.containers?.[0]?.image ?? '';
  const statuses: V1ContainerStatus[] = [...(status.initContainerStatuses ?? []), ...(status.containerStatuses ?? [])];
  for (const c of statuses) {
    const w = c.state?.waiting;
    const which = c.name === main ? 'the server\'s container' : `container ${c.name}`;
    if (w?.reason === 'ErrImageNeverPull') return { reason: `the image '${c.image || image}' is not on the node and its pull policy is Never: ${w.message ?? ''}`.trim(), code: null };
    if (w?.reason === 'ErrImagePull' || w?.reason === 'ImagePullBackOff' || w?.reason === 'InvalidImageName') {
      return { reason: `the image '${c.image || image}' of ${which} could not be pulled (${w.reason}): ${w.message ?? ''}`.trim(), code: null };
    }
    // the kubelet not yet having the Secret the pod was just created with ("failed to sync secret cache"): it tries again
    const transient = w?.reason === 'CreateContainerConfigError' && /failed to sync .*cache/i.test(w.message ?? '');
    if (!transient && (w?.reason === 'CreateContainerConfigError' || w?.reason === 'CreateContainerError' || w?.reason === 'RunContainerError')) {
      return { reason: `${which} could not be created (${w.reason}): ${w.message ?? ''}`.trim(), code: null };
    }
    // ended (a restart policy may bring it back: CrashLoopBackOff says the last end)
    const t = c.state?.terminated ?? (w?.reason === 'CrashLoopBackOff' ? c.lastState?.terminated : undefined);
    if (t) {
      const said = [t.reason, t.message?.trim()].filter(Boolean).join(': ');
      return { reason: `${which} exited with code ${t.exitCode}${said ? ` (${said})` : ''}`, code: c.name === main ? t.exitCode : null };
    }
  }
  if (status.phase === 'Failed' || status.phase === 'Succeeded') {
    return { reason: `the pod ${status.phase === 'Failed' ? 'failed' : 'ended'}${status.reason ? ` (${status.reason}${status.message ? `: ${status.message}` : ''})` : ''}`, code: null };
  }
  const scheduled = status.conditions?.find((c) => c.type === 'PodScheduled');
  // unschedulable ends the start, unless it waits for its claim's volume (being provisioned or bound): that comes
  if (scheduled?.status === 'False' && scheduled.reason === 'Unschedulable' && !/unbound .*PersistentVolumeClaim/i.test(scheduled.message ?? '')) {
    return { reason: `the pod cannot be scheduled: ${scheduled.message ?? 'no node fits it'}`, code: null };
  }
  return null;
}

/** A pod event as a progress line, as KubeSpawner shows them. */
const eventLine = (e: CoreV1Event) => `[${e.type ?? 'Normal'}] ${e.reason ? `${e.reason}: ` : ''}${(e.message ?? '').trim()}`;

export function createKubernetesBackend(ctx: BackendContext): SpawnerBackend {
  const log = ctx.log;
  const base = sectionOf(ctx);
  // KubeSpawner's bounds: each request, and the tries of one call
  const requestTimeoutMs = num(base.k8s_api_request_timeout, 3) * 1000;
  const apiTimeoutMs = Math.max(requestTimeoutMs, num(base.k8s_api_request_retry_timeout, 30) * 1000);
  const userNamespaces = base.enable_user_namespaces === true;

  interface Client { k8s: typeof import('@kubernetes/client-node'); kc: KubeConfig; core: CoreV1Api; watch: Watch; namespace: string }
  let client: Promise<Client> | null = null;
  const reflectors = new Map<string, PodReflector>();
  const events = new Map<string, PodEvents>();

  function connect(): Promise<Client> {
    client ??= (async () => {
      const k8s = await import('@kubernetes/client-node');
      const source = credentialSource();
      if (typeof source === 'string') throw new Error(source);
      const kc = new k8s.KubeConfig();
      if (source.incluster) kc.loadFromCluster();
      else kc.loadFromDefault(); // KUBECONFIG (its files merged), else ~/.kube/config: what credentialSource found
      // KubeSpawner.k8s_api_*: another address, CA or no verification for the same credentials
      const cluster = kc.getCurrentCluster();
      const user = kc.getCurrentUser();
      if (!cluster || !user) throw new Error(`the kubeconfig ${source.kubeconfig} has no current context with a cluster and a user`);
      const host = str(base.k8s_api_host);
      const ca = str(base.k8s_api_ssl_ca_cert);
      if (host || ca || base.k8s_api_verify_ssl === false) {
        kc.loadFromClusterAndUser({
          ...cluster, ...(host ? { server: host } : {}), ...(ca ? { caFile: ca, caData: undefined } : {}), skipTLSVerify: base.k8s_api_verify_ssl === false || cluster.skipTLSVerify,
        }, user);
      }
      return { k8s, kc, core: kc.makeApiClient(k8s.CoreV1Api), watch: new k8s.Watch(kc), namespace: defaultNamespace(kc) };
    })();
    client.catch(() => { client = null; });
    return client;
  }

  /**
   * One API call, bounded: each request by KubeSpawner.k8s_api_request_timeout, tried again after a timeout, a
   * connection error, a 429 or a 5xx until KubeSpawner.k8s_api_request_retry_timeout; the API's answer otherwise.
   */
  async function call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + apiTimeoutMs;
    for (let attempt = 0, delay = 200; ; attempt++, delay = Math.min(delay * 2, 3_000)) {
      let timer: NodeJS.Timeout | undefined;
      try {
        return await Promise.race([fn(), new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`${what}: no answer from the Kubernetes API within ${requestTimeoutMs / 1000} s`)), requestTimeoutMs);
        })]);
      } catch (e) {
        const code = statusOf(e);
        const transient = typeof code !== 'number' || code === 0 || code === 429 || code >= 500;
        if (!transient || attempt >= 30 || Date.now() + delay > deadline) throw e;
        log.info({ event: 'kubernetes.api.retry', what, err: apiMessage(e), attempt }, 'Kubernetes API call failed: trying again');
        await new Promise((r) => setTimeout(r, delay));
      } finally {
        clearTimeout(timer);
      }
    }
  }

  const selector = () => `${LABELS.component}=singleuser-server,${LABELS.hub}=${ctx.hubWideId}`;
  /** The watch that sees pods of this namespace: the one of all namespaces with per-user namespaces. */
  const scopeOf = (namespace: string) => (userNamespaces ? '' : namespace);

  async function podsIn(namespace: string): Promise<PodReflector> {
    const c = await connect();
    const scope = scopeOf(namespace);
    let r = reflectors.get(scope);
    if (!r) {
      r = new PodReflector({ kc: c.kc, watch: c.watch, namespace: scope || null, labelSelector: selector(), log });
      reflectors.set(scope, r);
    }
    await r.ready(apiTimeoutMs);
    return r;
  }

  async function eventsIn(namespace: string): Promise<PodEvents> {
    const c = await connect();
    const scope = scopeOf(namespace);
    let e = events.get(scope);
    if (!e) events.set(scope, (e = new PodEvents({ kc: c.kc, watch: c.watch, namespace: scope || null, log })));
    return e;
  }

  /** Settles when this pod (by uid) is gone or has ended, with why. */
  function endOf(pods: PodReflector, s: KubeState): Promise<ExitStatus> {
    return new Promise((resolve) => {
      let unsubscribe = () => undefined as unknown;
      const check = (pod: V1Pod | undefined, deleted: boolean) => {
        let end: ExitStatus | null = null;
        if (!pod || pod.metadata?.uid !== s.uid || deleted) end = { code: null, reason: 'the pod was deleted' };
        else {
          const problem = pod.metadata?.deletionTimestamp ? { reason: 'the pod is being deleted', code: null } : podProblem(pod);
          if (problem) end = { code: problem.code, reason: problem.reason };
        }
        if (!end) return;
        unsubscribe();
        resolve(end);
      };
      unsubscribe = pods.subscribe((pod, deleted) => { if (pod.metadata?.uid === s.uid) check(pod, deleted); });
      check(pods.get(s.namespace, s.pod), false);
    });
  }

  /** Deletes the pod (if it is still this uid) and waits until the watch no longer sees it. */
  async function deletePod(c: Client, pods: PodReflector, namespace: string, name: string, uid: string, graceSeconds: number): Promise<void> {
    const stillThere = () => pods.get(namespace, name)?.metadata?.uid === uid;
    const gone = new Promise<void>((resolve) => {
      const unsubscribe = pods.subscribe((pod, deleted) => { if (pod.metadata?.uid === uid && deleted) { unsubscribe(); resolve(); } });
      if (!stillThere()) { unsubscribe(); resolve(); }
    });
    try {
      await call(`deleting pod ${namespace}/${name}`, () => c.core.deleteNamespacedPod({ namespace, name, gracePeriodSeconds: graceSeconds, body: { gracePeriodSeconds: graceSeconds, preconditions: { uid } } }));
    } catch (e) {
      // 404: gone already; 409: the uid precondition failed (a pod of the same name that is not this one)
      if (statusOf(e) !== 404 && statusOf(e) !== 409) throw new Error(`could not delete pod ${namespace}/${name}: ${apiMessage(e)}`);
    }
    const bound = graceSeconds * 1000 + GONE_MARGIN_MS;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([gone, new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`pod ${namespace}/${name} was deleted but still exists after ${bound / 1000} s (${pods.get(namespace, name)?.status?.phase ?? 'phase unknown'}): is the node's kubelet running?`)), bound);
    })]).finally(() => clearTimeout(timer));
  }

  async function deleteSecret(c: Client, namespace: string, name: string): Promise<void> {
    if (!name) return;
    await call(`deleting secret ${namespace}/${name}`, () => c.core.deleteNamespacedSecret({ namespace, name })).catch((e) => {
      if (statusOf(e) !== 404) log.warn({ event: 'kubernetes.secret.delete_failed', secret: `${namespace}/${name}`, err: apiMessage(e) }, 'server secret not deleted');
    });
  }

  /** Creates the pod; a stale pod of this server under the name (left by a crash) is deleted first, a bounded number of times. */
  async function createPod(c: Client, pods: PodReflector, pod: V1Pod, req: StartRequest): Promise<V1Pod> {
    const namespace = pod.metadata!.namespace!;
    const name = pod.metadata!.name!;
    for (let attempt = 1; ; attempt++) {
      try {
        return await call(`creating pod ${namespace}/${name}`, () => c.core.createNamespacedPod({ namespace, body: pod }));
      } catch (e) {
        if (statusOf(e) !== 409) throw new Error(`could not create pod ${namespace}/${name}: ${apiMessage(e)}`);
        if (attempt >= CREATE_ATTEMPTS) throw new Error(`pod ${namespace}/${name} still exists after deleting it ${attempt - 1} times: ${apiMessage(e)}`);
        const stale = pods.get(namespace, name) ?? await call(`reading pod ${namespace}/${name}`, () => c.core.readNamespacedPod({ namespace, name })).catch(() => undefined);
        if (!stale) continue; // gone meanwhile
        const labels = stale.metadata?.labels ?? {};
        const ours = (k: keyof typeof LABELS) => labels[LABELS[k]] === pod.metadata?.labels?.[LABELS[k]];
        if (!ours('hub') || !ours('username') || !ours('servername')) {
          throw new Error(`a pod named '${name}' already exists in namespace ${namespace} and is not this server's: delete it, or change KubeSpawner.pod_name_template`);
        }
        await req.progress(`Deleting the stale pod ${name} of an earlier start`);
        log.info({ event: 'kubernetes.pod.stale', pod: `${namespace}/${name}`, uid: stale.metadata?.uid }, 'deleting a stale pod in the way of a start');
        await deletePod(c, pods, namespace, name, stale.metadata!.uid!, 0);
      }
    }
  }

  /**
   * The pod's address once the watch sees it Running with its IP (the server's container started): the target.
   * Rejects with why, when it ends or cannot run first; or when `signal` aborts (a stop during the start).
   */
  function whenRunning(pods: PodReflector, s: KubeState, signal: AbortSignal | null): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      let done = false;
      let unsubscribe = () => undefined as unknown;
      const onAbort = () => finish(() => reject(new Error('cancelled')));
      const finish = (f: () => void) => {
        if (done) return;
        done = true;
        unsubscribe();
        signal?.removeEventListener('abort', onAbort);
        f();
      };
      const check = (p: V1Pod | undefined, deleted: boolean) => {
        if (!p || p.metadata?.uid !== s.uid || deleted) return finish(() => reject(new Error('the pod was deleted before it ran')));
        if (p.metadata?.deletionTimestamp) return finish(() => reject(new Error('the pod is being deleted')));
        const problem = podProblem(p);
        if (problem) return finish(() => reject(Object.assign(new Error(problem.reason), { exited: problem.code !== null })));
        const main = p.status?.containerStatuses?.find((c) => c.name === p.spec?.containers?.[0]?.name);
        const ip = p.status?.podIP;
        if (p.status?.phase === 'Running' && ip && main?.state?.running) finish(() => resolve(`http://${ip.includes(':') ? `[${ip}]` : ip}:${s.port}`));
      };
      unsubscribe = pods.subscribe((p, deleted) => { if (p.metadata?.uid === s.uid) check(p, deleted); });
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      // seen by the watch already (a fast node), or not yet: then the next change of it decides
      check(pods.get(s.namespace, s.pod), false);
    });
  }

  async function start(req: StartRequest): Promise<Started> {
    const c = await connect();
    const options: Record<string, unknown> = { ...req.options, namespace: str(req.options.namespace) || c.namespace };
    const port = num(options.port, 8888);
    const listen: Listen = { ip: '0.0.0.0', port };
    // the hub's own PATH and HOME mean nothing in an image (and would hide the image's); the hub's address as pods reach it
    const internal = hubInternalUrl(ctx.config);
    const connectUrl = str(options.hub_connect_url).replace(/\/$/, '');
    const env = Object.fromEntries(Object.entries(req.env(listen))
      .filter(([k, v]) => !((k === 'PATH' || k === 'HOME') && v === process.env[k]))
      .map(([k, v]) => [k, connectUrl && v.startsWith(internal) ? connectUrl + v.slice(internal.length) : v]));
    const objects = kubeObjects({
      username: req.server.user, servername: req.server.name, id: req.id, hubId: ctx.hubWideId, cmd: req.cmd, env, port,
      limits: req.limits, notebookDir: req.notebookDir, options,
    });
    const { namespace, pod, pvc, secret } = objects;
    const name = pod.metadata!.name!;
    const pods = await podsIn(namespace);
    // the pod's events, from before it exists; those of a stale namesake are told apart by uid once ours is known
    let uid = '';
    const early: CoreV1Event[] = [];
    const said = new Set<string>();
    const say = (e: CoreV1Event) => {
      const line = eventLine(e);
      if (said.has(line)) return; // the same event again (its count grew), or the kubelet repeating itself
      said.add(line);
      void req.progress(line).catch(() => undefined);
    };
    const unfollow = (await eventsIn(namespace)).follow((e) => e.involvedObject?.namespace === namespace && e.involvedObject?.name === name, (e) => {
      if (!uid) early.push(e);
      else if (e.involvedObject?.uid === uid) say(e);
    });
    const secretName = secret.metadata!.name!;
    let created: V1Pod;
    try {
      if (objects.namespaceObject) {
        await call(`creating namespace ${namespace}`, () => c.core.createNamespace({ body: objects.namespaceObject! })).catch((e) => {
          if (statusOf(e) !== 409) throw new Error(`could not create namespace ${namespace}: ${apiMessage(e)}`);
        });
      }
      if (pvc) {
        // KubeSpawner.storage_pvc_ensure: made at the first start, found again by name at every later one
        await call(`creating volume claim ${namespace}/${pvc.metadata!.name}`, () => c.core.createNamespacedPersistentVolumeClaim({ namespace, body: pvc }))
          .then(() => req.progress(`Created volume claim ${pvc.metadata!.name}`), (e) => {
            if (statusOf(e) !== 409) throw new Error(`could not create volume claim ${namespace}/${pvc.metadata!.name}: ${apiMessage(e)}`);
          });
      }
      await call(`creating secret ${namespace}/${secretName}`, () => c.core.createNamespacedSecret({ namespace, body: secret })).catch(async (e) => {
        if (statusOf(e) !== 409) throw new Error(`could not create secret ${namespace}/${secretName}: ${apiMessage(e)}`);
        await call(`replacing secret ${namespace}/${secretName}`, () => c.core.replaceNamespacedSecret({ namespace, name: secretName, body: secret }));
      });
      if (req.signal.aborted) throw new Error('cancelled');
      await req.progress(`Creating pod ${name} in namespace ${namespace}`);
      created = await createPod(c, pods, pod, req);
      uid = created.metadata!.uid!;
      for (const e of early.splice(0)) if (e.involvedObject?.uid === uid) say(e);
    } catch (e) {
      unfollow();
      await deleteSecret(c, namespace, secretName);
      throw e;
    }
    // the Secret goes with the pod (the cluster's garbage collector), whoever deletes the pod
    await call(`owning secret ${namespace}/${secretName}`, () => c.core.patchNamespacedSecret({
      namespace, name: secretName,
      body: { metadata: { ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name, uid, blockOwnerDeletion: false, controller: false }] } },
    }, c.k8s.setHeaderOptions('Content-Type', c.k8s.PatchStrategy.MergePatch))).catch((e) =>
      log.warn({ event: 'kubernetes.secret.owner_failed', secret: `${namespace}/${secretName}`, err: apiMessage(e) }, 'server secret not tied to its pod (deleted at stop instead)'));

    const state: KubeState = { namespace, pod: name, uid, port, pvc: pvc?.metadata?.name ?? '', secret: secretName, grace: num(options.delete_grace_period, 1) };
    // a server that exits during its start: its last words say why (one read of its log, only then)
    const target = whenRunning(pods, state, req.signal).catch(async (e: Error & { exited?: boolean }) => {
      if (!e.exited) throw e;
      const said = await call(`reading the log of pod ${namespace}/${name}`, () => c.core.readNamespacedPodLog({ namespace, name, container: pod.spec!.containers[0].name, tailLines: 5, limitBytes: 2000 }))
        .catch(() => call(`reading the log of pod ${namespace}/${name}`, () => c.core.readNamespacedPodLog({ namespace, name, container: pod.spec!.containers[0].name, tailLines: 5, limitBytes: 2000, previous: true })))
        .catch(() => '');
      const lines = String(said).trim().split('\n').map((l) => l.trim()).filter(Boolean);
      throw new Error(lines.length ? `${e.message}; its last output: ${lines.join(' | ').slice(-800)}` : e.message);
    });
    target.then(unfollow, unfollow);
    return { target, state: state as unknown as BackendState, exited: endOf(pods, state) };
  }

  async function poll(state: BackendState): Promise<PollResult> {
    const s = state as unknown as KubeState;
    const pods = await podsIn(s.namespace);
    const pod = pods.get(s.namespace, s.pod);
    if (!pod || pod.metadata?.uid !== s.uid) return { running: false, code: null, reason: `pod ${s.namespace}/${s.pod} is gone` };
    const problem = podProblem(pod);
    return problem ? { running: false, code: problem.code, reason: problem.reason } : { running: true };
  }

  async function stop(state: BackendState, o: { graceMs: number }): Promise<void> {
    const s = state as unknown as KubeState;
    if (!s.pod || !s.namespace) return;
    const c = await connect();
    const pods = await podsIn(s.namespace);
    const grace = typeof s.grace === 'number' ? s.grace : Math.ceil(o.graceMs / 1000);
    if (s.uid) await deletePod(c, pods, s.namespace, s.pod, s.uid, grace);
    await deleteSecret(c, s.namespace, s.secret);
  }

  async function adopt(state: BackendState): Promise<Adopted | null> {
    const s = state as unknown as KubeState;
    if (!s.pod || !s.uid) return null;
    const pods = await podsIn(s.namespace);
    const pod = pods.get(s.namespace, s.pod);
    if (!pod || pod.metadata?.uid !== s.uid || pod.metadata.deletionTimestamp || podProblem(pod)) return null;
    // adopted while it was starting: its address comes as the start's would have
    const target = typeof s.port === 'number' ? whenRunning(pods, s, null) : undefined;
    target?.catch(() => undefined);
    return { exited: endOf(pods, s), ...(target ? { target } : {}) };
  }

  /** This hub's server pods that no record names (a crash between creating one and saving its record): deleted. */
  async function reconcile(records: readonly Readonly<ServerRecord>[]): Promise<void> {
    const c = await connect();
    const pods = await podsIn(str(base.namespace) || c.namespace);
    const named = new Set(records.filter((r) => isActive(r) && r.spawner_class === 'kubernetes').map((r) => (r.spawner_state as Partial<KubeState>).uid).filter(Boolean));
    // a record without state is a start under way: its pod may exist before the record names it
    const starting = new Set(records.filter((r) => isActive(r) && !Object.keys(r.spawner_state ?? {}).length).map((r) => `${r.user}/${r.name}`));
    for (const pod of pods.all()) {
      const a = pod.metadata?.annotations ?? {};
      if (named.has(pod.metadata?.uid) || starting.has(`${a[ANNOTATIONS.username]}/${a[ANNOTATIONS.servername] ?? ''}`) || pod.metadata?.deletionTimestamp) continue;
      const where = `${pod.metadata!.namespace}/${pod.metadata!.name}`;
      log.warn({ event: 'kubernetes.pod.orphan', pod: where }, 'deleting a server pod of this hub that no server names');
      await deletePod(c, pods, pod.metadata!.namespace!, pod.metadata!.name!, pod.metadata!.uid!, num(base.delete_grace_period, 1)).catch((e: Error) =>
        log.warn({ event: 'kubernetes.pod.orphan_delete_failed', pod: where, err: e.message }, 'orphan pod not deleted'));
    }
  }

  return { name: 'kubernetes', start, poll, stop, adopt, reconcile };
}
