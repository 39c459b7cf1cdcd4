// `npm run bench [name ...]`: runs the named benchmarks (all when none is named) and prints their figures.
import { api } from './api.js';
import { footprint } from './footprint.js';
import { importBench } from './import.js';
import { loginBench } from './login.js';
import { memory } from './memory.js';
import { metrics } from './metrics.js';
import { proxy } from './proxy.js';
import { restartBench } from './restart.js';
import { scale } from './scale.js';
import { spawnBench } from './spawn.js';
import { transport } from './transport.js';
import { users } from './users.js';
import { wsRelay } from './ws-relay.js';

const benches: Record<string, () => Promise<void>> = { footprint: () => footprint(), memory: () => memory(), api: () => api(), proxy: () => proxy(), metrics: () => metrics(), spawn: () => spawnBench(), scale: () => scale(), users: () => users(), login: () => loginBench(), import: () => importBench(), restart: () => restartBench(), 'ws-relay': () => wsRelay(), transport: () => transport() };
const wanted = process.argv.slice(2).filter((a) => !a.startsWith('-'));
for (const name of wanted.length ? wanted : Object.keys(benches)) {
  const bench = benches[name];
  if (!bench) {
    console.error(`unknown benchmark ${name}; known: ${Object.keys(benches).join(', ')}`);
    process.exit(2);
  }
  await bench();
}
