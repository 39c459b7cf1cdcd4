// `simple`: every server runs as the hub's own account (the hub's data dir is then as open to servers as
// to the hub: fine for one person or a demo, not for a shared machine — see localprocess). Limits, when
// set, are enforced by cgroups all the same.
import type { BackendContext, Preflight, SpawnerBackend } from '../backend.js';
import { expandHome, limitsPreflight, LocalProcesses } from '../process.js';

export function preflight(ctx: BackendContext): Preflight {
  const warnings = process.getuid?.() === 0
    ? ['Hub.spawner_class is "simple" and the hub runs as root: every single-user server runs as root and can read the hub\'s secrets; use "localprocess" to run each as its own account']
    : [];
  return { problems: limitsPreflight(ctx), warnings };
}

export function createSimpleBackend(ctx: BackendContext): SpawnerBackend {
  const local = new LocalProcesses(ctx);
  return {
    name: 'simple',
    // notebook_dir unset: the hub's working directory, as before there were backends
    start: (req) => local.start(req, async () => ({ cmd: req.cmd, env: {}, cwd: req.notebookDir ? expandHome(req.notebookDir, process.env.HOME || '/') : undefined })),
    poll: (state) => local.poll(state),
    stop: (state, o) => local.stop(state, o.graceMs),
    adopt: (state) => local.adopt(state),
  };
}
