// The environment the hub hands to programs it starts (single-user servers, hub-managed services).

/**
 * Each `HUB_*` variable also under every alias prefix (`Hub.env_prefix_aliases`): `["JUPYTERHUB_"]` adds
 * `JUPYTERHUB_API_TOKEN` and the rest, so programs written for the established hub run unchanged.
 * A variable set explicitly (e.g. in `Spawner.environment`) wins over an alias.
 */
export function withPrefixAliases(env: Record<string, string>, aliases: readonly string[]): Record<string, string> {
  if (!aliases.length) return env;
  const out = { ...env };
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith('HUB_')) continue;
    for (const prefix of aliases) out[prefix + name.slice(4)] ??= value;
  }
  return out;
}
